"""Unit tests for ``capture``: results, failures, user exceptions, trace cleanup (_api.py)."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx

from magpy_monitor import Capture, CaptureResult, capture, entry
from magpy_monitor.cpython.current import gettrace, settrace
from magpy_refgraph import MagPyError, Plan, Unsupported


def _line_of(fn: Callable[..., Any], marker: str) -> int:
    """The line number of the source line of ``fn`` that contains ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    (offset,) = [i for i, line in enumerate(lines) if marker in line]
    return first + offset


def _x() -> torch.Tensor:
    return torch.arange(6, dtype=torch.float32).reshape(2, 3)


# ---------------------------------------------------------------------- programs
def prints(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("y computed")  # BREAK
    return y * 2


def reads_item(x: torch.Tensor) -> float:
    s = x.sum()
    return s.item() + 1  # BREAK


def branches_on_tensor(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:  # BREAK
        return x + 1
    return x - 1


def returns_inputs(x: torch.Tensor, lst: list[int], obj: object) -> Any:
    return x, lst, obj


class Boom(Exception):
    pass


BOOM = Boom("boom")


def raises(x: torch.Tensor) -> torch.Tensor:
    raise BOOM


def raises_in_callee(x: torch.Tensor) -> torch.Tensor:
    def inner(t: torch.Tensor) -> torch.Tensor:
        raise BOOM

    return inner(x) + 1


def raises_after_break(x: torch.Tensor) -> torch.Tensor:
    print("before")
    raise BOOM


class TestSuccess:
    def test_result_fields_on_success(self) -> None:
        """A captured call has no failure, a Plan, an fx Graph and the example inputs."""
        x = _x()
        result = capture(lambda t: t * 2 + 1, (x,), {})
        assert isinstance(result, CaptureResult)
        assert result.failure is None
        assert isinstance(result.plan, Plan)
        assert isinstance(result.graph, fx.Graph)
        assert isinstance(result.capture, Capture)
        assert torch.equal(result.value, x * 2 + 1)

    def test_example_inputs_are_the_entry_tensors_in_input_order(self) -> None:
        """example_inputs are the very entry tensors, in plan.inputs (placeholder) order."""
        x, y = _x(), _x() + 1
        result = capture(lambda a, b: b * a + b, (x, y), {})
        assert result.plan is not None
        assert [str(p) for p in result.plan.inputs] == ["L.args[1]", "L.args[0]"]
        assert result.example_inputs[0] is y and result.example_inputs[1] is x

    def test_returned_inputs_are_the_very_objects(self) -> None:
        """capture returns the program's real result: inputs come back as the same objects."""
        x, lst, obj = _x(), [1, 2], object()
        result = capture(returns_inputs, (x, lst, obj), {})
        assert result.failure is None
        assert result.value[0] is x and result.value[1] is lst and result.value[2] is obj

    def test_keyword_arguments_are_entry_state(self) -> None:
        """Keyword arguments are read from L.kwargs and guarded like positional ones."""

        def scaled(t: torch.Tensor, *, scale: int) -> torch.Tensor:
            return t * scale

        result = capture(scaled, (_x(),), {"scale": 3})
        assert result.failure is None and result.plan is not None
        guards = {(str(g.path), g.kind.name, g.payload) for g in result.plan.guards}
        assert ("L.kwargs", "KEYS", ("scale",)) in guards
        assert ("L.kwargs['scale']", "VALUE", 3) in guards

    def test_entry_calls_the_function(self) -> None:
        """entry(fn, args, kwargs) is the plain call fn(*args, **kwargs)."""
        assert entry(lambda a, b=0: a - b, (5,), {"b": 2}) == 3


class TestFailure:
    @pytest.mark.parametrize(
        ("program", "reason_part"),
        [(prints, ""), (reads_item, "item"), (branches_on_tensor, "tensor")],
        ids=["print", "item", "if_tensor"],
    )
    def test_unsupported_keeps_the_real_result(
        self, program: Callable[[torch.Tensor], Any], reason_part: str
    ) -> None:
        """A graph break still returns the eager result, with no plan and no graph (value
        reads are breaks with ``speculate=False``; TestSpeculation has them assumed)."""
        expected = program(_x())
        result = capture(program, (_x(),), {}, speculate=False)
        if isinstance(expected, torch.Tensor):
            assert torch.equal(result.value, expected)
        else:
            assert result.value == expected
        assert isinstance(result.failure, Unsupported)
        assert reason_part in result.failure.reason
        assert result.plan is None and result.graph is None and result.example_inputs == []

    @pytest.mark.parametrize("program", [prints, reads_item, branches_on_tensor])
    def test_failure_names_the_users_file_and_line(self, program: Callable[..., Any]) -> None:
        """failure.filename/lineno point at the user's line that stopped capture."""
        result = capture(program, (_x(),), {}, speculate=False)
        failure = result.failure
        assert isinstance(failure, Unsupported)
        assert failure.filename == program.__code__.co_filename
        assert failure.lineno == _line_of(program, "# BREAK")
        assert f"{failure.filename}:{failure.lineno}" in str(failure)
        assert failure.reason

    def test_failure_is_a_magpy_error(self) -> None:
        """Every failure is a MagPyError (Unsupported or InternalError), never a raw exception."""
        result = capture(prints, (_x(),), {})
        assert isinstance(result.failure, MagPyError)

    def test_side_effect_before_break_happens_once(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The program runs exactly once: its print is seen once."""
        capture(prints, (_x(),), {})
        assert capsys.readouterr().out == "y computed\n"


class TestSpeculation:
    def test_a_branch_on_a_tensor_is_assumed_and_checked(self) -> None:
        """By default the branch's outcome becomes a check on a graph output."""
        result = capture(branches_on_tensor, (_x(),), {})
        assert result.failure is None and result.plan is not None
        (check,) = result.plan.checks
        assert check.truth and check.expected is bool(_x().sum() > 0)
        assert check.where.endswith(f":{_line_of(branches_on_tensor, '# BREAK')}")
        assert check.output < result.plan.num_outputs

    def test_an_item_feeding_only_the_result_assumes_nothing(self) -> None:
        result = capture(reads_item, (_x(),), {})
        assert result.failure is None and result.plan is not None
        assert result.plan.checks == ()
        assert result.value == reads_item(_x())


class TestUserExceptions:
    @pytest.mark.parametrize("program", [raises, raises_in_callee, raises_after_break])
    def test_user_exception_propagates_unchanged(self, program: Callable[..., Any]) -> None:
        """The program's own exception reaches the caller as the same object."""
        with pytest.raises(Boom) as info:
            capture(program, (_x(),), {})
        assert info.value is BOOM

    def test_exception_frames_point_at_user_code(self) -> None:
        """The traceback of a propagated exception ends in the user's raising line."""

        def inner(t: torch.Tensor) -> torch.Tensor:
            raise Boom("fresh")  # RAISE

        def outer(t: torch.Tensor) -> torch.Tensor:
            return inner(t) + 1

        with pytest.raises(Boom) as info:
            capture(outer, (_x(),), {})
        last = info.traceback[-1]
        assert last.name == "inner"
        assert last.lineno + 1 == _line_of(inner, "# RAISE")  # pytest's lineno is 0-based

    def test_keyboard_interrupt_propagates(self) -> None:
        """BaseExceptions such as KeyboardInterrupt propagate too."""

        def interrupted(x: torch.Tensor) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            capture(interrupted, (_x(),), {})


class TestTraceCleanup:
    def _with_tracer(self, body: Callable[[], Any]) -> Any:
        def previous(frame: types.FrameType, event: str, arg: object) -> None:
            return None

        # (the monitor's own trace hook: sys.settrace on 3.11, sys.monitoring from 3.12)
        old = gettrace()
        settrace(previous)
        try:
            body()
            return gettrace() is previous
        finally:
            settrace(old)

    def test_previous_tracer_restored_after_success(self) -> None:
        """A trace function installed before capture is installed again after it."""
        assert self._with_tracer(lambda: capture(lambda t: t + 1, (_x(),), {}))

    def test_previous_tracer_restored_after_break(self) -> None:
        """The previous trace function is back after a graph break."""
        assert self._with_tracer(lambda: capture(prints, (_x(),), {}))

    def test_previous_tracer_restored_after_user_exception(self) -> None:
        """The previous trace function is back after the program raised."""

        def body() -> None:
            with pytest.raises(Boom):
                capture(raises_in_callee, (_x(),), {})

        assert self._with_tracer(body)

    def test_no_tracer_left_after_capture(self) -> None:
        """With no tracer before, none is installed after success, break or exception."""
        assert sys.gettrace() is None
        capture(lambda t: t + 1, (_x(),), {})
        assert sys.gettrace() is None
        capture(prints, (_x(),), {})
        assert sys.gettrace() is None
        with pytest.raises(Boom):
            capture(raises, (_x(),), {})
        assert sys.gettrace() is None

    def test_monitored_frames_lose_their_local_tracer(self) -> None:
        """After a break, the frames that were monitored have f_trace None, opcodes off."""
        frames: list[types.FrameType] = []

        def inner(t: torch.Tensor) -> torch.Tensor:
            frames.append(sys._getframe())
            print("break here")
            return t + 1

        def outer(t: torch.Tensor) -> torch.Tensor:
            frames.append(sys._getframe())
            return inner(t) * 2

        result = capture(outer, (_x(),), {})
        assert result.failure is not None
        assert torch.equal(result.value, (_x() + 1) * 2)
        assert frames
        assert all(f.f_trace is None and not f.f_trace_opcodes for f in frames)

    def test_capture_is_reentrant_after_failure(self) -> None:
        """A failed capture does not poison the next one."""
        capture(prints, (_x(),), {})
        result = capture(lambda t: t - 1, (_x(),), {})
        assert result.failure is None
