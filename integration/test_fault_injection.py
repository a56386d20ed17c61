"""Fault injection: every internal stage of MagPy fails in turn, and the program never notices.

Each stage is patched to raise where it is looked up:

- the monitor: ``magpy_monitor.core.frame.FrameMonitor.on_opcode`` raises on its N-th call (N is
  calibrated per program so that the fault lands in the whole-call capture, in a segment, or
  late in the run);
- guard generation: ``magpy_codegen._record.generate_guard`` (imported there by name);
- mock generation: ``magpy_codegen._record.generate_mock``;
- backend compile: a callable backend that raises;
- guard evaluation: ``build_record`` (imported by name into ``magpy_runtime.cache._cache`` and
  ``magpy_runtime.cache._sites``) is wrapped so that every guard it builds raises;
- graph execution: a backend whose compiled callable raises when run.

For every program and stage: results and printed text equal eager's on every call, no trace
function is left behind, at most one warning (``MagPyWarning`` or ``RuntimeWarning``) is
emitted, and when the fault fired, ``magpy.stats(...).fallbacks`` counts it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import attrs
import pytest
import torch

import magpy
import magpy_codegen._record as codegen_record
import magpy_monitor.core.frame as monitor_frame
import magpy_runtime.cache._cache as runtime_cache
import magpy_runtime.cache._sites as runtime_sites

CALLS = 4


@pytest.fixture(autouse=True)
def _no_finder_left() -> Iterator[None]:
    """No finder (the tracer that looks for the resume point after a break) stays armed.

    A leaked finder keeps the thread's finder count above 0, and then no finder runs on the
    thread again: later tests would silently lose every resume site. Fail, and repair it.
    """
    import magpy_monitor.driver.segments as segments

    yield
    left = getattr(segments._local, "finders", 0)
    segments._local.finders = 0
    assert left == 0, f"{left} finder(s) left armed on this thread"


# ------------------------------------------------------------------------------ programs
def whole(x: torch.Tensor) -> torch.Tensor:
    """No break: one record for the whole call."""
    return (x.sin() * 2).cos() + 1


def split(x: torch.Tensor) -> torch.Tensor:
    """One break: two segments in one frame."""
    y = x.sin() * 2
    print("between the segments", y.shape[0])
    return y.cos() + 1


def _callee(x: torch.Tensor) -> torch.Tensor:
    s = x.abs().sum().item()
    print(f"callee {s > -1}")
    return x * 2


def callee_split(x: torch.Tensor) -> torch.Tensor:
    """A break inside a callee: segments in two frames."""
    return _callee(x + 1).relu()


PROGRAMS = {"whole": whole, "split": split, "callee_split": callee_split}


class Injected(RuntimeError):
    """The fault the tests inject."""


class Fault:
    """Counts how often the injected fault fired."""

    def __init__(self) -> None:
        self.fired = 0

    def fire(self) -> None:
        self.fired += 1
        raise Injected("injected fault")


def eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    return gm.forward


def run_program(
    program: Callable[..., Any], backend: Any, capsys: pytest.CaptureFixture[str]
) -> tuple[Any, list[warnings.WarningMessage]]:
    """Run ``program`` compiled ``CALLS`` times against eager; return the compiled callable and
    the MagPy warnings it emitted."""
    compiled = magpy.compile(program, backend=backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(CALLS):
            x = torch.randn(3, generator=torch.Generator().manual_seed(i))
            capsys.readouterr()
            want = program(x.clone())
            want_out = capsys.readouterr().out
            got = compiled(x)
            got_out = capsys.readouterr().out
            assert sys.gettrace() is None, f"call {i} left a trace function"
            H.assert_same(got, want, f"call {i}")
            assert got_out == want_out, f"call {i}: printed text differs"
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    return compiled, ours


def check_absorbed(compiled: Any, caught: list[warnings.WarningMessage], fault: Fault) -> None:
    messages = [str(w.message) for w in caught]
    assert len(caught) <= 1, messages
    st = magpy.stats(compiled)
    if fault.fired:
        assert st.fallbacks >= 1, (st, messages)
        assert len(caught) == 1, (st, messages)
        assert "injected fault" in messages[0], messages


# ------------------------------------------------------------------------------ stages
@pytest.fixture
def count_opcodes() -> Iterator[Callable[[Callable[..., Any]], int]]:
    """``count(program)``: how many ``on_opcode`` calls ``CALLS`` compiled calls make."""

    def count(program: Callable[..., Any]) -> int:
        original = monitor_frame.FrameMonitor.on_opcode
        n = 0

        def counting(self: Any) -> None:
            nonlocal n
            n += 1
            original(self)

        monitor_frame.FrameMonitor.on_opcode = counting  # type: ignore[method-assign]
        try:
            compiled = magpy.compile(program, backend=eager_backend)
            for i in range(CALLS):
                compiled(torch.randn(3, generator=torch.Generator().manual_seed(i)))
        finally:
            monitor_frame.FrameMonitor.on_opcode = original  # type: ignore[method-assign]
            magpy.reset()
        return n

    yield count


@pytest.mark.parametrize("where", [0.0, 0.3, 0.6, 0.95])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_monitor_failure(
    name: str,
    where: float,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    count_opcodes: Callable[[Callable[..., Any]], int],
) -> None:
    program = PROGRAMS[name]
    total = count_opcodes(program)
    capsys.readouterr()
    nth = max(1, int(total * where))
    original = monitor_frame.FrameMonitor.on_opcode
    fault = Fault()
    calls = 0

    def on_opcode(self: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == nth:
            fault.fire()
        original(self)

    monkeypatch.setattr(monitor_frame.FrameMonitor, "on_opcode", on_opcode)
    compiled, caught = run_program(program, eager_backend, capsys)
    assert fault.fired == 1, f"the fault at opcode {nth} of {total} never fired"
    check_absorbed(compiled, caught, fault)


@pytest.mark.parametrize("stage", ["generate_guard", "generate_mock"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_code_generation_failure(
    name: str, stage: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fault = Fault()

    def broken(*args: Any, **kwargs: Any) -> Any:
        fault.fire()

    monkeypatch.setattr(codegen_record, stage, broken)
    compiled, caught = run_program(PROGRAMS[name], eager_backend, capsys)
    assert fault.fired
    check_absorbed(compiled, caught, fault)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_backend_compile_failure(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    fault = Fault()

    def broken_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        fault.fire()

    compiled, caught = run_program(PROGRAMS[name], broken_backend, capsys)
    assert fault.fired
    check_absorbed(compiled, caught, fault)


_GUARD_EVAL_WHOLE = (
    "CacheState.call runs rec.guard(fn, args, kwargs) without protection: a guard that raises "
    "(generated guards catch Exception themselves, so only a broken generator or backend "
    "could do it) reaches the user's program"
)
_GUARD_EVAL_SITE = (
    "a guard raising at a site is caught by site_entry (RuntimeWarning 'site ... failed', the "
    "call runs natively) but it is not counted in stats().fallbacks and the site is not made "
    "eager, so the failing guard runs again on every call"
)


@pytest.mark.parametrize(
    "name",
    [
        "whole",
        "split",
        "callee_split",
    ],
)
def test_guard_evaluation_failure(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fault = Fault()
    real_build_record = codegen_record.build_record

    def build_record(*args: Any, **kwargs: Any) -> Any:
        rec = real_build_record(*args, **kwargs)

        def guard(*a: Any, **k: Any) -> Any:
            fault.fire()

        rec.guard = attrs.evolve(rec.guard, check=guard)
        return rec

    monkeypatch.setattr(runtime_cache, "build_record", build_record)
    monkeypatch.setattr(runtime_sites, "build_record", build_record)
    compiled, caught = run_program(PROGRAMS[name], eager_backend, capsys)
    assert fault.fired
    check_absorbed(compiled, caught, fault)


_GRAPH_RUN_WHOLE = (
    "a compiled graph that raises when it runs (e.g. a backend kernel failure) propagates "
    "from CacheState.call's rec.mock(...) to the user instead of falling back to the native call"
)


_GRAPH_RUN_SITE = (
    "a mock raising at a site (its compiled graph failed) is caught by site_entry "
    "(RuntimeWarning 'site ... failed', the call runs natively) but it is not counted in "
    "stats().fallbacks and the site is not made eager, so the failing graph runs again on "
    "every call (and each attempt counts as a hit)"
)


@pytest.mark.parametrize(
    "name",
    [
        "whole",
        "split",
        "callee_split",
    ],
)
def test_graph_execution_failure(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Beyond the five stages: the compiled graph itself fails when it runs."""
    fault = Fault()

    def failing_at_run(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        def run(*args: Any) -> Any:
            fault.fire()

        return run

    compiled, caught = run_program(PROGRAMS[name], failing_at_run, capsys)
    assert fault.fired
    check_absorbed(compiled, caught, fault)


def test_faults_leave_no_trace_function_after_the_test() -> None:
    """The autouse fixture checks it after every test; this one makes the check explicit."""
    assert sys.gettrace() is None
