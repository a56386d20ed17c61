"""The guard memo's snapshot check in C (``_snapcheck.c``), compiled on first use.

Checking a memo's snapshot is one pass over flat lists (``_memo.Memo.valid``); in Python each
element costs a C call through ``map`` (a dict version tag through pybind11 costs ~60 ns), in
C a few nanoseconds. The extension is built the way Inductor builds its CPU kernels: with the
system C compiler (``sysconfig``'s ``CC``, else ``cc``), into a cache directory
(``MAGPY_CACHE_DIR``, else ``~/.cache/magpy``) under a name keyed by the source and the
interpreter, written atomically (concurrent processes may race: the last rename wins, both
files are the same). Where it cannot be built or loaded (no compiler, another interpreter,
``MAGPY_SNAPCHECK=python``), the Python check serves, exactly as well, and ``reason`` says
why.
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

from magpy_monitor import INTERP

__all__ = ["load_disjoint", "load_snapcheck", "load_values_state", "load_version", "reason"]

_SOURCE = Path(__file__).with_name("_snapcheck.c")
_NAME = "_magpy_snapcheck"
reason: str | None = None  # why the C check is not in use, once that was decided


def _cache_dir() -> Path:
    root = os.environ.get("MAGPY_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "magpy"
    )
    return Path(root)


def _build(target: Path) -> None:
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")[:1] or ["cc"]
    include = sysconfig.get_paths()["include"]
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        cmd = [*cc, "-shared", "-fPIC", "-O2", f"-I{include}", str(_SOURCE), "-o", tmp]
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
    if os.environ.get("MAGPY_SNAPCHECK", "").strip().lower() == "python":
        reason = "MAGPY_SNAPCHECK=python"
    elif not INTERP.c_snapshot_check:
        reason = f"the C check does not know CPython {sys.version.split()[0]}"
    else:
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        key = hashlib.sha256(_SOURCE.read_bytes() + sys.version.encode()).hexdigest()[:16]
        target = _cache_dir() / f"snapcheck-{key}{suffix}"
        try:
            if not target.exists():
                _build(target)
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
