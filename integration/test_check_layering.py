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
