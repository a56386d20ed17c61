"""Instruction events from ``sys.monitoring`` (3.12+), under a tool id of MagPy's own.

``sys.settrace`` still gives the monitor its call, return and exception events; only the opcode
events come from here, because the legacy tracing that ``sys.settrace`` runs on in 3.12 and
3.13 shares one tool id between all threads and frames: a frame of the same code that runs
untraced in another thread (or under ``sys.setprofile``) turns the code's instruction events
off for the traced frame too (seen on 3.13.0: the traced frame's events stop mid-way). A tool of
our own never returns ``DISABLE``: the callback ignores the frames it was not asked to follow,
and a code's events go off only when its last followed frame lets go.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["follow", "unfollow"]

Trace = Callable[[types.FrameType, str, Any], Any]

_monitoring: Any = getattr(sys, "monitoring", None)  # (3.12+)
_TOOL_NAME = "magpy"
_followed: dict[int, tuple[types.FrameType, Trace]] = {}  # id(frame) -> (frame, trace)
_codes: dict[types.CodeType, int] = {}  # followed frames per code object


def _tool() -> int:
    """A free ``sys.monitoring`` tool id (3 or 4, the ones no standard tool claims), ours."""
    for tool in (4, 3):
        if _monitoring.get_tool(tool) == _TOOL_NAME:
            return tool
        if _monitoring.get_tool(tool) is None:
            _monitoring.use_tool_id(tool, _TOOL_NAME)
            _monitoring.register_callback(tool, _monitoring.events.INSTRUCTION, _on_instruction)
            return tool
    raise ImportError("magpy-monitor: sys.monitoring tool ids 3 and 4 are both taken")


_busy: list[int] = [0]  # callbacks running (a trace function may follow and unfollow in one)
_idle: set[types.CodeType] = set()  # codes whose events go off once no callback runs


def _on_instruction(code: types.CodeType, offset: int) -> Any:
    frame = sys._getframe(1)
    entry = _followed.get(id(frame))
    if entry is None or entry[0] is not frame:
        return None  # another frame of a followed code (another thread's): not ours
    _busy[0] += 1
    try:
        result = entry[1](frame, "opcode", None)
        # as settrace's trampoline does: a new trace function replaces the frame's, None keeps it
        if result is not None and id(frame) in _followed:
            _followed[id(frame)] = (frame, result)
    finally:
        _busy[0] -= 1
        if not _busy[0] and _idle:
            _switch_off_idle()
    return None


def _switch_off_idle() -> None:
    # (turning a code's events off and on again inside its own callback loses them on 3.13:
    # a frame that a segment leaves and a finder takes over in one event would get no more)
    for code in list(_idle):
        if code not in _codes:
            _monitoring.set_local_events(TOOL, code, 0)
    _idle.clear()


def follow(frame: types.FrameType, trace: Trace) -> None:
    """Call ``trace(frame, "opcode", None)`` before each instruction ``frame`` runs."""
    if id(frame) in _followed:
        _followed[id(frame)] = (frame, trace)
        return
    _followed[id(frame)] = (frame, trace)
    code = frame.f_code
    n = _codes.get(code, 0)
    _codes[code] = n + 1
    if n == 0 and code not in _idle:
        _monitoring.set_local_events(TOOL, code, _monitoring.events.INSTRUCTION)
    _idle.discard(code)


def unfollow(frame: types.FrameType) -> None:
    """No more instruction events for ``frame``."""
    if _followed.pop(id(frame), None) is None:
        return
    code = frame.f_code
    n = _codes.get(code, 1) - 1
    if n > 0:
        _codes[code] = n
        return
    _codes.pop(code, None)
    if _busy[0]:
        _idle.add(code)
    else:
        _monitoring.set_local_events(TOOL, code, 0)


TOOL = _tool() if _monitoring is not None else -1
