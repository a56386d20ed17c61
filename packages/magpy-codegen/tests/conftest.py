"""Test configuration for magpy-codegen (no ``__init__.py``: pytest runs in importlib mode).

- ``--update-golden`` rewrites ``tests/golden/*`` from the current generator output instead of
  comparing against it (review the diff before committing);
- two autouse fixtures: the trace function is restored after every test, and (when the runtime
  is importable) every MagPy record is dropped around every test;
- ``record_of``: capture a call with ``magpy_monitor.capture`` and build its record with the
  eager backend; ``golden``: compare a text with its golden file.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import magpy_monitor
from magpy_codegen import Record, build_record

try:  # the codegen venv does not install the runtime
    import magpy_runtime as _runtime
except ImportError:  # pragma: no cover - depends on the environment
    _runtime = None

GOLDEN_DIR = Path(__file__).with_name("golden")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite magpy-codegen's golden files from the current output",
    )


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


RecordOf = Callable[..., tuple[Record, magpy_monitor.CaptureResult]]


@pytest.fixture
def record_of() -> RecordOf:
    """``record_of(fn, *args, kwargs=None, backend="eager")`` -> (record, capture result)."""

    def make(
        fn: Any, *args: Any, kwargs: dict[str, Any] | None = None, backend: Any = "eager"
    ) -> tuple[Record, magpy_monitor.CaptureResult]:
        result = magpy_monitor.capture(fn, args, dict(kwargs or {}))
        assert result.failure is None, repr(result.failure)
        assert result.plan is not None and result.graph is not None
        qualname = getattr(fn, "__qualname__", type(fn).__qualname__)
        rec = build_record(
            result.plan, result.graph, result.example_inputs, backend, qualname=qualname
        )
        return rec, result

    return make


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """``golden(name, text)``: ``text`` must equal ``tests/golden/<name>``."""
    update = bool(request.config.getoption("--update-golden", default=False))

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if update:
            path.write_text(text, encoding="utf-8")
            return
        if not path.is_file():
            pytest.fail(f"golden file {path} is missing; run pytest with --update-golden")
        expected = path.read_text(encoding="utf-8")
        if text != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=f"golden/{name}",
                    tofile="generated",
                )
            )
            pytest.fail(
                f"generated code differs from golden/{name} (review, then rerun with "
                f"--update-golden to accept):\n{diff}"
            )

    return check
