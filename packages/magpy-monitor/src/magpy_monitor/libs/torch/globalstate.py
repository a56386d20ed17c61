"""Reads of torch's global state: the autocast settings and the default dtype.

``torch.get_autocast_gpu_dtype()``, ``torch.is_autocast_enabled()``, ``torch.get_default_dtype()``
and the like take no tensor: their result is fixed by process-wide state the caller may change
between two calls (``with torch.autocast(...)`` around the compiled function,
``torch.set_default_dtype``). The result is a constant of the record, guarded by the outcome of
the same read when the guard runs (``Outcome(read, value)`` on the function itself).

The guard runs where the record starts, so the read must see the state the record started
with: a read after the run entered or left an autocast block, or changed the default dtype,
is a graph break. The deprecated spellings (``get_autocast_gpu_dtype``,
``get_autocast_cpu_dtype``, ``is_autocast_cpu_enabled``) also issue a ``DeprecationWarning`` on
every call; the guard reads the state through their replacements, and the warning is replayed
on every hit as ``warnings.warn`` is (see ``_warn``).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import attrs
import torch
import torch.compiler
from torch.amp.autocast_mode import _enter_autocast, _exit_autocast

from magpy_refgraph import Const, GuardKind, Outcome

from ...core.frame import FrameMonitor, Inst
from ...core.registry import BUILTIN_HANDLERS
from ...core.values import Val
from ...core.valuetypes import is_value_type
from ..stdlib.warn import _warn

__all__ = ["StateRead", "set_compiling"]


@attrs.frozen
class StateRead:
    """``fn(*args)``: reading global state again (a guard's outcome function)."""

    fn: Any
    args: tuple[Any, ...]

    def __call__(self, _: Any) -> Any:
        return self.fn(*self.args)


def _autocast_reader(fn: Any) -> Any:
    return lambda *args: StateRead(fn, args)


# function -> (readers: its arguments -> the guard's read, the state it reads)
_READS: dict[Any, tuple[Any, str]] = {
    torch.get_autocast_dtype: (_autocast_reader(torch.get_autocast_dtype), "autocast"),
    torch.is_autocast_enabled: (_autocast_reader(torch.is_autocast_enabled), "autocast"),
    torch.get_autocast_gpu_dtype: (
        lambda: StateRead(torch.get_autocast_dtype, ("cuda",)),
        "autocast",
    ),
    torch.get_autocast_cpu_dtype: (
        lambda: StateRead(torch.get_autocast_dtype, ("cpu",)),
        "autocast",
    ),
    torch.is_autocast_cpu_enabled: (
        lambda: StateRead(torch.is_autocast_enabled, ("cpu",)),
        "autocast",
    ),
    torch.get_default_dtype: (lambda: StateRead(torch.get_default_dtype, ()), "default dtype"),
}

# graph operations that change that state (a read after one does not see the entry state)
_WRITERS: dict[str, frozenset[Any]] = {
    "autocast": frozenset(
        {
            _enter_autocast,
            _exit_autocast,
            torch.set_autocast_enabled,
            torch.set_autocast_dtype,
            torch.set_autocast_gpu_dtype,
            torch.set_autocast_cpu_dtype,
            torch.set_autocast_cpu_enabled,
        }
    ),
    "default dtype": frozenset(
        {torch.set_default_dtype, torch.set_default_tensor_type, torch._C._set_default_dtype}
    ),
}


def _state_read(fn: Any, m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    reader, state = _READS[fn]
    if kw or not all(v.obj is None or is_value_type(v.obj) for v in pos):
        raise m.unsupported(f"torch.{fn.__name__} with unusual arguments")
    for v in pos:
        cap.observe(v)
    writers = _WRITERS[state]
    if any(n.target in writers for n in cap.rec.created if _hashable(n.target)):
        raise m.unsupported(f"reads the {state} after the run changed it")
    args = tuple(v.obj for v in pos)
    try:
        read = reader(*args)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn(*args)  # what the call about to run natively gives
        again = read(None)
    except Exception as exc:  # arguments the function refuses: eager raises there
        raise m.unsupported(f"torch.{fn.__name__} with unusual arguments") from exc
    if again != value or type(again) is not type(value):
        raise m.unsupported(f"torch.{fn.__name__} reads state the guard cannot read again")
    root = cap.root(Const(fn), fn)
    assert root.node is not None
    cap.graph.observe(root.node, GuardKind.CUSTOM, Outcome(read, value))
    if not caught:
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])
        return
    if len(caught) != 1:
        raise m.unsupported(f"torch.{fn.__name__} issued several warnings")
    w = caught[0]  # (the call issues a warning: replayed like warnings.warn)
    _warn(m, inst, [cap.const(str(w.message)), cap.const(w.category)], {})


def _hashable(target: Any) -> bool:
    try:
        hash(target)
    except TypeError:
        return False
    return True


def _handler(fn: Any) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        _state_read(fn, m, inst, pos, kw)

    return handle


for _fn in _READS:
    BUILTIN_HANDLERS[id(_fn)] = (_fn, _handler(_fn))


class _ThreadFlag(threading.local):
    """Whether this thread is being recorded (each thread sees its own ``on``)."""

    on = False


_FLAG = _ThreadFlag()
_FLAG_NAME = "_magpy_thread_compiling"


def _is_compiling() -> bool:  # the body ``torch.compiler.is_compiling`` runs (in its globals)
    if torch._jit_internal.is_scripting():
        return False
    return _is_compiling_flag or _magpy_thread_compiling.on  # type: ignore[name-defined]  # noqa: F821


def _install_thread_flag() -> None:
    """Make ``torch.compiler.is_compiling()`` also answer this thread's flag.

    torch keeps the flag in a module global (``torch.compiler._is_compiling_flag``), which every
    thread reads: while one thread recorded, code in every other thread took its compile-mode
    branch, and two threads recording at once could leave it set. The function object stays the
    same (so ``from torch.compiler import is_compiling`` sees it too); its code also reads a
    ``threading.local`` that MagPy puts in the same module. torch's own uses of the global flag
    (TorchDynamo) are unchanged.
    """
    fn = torch.compiler.is_compiling
    if fn.__code__ is _is_compiling.__code__:
        return
    vars(torch.compiler)[_FLAG_NAME] = _FLAG
    fn.__code__ = _is_compiling.__code__


_install_thread_flag()


def set_compiling(value: bool) -> bool:
    """Set what ``torch.compiler.is_compiling()`` answers in this thread; return what it
    answered before.

    While MagPy monitors a run it compiles that run, so the program sees ``True`` there, as it
    does under TorchDynamo: code such as transformers' mask helpers then takes its
    compile-friendly path instead of reading tensor values. Unlike TorchDynamo's process-wide
    flag, MagPy's is per thread (``_install_thread_flag``).
    """
    old = _FLAG.on
    _FLAG.on = value
    return old
