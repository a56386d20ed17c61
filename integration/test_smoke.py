"""Smoke test: the meta-package and all four packages install and import together."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

DISTRIBUTIONS = ["magpy", "magpy-runtime", "magpy-codegen", "magpy-monitor", "magpy-refgraph"]


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_imports_at_lockstep_version(dist: str) -> None:
    """Every package imports, and every distribution has magpy's version."""
    importlib.import_module(dist.replace("-", "_"))
    import magpy

    assert magpy.__version__ == "0.1.0"
    assert importlib.metadata.version(dist) == magpy.__version__
