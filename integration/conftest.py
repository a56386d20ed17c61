"""Fixtures for the cross-package tests (no ``__init__.py``: pytest runs in importlib mode)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _trace_function_restored() -> Iterator[None]:
    """Fail a test that leaves ``sys.settrace`` changed, and restore it for the next test."""
    before = sys.gettrace()
    yield
    after = sys.gettrace()
    if after is not before:
        sys.settrace(before)
        pytest.fail(f"the test left sys.gettrace() == {after!r}; it was {before!r} before")
