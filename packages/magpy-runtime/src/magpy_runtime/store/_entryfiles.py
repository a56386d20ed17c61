"""The files of the store of persistent records (``_store``): the directory, entry files,
their checks, and the versions an entry is made with.

An entry file is ``MAGIC``, one line of JSON (the header: format, key, versions, the callable's
name, the objects referred to by name with their fingerprints, the graph inputs, the creation
time, the size of the library when there is one, and a SHA-256 over the header without it and
the rest), then the content (a pickle, see ``_persist``) and, for an Inductor record, its graph
compiled ahead of time (a shared library, see ``magpy_codegen._native``). It is written to a
temporary file (0600) renamed into place, in a directory made user-only (0700). A directory or
a file that belongs to another user or that group or others may write is refused; so is a file
that is not a regular file, too large, not in this format, or whose digest does not match.
Each refusal is one warning per reason and process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from magpy_codegen import open_trusted, trusted_directory, write_private

from .._logging import log

__all__ = [
    "MAGIC",
    "MAX_ENTRIES_PER_KEY",
    "SUFFIX",
    "canonical",
    "clear_entries",
    "digest",
    "directory_problem",
    "entry_files",
    "list_entries",
    "parse_entry",
    "read_entry",
    "versions",
    "warn_once",
    "write_entry",
]

SUFFIX = ".magpy-record"
MAGIC = b"MAGPY-RECORD 1\n"
MAX_ENTRY_BYTES = 256 << 20
MAX_ENTRIES_PER_KEY = 16


def _uid() -> int:
    """The user entries must belong to (tests simulate another owner through it)."""
    return os.getuid()


@functools.cache
def versions() -> dict[str, str]:
    """What an entry was made with: MagPy (its version and a digest of its four packages'
    sources, so a changed MagPy never reads another's entries), torch and Python."""
    digest = hashlib.sha256()
    for name in ("magpy_refgraph", "magpy_monitor", "magpy_codegen", "magpy_runtime"):
        root = Path(sys.modules[name].__file__ or "").parent
        for source in sorted(root.rglob("*.py")):
            digest.update(str(source.relative_to(root)).encode() + source.read_bytes())
    magpy = importlib.metadata.version("magpy-runtime")
    return {
        "magpy": f"{magpy}+{digest.hexdigest()[:16]}",
        "torch": f"{torch.__version__}+{torch.version.git_version[:12]}",
        "python": f"{sys.version.split()[0]} {sys.implementation.cache_tag}",
    }


# ----------------------------------------------------------------------------- warnings
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(reason: str, where: str) -> None:
    """One warning per reason per process (``where`` names the file or directory)."""
    with _warned_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    log.warning("persistent records: %s ignored: %s", where, reason)


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


# ----------------------------------------------------------------------------- the directory
def directory_problem(directory: str, *, create: bool) -> str | None:
    """Why ``directory`` must not be used (None: it may; ``magpy_codegen``'s trust checks).
    ``create``: make it (0700)."""
    return trusted_directory(directory, "the directory", uid=_uid(), create=create)


def entry_files(directory: str, prefix: str = "") -> list[Path]:
    try:
        found = [p for p in Path(directory).iterdir() if p.name.endswith(SUFFIX)]
    except OSError:
        return []
    return sorted((p for p in found if p.name.startswith(prefix)), key=lambda p: p.name)


def read_entry(path: Path) -> tuple[dict[str, Any], bytes] | str:
    """An entry's header and content, or why it is refused: checked owner and permissions
    (on the open file: a file swapped meanwhile is what is checked), format and digest."""
    opened = open_trusted(path, "the entry", uid=_uid())
    if isinstance(opened, str):
        return opened
    file, st = opened
    with file:
        if st.st_size > MAX_ENTRY_BYTES:
            return "the entry is too large"
        data = file.read(MAX_ENTRY_BYTES + 1)
    return parse_entry(data)


def parse_entry(data: bytes) -> tuple[dict[str, Any], bytes] | str:
    """The header and content of an entry's bytes (a file's, or a bundle's), or why they are
    refused: format and digest (nothing is unpickled)."""
    if len(data) > MAX_ENTRY_BYTES:
        return "the entry is too large"
    if not data.startswith(MAGIC):
        return "not an entry of this format"
    header_line, _, payload = data[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(header_line)
    except ValueError:
        return "the header is damaged"
    if not isinstance(header, dict) or not isinstance(header.get("sha256"), str):
        return "the header is damaged"
    if digest(header, payload) != header["sha256"]:
        return "the SHA-256 of the entry does not match its content"
    return header, payload


def digest(header: dict[str, Any], payload: bytes) -> str:
    signed = {k: v for k, v in header.items() if k != "sha256"}
    return hashlib.sha256(canonical(signed) + b"\n" + payload).hexdigest()


def write_entry(directory: Path, name: str, data: bytes) -> None:
    """``directory/name`` holds ``data`` at once or not at all (0600; ``write_private``)."""
    write_private(directory, name, data)


def clear_entries(directory: str) -> int:
    """Delete the entries in ``directory`` that belong to this user; how many."""
    removed = 0
    for path in entry_files(directory):
        try:
            if os.lstat(path).st_uid == _uid():
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def list_entries(directory: str) -> list[dict[str, Any]]:
    """The entries in ``directory``: file, size, and the header's key, callable, versions
    (whether they are this process's), creation time, whether it holds a library; or the
    problem that makes it unusable.
    Nothing is unpickled."""
    rows: list[dict[str, Any]] = []
    for path in entry_files(directory):
        try:
            size = os.lstat(path).st_size
        except OSError:
            continue
        read = read_entry(path)
        row: dict[str, Any] = {"file": path.name, "size": size}
        if isinstance(read, str):
            row["problem"] = read
        else:
            header = read[0]
            row |= {k: header.get(k) for k in ("key", "qualname", "versions", "created")}
            row["native"] = header.get("native") is not None  # (a library after the content)
            row["current"] = header.get("versions") == versions()
        rows.append(row)
    return rows
