"""Records kept in memory for a bundle, and those no bundle can hold (for ``_store``).

Without a records directory (``config.records_dir``), a record the store would write is kept
in memory as the same entry instead (``Kept``: signed header and payload), so that
``magpy.save_cache_artifacts`` needs no setup. Its library (AOTInductor, where the graph gets
one) is built only when a bundle is saved, for inputs made from the entry's description of
them (``made_inputs``: sizes, strides and dtypes are what the library is compiled for; the
values only serve its check against the graph): the recording call's inputs are not held
meanwhile. What cannot be stored is counted per callable and reason (``not_stored``), and
named when a bundle is saved.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import attrs
import torch

from .._logging import log_topic
from .._owner import RecordOwner
from ._entryfiles import (
    MAGIC,
    MAX_ENTRIES_PER_KEY,
    SUFFIX,
    canonical,
    digest,
    versions,
    warn_once,
)
from ._libraries import build_library
from ._persist import Unstorable, encode

__all__ = [
    "NO_NAME",
    "Kept",
    "build_libraries",
    "clear_not_stored",
    "failed",
    "keep",
    "not_stored",
    "not_stored_lines",
]

NO_NAME = "code not found again by name (a local function or class, a lambda, a builtin)"


@attrs.define(eq=False)
class Kept:
    """An entry kept in memory: its ``header`` and ``content`` (pickled into ``payload`` only
    when a bundle is saved: a process that saves none pays nothing for it); ``rows``, its
    graph, while it is still to get a library (``library``: built when a bundle is saved)."""

    header: dict[str, Any]
    content: dict[str, Any] | None
    rows: Any = None
    payload: bytes = b""
    library: tuple[bytes, dict[str, Any]] | None = None

    def entry(self, name: str) -> bytes | None:
        """The entry as an entry file holds it, with its library if it got one (None: its
        content cannot be stored, said by ``not_stored``)."""
        if self.content is not None:
            content, self.content = self.content, None
            try:
                encoded = encode(content)
            except Unstorable as exc:
                not_stored(self.header["qualname"], str(exc))
                self.header = {}
                return None
            self.header["refs"] = [list(r) for r in encoded.refs]
            self.header["versions"] = versions()
            self.payload = encoded.payload
        if not self.header:
            return None
        header, payload = dict(self.header), self.payload
        if self.library is not None:
            data, made_for = self.library
            header["native"] = {"bytes": len(data), "runner": "cpu", "platform": made_for}
            payload += data
        header["sha256"] = digest(header, payload)
        return MAGIC + canonical(header) + b"\n" + payload


_names = itertools.count()


def keep(
    kept: dict[str, Kept], key_hash: str, header: dict[str, Any], content: Any, rows: Any
) -> str | None:
    """Keep an entry of ``header`` and ``content`` in ``kept``, a callable's entries; its
    name (None: it has too many). ``rows``: its graph, if it gets a library."""
    if len(kept) >= MAX_ENTRIES_PER_KEY:
        not_stored(header["qualname"], f"{MAX_ENTRIES_PER_KEY} entries of its key already")
        return None
    name = f"{key_hash}-m{os.getpid():x}x{next(_names)}{SUFFIX}"
    kept[name] = Kept(header, content, rows)
    log_topic("records", "record of %s kept in memory as %s", header["qualname"], name)
    return name


def build_libraries(kept: list[Kept]) -> None:
    """Build the libraries of the entries ``kept`` that get one and have none yet (each tried
    once), on MagPy's worker thread (``wait_compiles`` waits for them)."""
    for entry in kept:
        if entry.rows is None or entry.library is not None:
            continue
        examples = made_inputs(entry.header["inputs"])
        entry.rows, rows = None, entry.rows
        if examples is None:
            continue

        def done(library: tuple[bytes, dict[str, Any]], entry: Kept = entry) -> None:
            entry.library = library

        build_library(entry.header["qualname"], rows, examples, done)


def made_inputs(metas: list[Any]) -> list[Any] | None:
    """Graph inputs matching an entry's ``inputs`` (None: not all are CPU tensors)."""
    made: list[Any] = []
    for meta in metas:
        if not isinstance(meta, list):
            made.append(meta)
            continue
        shape, stride, dtype_name, device = meta
        dtype = getattr(torch, dtype_name.removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype) or device != "cpu":
            return None
        span = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if all(shape) else 0
        if dtype.is_floating_point or dtype.is_complex:
            base = torch.randn(span, dtype=dtype)
        else:
            base = torch.zeros(span, dtype=dtype)  # (valid as indices)
        made.append(base.as_strided(shape, stride))
    return made


_counts: dict[tuple[str, str], int] = {}  # (qualname, why) -> records or callables not stored
_lock = threading.Lock()


def not_stored(qualname: str, why: str) -> None:
    log_topic("records", "record of %s not stored: %s", qualname, why)
    with _lock:
        _counts[qualname, why] = _counts.get((qualname, why), 0) + 1


def failed(qualname: str, exc: Exception, *, on_disk: bool) -> None:
    """A record not stored by a failure of ours: warned once with a records directory
    (``on_disk``); kept in memory, said when a bundle is saved (a process that saves none is
    not troubled)."""
    why = f"a record cannot be stored: {type(exc).__name__}: {exc}"
    if on_disk:
        warn_once(why, qualname)
    else:
        not_stored(qualname, why)


def not_stored_lines(states: list[RecordOwner]) -> list[str]:
    """What cannot be stored, one line per callable and reason: what ``not_stored`` counted,
    and the records of ``states`` (compiled callables) split at graph breaks."""
    with _lock:
        lines = {f"{q}: {why} ({n}x)" for (q, why), n in _counts.items()}
    for state in states:
        if state.site_records:
            why = "records of a program split at graph breaks (segments) are not stored"
            lines.add(f"{state.qualname}: {why} ({len(state.site_records)}x)")
    return sorted(lines)


def clear_not_stored() -> None:
    with _lock:
        _counts.clear()
