"""``with`` blocks beyond grad mode: context managers the monitor follows or models.

BEFORE_WITH pops the context manager and pushes its bound ``__exit__`` and what ``__enter__``
returned; the block ends with a plain call of that ``__exit__`` (a ``return`` inside the block
calls it too, before returning). Grad-mode contexts are handled in ``_exceptions.py``; the others:

- Context managers written in Python (``__enter__`` and ``__exit__`` are Python functions of the
  type): ``__enter__``, which BEFORE_WITH calls from C, is followed like an inlined call, and so
  is the ``__exit__`` call that ends the block. Such an object made during the run (``with
  Timer():``, ``contextlib.nullcontext()``, ``contextlib.suppress(...)``, the wrapper of a
  ``contextlib.contextmanager`` generator) is built by following its ``__init__``; it cannot
  leave the record (the mock could not rebuild it), so a segment that ends inside its block has
  no record.
- ``warnings.catch_warnings()``: it saves the warning filters on entry and restores them on
  exit, so ``warnings.simplefilter``/``filterwarnings`` inside it change nothing after the block.
  Entering, filtering and leaving run natively at record time; the filters need no replay, but
  each of these steps also forgets what every module's ``__warningregistry__`` has shown
  (``warnings._filters_mutated()``: a ``"default"``/``"once"`` warning shows again), and that
  the mock replays, once per step, in program order (``forget_shown_warnings``). The operations
  of the graph run outside the filters (a warning one of them emits makes it a break,
  ``libs.stdlib.warnspy``); a segment that ends inside the block re-enters one with the same
  filters. ``warnings.warn`` still breaks the graph, and so does a filter change
  outside such a block (it changes the filters for good), or the ``"error"`` action (it turns a
  warning into an exception the graph would not raise).
- ``torch.autograd.profiler.record_function(name)``: a label for the profiler, nothing the
  operations compute; the record is guarded on the profiler being off.
- ``torch.autocast(...)`` (and the ``torch.cuda.amp``/``torch.cpu.amp`` forms), enabled or not:
  entered and left by ``torch.amp._enter_autocast``/``_exit_autocast`` nodes of the graph, so
  its operations run with the block's autocast state whatever the caller's.

An exception raised inside a ``with`` block (``WITH_EXCEPT_START``) calls ``__exit__`` with
it: a Python ``__exit__`` is followed, a grad mode is restored; for the context managers
modelled here it is a graph break.
"""

from __future__ import annotations

import _warnings
import types
import warnings
from typing import Any, Protocol

import torch
import torch.autograd.profiler as prof
from torch.amp.autocast_mode import _enter_autocast, _exit_autocast
from torch.cpu.amp.autocast_mode import autocast as cpu_autocast

from magpy_refgraph import Attr, Const

from ..core import registry
from ..core.attributes import Read, attr_rule
from ..core.capture import Capture, Write
from ..core.frame import FrameMonitor, Inst
from ..core.registry import register_builtin
from ..core.values import BoundMethod, Payload, Val
from .instances import follow, lookup

__all__ = [
    "ContextExit",
    "ModelledContext",
    "PythonExit",
    "before_with",
    "context_exit",
    "is_python_context_class",
]


class BlockModel(Protocol):
    """How the monitor models the block of one kind of context manager (``_WarningsBlock``,
    ``_RecordFunction``, ``_Autocast``): entering it, leaving it, and what re-enters it for a
    frame resuming inside the block (``(fn, args)``; None: it cannot be)."""

    def enter(self, m: FrameMonitor, inst: Inst, ctx: Val) -> None: ...

    def exit(self, m: FrameMonitor, inst: Inst) -> None: ...

    def reenter(self) -> tuple[Any, tuple[Any, ...]] | None: ...


class ModelledContext(Payload):
    """A context manager made in the run whose block the monitor models."""

    __slots__ = ("model",)

    def __init__(self, model: BlockModel) -> None:
        self.model = model


class ContextExit(Payload):
    """The bound ``__exit__`` of a modelled context manager's block (``model`` leaves it, and
    re-enters it for a frame resuming inside the block)."""

    __slots__ = ("model",)

    def __init__(self, model: BlockModel) -> None:
        self.model = model


class PythonExit(BoundMethod):
    """The bound ``__exit__`` of a context manager written in Python (``self_val``: the
    manager): called like any method of it, and rebuilt by the mock from it."""

    __slots__ = ()


def _python_protocol(cls: type) -> tuple[types.FunctionType, types.FunctionType] | None:
    enter, exit_ = lookup(cls, "__enter__"), lookup(cls, "__exit__")
    if isinstance(enter, types.FunctionType) and isinstance(exit_, types.FunctionType):
        return enter, exit_
    return None


# ---------------------------------------------------------------------- Python context managers
def is_python_context_class(cls: type) -> bool:
    """A class of context managers written in Python whose construction the monitor follows:
    ``object.__new__``, a metaclass without its own ``__call__``, a Python ``__init__``."""
    new: Any = cls.__new__
    if _python_protocol(cls) is None or new is not object.__new__:
        return False
    metaclass: Any = type(cls)
    if any("__call__" in vars(meta) for meta in metaclass.__mro__ if meta is not type):
        return False
    init = lookup(cls, "__init__")
    return init is object.__init__ or isinstance(init, types.FunctionType)


def _follow_enter(m: FrameMonitor, inst: Inst, ctx: Val, enter: types.FunctionType) -> None:
    if ctx.external:
        m.cap.observe_type(ctx)

    def outputs(real: list[Any], entered: Val) -> list[Val]:
        # the bound __exit__: called like any method of ctx (the mock can rebuild it from ctx)
        return [Val(real[0], payload=PythonExit(ctx)), entered]

    follow(m, inst, enter, [ctx], 2, outputs)


# ---------------------------------------------------------------------- BEFORE_WITH, __exit__
@registry.BEFORE_WITH.provide
def before_with(m: FrameMonitor, inst: Inst, ctx: Val) -> None:
    """BEFORE_WITH on ``ctx`` (already popped), any context manager but grad mode's."""
    state = ctx.payload(ModelledContext)
    if state is not None:
        state.model.enter(m, inst, ctx)
        return
    cls = type(ctx.obj)
    if lookup(cls, "__enter__") in _NATIVE_ENTERS:
        raise m.unsupported(f"`with` on a {cls.__name__} made outside the record")
    protocol = _python_protocol(cls)
    if protocol is None:
        raise m.unsupported(f"`with` on a {cls.__name__} (its __enter__/__exit__ are not Python)")
    _follow_enter(m, inst, ctx, protocol[0])


def context_exit(m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val]) -> bool:
    """The call of a modelled context manager's ``__exit__``; False if ``fn_val`` is none."""
    state = fn_val.payload(ContextExit)
    if state is None:
        fn = fn_val.obj
        if type(fn) is types.MethodType and fn.__func__ in _NATIVE_EXITS:
            raise m.unsupported(
                f"leaving a {type(fn.__self__).__name__} block entered before this segment"
            )
        return False
    if not all(v.obj is None for v in pos):
        raise m.unsupported("__exit__ called with an exception")
    state.model.exit(m, inst)
    return True


def _native_exit(m: FrameMonitor, inst: Inst) -> None:
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


# ---------------------------------------------------------------------- warnings
class _WarningsBlock:
    """A ``warnings.catch_warnings()`` block: the filter calls made inside it, in order."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.filters: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def enter(self, m: FrameMonitor, inst: Inst, ctx: Val) -> None:
        block = _WarningsBlock(self.kwargs)

        def make(real: list[Any]) -> list[Val]:
            # __enter__ resets the registries, and again in simplefilter(action) if given one
            _replay_registry_reset(m.cap, 1 + (self.kwargs.get("action") is not None))
            return [Val(real[0], payload=ContextExit(block)), m.cap.const(real[1])]

        m.expect_outputs(inst, 2, make)

    def exit(self, m: FrameMonitor, inst: Inst) -> None:
        def make(real: list[Any]) -> list[Val]:
            _replay_registry_reset(m.cap, 1)
            return [m.cap.const(real[0])]

        m.expect_outputs(inst, 1, make)

    def reenter(self) -> tuple[Any, tuple[Any, ...]] | None:
        return reenter_catch_warnings, (self.kwargs, tuple(self.filters))


# (the same function on 3.11 to 3.13: ``warnings`` imports it from ``_warnings``)
_FILTERS_MUTATED: Any = _warnings._filters_mutated  # type: ignore[attr-defined]


def forget_shown_warnings() -> None:
    """What entering or leaving a ``catch_warnings`` block and each filter call do to the
    registries of shown warnings (called by the mock): every ``__warningregistry__`` is out of
    date from now on, so a ``"default"``/``"once"``/``"module"`` warning shows again."""
    _FILTERS_MUTATED()


def _replay_registry_reset(cap: Capture, times: int) -> None:
    """The step of a ``catch_warnings`` block that just ran natively reset the registries
    ``times`` times: the mock does the same, in program order with the other write-backs."""
    fn = cap.root(Const(forget_shown_warnings), forget_shown_warnings)
    cap.writes.extend(Write("callmethod", fn, "__call__", None) for _ in range(times))


def reenter_catch_warnings(
    kwargs: dict[str, Any], filters: tuple[tuple[Any, tuple[Any, ...], dict[str, Any]], ...]
) -> Any:
    """Re-create a ``catch_warnings`` block's state for a frame resuming inside it: enter a new
    one, repeat the filter calls made in it, and return its ``__exit__``."""
    ctx = warnings.catch_warnings(**kwargs)
    ctx.__enter__()
    for fn, args, kw in filters:
        fn(*args, **kw)
    return ctx.__exit__


@register_builtin(warnings.catch_warnings)
def _catch_warnings(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    if pos:
        raise m.unsupported("warnings.catch_warnings() with positional arguments")
    for v in kw.values():
        m.cap.observe(v)
    kwargs = {k: v.obj for k, v in kw.items()}
    if kwargs.get("record"):
        raise m.unsupported("warnings.catch_warnings(record=True) collects warnings")
    if kwargs.get("module") is not None:
        raise m.unsupported("warnings.catch_warnings(module=...)")
    if kwargs.get("action") == "error":
        raise m.unsupported("warnings turned into errors (the graph would not raise them)")
    registry.NOTE_CATCH_WARNINGS.impl(m)  # (not in a record that replays a warning)
    state = _WarningsBlock(kwargs)
    m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], payload=ModelledContext(state))])


def _innermost_warnings_block(m: FrameMonitor | Capture) -> _WarningsBlock | None:
    """The innermost ``catch_warnings`` block the run is in (its ``__exit__`` on a stack)."""
    cap = m if isinstance(m, Capture) else m.cap
    for mon in reversed(cap.frames):
        for v in reversed(mon.stack):
            state = v.payload(ContextExit)
            if state is not None and isinstance(state.model, _WarningsBlock):
                return state.model
    return None


def _filter_call(fn: Any) -> Any:
    """The handler of ``warnings.simplefilter``/``filterwarnings`` (``fn``)."""

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        block = _innermost_warnings_block(m)
        if block is None:
            raise m.unsupported(
                f"warnings.{fn.__name__} outside a `with warnings.catch_warnings()` block "
                "(it changes the warning filters for good)"
            )
        for v in (*pos, *kw.values()):
            m.cap.observe(v)
        args = tuple(v.obj for v in pos)
        kwargs = {k: v.obj for k, v in kw.items()}
        if (args[0] if args else kwargs.get("action")) == "error":
            raise m.unsupported("warnings turned into errors (the graph would not raise them)")
        block.filters.append((fn, args, kwargs))
        m.cap.mutations += 1  # a change of state that a segment cut earlier could not replay

        def make(real: list[Any]) -> list[Val]:
            _replay_registry_reset(m.cap, 1)  # (the new filter resets the registries)
            return [m.cap.const(real[0])]

        m.expect_outputs(inst, 1, make)

    return handle


for _fn in (warnings.simplefilter, warnings.filterwarnings):
    register_builtin(_fn)(_filter_call(_fn))


def _warnings_state_in_block(r: Read) -> bool:
    return (
        r.obj is warnings
        and not callable(r.real)
        and r.base.external
        and _innermost_warnings_block(r.cap) is not None
    )


@attr_rule("warnings state in a catch_warnings block", _warnings_state_in_block)
def _read_warnings_state_in_block(m: FrameMonitor, r: Read) -> Val:
    """``warnings.filters`` (or another setting of the module) read inside a modelled block:
    the block's entry, its filter calls and its restore ran natively at record time and the mock
    replays none of them, so on a hit the program would see the filters of the caller, not the
    block's. A graph break: the segment after it re-enters the block (``reenter``) and reads the
    block's own filters natively."""
    raise m.unsupported(
        f"warnings.{r.name} read inside a `with warnings.catch_warnings()` block "
        "(the mock does not replay the block's filters)"
    )


# ---------------------------------------------------------------------- torch contexts
def _entered(m: FrameMonitor, ctx: Val, real: Any) -> Val:
    """What ``__enter__`` of a modelled context returned (itself, or a constant)."""
    return ctx if real is ctx.obj else m.cap.const(real)


class _RecordFunction:
    """A ``record_function(name)`` block: a profiler label, guarded to have no profiler."""

    def __init__(self, name: Any, args: Any) -> None:
        self.name, self.args = name, args

    def enter(self, m: FrameMonitor, inst: Inst, ctx: Val) -> None:
        if prof._is_profiler_enabled or torch._C._autograd._profiler_enabled():
            raise m.unsupported("record_function while the profiler runs (it records a label)")
        cap = m.cap
        module = cap.root(Const(prof), prof)
        cap.observe(cap.child(module, Attr("_is_profiler_enabled"), prof._is_profiler_enabled))

        def make(real: list[Any]) -> list[Val]:
            return [Val(real[0], payload=ContextExit(self)), _entered(m, ctx, real[1])]

        m.expect_outputs(inst, 2, make)

    def exit(self, m: FrameMonitor, inst: Inst) -> None:
        _native_exit(m, inst)

    def reenter(self) -> tuple[Any, tuple[Any, ...]] | None:
        return reenter_record_function, (self.name, self.args)


def reenter_record_function(name: str, args: Any) -> Any:
    """Enter a new ``record_function(name, args)`` and return its ``__exit__`` (a frame
    resuming inside such a block)."""
    ctx = torch.autograd.profiler.record_function(name, args)
    ctx.__enter__()
    return ctx.__exit__


@register_builtin(torch.autograd.profiler.record_function)
def _record_function(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    for v in (*pos, *kw.values()):
        m.cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        ctx = real[0]
        return [m.cap.new(ctx, payload=ModelledContext(_RecordFunction(ctx.name, ctx.args)))]

    m.expect_outputs(inst, 1, make)


class _Autocast:
    """A ``torch.autocast`` block: entered and left by nodes of the graph (as TorchDynamo's
    graphs do), so its operations run with the block's autocast state whatever the caller's."""

    def __init__(self, device: str, dtype: Any, enabled: bool, cache: Any) -> None:
        self.device, self.dtype, self.enabled, self.cache = device, dtype, enabled, cache
        self.node: Any = None

    def enter(self, m: FrameMonitor, inst: Inst, ctx: Val) -> None:
        def make(real: list[Any]) -> list[Val]:
            block = _Autocast(self.device, self.dtype, self.enabled, self.cache)
            block.node = m.cap.rec.call(
                "call_function",
                _enter_autocast,
                (self.device, self.dtype, self.enabled, self.cache),
                {},
                effect=True,
            )
            return [Val(real[0], payload=ContextExit(block)), _entered(m, ctx, real[1])]

        m.expect_outputs(inst, 2, make)

    def exit(self, m: FrameMonitor, inst: Inst) -> None:
        def make(real: list[Any]) -> list[Val]:
            m.cap.rec.call("call_function", _exit_autocast, (self.node,), {}, effect=True)
            return [m.cap.const(real[0])]

        m.expect_outputs(inst, 1, make)

    def reenter(self) -> tuple[Any, tuple[Any, ...]] | None:
        return None  # the graph entered it: a native __exit__ would leave it twice


_AUTOCAST_CLASSES = (torch.amp.autocast, torch.cuda.amp.autocast, cpu_autocast)


@register_builtin(*_AUTOCAST_CLASSES)
def _autocast(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    for v in (*pos, *kw.values()):
        m.cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        ctx = real[0]
        state = _Autocast(ctx.device, ctx.fast_dtype, bool(ctx._enabled), ctx._cache_enabled)
        return [m.cap.new(ctx, payload=ModelledContext(state))]

    m.expect_outputs(inst, 1, make)


_NATIVE_CLASSES = (
    warnings.catch_warnings,
    torch.autograd.profiler.record_function,
    *_AUTOCAST_CLASSES,
)
_NATIVE_ENTERS = tuple(lookup(c, "__enter__") for c in _NATIVE_CLASSES)
_NATIVE_EXITS = tuple(lookup(c, "__exit__") for c in _NATIVE_CLASSES)
