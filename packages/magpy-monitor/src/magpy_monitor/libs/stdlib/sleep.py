"""``time.sleep(seconds)``: an effect the mock replays on every hit.

Sleeping changes no object the program or the graph can see; what eager shows is the time it
takes. So the call runs natively at record time, and the record holds a write-back that sleeps
for the same number of seconds on every later hit (``replay_sleep``, in program order with the
other write-backs, after the graph ran: where in the call the pause falls is not observable by
the program). The duration is guarded by value (a new duration makes a new record); a duration
computed from a tensor's values, or anything but a plain number, stays a break.
"""

from __future__ import annotations

import time

from magpy_refgraph import Const

from ...core.capture import Write
from ...core.frame import FrameMonitor, Inst
from ...core.registry import BUILTIN_HANDLERS
from ...core.values import Val

__all__ = ["replay_sleep"]


def replay_sleep(seconds: float) -> None:
    """Sleep as the program did at record time (called by the mock)."""
    time.sleep(seconds)


def _sleep(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if kw or len(pos) != 1:
        raise m.unsupported("time.sleep with unusual arguments")
    secs = pos[0]
    if type(secs.obj) not in (int, float):
        raise m.unsupported(f"time.sleep of a {type(secs.obj).__name__}")
    cap.observe(secs)  # (its value: a tensor's value read into Python is a break there)
    target = cap.root(Const(replay_sleep), replay_sleep)
    cap.writes.append(Write("callmethod", target, "__call__", cap.const(secs.obj)))
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


BUILTIN_HANDLERS[id(time.sleep)] = (time.sleep, _sleep)
