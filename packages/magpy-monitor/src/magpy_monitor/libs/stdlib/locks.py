"""Locks the run makes (``threading.Lock()``, ``threading.RLock()``): local objects.

Code that initialises something once guards it with a lock it may make on the spot (torch's
``lazy_load_decompositions``), and a helper object built in a forward may carry its own. While
such a lock stays inside the run no other thread can reach it (a thread the run started would
already have stopped capture), so taking and releasing it changes nothing the program can
observe but the lock's own state, and that state is the shadow's: how many times it is held.
``with lock:``, ``acquire``, ``release`` and ``locked`` run natively on the real lock, and
their results are the constants the shadow predicts (checked as they come back); the mock
replays none of it. A lock that leaves the run (returned, stored where the caller sees it)
cannot be rebuilt by the mock, and a segment cannot resume inside its block: both are
breaks. So is taking a lock from outside the run (another thread may hold it).
"""

from __future__ import annotations

import _thread
import threading
from typing import Any

from ...core.frame import FrameMonitor, Inst
from ...core.registry import register_builtin, register_methods
from ...core.values import Val
from ...pyobj.contexts import ContextExit, ModelledContext

__all__ = ["LockState"]


class LockState:
    """The shadow state of a lock made in the run: reentrant or not, and how often held."""

    def __init__(self, reentrant: bool) -> None:
        self.reentrant = reentrant
        self.held = 0

    def can_take(self) -> bool:
        return self.reentrant or self.held == 0

    # the block protocol of pyobj.contexts (``with lock:``)
    def enter(self, m: FrameMonitor, inst: Inst, ctx: Val) -> None:
        if not self.can_take():
            raise m.unsupported("`with` on a lock the run already holds (it would wait forever)")

        def make(real: list[Any]) -> list[Val]:
            self.held += 1
            return [Val(real[0], payload=ContextExit(self)), m.cap.const(real[1])]

        m.expect_outputs(inst, 2, make)

    def exit(self, m: FrameMonitor, inst: Inst) -> None:
        def make(real: list[Any]) -> list[Val]:
            self.held -= 1
            return [m.cap.const(real[0])]

        m.expect_outputs(inst, 1, make)

    def reenter(self) -> tuple[Any, tuple[Any, ...]] | None:
        return None  # the lock itself was made in the run: nothing outside can re-enter it


def lock_state(m: FrameMonitor, v: Val) -> LockState:
    """The state of lock ``v``; a lock from outside the run is a break."""
    ctx = v.payload(ModelledContext)
    if ctx is None or not isinstance(ctx.model, LockState):
        raise m.unsupported(f"a {type(v.obj).__name__} from outside the run (other threads see it)")
    return ctx.model


def _maker(reentrant: bool) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if pos or kw:
            raise m.unsupported("a lock made with arguments")
        state = LockState(reentrant)
        m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], payload=ModelledContext(state))])

    return handle


register_builtin(_thread.allocate_lock, threading.Lock)(_maker(reentrant=False))
register_builtin(_thread.RLock, threading.RLock)(_maker(reentrant=True))

_LOCK_TYPES = (_thread.LockType, _thread.RLock)


def _argument(pos: list[Val], kw: dict[str, Val], index: int, name: str, default: Any) -> Any:
    if len(pos) > index:
        return pos[index].obj
    return kw[name].obj if name in kw else default


def _acquire(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``lock.acquire(blocking=True, timeout=-1)``: True when the shadow says it is free (or
    reentrant); a blocking call on a held lock would wait forever, a non-blocking one (or one
    with a timeout) gives False."""
    state = lock_state(m, pos[0])
    for v in (*pos[1:], *kw.values()):
        m.cap.observe(v)
    blocking = _argument(pos, kw, 1, "blocking", True)
    if not state.can_take() and blocking and _argument(pos, kw, 2, "timeout", -1) < 0:
        raise m.unsupported("acquiring a lock the run already holds (it would wait forever)")
    taken = state.can_take()

    def make(real: list[Any]) -> list[Val]:
        if bool(real[0]) != taken:
            raise m.unsupported("a lock gave another answer than its shadow")
        state.held += taken
        return [m.cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


def _release(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    state = lock_state(m, pos[0])
    if state.held == 0:
        raise m.unsupported("releasing a lock that is not held (an error eager raises)")

    def make(real: list[Any]) -> list[Val]:
        state.held -= 1
        return [m.cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


def _locked(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    state = lock_state(m, pos[0])

    def make(real: list[Any]) -> list[Val]:
        if bool(real[0]) != (state.held > 0):
            raise m.unsupported("a lock gave another answer than its shadow")
        return [m.cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


for _owner in _LOCK_TYPES:
    register_methods(_owner, "acquire")(_acquire)
    register_methods(_owner, "release")(_release)
register_methods(_thread.LockType, "acquire_lock")(_acquire)
register_methods(_thread.LockType, "release_lock")(_release)
register_methods(_thread.LockType, "locked", "locked_lock")(_locked)
