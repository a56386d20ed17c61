"""Test configuration for magpy-monitor (no ``__init__.py``: pytest runs in importlib mode).

Fixtures:

- two autouse fixtures: the trace function is restored after every test, and (when the runtime
  is importable, as in a full checkout) every MagPy record is dropped around every test;
- ``stack_checker``: compares each monitored frame's shadow stack with the real value stack at
  every opcode event, for the shadow-stack corpus tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from magpy_monitor import NULL
from magpy_monitor.core.capture import is_value_type
from magpy_monitor.core.frame import FrameMonitor

try:  # the monitor's own venv does not install the runtime
    import magpy_runtime as _runtime
except ImportError:  # pragma: no cover - depends on the environment
    _runtime = None


@pytest.fixture(autouse=True)
def _trace_function_restored() -> Iterator[None]:
    """Fail a test that leaves ``sys.settrace`` changed, and restore it for the next test."""
    before = sys.gettrace()
    yield
    after = sys.gettrace()
    if after is not before:
        sys.settrace(before)
        pytest.fail(f"the test left sys.gettrace() == {after!r}; it was {before!r} before")


@pytest.fixture(autouse=True)
def _magpy_reset() -> Iterator[None]:
    """No MagPy record of an earlier test survives into this one (when the runtime exists)."""
    if _runtime is not None:
        _runtime.reset()
    yield
    if _runtime is not None:
        _runtime.reset()


class StackChecker:
    """Records every disagreement between a shadow stack and the real stack it mirrors.

    The shadow stack is compared when it describes the state *before* the instruction of the
    current event: right after the previous instruction's outputs were bound, or at the start
    of an event when nothing was pending. Disagreements are recorded, never raised, because an
    exception inside a trace callback would only stop monitoring.
    """

    def __init__(self) -> None:
        self.checks = 0
        self.mismatches: list[str] = []

    def check(self, mon: FrameMonitor) -> None:
        self.checks += 1
        where = f"{mon.code.co_qualname}@{mon.frame.f_lasti}"
        real = mon.view.values()
        if len(real) != len(mon.stack):
            self.mismatches.append(f"{where}: shadow depth {len(mon.stack)} != real {len(real)}")
            return
        for i, (val, obj) in enumerate(zip(mon.stack, real, strict=True)):
            if val.obj is obj:
                continue
            if obj is not NULL and is_value_type(obj) and _equal(val.obj, obj):
                continue
            self.mismatches.append(f"{where}: slot {i} shadow {val!r} != real {obj!r}")


def _equal(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


@pytest.fixture
def stack_checker(monkeypatch: pytest.MonkeyPatch) -> StackChecker:
    """Compare shadow and real stacks of every monitored frame at every opcode event."""
    checker = StackChecker()
    on_opcode = FrameMonitor.on_opcode
    bind = FrameMonitor.bind

    def checked_on_opcode(self: FrameMonitor) -> None:
        if self.pending is None:
            checker.check(self)
        on_opcode(self)

    def checked_bind(self: FrameMonitor, lasti: int) -> None:
        bind(self, lasti)
        checker.check(self)

    monkeypatch.setattr(FrameMonitor, "on_opcode", checked_on_opcode)
    monkeypatch.setattr(FrameMonitor, "bind", checked_bind)
    return checker
