"""Unit tests for reading the live value stack with ctypes (_frameio.py)."""

from __future__ import annotations

import dis
import math
import pickle
import types
from collections.abc import Callable
from typing import Any

import pytest

from magpy_monitor import INTERP, NULL, StackView, read_stack, stack_depth
from magpy_monitor.cpython import frameio as _frameio
from magpy_monitor.cpython.current import gettrace, opcode_trace_off, opcode_trace_on, settrace


def _snapshots(fn: Callable[..., Any], *args: Any) -> list[tuple[int, str, list[Any], int]]:
    """Run ``fn(*args)`` traced; at each opcode event of its frame record
    ``(offset, opname, read_stack(frame), StackView(frame).depth())``."""
    seen: list[tuple[int, str, list[Any], int]] = []
    code = fn.__code__
    ops = {i.offset: i.opname for i in dis.get_instructions(code)}

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not code:
            return None
        if event == "call":
            opcode_trace_on(frame, tracer)  # (3.12+: from sys.monitoring)
        elif event == "return":
            opcode_trace_off(frame)
        if event == "opcode":
            view = StackView(frame)
            seen.append((frame.f_lasti, ops[frame.f_lasti], read_stack(frame), view.depth()))
        return tracer

    old = gettrace()
    settrace(tracer)
    try:
        fn(*args)
    finally:
        settrace(old)
    return seen


def _at(seen: list[tuple[int, str, list[Any], int]], opname: str, n: int = 0) -> list[Any]:
    """The stack at the ``n``-th event of instruction ``opname``."""
    matches = [s for s in seen if s[1] == opname]
    return matches[n][2]


def _slots(fn: object) -> list[Any]:
    """A call's two slots for callable ``fn`` with no ``self``: NULL below it (3.11, 3.12) or
    above it (3.13)."""
    return [fn, NULL] if INTERP.null_above_callable else [NULL, fn]


_CALL_STARTS = INTERP.call_ops(0)[0][0]  # (3.11's PRECALL, else CALL)


def _call_none_and_len(f: Callable[..., Any], a: object) -> object:
    return f(None, a, len((a, 7)))


def _callee(*args: object) -> tuple[object, ...]:
    return args


class TestNull:
    def test_null_is_a_singleton_distinct_from_none(self) -> None:
        """NULL is one object, never None, falsy-agnostic, and prints as NULL."""
        assert NULL is not None
        assert type(NULL)() is NULL
        assert repr(NULL) == "NULL"

    def test_null_pickles_to_itself(self) -> None:
        """Pickling NULL round-trips to the same sentinel."""
        assert pickle.loads(pickle.dumps(NULL)) is NULL


class TestReadStack:
    def test_push_null_below_a_local_callable(self) -> None:
        """PUSH_NULL leaves NULL under a callable loaded from a local; None stays None."""
        seen = _snapshots(_call_none_and_len, _callee, None)
        stack = _at(seen, "LOAD_GLOBAL")  # before len is loaded: NULL, f, None, a
        assert stack[:2] == _slots(_callee)
        assert stack[2] is None and stack[3] is None

    def test_load_global_with_null_bit_pushes_null_then_global(self) -> None:
        """LOAD_GLOBAL (arg & 1) pushes NULL and the global; the constant 7 sits on top."""
        seen = _snapshots(_call_none_and_len, _callee, None)
        stack = _at(seen, "BUILD_TUPLE")
        assert stack[4:6] == _slots(len)
        assert stack[6] is None
        assert stack[7] == 7
        nulls = [s is NULL for s in [*_slots(_callee), None, None, *_slots(len), None, 7]]
        assert [s is NULL for s in stack] == nulls

    def test_call_result_replaces_callable_and_null(self) -> None:
        """After the inner call, the NULL+len pair is replaced by len's result (2)."""
        seen = _snapshots(_call_none_and_len, _callee, "x")
        stack = _at(seen, _CALL_STARTS, 1)  # the outer call: NULL, f, None, a, 2
        assert stack == [*_slots(_callee), None, "x", 2]

    def test_return_value_event_sees_the_result(self) -> None:
        """At RETURN_VALUE the stack holds exactly the returned value."""
        seen = _snapshots(_call_none_and_len, _callee, "x")
        assert _at(seen, "RETURN_VALUE") == [(None, "x", 2)]

    def test_load_method_on_a_plain_method_pushes_function_and_self(self) -> None:
        """LOAD_METHOD of a method found on the type pushes [function, self], no NULL."""
        items: list[int] = []

        def probe(lst: list[int]) -> None:
            lst.append(1)

        seen = _snapshots(probe, items)
        stack = _at(seen, "LOAD_CONST")  # after LOAD_METHOD, before the argument
        assert stack == [list.append, items]
        assert all(s is not NULL for s in stack)

    def test_load_method_on_a_module_attribute_pushes_null_then_attribute(self) -> None:
        """LOAD_METHOD that finds a plain attribute (math.sqrt) pushes [NULL, attribute]."""

        def probe(m: types.ModuleType) -> float:
            return m.sqrt(4.0)

        seen = _snapshots(probe, math)
        stack = _at(seen, "LOAD_CONST")
        assert stack == _slots(math.sqrt)

    def test_depth_matches_every_event(self) -> None:
        """StackView.depth() equals the number of values read at every event."""
        seen = _snapshots(_call_none_and_len, _callee, 3)
        assert seen
        assert all(depth == len(stack) for _, _, stack, depth in seen)
        depths = [depth for _, _, _, depth in seen]
        assert depths[0] == 0  # the first event after RESUME: empty stack
        assert max(depths) == 8  # NULL f None a NULL len a 7

    def test_stack_depth_helper_agrees_with_view(self) -> None:
        """stack_depth(frame) gives the same number as StackView(frame).depth()."""
        pairs: list[tuple[int, int]] = []
        code = _call_none_and_len.__code__

        def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
            if frame.f_code is not code:
                return None
            if event == "call":
                opcode_trace_on(frame, tracer)  # (3.12+: from sys.monitoring)
            elif event == "return":
                opcode_trace_off(frame)
            if event == "opcode":
                pairs.append((stack_depth(frame), StackView(frame).depth()))
            return tracer

        old = gettrace()
        settrace(tracer)
        try:
            _call_none_and_len(_callee, 1)
        finally:
            settrace(old)
        assert pairs and all(a == b for a, b in pairs)

    def test_peek_zero_is_top_of_stack(self) -> None:
        """peek(0) is the top of the stack and peek(depth-1) the bottom."""
        tops: list[tuple[Any, Any, list[Any]]] = []
        code = _call_none_and_len.__code__

        def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
            if frame.f_code is not code:
                return None
            if event == "call":
                opcode_trace_on(frame, tracer)  # (3.12+: from sys.monitoring)
            elif event == "return":
                opcode_trace_off(frame)
            if event == "opcode":
                view = StackView(frame)
                if view.depth():
                    tops.append((view.peek(0), view.peek(view.depth() - 1), view.values()))
            return tracer

        old = gettrace()
        settrace(tracer)
        try:
            _call_none_and_len(_callee, 1)
        finally:
            settrace(old)
        assert tops
        for top, bottom, values in tops:
            assert top is values[-1]
            assert bottom is values[0]

    def test_local_reads_localsplus_slots(self) -> None:
        """StackView.local(i) reads arguments and locals; an unbound local reads as NULL."""
        found: list[tuple[Any, Any, Any]] = []

        def probe(a: object, b: object) -> object:
            c = (a, b)
            return c

        code = probe.__code__

        def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
            if frame.f_code is not code:
                return None
            if event == "call":
                opcode_trace_on(frame, tracer)  # (3.12+: from sys.monitoring)
            elif event == "return":
                opcode_trace_off(frame)
            if event == "opcode":
                view = StackView(frame)
                found.append((view.local(0), view.local(1), view.local(2)))
            return tracer

        a, b = object(), object()
        old = gettrace()
        settrace(tracer)
        try:
            probe(a, b)
        finally:
            settrace(old)
        assert found[0] == (a, b, NULL)
        assert found[-1][:2] == (a, b) and found[-1][2] == (a, b)


class TestNLocalsPlus:
    def test_counts_varnames_cells_and_free_variables(self) -> None:
        """nlocalsplus counts varnames, cells that are not arguments, and free variables."""

        def outer(a: int) -> Callable[[], int]:
            b = 1

            def inner() -> int:
                return a + b

            return inner

        assert _frameio.nlocalsplus(outer.__code__) == len(outer.__code__.co_varnames) + 1
        inner = outer(1)
        assert _frameio.nlocalsplus(inner.__code__) == 2  # two free variables, no varnames

    def test_cell_argument_shares_the_argument_slot(self) -> None:
        """A cell that is also an argument does not get a second slot."""

        def outer(a: int) -> Callable[[], int]:
            return lambda: a

        code = outer.__code__
        assert "a" in code.co_cellvars
        assert _frameio.nlocalsplus(code) == len(code.co_varnames)


class TestSelfTest:
    def test_self_test_passes_again_and_restores_tracer(self) -> None:
        """Running the import-time self-test again succeeds and keeps the current tracer."""
        before = gettrace()
        _frameio._self_test()
        assert gettrace() is before

    def test_self_test_rejects_a_wrong_layout(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """If the stack does not read as NULL, len, 'x', 7, the self-test raises ImportError."""
        monkeypatch.setattr(_frameio, "read_stack", lambda frame: [None, len, "x", 7])
        before = gettrace()
        with pytest.raises(ImportError, match="frame layout"):
            _frameio._self_test()
        assert gettrace() is before
