"""``INTERP``: the ``Interpreter`` of the running CPython, chosen once, at import; and the trace
events the monitor runs on, from the mechanism that version gives them best.

The contract is ``sys.settrace``'s, per thread: ``settrace(global_trace)``; the global function
gets ``"call"`` for each frame that starts or resumes and returns its local trace function;
a local function gets ``"return"``, ``"exception"`` and (after ``opcode_trace_on``) ``"opcode"``.
3.11 delivers them through ``sys.settrace`` itself; 3.12 and 3.13 through ``sys.monitoring``
(``cpython/events.py``), which costs only where the monitor looks.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from . import events, py311, py312, py313
from .compat import VERSION
from .interp import Interpreter

__all__ = [
    "INTERP",
    "frame_trace",
    "gettrace",
    "opcode_trace_off",
    "opcode_trace_on",
    "set_frame_trace",
    "settrace",
]

INTERP: Interpreter = {(3, 11): py311.INTERP, (3, 12): py312.INTERP, (3, 13): py313.INTERP}[VERSION]


def _set_local(frame: types.FrameType, trace: Any) -> None:
    frame.f_trace = trace
    frame.f_trace_lines = False


def _opcode_on(frame: types.FrameType, trace: Any) -> None:
    _set_local(frame, trace)
    frame.f_trace_opcodes = True


def _frame_trace(frame: types.FrameType) -> Any:
    return frame.f_trace


def _opcode_off(frame: types.FrameType) -> None:
    frame.f_trace = None
    frame.f_trace_opcodes = False


if INTERP.events_from_monitoring:
    settrace = events.settrace
    gettrace = events.gettrace
    frame_trace = events.frame_trace
    set_frame_trace = events.set_frame_trace
    opcode_trace_on = events.opcode_on
    opcode_trace_off = events.opcode_off
else:
    settrace = sys.settrace  # type: ignore[assignment]
    gettrace = sys.gettrace  # type: ignore[assignment]
    frame_trace = _frame_trace
    set_frame_trace = _set_local
    opcode_trace_on = _opcode_on
    opcode_trace_off = _opcode_off
