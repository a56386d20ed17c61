"""The guard memo's snapshot check in C (``_snapcheck.c``), compiled on first use.

Checking a memo's snapshot is one pass over flat lists (``_memo.Memo.valid``); in Python each
element costs a C call through ``map`` (a dict version tag through pybind11 costs ~60 ns), in
C a few nanoseconds. The extension is built the way Inductor builds its CPU kernels: with the
system C compiler (``sysconfig``'s ``CC``, else ``cc``), into a cache directory under a name
keyed by what decides the built file (``CBuild.key``: the source, the interpreter, the
compiler command), written atomically (concurrent processes may race: the last rename wins,
both files are the same). Where it cannot be built or loaded (no compiler, another interpreter,
the Python check asked for), the Python check serves, exactly as well, and ``reason`` says why.

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

__all__ = [
    "CBuild",
    "NativeSettings",
    "configure",
    "load_disjoint",
    "load_snapcheck",
    "load_values_state",
    "load_version",
    "reason",
    "settings",
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


def _build(build: CBuild, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        cmd = [*build.command, str(_SOURCE), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        build = CBuild.current()
        target = given.directory() / f"snapcheck-{build.key()}{suffix}"
        try:
            if not target.exists():
                _build(build, target)
            loader = importlib.machinery.ExtensionFileLoader(_NAME, str(target))
            spec = importlib.util.spec_from_file_location(_NAME, target, loader=loader)
            assert spec is not None
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            reason = None
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            module = None
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
