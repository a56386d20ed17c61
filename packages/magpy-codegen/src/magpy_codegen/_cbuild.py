"""The guard memo's snapshot check in C (``_snapcheck.c``), compiled on first use.

Checking a memo's snapshot is one pass over flat lists (``_memo.Memo.valid``); in Python each
element costs a C call through ``map`` (a dict version tag through pybind11 costs ~60 ns), in
C a few nanoseconds. The extension is built the way Inductor builds its CPU kernels: with the
system C compiler (``sysconfig``'s ``CC``, else ``cc``), into a cache directory under a name
keyed by what decides the built file (``CBuild.key``: the source, the interpreter, the
compiler command), written atomically (concurrent processes may race: the last rename wins,
both files are the same), with its SHA-256 beside it. Loading it runs its code in this
process, so it is loaded only after the record store's trust checks (``open_extension``): the
directory and the file belong to this user and group and others cannot write them (the
directory is made 0700), and the file's hash is the one recorded when it was built. Where it
cannot be built or loaded (no compiler, another interpreter, a refused file, the Python check
asked for), the Python check serves, exactly as well, and ``reason`` says why.

Where and whether to build are ``NativeSettings``, given by the runtime (``magpy.config``'s
``cache_dir`` and ``snapcheck``, from ``MAGPY_CACHE_DIR`` and ``MAGPY_SNAPCHECK``) through
``configure``: this package reads no environment. They take effect until the extension was
first loaded; after that the check in use stays (guard memos hold its version numbers).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import attrs

from magpy_monitor import INTERP

from ._trust import directory_problem, open_trusted, write_private

__all__ = [
    "CBuild",
    "NativeSettings",
    "configure",
    "install_snapcheck",
    "load_disjoint",
    "load_snapcheck",
    "load_values_state",
    "load_version",
    "open_extension",
    "reason",
    "settings",
    "snapcheck_artifact",
]

_SOURCE = Path(__file__).with_name("_snapcheck.c")
_NAME = "_magpy_snapcheck"
reason: str | None = None  # why the C check is not in use, once that was decided


@attrs.frozen
class NativeSettings:
    """Where the snapshot check's extension is built and whether it is used.

    ``cache_dir``: the directory of built files (None: ``~/.cache/magpy``). ``snapcheck``:
    ``"c"`` builds and uses the compiled check, ``"python"`` keeps the Python one.
    """

    cache_dir: str | None = None
    snapcheck: str = "c"

    def directory(self) -> Path:
        return Path(self.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "magpy"))


@attrs.frozen
class CBuild:
    """What decides the built extension's content: its source, the interpreter it is built
    for (headers and ABI) and the compiler command. ``key()`` names the built file."""

    source: bytes
    interpreter: str
    command: tuple[str, ...]

    @classmethod
    def current(cls) -> CBuild:
        cc = shlex.split(sysconfig.get_config_var("CC") or "cc")[:1] or ["cc"]
        include = sysconfig.get_paths()["include"]
        return cls(
            _SOURCE.read_bytes(), sys.version, (*cc, "-shared", "-fPIC", "-O2", f"-I{include}")
        )

    def key(self) -> str:
        h = hashlib.sha256(self.source)
        h.update(self.interpreter.encode())
        h.update("\0".join(self.command).encode())
        return h.hexdigest()[:16]


_SETTINGS = [NativeSettings()]


def configure(new: NativeSettings) -> None:
    """Use ``new`` from now on (the runtime's config gives them; see the module docstring)."""
    _SETTINGS[0] = new


def settings() -> NativeSettings:
    """The settings in use."""
    return _SETTINGS[0]


def _uid() -> int:
    """The user the cache directory and the built files must belong to (tests simulate
    another owner through it)."""
    return os.getuid()


def _directory_problem(directory: Path) -> str | None:
    """Why the built files must not be kept in (or loaded from) ``directory`` (None: they
    may); it is made user-only (0700) where missing. The record store's checks (``_trust``):
    owned by this user, not writable by others."""
    return directory_problem(directory, f"the cache directory {directory}", uid=_uid(), create=True)


def _file_problem(target: Path) -> tuple[str | None, str | None]:
    """(why the built file ``target`` must not be loaded, its SHA-256): checked on the open
    file, so that what is checked is what was opened (``_trust.open_trusted``): a regular file
    of this user that group and others cannot write."""
    opened = open_trusted(target, target.name, uid=_uid())
    if isinstance(opened, str):
        return opened, None
    with opened[0] as file:
        return None, hashlib.sha256(file.read()).hexdigest()


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _built_hash(target: Path) -> str | None:
    """The SHA-256 written when ``target`` was built (None: none, or not this user's)."""
    problem, _ = _file_problem(_sidecar(target))
    if problem is not None:
        return None
    text = _sidecar(target).read_text().strip()
    return text if len(text) == 64 else None


def _build(build: CBuild, target: Path) -> None:
    """Compile the extension into ``target`` (0700) and record its SHA-256 beside it."""
    fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        cmd = [*build.command, str(_SOURCE), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
        os.chmod(tmp, 0o700)  # (the compiler makes it with the umask's permissions)
        built = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        write_private(target.parent, _sidecar(target).name, built.encode())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def open_extension(given: NativeSettings, build: CBuild) -> tuple[Any, str | None]:
    """(the extension built by ``build`` in ``given``'s directory, None) or (None, why not).

    Loaded only when the directory and the file pass the trust checks (``_directory_problem``,
    ``_file_problem``) and the file's SHA-256 is the one recorded when it was built. A file
    of this user whose hash does not match (damaged, or half written by a process that died)
    is built again once; one that fails the owner or permission checks is not touched."""
    directory = given.directory()
    problem = _directory_problem(directory)
    if problem is not None:
        return None, problem
    target = _target(given, build)
    try:
        if not target.exists():
            _build(build, target)
        problem, found = _file_problem(target)
        if problem is None and found != _built_hash(target):
            _build(build, target)  # (ours, in our directory: a damaged build is redone)
            problem, found = _file_problem(target)
        if problem is None and found != _built_hash(target):
            problem = f"the SHA-256 of {target.name} does not match what was built"
        if problem is not None:
            return None, problem
        loader = importlib.machinery.ExtensionFileLoader(_NAME, str(target))
        spec = importlib.util.spec_from_file_location(_NAME, target, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return module, None


def _target(given: NativeSettings, build: CBuild) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return given.directory() / f"snapcheck-{build.key()}{suffix}"


def snapcheck_artifact() -> tuple[str, bytes] | None:
    """The extension built for this interpreter and compiler, as (file name, bytes), for a
    bundle (``magpy.save_cache_artifacts``); None where none was built, or it fails the trust
    checks or its recorded SHA-256."""
    given = settings()
    if given.snapcheck != "c" or not INTERP.c_snapshot_check:
        return None
    target = _target(given, CBuild.current())
    if not target.exists() or _directory_problem(target.parent) is not None:
        return None
    problem, _ = _file_problem(target)
    if problem is not None:
        return None
    data = target.read_bytes()
    if hashlib.sha256(data).hexdigest() != _built_hash(target):
        return None
    return target.name, data


def install_snapcheck(name: str, data: bytes) -> bool:
    """Put a bundle's extension ``name`` (``snapcheck_artifact``'s, from a verified bundle)
    where this process would build its own, so that it is loaded instead of compiled; whether
    it was (not: another interpreter or compiler's, one is there already, or the check was
    loaded or refused already)."""
    given = settings()
    if _MODULE or given.snapcheck != "c" or not INTERP.c_snapshot_check:
        return False
    target = _target(given, CBuild.current())
    if name != target.name or target.exists() or _directory_problem(target.parent) is not None:
        return False
    fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(tmp, 0o700)
        write_private(
            target.parent, _sidecar(target).name, hashlib.sha256(data).hexdigest().encode()
        )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


_MODULE: list[Any] = []  # the loaded extension, once it was tried (None: not available)


def _load() -> Any:
    global reason
    if _MODULE:
        return _MODULE[0]
    module = None
    given = settings()
    if given.snapcheck == "python":
        reason = "the Python check was asked for (snapcheck='python')"
    elif not INTERP.c_snapshot_check:
        reason = f"the C check does not know CPython {sys.version.split()[0]}"
    else:
        module, reason = open_extension(given, CBuild.current())
    _MODULE.append(module)
    return module


def load_snapcheck() -> Callable[[Any, Any], bool] | None:
    """``holds(state, absent)`` from the compiled extension, or None (see ``reason``)."""
    module = _load()
    return None if module is None else cast("Callable[[Any, Any], bool]", module.holds)


def load_disjoint() -> Callable[[Any, Any], bool] | None:
    """``disjoint(outs, inputs)`` from the compiled extension, or None (see ``reason``)."""
    module = _load()
    return None if module is None else cast("Callable[[Any, Any], bool]", module.disjoint)


def load_version() -> Callable[[Any], int] | None:
    """``version(dict)`` from the compiled extension (the number ``holds`` compares), or None."""
    module = _load()
    return None if module is None else cast("Callable[[Any], int]", module.version)


def load_values_state() -> Callable[[Any], bytes] | None:
    """``values_state(dict)`` from the compiled extension, where it has one (3.13: what
    ``holds`` compares of an instance dict whose values live in the object), or None."""
    module = _load()
    return None if module is None else getattr(module, "values_state", None)
