"""What ``magpy explain`` does once ``magpy._cli`` has parsed its arguments.

Two forms (``TARGET`` is ``path/to/script.py`` or, with ``-m``, ``package.module``):

* ``magpy explain TARGET:CALLABLE``: load the script (as a module, not as ``__main__``, so its
  ``if __name__ == "__main__":`` block does not run) or import the module, look up
  ``CALLABLE`` in it (a function, an ``nn.Module`` instance, or a dotted path such as
  ``model.encoder`` or ``Trainer.step``), call its ``example_inputs()`` for the arguments, and
  explain one call with ``magpy.explain``. Then, unless ``--calls 0``, call it ``--calls`` more
  times compiled with ``magpy.compile`` to measure the share of time outside compiled graphs.
* ``magpy explain TARGET``: run the script or module as ``__main__`` (``ARGS`` become its
  ``sys.argv[1:]``) and report, for every callable it compiles with ``magpy.compile``, what its
  own calls captured (``ExplainOutput.of_compiled``), including the time outside graphs.

``magpy._cli`` has split TARGET:CALLABLE (``args.where``, ``args.callable``) and checked
that a script exists. ``example_inputs()`` returns the positional arguments as a tuple, or a
pair ``(args, kwargs)`` where ``args`` is a tuple and ``kwargs`` a dict with str keys; any other
2-tuple is two positional arguments. User mistakes (a missing module, callable or
``example_inputs``, inputs of the wrong shape) are ``UsageError``s: the caller prints them
argparse-style and exits with status 2. An exception of the program itself shows its
traceback and exits with status 1.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import linecache
import os
import runpy
import sys
import traceback
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import magpy
import magpy_runtime
from magpy import ExplainOutput
from magpy_runtime._html import write_report

__all__ = ["ProgramError", "UsageError", "describe", "example_arguments", "run"]

FALLBACK_MODULE = "__magpy_script__"  # a script whose file name is taken or no identifier


class UsageError(Exception):
    """A mistake in what ``magpy explain`` was asked to do (exit status 2, no traceback)."""


class ProgramError(Exception):
    """The program raised (``what`` it was doing); its traceback is printed (exit status 1)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def run(args: argparse.Namespace, error: Callable[[str], NoReturn]) -> int:
    """``magpy explain``; ``error`` reports a ``UsageError`` (argparse's ``parser.error``)."""
    where, name = args.where, args.callable  # (``magpy._cli.split_target``)
    try:
        with _program_environment(where, args.module, args.args):
            if name is None:
                outputs, label = _run_main(where, args.module)
            else:
                outputs, label = [_explain_callable(where, name, args)], f"{where}:{name}"
    except UsageError as exc:
        error(str(exc))
    except ProgramError as exc:
        cause = exc.__cause__
        if cause is not None:
            traceback.print_exception(cause)
        print(f"magpy explain: {exc.what} raised {type(cause).__name__}", file=sys.stderr)
        return 1
    for out in outputs:
        print(describe(out, verbose=args.verbose))
    if args.report is not None:
        path = write_report(args.report, outputs, title=f"magpy explain {label}")
        print(f"report: {path}")
    return 0


# ---------------------------------------------------------------------- loading the program
@contextmanager
def _program_environment(where: str, module: bool, argv: list[str]) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as ``python script.py ARGS`` / ``python -m module
    ARGS`` set them, for the block; put back afterwards."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [where, *argv]
    first = os.getcwd() if module else str(Path(where).resolve().parent)
    sys.path.insert(0, first)
    try:
        yield
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


def _load(where: str, module: bool) -> types.ModuleType:
    """The module ``where`` (``-m``) or the script at ``where`` loaded as a module."""
    if module:
        _check_module(where)
        try:
            return importlib.import_module(where)
        except Exception as exc:
            raise ProgramError(f"importing {where}") from exc
    path = Path(where).resolve()
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{where} cannot be loaded as Python source (name it *.py)")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # (as import does: pickling and dataclasses look it up)
    try:
        spec.loader.exec_module(loaded)
    except Exception as exc:
        raise ProgramError(f"loading {where}") from exc
    return loaded


def _check_module(name: str) -> None:
    """``UsageError`` unless the module ``name`` can be found (its parent packages are
    imported to look, as ``python -m`` does)."""
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
            raise ProgramError(f"importing {name}") from exc
        found = False
    except Exception as exc:
        raise ProgramError(f"importing {name}") from exc
    if not found:
        raise UsageError(f"no module named {name!r} (looked in {sys.path[0]} and sys.path)")


def _module_name(path: Path) -> str:
    """The script's file stem where no other module has that name, else FALLBACK_MODULE."""
    stem = path.stem
    if not stem.isidentifier() or stem in sys.modules:
        return FALLBACK_MODULE
    try:
        spec = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        return FALLBACK_MODULE
    if spec is None or (spec.origin is not None and Path(spec.origin).resolve() == path):
        return stem
    return FALLBACK_MODULE


def _lookup(module: types.ModuleType, where: str, name: str) -> Any:
    """``module``'s object at the dotted ``name``, checked to be something to call."""
    obj: Any = module
    for i, part in enumerate(name.split(".")):
        if not hasattr(obj, part):
            found = ".".join(name.split(".")[:i]) or where
            raise UsageError(f"{found} has no attribute {part!r} (looking up {name!r} in {where})")
        obj = getattr(obj, part)
    if isinstance(obj, type):
        raise UsageError(
            f"{name!r} in {where} is a class; name a function or an instance (for an "
            f"nn.Module: a module-level `model = {obj.__name__}(...)`, then {where}:model)"
        )
    if not callable(obj):
        raise UsageError(f"{name!r} in {where} is not callable (of type {type(obj).__name__})")
    return obj


def example_arguments(value: Any, where: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``example_inputs()``'s result as (args, kwargs): a tuple is the positional arguments;
    a 2-tuple ``(tuple, dict)`` is (args, kwargs) (a dict with str keys)."""
    if not isinstance(value, tuple):
        raise UsageError(
            f"example_inputs() in {where} returned a {type(value).__name__}; return a tuple "
            "of positional arguments, e.g. `return (x,)`, or a pair `return (x,), {'k': v}`"
        )
    if len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], dict):
        args, kwargs = value
        bad = [k for k in kwargs if not isinstance(k, str)]
        if bad:
            raise UsageError(
                f"example_inputs() in {where} returned (args, kwargs) whose kwargs have "
                f"keys that are not str: {bad!r}"
            )
        return args, kwargs
    return value, {}


def _inputs(module: types.ModuleType, where: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    make = getattr(module, "example_inputs", None)
    if make is None:
        raise UsageError(
            f"{where} defines no example_inputs(); add one returning the arguments, e.g. "
            "`def example_inputs(): return (torch.randn(8, 16),)`"
        )
    if not callable(make):
        raise UsageError(
            f"example_inputs in {where} is not a function (of type {type(make).__name__})"
        )
    try:
        value = make()
    except Exception as exc:
        raise ProgramError(f"example_inputs() of {where}") from exc
    return example_arguments(value, where)


# ---------------------------------------------------------------------- the two forms
def _explain_callable(where: str, name: str, args: argparse.Namespace) -> ExplainOutput:
    module = _load(where, args.module)
    fn = _lookup(module, where, name)
    call_args, call_kwargs = _inputs(module, where)
    try:
        out = magpy.explain(fn)(*call_args, **call_kwargs)
    except Exception as exc:
        raise ProgramError(f"{name}(*example_inputs())") from exc
    if args.calls:
        try:
            _measure(out, fn, call_args, call_kwargs, args.calls, args.backend)
        except Exception as exc:
            raise ProgramError(f"{name}, compiled with magpy.compile") from exc
    return out


def _measure(
    out: ExplainOutput,
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    calls: int,
    backend: str,
) -> None:
    """Fill ``out.outside_share`` from ``calls`` calls of ``fn`` compiled with ``backend``."""
    compiled = magpy.compile(fn, backend=backend)
    for _ in range(calls):
        compiled(*args, **kwargs)
    stats = magpy.stats(compiled)
    how = (
        f"{calls} more calls with the same inputs, compiled with "
        f"magpy.compile(backend={backend!r}); calls that recorded are not timed"
    )
    if stats.hits + stats.native_calls == 0:
        out.outside_note = f"not measured: each of the {calls} compiled calls recorded"
        return
    out.outside_share = stats.outside_share
    out.outside_note = how


def _run_main(where: str, module: bool) -> tuple[list[ExplainOutput], str]:
    """Run the program as ``__main__``; what every callable it compiled captured."""
    if module:
        _check_module(where)
    with _collecting_compiles() as compiled:
        try:
            if module:
                runpy.run_module(where, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(where, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise ProgramError(f"running {where} (sys.exit({exc.code!r}))") from exc
        except Exception as exc:
            raise ProgramError(f"running {where}") from exc
    if not compiled:
        raise UsageError(
            f"{where} ran but compiled nothing with magpy.compile; name the callable to "
            f"explain: magpy explain {'-m ' if module else ''}{where}:CALLABLE"
        )
    return [ExplainOutput.of_compiled(c) for c in compiled], where


@contextmanager
def _collecting_compiles() -> Iterator[list[Any]]:
    """``magpy.compile`` for the block also keeps what it returns (``@magpy.compile``,
    ``@magpy.compile(...)`` and ``magpy.compile(fn)``): the program's compiled callables,
    kept alive until they are explained."""
    found: list[Any] = []
    real = magpy_runtime.compile

    def collecting(model: Any = None, **options: Any) -> Any:
        if model is None:
            return lambda m: collecting(m, **options)
        compiled = real(model, **options)
        if compiled is not model and not any(c is compiled for c in found):
            found.append(compiled)
        return compiled

    functools.update_wrapper(collecting, real)
    for owner in (magpy, magpy_runtime):
        owner.compile = collecting  # type: ignore[attr-defined]
    try:
        yield found
    finally:
        for owner in (magpy, magpy_runtime):
            owner.compile = real  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- printing
def describe(out: ExplainOutput, *, verbose: bool = False, guards: bool = True) -> str:
    """The text ``magpy explain`` prints for one explanation (``guards=False``: each record's
    number of checks, not the checks)."""
    lines = [
        f"== {out.qualname} ==",
        f"Graph Count: {out.graph_count}",
        f"Graph Break Count: {out.graph_break_count}",
        f"Op Count: {out.op_count}",
        f"Record Count: {len(out.records)}",
    ]
    if out.break_reasons:
        lines.append("Graph Breaks:")
        for i, (r, times) in enumerate(Counter(out.break_reasons).items()):
            where = f"{r.filename}:{r.lineno}" if r.filename else "(no source location)"
            again = f" (met {times} times)" if times > 1 else ""
            lines.append(f"  {i + 1}. {where}: {r.reason}{again}")
            source = (
                linecache.getline(r.filename, r.lineno).strip() if r.filename and r.lineno else ""
            )
            if source:
                lines.append(f"       {r.lineno} | {source}")
    if out.assumptions:
        lines.append("Assumed Values (checked after each graph run):")
        lines += [f"  {i + 1}. {a}" for i, a in enumerate(out.assumptions)]
    lines += _graph_lines(out, verbose)
    lines += _record_lines(out, verbose, guards)
    if out.outside_share is not None:
        lines.append(f"Time Outside Compiled Graphs: {out.outside_share:.0%} ({out.outside_note})")
    elif out.outside_note:
        lines.append(f"Time Outside Compiled Graphs: {out.outside_note}")
    return "\n".join(lines)


def _indented(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in text.strip("\n").splitlines() if line.strip()]


def _graph_lines(out: ExplainOutput, verbose: bool) -> list[str]:
    lines = ["Graphs:"] if out.graphs else []
    for i, ops in enumerate(out.ops_per_graph):
        lines.append(f"  Graph {i + 1} ({len(ops)} ops): {', '.join(ops)}")
        if verbose:
            lines += _indented(str(out.graphs[i].code), "      ")
    return lines


def _record_lines(out: ExplainOutput, verbose: bool, guards: bool = True) -> list[str]:
    """Each record: which graph it runs, and its guard's checks (``verbose``: its whole guard
    and mock source)."""
    number = {id(gm): i + 1 for i, gm in enumerate(out.graphs)}
    lines = ["Records and Their Guards:"] if out.records else []
    for i, rec in enumerate(out.records):
        gm = rec.graph_module
        graph = f"Graph {number[id(gm)]}" if id(gm) in number else "no graph"
        checks = [line.strip() for line in rec.guard_source.splitlines()]
        checks = [line for line in checks if line.startswith("if ")]
        lines.append(f"  Record {i + 1}: runs {graph}; its guard makes {len(checks)} checks")
        if verbose:
            lines += ["    guard:", *_indented(rec.guard_source, "      ")]
            lines += ["    mock:", *_indented(rec.mock_source, "      ")]
        elif guards:
            lines += [f"    {check}" for check in checks]
    return lines
