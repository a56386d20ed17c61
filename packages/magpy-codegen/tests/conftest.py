"""Test configuration for magpy-codegen (no ``__init__.py``: pytest runs in importlib mode).

- ``--update-golden`` rewrites ``tests/golden/*`` from the current generator output instead of
  comparing against it (review the diff before committing);
- ``record_of``: capture a call with ``magpy_monitor.capture`` and build its record with the
  eager backend; ``golden``: compare a text with its golden file.

The autouse fixtures (trace function restored, MagPy reset) come from the shared plugin
``testing/magpy_pytest_plugin.py``, which the root ``pyproject.toml`` loads.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import magpy_monitor
from magpy_codegen import Record, build_record

GOLDEN_DIR = Path(__file__).with_name("golden")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite magpy-codegen's golden files from the current output",
    )


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
