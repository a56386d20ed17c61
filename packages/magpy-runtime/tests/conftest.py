"""Test configuration for magpy-runtime (no ``__init__.py``: pytest runs in importlib mode).

Two autouse fixtures: the trace function is restored after every test, and every MagPy record
is dropped before and after every test (``magpy_runtime.reset()``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

import magpy_runtime


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
    """Every test starts with no MagPy record of an earlier test, and leaves none behind."""
    magpy_runtime.reset()
    yield
    magpy_runtime.reset()
