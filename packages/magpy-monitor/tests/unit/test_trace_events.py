"""The trace-event contract the monitor runs on (``cpython/current.py``), on every version.

3.11 delivers it through ``sys.settrace``; 3.12 and 3.13 through ``sys.monitoring`` under
MagPy's own tool id (``cpython/events.py``). The same tests hold for both.
"""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

import pytest

from magpy_monitor.cpython import events
from magpy_monitor.cpython.current import (
    INTERP,
    frame_trace,
    gettrace,
    opcode_trace_off,
    opcode_trace_on,
    set_frame_trace,
    settrace,
)

Event = tuple[str, str, Any]


def _add(a: int, b: int) -> int:
    c = a + b
    return c * 2


def _fails(x: int) -> int:
    return [x][x]


def _catches() -> str:
    try:
        _fails(3)
    except IndexError:
        return "caught"
    return "not"


def _gen() -> Any:
    yield 1
    yield 2
    return 3


def _drives() -> int:
    got = yield from _gen()
    return got


class Recorder:
    """A global trace function that follows the frames of ``codes`` and logs their events."""

    def __init__(self, *funcs: Any, opcodes: bool = False) -> None:
        self.codes = {f.__code__ for f in funcs}
        self.opcodes = opcodes
        self.log: list[Event] = []
        self.frames: list[types.FrameType] = []

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code not in self.codes:
            return None
        self.log.append((frame.f_code.co_name, event, arg))
        self.frames.append(frame)
        if self.opcodes:
            opcode_trace_on(frame, self.local)
        return self.local

    def local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "exception":
            arg = (arg[0], type(arg[1]))
        self.log.append((frame.f_code.co_name, event, arg))
        if event == "return":
            opcode_trace_off(frame)
        return self.local

    def events(self, name: str | None = None) -> list[tuple[str, Any]]:
        # (3.11's sys.settrace gives "line" events too, to a frame not turned to opcode events)
        skip = ("opcode", "line")
        return [(e, a) for n, e, a in self.log if (name is None or n == name) and e not in skip]


def _traced(rec: Any, fn: Any, *args: Any) -> Any:
    prev = gettrace()
    settrace(rec)
    try:
        return fn(*args)
    finally:
        settrace(prev)


def test_call_and_return_events_carry_the_result() -> None:
    rec = Recorder(_add)
    assert _traced(rec, _add, 2, 3) == 10
    assert rec.events() == [("call", None), ("return", 10)]


def test_opcode_events_come_only_once_asked_for() -> None:
    quiet = Recorder(_add)
    _traced(quiet, _add, 1, 1)
    assert all(e != "opcode" for _, e, _ in quiet.log)
    loud = Recorder(_add, opcodes=True)
    _traced(loud, _add, 1, 1)
    assert sum(e == "opcode" for _, e, _ in loud.log) >= 6  # loads, the add, the store, ...


def test_an_exception_passing_through_gives_exception_then_return_none() -> None:
    rec = Recorder(_fails, _catches)
    assert _traced(rec, _catches) == "caught"
    assert rec.events("_fails") == [("call", None), ("exception", (IndexError, IndexError)),
                                    ("return", None)]  # fmt: skip
    # the caller sees it arrive, handles it, and returns normally
    assert rec.events("_catches") == [("call", None), ("exception", (IndexError, IndexError)),
                                      ("return", "caught")]  # fmt: skip


def test_generators_give_a_call_per_resume_and_a_return_per_yield() -> None:
    rec = Recorder(_gen)
    assert _traced(rec, list, _gen()) == [1, 2]
    assert rec.events("_gen") == [("call", None), ("return", 1), ("call", None), ("return", 2),
                                  ("call", None), ("return", 3)]  # fmt: skip


def test_a_generators_return_into_yield_from() -> None:
    rec = Recorder(_drives)
    assert _traced(rec, list, _drives()) == [1, 2]
    got = rec.events("_drives")
    if INTERP.stop_iteration_event:  # 3.12+: the delegate's return, reported to the driver
        assert ("exception", (StopIteration, StopIteration)) in got
    assert got[-1] == ("return", 3)


def test_the_local_trace_function_it_returns_replaces_its_own() -> None:
    seen: list[str] = []

    def second(frame: types.FrameType, event: str, arg: Any) -> Any:
        seen.append(f"second:{event}")
        return None  # (None keeps the current one)

    def first(frame: types.FrameType, event: str, arg: Any) -> Any:
        seen.append(f"first:{event}")
        return second

    def glob(frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is not _add.__code__:
            return None
        opcode_trace_on(frame, first)
        return first

    _traced(glob, _add, 1, 2)
    assert seen[0] == "first:opcode"
    assert set(seen[1:]) == {"second:opcode", "second:return"}


def test_a_raising_trace_function_loses_its_thread_and_frame_tracing() -> None:
    calls: list[str] = []

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        calls.append(event)
        raise KeyError("from the trace function")

    def glob(frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is _add.__code__:
            opcode_trace_on(frame, local)
            return local
        return None

    prev = gettrace()
    settrace(glob)
    try:
        with pytest.raises(KeyError, match="from the trace function"):
            _add(1, 2)
        assert gettrace() is None
    finally:
        settrace(prev)
    assert calls == ["opcode"]
    assert _add(1, 2) == 6  # and nothing is left behind


def test_set_frame_trace_on_a_running_frame_and_frame_trace_reads_it() -> None:
    log: list[tuple[str, Any]] = []

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        log.append((event, arg))
        if event == "return":
            set_frame_trace(frame, None)
        return local

    def body() -> int:
        me = sys._getframe()
        set_frame_trace(me, local)
        assert frame_trace(me) is local
        return 7

    _traced(lambda f, e, a: None, body)
    assert log == [("return", 7)]


def test_another_threads_frames_of_the_same_code_are_not_delivered() -> None:
    rec = Recorder(_add, opcodes=True)
    other: list[int] = []
    gate = threading.Event()

    def elsewhere() -> None:
        gate.wait(5)
        other.append(_add(5, 5))

    def traced() -> int:
        worker = threading.Thread(target=elsewhere)
        worker.start()
        out = _add(1, 2)
        gate.set()
        worker.join()
        return out

    _traced(rec, traced)
    assert other == [20]
    assert [a for n, e, a in rec.log if e == "return"] == [6]


@pytest.mark.skipif(not INTERP.events_from_monitoring, reason="3.12+: sys.monitoring")
def test_no_events_stay_on_once_nothing_is_followed() -> None:
    mon: Any = getattr(sys, "monitoring")  # noqa: B009
    rec = Recorder(_add, _gen, opcodes=True)
    _traced(rec, _add, 1, 2)
    _traced(rec, list, _gen())
    assert sys.gettrace() is None  # sys.settrace is never used
    assert mon.get_events(events.TOOL) == 0
    for code in (_add.__code__, _gen.__code__):
        assert mon.get_local_events(events.TOOL, code) == 0


@pytest.mark.skipif(not INTERP.events_from_monitoring, reason="3.12+: sys.monitoring")
def test_a_program_tracer_and_ours_both_see_the_frames() -> None:
    theirs: list[str] = []

    def program_tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is _add.__code__:
            theirs.append(event)
        return None

    rec = Recorder(_add)
    sys.settrace(program_tracer)
    try:
        _traced(rec, _add, 1, 2)
    finally:
        sys.settrace(None)
    assert theirs == ["call"]
    assert rec.events() == [("call", None), ("return", 6)]
