"""Smoke tests: the public surface of magpy_codegen and its layering."""

from __future__ import annotations

import subprocess
import sys

import magpy_codegen


def test_every_public_name_resolves() -> None:
    """Every name in __all__ is an attribute of the package."""
    missing = [name for name in magpy_codegen.__all__ if not hasattr(magpy_codegen, name)]
    assert missing == []


def test_all_has_no_duplicates_or_private_names() -> None:
    """__all__ lists each public name once and no underscore names."""
    names = magpy_codegen.__all__
    assert len(names) == len(set(names))
    assert not [name for name in names if name.startswith("_")]


def test_contract_names_present() -> None:
    """The names the runtime relies on are exported."""
    contract = {"Record", "build_record", "compile_graph", "resolve_backend", "BACKENDS"}
    assert contract <= set(magpy_codegen.__all__)


def test_version_is_a_string() -> None:
    """The package exposes a dotted __version__ string."""
    assert isinstance(magpy_codegen.__version__, str)
    assert magpy_codegen.__version__.count(".") == 2


def test_import_stays_in_its_layer() -> None:
    """A fresh import loads no runtime and no inductor, and installs no tracer."""
    code = (
        "import sys; import magpy_codegen; "
        "assert sys.gettrace() is None; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('magpy_runtime', 'magpy') "
        "or m.startswith('torch._inductor.compile_fx')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
