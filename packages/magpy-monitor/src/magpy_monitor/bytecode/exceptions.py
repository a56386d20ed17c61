"""Exceptions raised and handled inside the monitored program, and ``with`` blocks.

CPython 3.11 handles exceptions through the code object's exception table: when an instruction
raises inside a protected range, the stack is cut to the entry's depth, ``lasti`` is pushed if
the entry says so, then the exception, and execution continues at the handler. The monitor
mirrors that on the shadow stack at the ``exception`` event. Whatever made the instruction raise
is guarded (the attribute that was missing, the key that was absent), so a record never depends
on an exception it did not check for.

``with`` blocks on the grad-mode context managers (``torch.no_grad()``,
``torch.enable_grad()``, ``torch.set_grad_enabled(b)``) are modelled here: entering and leaving
them become ``torch._C._set_grad_enabled`` nodes of the operator graph. Other context managers
are handled in ``_contexts.py``.
"""

from __future__ import annotations

import dis
import types
from typing import Any

import torch

from magpy_refgraph import GuardKind, Outcome

from ..core import registry
from ..core.dispatch import dispatch_call
from ..core.frame import FrameMonitor, Inst, Pending
from ..core.registry import opcode
from ..core.values import Payload, Val
from ..core.valuetypes import is_value_type
from ..cpython.code import real_offset
from ..cpython.current import INTERP
from .subscripts import dict_item_read
from .variables import Defines

__all__ = [
    "GRAD_MODE_CLASSES",
    "GradContext",
    "GradExit",
    "grad_context",
    "on_exception",
    "reenter_grad_context",
]

_tables: dict[types.CodeType, list[Any]] = {}


def _handler_for(code: types.CodeType, lasti: int) -> Any:
    table = _tables.get(code)
    if table is None:
        table = _tables[code] = list(dis._parse_exception_table(code))  # type: ignore[attr-defined]
    for entry in table:
        if entry.start <= lasti < entry.end:
            return entry
    return None


def _observe_cause(m: FrameMonitor, exc: BaseException) -> None:
    cap = m.cap
    inst = m.last
    popped = m.popped
    if inst is not None and inst.opname in ("LOAD_ATTR", "LOAD_METHOD") and popped:
        base = popped[0]
        name = inst.argval
        if base.external and base.node is not None:
            cap.observe_type(base)
            cap.graph.observe(base.node, GuardKind.NOT_HASATTR, name)
            return
    if _missing_key(m, inst, exc, popped):
        return
    for v in popped:
        if isinstance(v.obj, torch.Tensor):
            cap.guard_meta(v)
        else:
            cap.observe(v)


def _missing_key(m: FrameMonitor, inst: Inst | None, exc: BaseException, popped: list[Val]) -> bool:
    """``d[k]`` of a dict from outside (or a subclass whose lookup is dict's) raised KeyError:
    what decided it is that ``k`` is not among the keys, not the other entries
    (``os.environ.get("X")`` reads ``environ._data``, which holds every variable: a variable
    set later must not fail the guard). True when guarded so."""
    if inst is None or inst.opname != "BINARY_SUBSCR" or type(exc) is not KeyError:
        return False
    if len(popped) != 2 or not _native_lookup(type(popped[0].obj)) or not popped[0].external:
        return False
    container, key = popped
    if container.node is None or not (is_value_type(key.obj) or key.obj is None):
        return False
    cap = m.cap
    cap.observe_type(container)
    cap.observe(key)
    cap.graph.observe(container.node, GuardKind.CUSTOM, Outcome(Defines(key.obj), False))
    return True


def _native_lookup(cls: type) -> bool:
    """``d[k]`` and ``k in d`` (the guard's ``Defines``) run dict's own C code: a dict, or a
    subclass keeping dict's ``__getitem__`` and ``__contains__`` with no ``__missing__``."""
    return cls is dict or (
        dict_item_read(cls) and getattr(cls, "__contains__", None) is dict.__contains__
    )


def on_exception(m: FrameMonitor, exc: BaseException) -> bool:
    """An exception is raised in ``m``'s frame; returns True if a handler in it will run."""
    pending = m.pending
    if (
        pending is not None
        and pending.inst.opname in ("FOR_ITER", "SEND")
        and type(exc) is StopIteration
        and pending.gen is not None
    ):
        # a followed generator returned a value: the instruction itself catches its
        # StopIteration (CPython reports it to the tracer first); ``pending`` binds the end
        return False
    if (
        INTERP.stop_iteration_event
        and type(exc) is StopIteration
        and m.last is not None
        and m.last.opname in ("FOR_ITER", "SEND", "END_FOR", "END_SEND")
    ):
        return False  # (the event of a generator that returned: nothing was raised)
    m.pending = None
    if pending is not None and pending.on_raise is not None:
        pending.on_raise(exc)
    elif pending is not None and pending.raised is not None:
        pass  # a followed callee raised it: what made it raise is guarded there
    elif pending is not None or m.popped:
        _observe_cause(m, exc)
    entry = _handler_for(m.code, real_offset(m.code, m.frame.f_lasti))
    if entry is None:
        m.unwinding, m.raised = True, exc
        return False
    _enter_handler(m, entry, m.cap.known(exc) or m.cap.new(exc, const=True))
    return True


def _enter_handler(m: FrameMonitor, entry: Any, exc_val: Val) -> None:
    """Cut the shadow stack to the handler's depth; the handler starts with ``lasti`` (if the
    entry says so) and the exception pushed."""
    del m.stack[entry.depth :]

    def make(real: list[Any]) -> list[Val]:
        return [m.cap.const(real[0]), exc_val] if entry.lasti else [exc_val]

    handler = Inst.synthetic("<exception handler>", entry.target)
    m.pending = Pending(handler, 1 + bool(entry.lasti), make)


@opcode("RAISE_VARARGS")
def _raise(m: FrameMonitor, inst: Inst) -> None:
    m.pop(inst.arg)


@opcode("RERAISE")
def _reraise(m: FrameMonitor, inst: Inst) -> None:
    """Raise the exception on top again (a ``finally`` or ``with`` cleanup). CPython unwinds
    straight from here, with no ``exception`` event: the frame's handler is entered now, or
    the frame is left by the exception."""
    (exc,) = m.pop()  # (the lasti below it, if any, is only read)
    entry = _handler_for(m.code, inst.offset)
    if entry is None:
        m.unwinding, m.raised = True, exc.obj
        return
    _enter_handler(m, entry, exc)


@opcode("PUSH_EXC_INFO")
def _push_exc_info(m: FrameMonitor, inst: Inst) -> None:
    (exc,) = m.pop()
    depth, left = m.exc_state
    m.exc_state = (depth + 1, left)
    m.expect_outputs(inst, 2, lambda real: [m.cap.const(real[0]), exc])


@opcode("POP_EXCEPT")
def _pop_except(m: FrameMonitor, inst: Inst) -> None:
    m.pop()
    depth, left = m.exc_state
    m.exc_state = (depth - 1, left) if depth else (0, True)


@opcode("CHECK_EXC_MATCH")
def _check_exc_match(m: FrameMonitor, inst: Inst) -> None:
    (typ,) = m.pop()
    m.cap.observe(typ)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("LOAD_ASSERTION_ERROR")
def _load_assertion_error(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.cap.const(AssertionError))


# ---------------------------------------------------------------------- with blocks
GRAD_MODE_CLASSES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)


class GradContext(Payload):
    """A grad-mode context object made in the run: the mode its block runs in (None: the
    mode ``set_grad_enabled`` already switched to), and the mode before it (None: the mode when
    the block is entered)."""

    __slots__ = ("mode", "prev")

    def __init__(self, mode: bool | None, prev: bool | None = None) -> None:
        self.mode, self.prev = mode, prev


class GradExit(Payload):
    """The bound ``__exit__`` of a grad-mode block: the mode it restores (``prev``), the
    context's class and the mode inside the block (to re-enter it, ``reenter_grad_context``)."""

    __slots__ = ("cls", "mode", "prev")

    def __init__(self, prev: bool, cls: type, mode: bool) -> None:
        self.prev, self.cls, self.mode = prev, cls, mode


def grad_context(
    m: FrameMonitor, inst: Inst, cls: Any, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``torch.no_grad()`` & co: a context object whose entry/exit are graph nodes."""
    for v in (*pos, *kwargs.values()):
        m.cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        ctx = real[0]
        if cls is torch.set_grad_enabled:
            # set_grad_enabled(b) switches the mode when constructed, not when entered
            mode = torch.is_grad_enabled()
            m.cap.rec.call("call_function", torch._C._set_grad_enabled, (mode,), {}, effect=True)
            return [m.cap.new(ctx, payload=GradContext(None, ctx.prev))]
        return [m.cap.new(ctx, payload=GradContext(cls is torch.enable_grad))]

    m.expect_outputs(inst, 1, make)


@opcode("BEFORE_WITH")
def _before_with(m: FrameMonitor, inst: Inst) -> None:
    (ctx,) = m.pop()
    state = ctx.payload(GradContext)
    if state is None:
        registry.BEFORE_WITH.impl(m, inst, ctx)  # any other context manager
        return
    prev = state.prev if state.prev is not None else torch.is_grad_enabled()
    mode = state.mode

    def make(real: list[Any]) -> list[Val]:
        if mode is not None:
            m.cap.rec.call("call_function", torch._C._set_grad_enabled, (mode,), {}, effect=True)
        inside = mode if mode is not None else torch.is_grad_enabled()
        exit_val = Val(real[0], payload=GradExit(prev, type(ctx.obj), inside))
        return [exit_val, m.cap.const(real[1])]

    m.expect_outputs(inst, 2, make)


def grad_exit(m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val]) -> None:
    """Calling a grad-mode context's ``__exit__``: restore the mode in the graph."""
    prev = fn_val.require(GradExit).prev

    def make(real: list[Any]) -> list[Val]:
        m.cap.rec.call("call_function", torch._C._set_grad_enabled, (prev,), {}, effect=True)
        return [m.cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


@opcode("WITH_EXCEPT_START")
def _with_except_start(m: FrameMonitor, inst: Inst) -> None:
    """An exception left a ``with`` block: ``__exit__(type, exc, tb)`` is called like a CALL
    (a Python ``__exit__`` is followed; torch's grad modes are restored in the graph) and its
    result, which decides whether the exception is swallowed, is pushed."""
    exit_fn, exc = m.stack[-4], m.stack[-1]
    err = exc.obj
    if not isinstance(err, BaseException):
        raise m.unsupported("WITH_EXCEPT_START without an exception")
    tb = m.cap.new(err.__traceback__, const=True)
    dispatch_call(m, inst, exit_fn, [m.cap.const(type(err)), exc, tb], {})


def reenter_grad_context(cls: Any, mode: bool, prev: bool) -> Any:
    """Re-create a grad-mode ``with`` block's state for a frame resuming inside it.

    Sets the mode the block started from, enters a new context of the same kind, and returns
    its ``__exit__`` (what the frame's stack holds inside a ``with`` block).
    """
    torch._C._set_grad_enabled(prev)
    ctx = cls(mode) if cls is torch.set_grad_enabled else cls()
    ctx.__enter__()
    return ctx.__exit__
