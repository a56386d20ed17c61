"""``INTERP``: the ``Interpreter`` of the running CPython, chosen once, at import."""

from __future__ import annotations

import types
from typing import Any

from . import py311, py312, py313
from .compat import VERSION
from .instructions import follow, unfollow
from .interp import Interpreter, prime_opcode_events, start_tracing

__all__ = ["INTERP", "opcode_trace_off", "opcode_trace_on", "trace_with"]

INTERP: Interpreter = {(3, 11): py311.INTERP, (3, 12): py312.INTERP, (3, 13): py313.INTERP}[VERSION]
if INTERP.opcode_events_need_priming:
    prime_opcode_events()


def trace_with(trace: Any) -> None:
    """Install ``trace`` as this thread's trace function to monitor with (``sys.settrace``)."""
    start_tracing(INTERP, trace)


def opcode_trace_on(frame: types.FrameType, trace: Any) -> None:
    """Send ``frame``'s opcode events (no line events) to ``trace``; its call, return and
    exception events come through ``frame.f_trace`` (``sys.settrace``) as ever."""
    frame.f_trace = trace
    frame.f_trace_lines = False
    if INTERP.instruction_events_from_monitoring:
        follow(frame, trace)
    else:
        frame.f_trace_opcodes = True


def opcode_trace_off(frame: types.FrameType) -> None:
    """No more trace events for ``frame``."""
    frame.f_trace = None
    if INTERP.instruction_events_from_monitoring:
        unfollow(frame)
    else:
        frame.f_trace_opcodes = False
