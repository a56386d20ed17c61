"""MagPy's configuration has one owner: ``magpy_runtime/_config.py`` reads every ``MAGPY_*``
variable, docs/config.md documents each variable and ``magpy.config`` field, and the settings
reach the packages below the runtime (``cache_dir``, ``snapcheck`` as ``NativeSettings``)."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from magpy_codegen import _cbuild
from magpy_runtime import config
from magpy_runtime._config import VARIABLES, Config, environ

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def _table_rows() -> list[list[str]]:
    rows = [line.split("|")[1:-1] for line in DOC.read_text().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]


def test_every_variable_has_a_row() -> None:
    """Each variable in VARIABLES is named in the table's variable column, and the table names
    no other."""
    named = {m for row in _table_rows() for m in re.findall(r"MAGPY_[A-Z0-9_]+", row[1])}
    assert named == set(VARIABLES)


def test_every_field_has_a_row() -> None:
    """Each field of Config has a row, and each variable's field is the one in its row."""
    fields = {row[0].strip("`") for row in _table_rows() if row[0] != "—"}
    assert fields == {f.name for f in attrs.fields(Config)}
    for row in _table_rows():
        for name in re.findall(r"MAGPY_[A-Z0-9_]+", row[1]):
            if row[0] != "—":
                assert VARIABLES[name] == row[0].strip("`"), name


def test_environ_reads_only_known_variables() -> None:
    """environ() refuses a name missing from VARIABLES (a variable nobody documented)."""
    with pytest.raises(KeyError, match="MAGPY_NOT_A_SETTING"):
        environ("MAGPY_NOT_A_SETTING")


def test_native_settings_follow_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """MAGPY_CACHE_DIR and MAGPY_SNAPCHECK become config fields, and setting a field (or
    patching it) passes the new NativeSettings down to magpy_codegen."""
    monkeypatch.setenv("MAGPY_CACHE_DIR", "/somewhere")
    monkeypatch.setenv("MAGPY_SNAPCHECK", " Python ")
    got = Config.from_env()
    assert (got.cache_dir, got.snapcheck) == ("/somewhere", "python")
    before = _cbuild.settings()
    with config.patch(snapcheck="python", cache_dir="/elsewhere"):
        assert _cbuild.settings() == _cbuild.NativeSettings("/elsewhere", "python")
    assert _cbuild.settings() == before
    with pytest.raises(ValueError, match="snapcheck"):
        config.snapcheck = "fortran"
    assert _cbuild.settings() == before
