"""Test configuration for magpy-monitor (no ``__init__.py``: pytest runs in importlib mode).

Fixtures:

- ``stack_checker``: compares each monitored frame's shadow stack with the real value stack at
  every opcode event, for the shadow-stack corpus tests.

The autouse fixtures (trace function restored, MagPy reset) come from the shared plugin
``testing/magpy_pytest_plugin.py``, which the root ``pyproject.toml`` loads.
"""

from __future__ import annotations

from typing import Any

import pytest

from magpy_monitor import NULL
from magpy_monitor.core.frame import FrameMonitor
from magpy_monitor.core.valuetypes import is_value_type


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
