"""Smoke tests: the public surface of magpy_monitor and its import-time checks."""

from __future__ import annotations

import subprocess
import sys

import magpy_monitor


def test_every_public_name_resolves() -> None:
    """Every name in __all__ is an attribute of the package."""
    missing = [name for name in magpy_monitor.__all__ if not hasattr(magpy_monitor, name)]
    assert missing == []


def test_all_has_no_duplicates_or_private_names() -> None:
    """__all__ lists each public name once and no underscore names."""
    names = magpy_monitor.__all__
    assert len(names) == len(set(names))
    assert not [name for name in names if name.startswith("_")]


def test_contract_names_present() -> None:
    """The names the other packages and the tests rely on are exported."""
    contract = {
        "NULL",
        "TABLE",
        "Annotation",
        "AnnotationTable",
        "Kind",
        "CaptureResult",
        "StackView",
        "capture",
        "classify",
        "read_stack",
        "stack_depth",
    }
    assert contract <= set(magpy_monitor.__all__)


def test_version_is_a_string() -> None:
    """The package exposes a dotted __version__ string."""
    assert isinstance(magpy_monitor.__version__, str)
    assert magpy_monitor.__version__.count(".") == 2


def test_fresh_import_self_tests_and_stays_in_its_layer() -> None:
    """A fresh import passes the layout self-test, leaves no tracer, and loads no upper layer."""
    code = (
        "import sys; import magpy_monitor; "
        "assert sys.gettrace() is None, sys.gettrace(); "
        "assert 'magpy_monitor.cpython.frameio' in sys.modules; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('magpy_codegen', 'magpy_runtime', 'magpy')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
