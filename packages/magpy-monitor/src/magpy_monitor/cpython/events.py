"""The monitor's trace events from ``sys.monitoring`` (3.12+), under a tool id of MagPy's own.

The same contract as ``sys.settrace``, delivered only where the monitor asks for it: a
thread's *global* trace function gets a ``"call"`` event for every Python frame that starts,
resumes or has an exception thrown into it, and returns the frame's *local* trace function (or
None); a frame's local trace function gets its ``"return"`` (a return, a yield, or ``None`` when
an exception leaves it), ``"exception"`` (``(type, value, traceback)``) and, once asked for,
``"opcode"`` events, and what it returns (when not None) replaces it. A trace function that
raises loses the thread's global function and the frame's own, and the exception goes on into
the program, as with ``sys.settrace``.

Why not ``sys.settrace`` itself: from 3.12 it runs on ``sys.monitoring`` too (a reserved tool
id), and turns LINE and JUMP events on in *every* code object while it is installed, so all
Python code, the monitor's own inside its callbacks included, runs through the instrumented
path (measured: 1.4-2x slower on 3.12). Here only PY_START/PY_RESUME/PY_THROW and the exception
events (RAISE, PY_UNWIND: ``sys.monitoring`` has no local form of them) are global; returns,
yields, STOP_ITERATION and instructions are turned on per code object, for the codes of
followed frames only. Its opcode events are also why the legacy path was dropped first: it
shares one tool id between all threads and frames, and an untraced frame of the same code in
another thread (or a ``sys.setprofile`` profiler's ``DISABLE``) turned the traced frame's
events off (seen on 3.13.0). This tool never returns ``DISABLE``: callbacks ignore the frames
they were not asked to follow, and a code's events go off when its last followed frame lets go.
"""

from __future__ import annotations

import sys
import types
from _thread import get_ident
from collections.abc import Callable
from typing import Any

__all__ = ["frame_trace", "gettrace", "opcode_off", "opcode_on", "set_frame_trace", "settrace"]

Trace = Callable[[types.FrameType, str, Any], Any]

_monitoring: Any = getattr(sys, "monitoring", None)  # (3.12+)
_TOOL_NAME = "magpy"


class _Followed:
    """Where a followed frame's events go: ``trace`` (its opcode events too when ``opcodes``)."""

    __slots__ = ("opcodes", "trace")

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.opcodes = False


_globals: dict[int, Trace] = {}  # thread ident -> its global trace function
_followed: dict[types.FrameType, _Followed] = {}  # frame -> what its events go to
_codes: dict[types.CodeType, list[int]] = {}  # code -> [followed frames, of them with opcodes]
_applied: dict[types.CodeType, int] = {}  # the local events each code has on
_pending: set[types.CodeType] = set()  # codes whose events go off once no callback runs
_busy: list[int] = [0]  # callbacks running (a trace function may follow and let go in one)
_global_on: list[bool] = [False]
_getframe = sys._getframe
_followed_get = _followed.get


# ---------------------------------------------------------------------------- the interface
def settrace(trace: Trace | None) -> None:
    """This thread's global trace function (None: none)."""
    if trace is None:
        _globals.pop(get_ident(), None)
    else:
        _globals[get_ident()] = trace
    _sync_global()


def gettrace() -> Trace | None:
    """This thread's global trace function, or None."""
    return _globals.get(get_ident())


def frame_trace(frame: types.FrameType) -> Trace | None:
    """``frame``'s local trace function, or None."""
    entry = _followed.get(frame)
    return entry.trace if entry is not None else None


def set_frame_trace(frame: types.FrameType, trace: Trace | None) -> None:
    """Send ``frame``'s call-level events to ``trace`` (None: no events for ``frame`` at all)."""
    if trace is None:
        _let_go(frame)
        return
    entry = _followed.get(frame)
    if entry is not None:
        entry.trace = trace
        return
    _followed[frame] = _Followed(trace)
    counts = _codes.setdefault(frame.f_code, [0, 0])
    counts[0] += 1
    _apply(frame.f_code)
    _sync_global()


def opcode_on(frame: types.FrameType, trace: Trace) -> None:
    """``frame``'s events, its opcode events included, go to ``trace``."""
    set_frame_trace(frame, trace)
    entry = _followed[frame]
    if not entry.opcodes:
        entry.opcodes = True
        _codes[frame.f_code][1] += 1
        _apply(frame.f_code)


def opcode_off(frame: types.FrameType) -> None:
    """No more events for ``frame``."""
    _let_go(frame)


# ---------------------------------------------------------------------------- bookkeeping
def _let_go(frame: types.FrameType) -> None:
    entry = _followed.pop(frame, None)
    if entry is None:
        return
    code = frame.f_code
    counts = _codes[code]
    counts[0] -= 1
    counts[1] -= entry.opcodes
    if not counts[0]:
        del _codes[code]
    _apply(code)
    _sync_global()


def _wanted(code: types.CodeType) -> int:
    counts = _codes.get(code)
    if counts is None:
        return 0
    events = _monitoring.events
    local = events.PY_RETURN | events.PY_YIELD | events.STOP_ITERATION
    return local | (events.INSTRUCTION if counts[1] else 0)


def _apply(code: types.CodeType) -> None:
    """Turn ``code``'s local events to what its followed frames want: at once when some go on;
    events go off only once no callback runs (turning a code's events off and on again inside
    one of its own callbacks loses them on 3.13: a frame that a segment leaves and a finder
    takes over in one event would get no more)."""
    want, have = _wanted(code), _applied.get(code, 0)
    if want == have:
        _pending.discard(code)
        return
    if _busy[0]:
        _pending.add(code)
        if not want & ~have:
            return
        want |= have
    _set_local(code, want)


def _set_local(code: types.CodeType, events: int) -> None:
    _monitoring.set_local_events(TOOL, code, events)
    if events:
        _applied[code] = events
    else:
        _applied.pop(code, None)


def _settle() -> None:
    for code in list(_pending):
        _pending.discard(code)
        _apply(code)


def _sync_global() -> None:
    on = bool(_globals or _followed)
    if on != _global_on[0]:
        _global_on[0] = on
        events = _monitoring.events
        wanted = events.PY_START | events.PY_RESUME | events.PY_THROW
        wanted |= events.RAISE | events.PY_UNWIND
        _monitoring.set_events(TOOL, wanted if on else 0)


# ---------------------------------------------------------------------------- callbacks
def _on_start(code: types.CodeType, offset: int, *exc: Any) -> None:
    """PY_START, PY_RESUME, PY_THROW: the thread's global trace function's ``"call"``."""
    if not _globals:
        return
    trace = _globals.get(get_ident())
    if trace is None:
        return
    frame = sys._getframe(1)
    _busy[0] += 1
    try:
        result = trace(frame, "call", None)
        if result is not None:
            set_frame_trace(frame, result)
    except BaseException:
        _globals.pop(get_ident(), None)
        _sync_global()
        raise
    finally:
        _done()


def _deliver(frame: types.FrameType, event: str, arg: Any) -> None:
    entry = _followed.get(frame)
    if entry is None:
        return  # another frame of a followed code (another thread's, or untraced): not ours
    _busy[0] += 1
    try:
        result = entry.trace(frame, event, arg)
        if result is not None and _followed.get(frame) is entry:
            entry.trace = result
    except BaseException:
        _globals.pop(get_ident(), None)
        _let_go(frame)
        raise
    finally:
        _done()


def _done() -> None:
    _busy[0] -= 1
    if not _busy[0] and _pending:
        _settle()


def _on_instruction(code: types.CodeType, offset: int) -> None:
    # (the hot path: one event per monitored instruction, so _deliver is written out here)
    frame = _getframe(1)
    entry = _followed_get(frame)
    if entry is None or not entry.opcodes:
        return
    _busy[0] += 1
    try:
        result = entry.trace(frame, "opcode", None)
        if result is not None and result is not entry.trace and _followed_get(frame) is entry:
            entry.trace = result
    except BaseException:
        _globals.pop(get_ident(), None)
        _let_go(frame)
        raise
    finally:
        _busy[0] -= 1
        if _pending and not _busy[0]:
            _settle()


def _on_return(code: types.CodeType, offset: int, value: Any) -> None:
    """PY_RETURN: the frame is done; it gets no more events (none would come)."""
    _deliver_last(_getframe(1), value)


def _on_yield(code: types.CodeType, offset: int, value: Any) -> None:
    """PY_YIELD: the frame is suspended and keeps its trace function for when it resumes."""
    _deliver(_getframe(1), "return", value)


def _on_unwind(code: types.CodeType, offset: int, exc: BaseException) -> None:
    """PY_UNWIND: an exception leaves the frame (settrace: ``"return"`` with None)."""
    if _followed:
        _deliver_last(_getframe(1), None)


def _deliver_last(frame: types.FrameType, value: Any) -> None:
    """The ``"return"`` of a frame that is leaving for good, which is let go after it."""
    try:
        _deliver(frame, "return", value)
    finally:
        _let_go(frame)


def _on_raise(code: types.CodeType, offset: int, exc: BaseException) -> None:
    """RAISE, STOP_ITERATION (a generator's return seen by its FOR_ITER or SEND)."""
    if _followed:
        _deliver(sys._getframe(1), "exception", (type(exc), exc, exc.__traceback__))


def _tool() -> int:
    """A free ``sys.monitoring`` tool id (3 or 4, the ones no standard tool claims), ours."""
    events = _monitoring.events
    callbacks: dict[int, Callable[..., None]] = {
        events.PY_START: _on_start,
        events.PY_RESUME: _on_start,
        events.PY_THROW: _on_start,
        events.PY_RETURN: _on_return,
        events.PY_YIELD: _on_yield,
        events.PY_UNWIND: _on_unwind,
        events.RAISE: _on_raise,
        events.STOP_ITERATION: _on_raise,
        events.INSTRUCTION: _on_instruction,
    }
    for tool in (4, 3):
        if _monitoring.get_tool(tool) == _TOOL_NAME:
            return tool
        if _monitoring.get_tool(tool) is None:
            _monitoring.use_tool_id(tool, _TOOL_NAME)
            for event, callback in callbacks.items():
                _monitoring.register_callback(tool, event, callback)
            return tool
    raise ImportError("magpy-monitor: sys.monitoring tool ids 3 and 4 are both taken")


TOOL = _tool() if _monitoring is not None else -1
