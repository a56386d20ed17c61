"""Smoke tests: the public surface of magpy_runtime and the magpy meta-package."""

from __future__ import annotations

import subprocess
import sys

import pytest

import magpy_runtime


def test_every_public_name_resolves() -> None:
    """Every name in __all__ is an attribute of the package."""
    missing = [name for name in magpy_runtime.__all__ if not hasattr(magpy_runtime, name)]
    assert missing == []


def test_all_has_no_duplicates_or_private_names() -> None:
    """__all__ lists each public name once and no underscore names."""
    names = magpy_runtime.__all__
    assert len(names) == len(set(names))
    assert not [name for name in names if name.startswith("_")]


def test_product_surface_present() -> None:
    """compile, explain, reset, stats, annotate and the warning/error types are exported."""
    surface = {
        "compile",
        "explain",
        "reset",
        "stats",
        "annotate",
        "MagPyWarning",
        "FullGraphError",
        "CacheStats",
        "ExplainOutput",
        "config",
    }
    assert surface <= set(magpy_runtime.__all__)


def test_version_is_a_string() -> None:
    """The package exposes a dotted __version__ string."""
    assert isinstance(magpy_runtime.__version__, str)
    assert magpy_runtime.__version__.count(".") == 2


def test_meta_package_reexports_the_runtime() -> None:
    """`import magpy` exposes exactly the runtime's public names, as the same objects."""
    magpy = pytest.importorskip("magpy", reason="the meta-package is installed in integration")

    assert set(magpy.__all__) == set(magpy_runtime.__all__)
    assert magpy.compile is magpy_runtime.compile


def test_a_first_compile_leaves_the_warning_filters_as_they_were() -> None:
    """MagPy's own lazy imports (sympy, on a first compile) do not change the program's
    ``warnings.filters`` in the middle of its run."""
    code = (
        "import warnings, torch, magpy_runtime as magpy; before = list(warnings.filters); "
        "f = magpy.compile(lambda x: x + 1, backend='eager'); f(torch.ones(2)); f(torch.ones(2)); "
        "assert warnings.filters == before, (len(before), len(warnings.filters))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
