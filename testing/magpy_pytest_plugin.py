"""MagPy's shared pytest plugin: the autouse fixtures of every test directory.

Loaded for every pytest run from the root ``pyproject.toml`` (``[tool.pytest.ini_options]``:
``pythonpath = ["testing"]`` and ``-p magpy_pytest_plugin`` in ``addopts``), so that
``integration/`` and each ``packages/magpy-*/tests`` get the same two fixtures without a copy
in their conftests:

- ``_trace_function_restored``: a test that leaves ``sys.settrace`` changed fails, and the trace
  function is restored for the next test;
- ``_magpy_reset``: no MagPy record of an earlier test survives into a test, and none is left
  behind.

The plugin imports nothing from MagPy (stdlib and pytest only), so it loads in every package's
venv, refgraph's included (no torch, no runtime there). The reset calls
``magpy_runtime.reset()`` only once something has imported ``magpy_runtime``: until then no
record can exist, and a package's tests never pull the runtime (and torch) in just for it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

_RUNTIME = "magpy_runtime"


def _reset_magpy() -> None:
    """``magpy_runtime.reset()`` if the runtime is imported; nothing to drop otherwise."""
    runtime = sys.modules.get(_RUNTIME)
    if runtime is not None:
        runtime.reset()


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
    _reset_magpy()
    yield
    _reset_magpy()
