"""The settrace driver: which frames are monitored, and the per-frame opcode callbacks.

``run_monitored(entry, *args)`` calls ``entry`` with a global trace function installed. The
entry frame becomes the root monitored frame; a new Python frame becomes monitored only when the
innermost monitored frame's pending instruction expects it (an inlined call, a generator it
drives). Frames entered by native code on behalf of an opaque instruction (a torch function's
Python internals, ``Module.__getattr__``) run untraced. Any error inside a callback stops
monitoring for good in this run: tracing is removed from every frame, and the program finishes
natively, so its results never depend on the monitor.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import InternalError, MagPyError, Unsupported

from ..bytecode.exceptions import on_exception
from ..core.calls import GeneratorState, _closure
from ..core.capture import Capture
from ..core.frame import (
    WARNS_NATIVELY,
    Callback,
    FrameKind,
    FrameMonitor,
    Pending,
    initial_fast,
)
from ..core.values import Val
from ..core.valuetypes import is_value_type
from ..cpython.code import positional_count
from ..cpython.current import gettrace, opcode_trace_off, opcode_trace_on, settrace
from ..libs.stdlib import warnspy
from ..libs.stdlib.warn import replay_library_warnings
from ..libs.torch.globalstate import set_compiling
from . import plugins  # noqa: F401  (every handler is registered before the first run)

__all__ = ["Monitor"]

_modes = torch._C._len_torch_function_stack  # torch function modes entered (0: none)
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction

TraceFn = Callable[[types.FrameType, str, Any], Any]


class Monitor:
    """Runs one call under monitoring and keeps what was captured (or why capture stopped)."""

    def __init__(self, capture: Capture, entry_code: types.CodeType) -> None:
        self.cap = capture
        self.entry_code = entry_code
        self.failure: BaseException | None = None
        self.user_exception = False
        self.finished = False
        self.chain: list[tuple[types.CodeType, Any]] = []
        self._prev: TraceFn | None = None
        self._was_compiling: bool | None = None  # torch.compiler.is_compiling() before us
        # fullgraph=True: the error a graph break raises in the program, at the instruction
        # that breaks, before it runs (None: capture stops and the program goes on natively)
        self.stop_at_break: Callable[[Unsupported], BaseException] | None = None
        self._watching: FrameMonitor | None = None  # whose instruction warnspy watches
        self._operands: list[Any] = []  # (and its inputs)

    def _begin_compiling(self) -> None:
        if self._was_compiling is None:
            self._was_compiling = set_compiling(True)

    def run(self, entry: Callable[..., Any], *args: Any) -> Any:
        """Call ``entry(*args)`` monitored; returns its real result (never altered)."""
        self.trace_on()
        try:
            return entry(*args)
        finally:
            self.trace_off()

    def trace_on(self) -> None:
        """Install the trace function: the next frame of the entry code becomes the root (a
        caller that must not put frames of its own below the program calls ``trace_on``, the
        entry function and ``trace_off`` itself, as ``run`` does)."""
        self._prev = gettrace()
        self._begin_compiling()
        settrace(self._global)

    def trace_off(self) -> None:
        """Remove the trace function (the entry call returned or raised)."""
        settrace(self._prev)
        self._detach()

    # ------------------------------------------------------------------ callbacks
    def _global(self, frame: types.FrameType, event: str, arg: Any) -> TraceFn | None:
        if event != "call" or self.failure is not None or self.finished:
            return None
        try:
            return self._on_call(frame)
        except BaseException as exc:  # never let a monitor error reach the program
            self._fail(exc)
            return None

    def _on_call(self, frame: types.FrameType) -> TraceFn | None:
        frames = self.cap.frames
        if not frames:
            if frame.f_code is self.entry_code:
                mon = FrameMonitor(
                    self.cap, frame, initial_fast(self.cap, frame, None, None), kind=FrameKind.ROOT
                )
                return self._attach(mon)
            return None
        top: FrameMonitor = frames[-1]
        gen = self.cap.gen_frames.get(id(frame))
        if gen is not None and gen.obj.gi_frame is frame:
            return self._resume_generator(top, frame, gen)
        p = top.pending
        if p is None:
            return None
        if p.expect is not None and p.expect[0] is frame.f_code:
            start = p.expect[1]
            p.expect = None
            return self._attach(start(frame))
        if frame.f_code in p.callbacks:
            return self._attach(self._callback(top, frame, p.callbacks[frame.f_code]))
        if p.opaque and (p.calls_back is None or not p.calls_back(frame)):
            return None
        code = frame.f_code
        where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
        raise top.unsupported(f"unexpected call of {code.co_qualname} ({where}) from {p.inst}")

    def _callback(self, top: FrameMonitor, frame: types.FrameType, fn_val: Val) -> FrameMonitor:
        """A Python callable called by native code: bind its arguments by identity (or as
        the callable's own ``bind(frame)`` says, when its shadow has one)."""
        code = frame.f_code
        n = positional_count(code)
        callback = fn_val.payload(Callback)
        bind = callback.bind if callback is not None else None
        bound: dict[str, Val] = bind(frame) if bind is not None else {}
        for name in code.co_varnames[:n] if bind is None else ():
            obj = frame.f_locals[name]
            known = self.cap.known(obj)
            if known is None:
                if not is_value_type(obj):
                    raise top.unsupported(
                        f"native code passed an unknown {type(obj).__name__} to {code.co_qualname}"
                    )
                known = self.cap.const(obj)
            bound[name] = known
        mon = FrameMonitor(
            self.cap,
            frame,
            initial_fast(self.cap, frame, bound, _closure(top, fn_val)),
            kind=FrameKind.CALLBACK,
        )
        return mon

    def _resume_generator(
        self, top: FrameMonitor, frame: types.FrameType, gen: Val
    ) -> TraceFn | None:
        if top.pending is None:
            raise top.unsupported("generator resumed outside an instruction")
        state = gen.require(GeneratorState)
        mon = state.monitor
        if mon is None:
            mon = FrameMonitor(
                self.cap,
                frame,
                initial_fast(self.cap, frame, state.bound, state.closure),
                kind=FrameKind.GENERATOR,
            )
            state.monitor = mon
        else:

            def sent(real: list[Any]) -> list[Val]:
                if real[0] is not None:
                    raise mon.unsupported("generator.send() of a value")
                return [self.cap.const(None)]

            mon.pending = Pending(mon.last, 1, sent)  # type: ignore[arg-type]
        return self._attach(mon)

    def _attach(self, mon: FrameMonitor) -> TraceFn:
        self.cap.frames.append(mon)
        frame = mon.frame

        local = _Local(self, mon)  # (not a closure: one returning itself is a cycle)
        opcode_trace_on(frame, local)
        return local

    def _event(self, mon: FrameMonitor, event: str, arg: Any) -> bool:
        """One trace event of ``mon``'s frame; False: stop following it."""
        if self.failure is not None:
            return False
        try:
            self._check_warnings()
            replayed = warnspy.replays()
            if self.cap.hooked or _modes():
                # (the monitor's own reads of tensors: no torch function mode or
                # subclass hook of the program may see them)
                with _NO_TORCH_FUNCTION():
                    self._handle(mon, event, arg)
            else:
                self._handle(mon, event, arg)
            if mon.pending is not None and warnspy.replays() == replayed:
                self._watch(mon)  # (the instruction now runs natively)
        except BaseException as exc:
            self._fail(exc)
            stop = self.stop_at_break
            if stop is not None and event == "opcode" and isinstance(self.failure, Unsupported):
                raise stop(self.failure) from None  # (into the program, at this instruction)
            return False
        return True

    def _watch(self, mon: FrameMonitor) -> None:
        if mon.last is None or mon.last.opname not in warnspy.WATCHED:
            return
        operands = [v.obj for v in mon.popped]
        if mon.stack and mon.last.opname == "FOR_ITER":
            operands.append(mon.stack[-1].obj)  # (the iterator stays on the stack)
        if not warnspy.touches_filters(operands):
            self._watching, self._operands = mon, operands
            warnspy.arm()

    def _check_warnings(self) -> None:
        """The instruction that ran natively since the last event issued a warning: a break
        (``libs.stdlib.warnspy``), before its outputs become part of the record."""
        seen = warnspy.disarm()
        mon, self._watching = self._watching, None
        calls = warnspy.calls() if mon is not None else []
        # (a warning its registry kept from the filters, shown at this place before, is still
        # replayed: a reset registry shows it again, in eager too)
        replayed = bool(calls) and replay_library_warnings(mon, seen, calls)  # type: ignore[arg-type]
        # (the nodes the instruction's outputs make now run without those warnings)
        self.cap.rec.quiet = frozenset(c.message for c in calls) if replayed else None
        last = mon.last if mon is not None else None
        if not (replayed or calls) and last is not None:
            # (native warnings issued on every execution that the handler replays itself)
            replayed = warnspy.native_replayed(last.opname, last.argval, self._operands, seen)
        self._operands = []
        if seen and mon is not None and not replayed:
            if mon.last is not None:
                offset = mon.original_offset(mon.last.offset)
                WARNS_NATIVELY.setdefault(mon.original, set()).add(offset)
            raise mon.unsupported(
                f"{mon.last.opname if mon.last else 'an instruction'} issued a warning "
                f"({seen[0][:80]!r}): it runs natively, to warn as eager does"
            )

    def _handle(self, mon: FrameMonitor, event: str, arg: Any) -> None:
        if event == "opcode":
            mon.on_opcode()
        elif event == "return":
            self._on_return(mon, arg)
        elif event == "exception":
            on_exception(mon, arg[1])

    def _on_return(self, mon: FrameMonitor, value: Any) -> None:
        try:
            self._returned(mon, value)
        finally:
            if mon.kind is not FrameKind.GENERATOR:
                mon.release()

    def _returned(self, mon: FrameMonitor, value: Any) -> None:
        frames = self.cap.frames
        if not frames or frames[-1] is not mon:
            raise InternalError("monitored frames out of order at return")
        frames.pop()
        if mon.kind is not FrameKind.GENERATOR:  # (a generator's frame is resumed later)
            opcode_trace_off(mon.frame)
        if mon.unwinding:  # the frame is left by an exception; its caller sees it next
            if mon.kind is FrameKind.ROOT:
                self.finished = True
                self.failure = Unsupported("the program raised an exception")
            elif frames and frames[-1].pending is not None:
                frames[-1].pending.raised = mon.raised  # (native code may catch it: hasattr)
            return
        inst = mon.last
        opname = inst.opname if inst is not None else ""
        if opname not in ("RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE"):
            raise mon.unsupported(f"frame left at {opname}")
        if mon.pending is not None:
            raise InternalError(f"{mon.pending.inst} still pending at return")
        (val,) = mon.pop()
        if val.obj is not value:
            raise InternalError(f"returned {value!r} but the shadow holds {val!r}")
        if mon.kind is FrameKind.ROOT:
            self.cap.result = val
            self.finished = True
            return
        caller: FrameMonitor = frames[-1]
        if caller.pending is None:
            raise InternalError("callee returned to a caller with nothing pending")
        if opname == "YIELD_VALUE":
            caller.pending.yields.append(val)
        elif mon.kind is FrameKind.CALLBACK:
            caller.pending.callback_results.append(val)
        elif mon.kind is FrameKind.GENERATOR:
            caller.pending.result = val  # its return value (a `yield from` takes it)
            if caller.pending.on_gen_return is not None:
                caller.pending.on_gen_return()
        else:
            if caller.pending.on_result is not None:
                caller.pending.on_result(val)
            else:
                caller.pending.result = val

    # ------------------------------------------------------------------ failure
    def _fail(self, exc: BaseException, *, user: bool = False) -> None:
        if self.failure is None:
            self.chain = [(m.code, m.func) for m in self.cap.frames]
            if not isinstance(exc, MagPyError):
                loc = self.cap.location
                exc = InternalError(f"{type(exc).__name__}: {exc} (at {loc})").with_traceback(
                    exc.__traceback__
                )
            self.failure = exc
            self.user_exception = user
        settrace(self._prev)
        self._detach()

    def _detach(self) -> None:
        warnspy.disarm()
        self._watching = None
        if self._was_compiling is not None:
            set_compiling(self._was_compiling)
            self._was_compiling = None
        for mon in self.cap.frames:
            opcode_trace_off(mon.frame)
        for gen in self.cap.gen_frames.values():
            state = gen.payload(GeneratorState)
            mon = state.monitor if state is not None else None
            if mon is not None:
                opcode_trace_off(mon.frame)
        self.cap.frames.clear()

    @property
    def unsupported(self) -> Unsupported | None:
        """The reason capture stopped, when it is a graph break rather than a bug."""
        return self.failure if isinstance(self.failure, Unsupported) else None


class _Local:
    """The trace function of one followed frame. An object, not a closure: a closure that
    returns itself refers to itself (a reference cycle), which would keep the monitor, its
    capture and every value the run made alive until the GC runs."""

    __slots__ = ("mon", "owner")

    def __init__(self, owner: Monitor, mon: FrameMonitor) -> None:
        self.owner, self.mon = owner, mon

    def __call__(self, f: types.FrameType, event: str, arg: Any) -> TraceFn | None:
        return self if self.owner._event(self.mon, event, arg) else None
