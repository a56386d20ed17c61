"""Smoke tests: the public surface of magpy_refgraph and its layering rule."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import magpy_refgraph


def _run(code: str) -> None:
    """Run ``code`` in a fresh interpreter that imports this very magpy_refgraph."""
    src = str(Path(magpy_refgraph.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": path})


MODULES = [
    "_errors",
    "_access",
    "_render",
    "_custom",
    "_guards",
    "_graph",
    "_algorithms",
    "_inspect",
    "_plan",
]


def test_every_public_name_resolves() -> None:
    """Every name in __all__ is an attribute of the package."""
    missing = [name for name in magpy_refgraph.__all__ if not hasattr(magpy_refgraph, name)]
    assert missing == []


def test_all_has_no_duplicates_or_private_names() -> None:
    """__all__ lists each public name once and no underscore names."""
    names = magpy_refgraph.__all__
    assert len(names) == len(set(names))
    assert not [name for name in names if name.startswith("_")]


def test_module_all_lists_are_reexported() -> None:
    """Each private module's __all__ is re-exported by the package."""
    for module_name in MODULES:
        module = importlib.import_module(f"magpy_refgraph.{module_name}")
        assert set(module.__all__) <= set(magpy_refgraph.__all__), module_name


def test_version_is_a_string() -> None:
    """The package exposes a __version__ string."""
    assert isinstance(magpy_refgraph.__version__, str)
    assert magpy_refgraph.__version__.count(".") == 2


def test_contract_names_present() -> None:
    """The names promised by docs/refgraph-api.md are all exported."""
    contract = [
        *("MagPyError", "Unsupported", "InternalError", "UnknownOptionError"),
        *("NotCompiledError", "GuardFailure", "AccessKind", "Access", "Local", "Global"),
        *("Builtin", "Cell", "Attr", "Item", "IterPos", "Const", "Path", "RenderContext"),
        *("SimpleRenderContext", "render_path", "GuardKind", "GuardReq", "GuardSet"),
        *("NodeKind", "ShadowNode", "ShadowVersion", "Edge", "RefGraph", "entry_paths"),
        *("primary_path", "guard_set", "guard_requirements", "aliases", "mock_set", "MockSet"),
        *("dump", "to_dot"),
    ]
    assert set(contract) <= set(magpy_refgraph.__all__)


def test_import_does_not_pull_torch() -> None:
    """Importing magpy_refgraph in a fresh interpreter never imports torch."""
    code = "import magpy_refgraph, sys; assert 'torch' not in sys.modules"
    _run(code)


def test_only_allowed_third_party_imports() -> None:
    """A fresh import loads no third-party package besides attrs and typing_extensions."""
    code = (
        "import sys; before = set(sys.modules); import magpy_refgraph; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "allowed = {'magpy_refgraph', 'attr', 'attrs', 'typing_extensions'}; "
        "stdlib = set(sys.stdlib_module_names); "
        "bad = sorted(m for m in new "
        "if m not in allowed and m not in stdlib and not m.startswith('_')); "
        "assert not bad, bad"
    )
    _run(code)
