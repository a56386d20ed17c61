"""Test configuration for magpy-refgraph.

Tests run with ``--import-mode=importlib``, so test directories are not on ``sys.path``.
``strategies.py`` is loaded here under a package-unique module name, so that other packages'
``tests/strategies.py`` can never shadow it in a shared pytest run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_STRATEGIES = "_refgraph_strategies"


def _load_strategies() -> None:
    if _STRATEGIES in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        _STRATEGIES, Path(__file__).with_name("strategies.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_STRATEGIES] = module
    spec.loader.exec_module(module)


_load_strategies()
