"""Fixtures for the cross-package tests (no ``__init__.py``: pytest runs in importlib mode).

``helpers.py`` is loaded here under the unique module name ``_integration_helpers`` (the same
pattern as ``packages/magpy-refgraph/tests/conftest.py``), so test modules can
``import _integration_helpers as H`` without ``integration/`` being on ``sys.path``.

The autouse fixtures (trace function restored, MagPy reset around every test) come from the
shared plugin ``testing/magpy_pytest_plugin.py``. Here: ``check``, ``programs`` and
``recorded`` (warnings recorded under a chosen filter, for ``test_warnings.py`` and
``test_checkpoint.py``).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_HELPERS = "_integration_helpers"
_DIFFERENTIAL = "_integration_differential"


def _load(name: str, filename: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_load(_HELPERS, "helpers.py")
_load(_DIFFERENTIAL, "differential.py")  # the differential harness (test_differs_*.py)

import _integration_helpers as H  # noqa: E402  (registered just above)


@pytest.fixture
def check() -> Callable[..., Any]:
    """``check(fn_or_module, make_inputs, calls=4, backend="eager", expect_records=1)``.

    Compiled equals eager on every call and the cache hits; see
    ``helpers.assert_compiles_like_eager``.
    """
    return H.assert_compiles_like_eager


@pytest.fixture
def programs() -> Any:
    """The conformance programs (``../shared/conformance/programs.py``); skip when absent."""
    module = H.load_programs()
    if module is None:
        pytest.skip(f"conformance programs not found in {H.CONFORMANCE_DIR}")
    return module


@pytest.fixture
def recorded() -> Iterator[Callable[[str], list[warnings.WarningMessage]]]:
    """Every warning of the test is recorded (pytest's "error" filter would turn them into
    exceptions); ``recorded(action)`` sets the filter and returns the list it fills."""
    with warnings.catch_warnings(record=True) as log:

        def use(action: str) -> list[warnings.WarningMessage]:
            warnings.simplefilter(action)
            log.clear()
            return log

        use("always")
        yield use
