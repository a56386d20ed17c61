"""tools/check_layering.py refuses what it promises to refuse: each check is run on a small
package written to a temporary directory, and on the repository (which must pass)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "check_layering.py"


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_check_layering", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses and annotations look the module up)
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _package(root: Path, name: str, files: dict[str, str]) -> Path:
    directory = root / name
    directory.mkdir()
    for file, text in files.items():
        (directory / file).write_text(text)
    return directory


def test_the_repository_passes(checker: ModuleType) -> None:
    """The sources as they are break no rule."""
    assert checker.check() == []


def test_a_variable_read_outside_the_config_is_refused(checker: ModuleType, tmp_path: Path) -> None:
    """``os.environ.get("MAGPY_X")`` in a package module is an error naming the module; the
    variable passed to the config's ``environ`` is not."""
    pkg = _package(
        tmp_path,
        "magpy_codegen",
        {
            "__init__.py": "",
            "_own.py": 'import os\nFLAG = os.environ.get("MAGPY_OWN_FLAG")\n',
            "_asks.py": 'from magpy_runtime._config import environ\nX = environ("MAGPY_LOGS")\n',
        },
    )
    errors = checker.check_environment_reads({"magpy_codegen": pkg})
    assert len(errors) == 1 and "_own.py:2: MAGPY_OWN_FLAG" in errors[0], errors


def test_an_import_circle_is_refused(checker: ModuleType, tmp_path: Path) -> None:
    """Two runtime modules that import each other are a circle, named by its modules."""
    pkg = _package(
        tmp_path,
        "magpy_runtime",
        {
            "__init__.py": "from ._a import A\n",
            "_a.py": "from ._b import B\nclass A: ...\n",
            "_b.py": "from . import _a\nclass B: ...\n",
        },
    )
    errors = checker.check_cycles({"magpy_runtime": pkg})
    assert len(errors) == 1, errors
    assert "magpy_runtime._a -> magpy_runtime._b -> magpy_runtime._a" in errors[0]


def test_a_type_checking_import_that_closes_a_circle_is_refused(
    checker: ModuleType, tmp_path: Path
) -> None:
    """An import under ``if TYPE_CHECKING:`` counts: it closes the circle all the same (as
    _pool, _store and _libraries did with _cache)."""
    pkg = _package(
        tmp_path,
        "magpy_runtime",
        {
            "__init__.py": "",
            "_cache.py": "from ._pool import adopt\n",
            "_pool.py": "from ._store import serve\n",
            "_store.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from ._cache import CacheState\n"
            ),
        },
    )
    errors = checker.check_cycles({"magpy_runtime": pkg})
    assert len(errors) == 1, errors
    assert (
        "_cache -> magpy_runtime._pool -> magpy_runtime._store -> magpy_runtime._cache"
        in (errors[0])
    )


def test_a_circle_inside_a_subpackage_is_refused(checker: ModuleType, tmp_path: Path) -> None:
    """Modules of the runtime's subpackages count as its modules: a circle through
    ``cache/`` and ``store/`` (relative imports one and two levels up) is refused."""
    pkg = _package(tmp_path, "magpy_runtime", {"__init__.py": "", "_owner.py": ""})
    for sub, files in {
        "cache": {"__init__.py": "", "_cache.py": "from ..store._store import serve\n"},
        "store": {
            "__init__.py": "",
            "_store.py": "from .._owner import O\nfrom ._kept import K\n",
            "_kept.py": "from ..cache import _cache\n",
        },
    }.items():
        _package(pkg, sub, files)
    errors = checker.check_cycles({"magpy_runtime": pkg})
    assert len(errors) == 1, errors
    assert (
        "magpy_runtime.cache._cache -> magpy_runtime.store._store -> magpy_runtime.store._kept"
        " -> magpy_runtime.cache._cache"
    ) in errors[0]


def test_the_store_importing_the_cache_is_refused(checker: ModuleType, tmp_path: Path) -> None:
    """``store/`` lies below ``cache/``: a store module importing a cache module is refused
    even where no circle closes; the cache importing the store passes."""
    pkg = _package(tmp_path, "magpy_runtime", {"__init__.py": ""})
    _package(pkg, "cache", {"__init__.py": "", "_cache.py": "from ..store import _store\n"})
    _package(
        pkg,
        "store",
        {"__init__.py": "", "_store.py": "", "_kept.py": "from ..cache._stats import S\n"},
    )
    (pkg / "cache" / "_stats.py").write_text("S = 1\n")
    roots = {"magpy_runtime": pkg}
    assert checker.check_cycles(roots) == []
    errors = checker.check_subpackage_order(roots)
    assert errors == [
        "magpy_runtime.store._kept imports magpy_runtime.cache._stats: magpy_runtime.store lies"
        " below magpy_runtime.cache"
    ], errors


def test_modules_in_a_line_are_no_circle(checker: ModuleType, tmp_path: Path) -> None:
    """Imports that all point down (a Protocol module at the bottom) pass."""
    pkg = _package(
        tmp_path,
        "magpy_runtime",
        {
            "__init__.py": "from ._cache import C\n",
            "_owner.py": "from typing import Protocol\nclass Owner(Protocol): ...\n",
            "_store.py": "from ._owner import Owner\n",
            "_cache.py": "from ._owner import Owner\nfrom ._store import Owner as O\nC = 1\n",
        },
    )
    assert checker.check_cycles({"magpy_runtime": pkg}) == []
