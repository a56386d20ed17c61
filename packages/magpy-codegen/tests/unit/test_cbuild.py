"""The C snapshot check's build is trusted like a stored record (``_cbuild.open_extension``):
loaded only from a directory and a file of this user that group and others cannot write, and
only when its SHA-256 is the one recorded at build time; otherwise rebuilt (a damaged file of
this user) or not loaded, with the reason (the Python check then serves)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from magpy_codegen import _cbuild
from magpy_monitor import INTERP

pytestmark = pytest.mark.skipif(
    not INTERP.c_snapshot_check, reason="the C check does not know this interpreter"
)


def _open(directory: Path) -> tuple[object, str | None]:
    return _cbuild.open_extension(_cbuild.NativeSettings(str(directory)), _cbuild.CBuild.current())


def _built(directory: Path) -> Path:
    (target,) = [
        p
        for p in directory.iterdir()
        if p.name.startswith("snapcheck-") and not p.name.endswith(".sha256")
    ]
    return target


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A fresh cache directory holding one build, not loaded (a loaded library must not be
    changed in place: the tests below damage it)."""
    directory = tmp_path / "magpy"
    assert _cbuild._directory_problem(directory) is None
    build = _cbuild.CBuild.current()
    suffix = _cbuild.sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    _cbuild._build(build, directory / f"snapcheck-{build.key()}{suffix}")
    return directory


def test_a_new_directory_is_user_only_and_the_build_loads(cache: Path) -> None:
    """The directory is made 0700; the library is 0700 and its recorded hash is beside it."""
    assert cache.stat().st_mode & 0o777 == 0o700
    target = _built(cache)
    assert target.stat().st_mode & 0o077 == 0
    assert Path(f"{target}.sha256").read_text().strip() == _cbuild._file_problem(target)[1]
    module, why = _open(cache)
    assert module is not None and why is None


def test_a_damaged_library_is_built_again(cache: Path) -> None:
    """A library of this user whose content differs from what was built is rebuilt, then
    loaded."""
    target = _built(cache)
    target.write_bytes(target.read_bytes()[:-16] + b"\0" * 16)
    module, why = _open(cache)
    assert module is not None, why
    assert _cbuild._file_problem(target)[1] == Path(f"{target}.sha256").read_text().strip()


def test_a_missing_hash_is_built_again(cache: Path) -> None:
    """A library without its recorded hash (written by something else) is rebuilt."""
    target = _built(cache)
    Path(f"{target}.sha256").unlink()
    module, why = _open(cache)
    assert module is not None, why
    assert Path(f"{target}.sha256").is_file()


def test_a_library_others_may_write_is_refused(cache: Path) -> None:
    """Group- or other-writable: not loaded, not rebuilt, and the reason says so."""
    target = _built(cache)
    os.chmod(target, 0o766)
    module, why = _open(cache)
    assert module is None and why is not None and "writable by group or others" in why
    assert target.stat().st_mode & 0o777 == 0o766  # (left as it was)


def test_a_library_of_another_user_is_refused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another owner's library (simulated through ``_uid``) is refused: since the directory
    is checked first, its owner is refused first, naming it."""
    monkeypatch.setattr(_cbuild, "_uid", lambda: os.getuid() + 1)
    module, why = _open(cache)
    assert module is None and why is not None and "belongs to another user" in why


def test_a_library_of_another_user_in_a_directory_of_ours_is_refused(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's own owner is checked too (on the opened file)."""
    target = _built(cache)
    real = os.fstat

    def foreign(fd: int) -> os.stat_result:
        st = real(fd)
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(target.resolve()):
            fields = list(st)
            fields[4] = os.getuid() + 1  # st_uid
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(_cbuild.os, "fstat", foreign)
    module, why = _open(cache)
    assert module is None and why == f"{target.name} belongs to another user"


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    """Nothing is built in, or loaded from, a directory group or others may write."""
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, 0o777)
    module, why = _open(directory)
    assert module is None and why is not None and "writable by group or others" in why
    assert list(directory.iterdir()) == []


def test_a_refusal_falls_back_to_the_python_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``load_snapcheck``: a refused directory gives None and ``reason`` records why
    (the guard memo then keeps the Python check)."""
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, 0o757)
    monkeypatch.setattr(_cbuild, "_MODULE", [])
    monkeypatch.setattr(_cbuild, "_SETTINGS", [_cbuild.NativeSettings(str(directory))])
    monkeypatch.setattr(_cbuild, "reason", None)
    assert _cbuild.load_snapcheck() is None
    assert _cbuild.reason is not None and "writable by group or others" in _cbuild.reason


def test_a_bundle_carries_the_build_to_another_cache(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``snapcheck_artifact`` gives the verified build (a bundle carries it);
    ``install_snapcheck`` puts it in an empty cache of this interpreter (0700, its hash beside
    it), where it loads; a name of another build, or a cache that has one, is left alone."""
    monkeypatch.setattr(_cbuild, "_MODULE", [])
    monkeypatch.setattr(_cbuild, "_SETTINGS", [_cbuild.NativeSettings(str(cache))])
    artifact = _cbuild.snapcheck_artifact()
    assert artifact is not None and artifact[0] == _built(cache).name
    assert _cbuild.install_snapcheck(*artifact) is False  # (there is one already)
    other = tmp_path / "other"
    monkeypatch.setattr(_cbuild, "_SETTINGS", [_cbuild.NativeSettings(str(other))])
    assert _cbuild.install_snapcheck("snapcheck-0000.so", artifact[1]) is False
    assert _cbuild.install_snapcheck(*artifact) is True
    assert _built(other).stat().st_mode & 0o077 == 0
    # (where it would be loaded, with the hash the load checks beside it; not loaded here: each
    # loaded copy of the extension takes one of the interpreter's 8 dict watchers on 3.12+)
    digest = hashlib.sha256(artifact[1]).hexdigest()
    assert Path(f"{_built(other)}.sha256").read_text().strip() == digest
    assert _built(other).read_bytes() == artifact[1]
    Path(f"{_built(cache)}.sha256").write_text("0" * 64)  # (the recorded hash no longer matches)
    monkeypatch.setattr(_cbuild, "_SETTINGS", [_cbuild.NativeSettings(str(cache))])
    assert _cbuild.snapcheck_artifact() is None
