"""``magpy run [--explain] [-m] TARGET [ARGS...]``: run a program as ``python`` would, with
``torch.compile`` and ``nn.Module.compile`` served by MagPy (``magpy.use_for_torch_compile``).

The program runs as ``__main__``: ``sys.argv`` is ``[TARGET, *ARGS]`` (with ``-m``, the module's
file, as ``python -m`` sets it), ``sys.path[0]`` is the script's folder (with ``-m``, the
current folder), ``sys.exit(code)`` ends magpy with that code, and an uncaught exception is shown
by ``sys.excepthook`` with the program's frames only, then exit status 1. With ``--explain``,
what every compiled callable captured (graphs, graph breaks with file:line, records and their
guards) and the calls that went to TorchDynamo are printed to stderr when the program ends.
"""

from __future__ import annotations

import os
import runpy
import sys
import types
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import magpy
from magpy import ExplainOutput

from ._explain_cli import _check_module, _collecting_compiles, describe

__all__ = ["run_program"]

# (runpy's frames name "<frozen runpy>" where it is frozen, its file where it is not)
_OWN_FILES = frozenset(
    {"<frozen runpy>", os.path.realpath(runpy.__file__), os.path.realpath(__file__)}
)


def _own(code: types.CodeType) -> bool:
    name = code.co_filename
    return name in _OWN_FILES or os.path.realpath(name) in _OWN_FILES


def run_program(target: str, args: Sequence[str], *, module: bool, explain: bool) -> int:
    """Run ``target`` (a script, or with ``module`` a module name) as ``__main__``."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [target, *args]
    sys.path[0:1] = [os.getcwd() if module else str(Path(target).resolve().parent)]
    status = 0
    try:
        with magpy.use_for_torch_compile() as redirect, _collecting_compiles() as direct:
            try:
                if module:
                    _check_module(target)
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(target, run_name="__main__")
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # (shown as python shows it; not swallowed)
                _show_uncaught(exc)
                status = 1
            finally:
                if explain:
                    _explain(redirect.compiled, direct, redirect.fallbacks)
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
    return status


def _show_uncaught(exc: BaseException) -> None:
    """``sys.excepthook`` with the traceback from the program's first frame on (magpy's and
    runpy's frames dropped), as ``python script.py`` shows it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _own(tb.tb_frame.f_code):
        tb = tb.tb_next
    exc.__traceback__ = tb  # (the default hook shows the exception's own traceback)
    sys.stdout.flush()
    sys.excepthook(type(exc), exc, tb)


def _explain(served: list[Any], direct: list[Any], fallbacks: list[str]) -> None:
    """What each compiled callable captured, then the calls that went to TorchDynamo."""
    compiled = list(served)
    compiled += [c for c in direct if not any(c is s for s in compiled)]
    lines = [f"magpy run --explain: {len(compiled)} callable(s) compiled by MagPy"]
    for c in compiled:
        lines.append(describe(_explanation(c), guards=False))
    if fallbacks:
        lines.append(f"Compiled by TorchDynamo instead ({len(fallbacks)} call(s)):")
        lines += [f"  {n} x {reason}" for reason, n in Counter(fallbacks).items()]
    sys.stdout.flush()
    print("\n".join(lines), file=sys.stderr, flush=True)


def _explanation(compiled: Any) -> ExplainOutput:
    out = ExplainOutput.of_compiled(compiled)
    stats = magpy.stats(compiled)
    original = getattr(compiled, "_magpy_original", compiled)
    if isinstance(original, types.MethodType) and isinstance(original.__self__, torch.nn.Module):
        out.qualname = f"{type(original.__self__).__qualname__} (module.compile())"
    where = _where(original)
    out.qualname = f"{out.qualname} at {where}: {stats.hits} hits, {stats.misses} misses"
    return out


def _where(obj: Any) -> str:
    """``file:line`` of the code a compiled callable runs."""
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, torch.nn.Module):
        obj = obj.__self__  # (module.compile() compiles the module's _call_impl)
    fn = obj.forward if hasattr(obj, "forward") and not isinstance(obj, types.MethodType) else obj
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return type(obj).__qualname__
    return f"{code.co_filename}:{code.co_firstlineno}"
