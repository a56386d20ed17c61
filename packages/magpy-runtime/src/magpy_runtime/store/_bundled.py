"""The entries of the bundles this process loaded (``_bundle``), for the store (``_store``).

A verified bundle's entries are kept here by key (the hash of a callable's key, which starts
each entry's name); ``_store`` serves them like its directory's, reading a key's entries again
when its ``generation`` changed (a bundle loaded after the callable was compiled, or after
its entries were read). Torch's artifacts of a bundle wait here for the first loaded record
that Inductor compiles: loading them imports Inductor, which a record running its library
never needs.
"""

from __future__ import annotations

import threading

import torch

from ._entryfiles import warn_once

__all__ = [
    "add_bundled",
    "bundled",
    "bundled_generation",
    "clear_bundled",
    "give_torch_its_artifacts",
]

_lock = threading.Lock()
_entries: dict[str, dict[str, bytes]] = {}  # key hash -> entry name -> its bytes
_generations: dict[str, int] = {}  # key hash -> bundles that added entries of it
_torch_parts: list[bytes] = []  # torch's artifacts of loaded bundles, not yet given to torch


def add_bundled(entries: list[tuple[str, bytes]], torch_part: bytes | None) -> None:
    """Serve the entries of a verified bundle (``_bundle.load_cache_artifacts``); keep
    ``torch_part`` (``torch.compiler.save_cache_artifacts()``'s bytes) for later."""
    with _lock:
        for name, data in entries:
            key_hash = name.partition("-")[0]
            _entries.setdefault(key_hash, {})[name] = data
            _generations[key_hash] = _generations.get(key_hash, 0) + 1
        if torch_part:
            _torch_parts.append(torch_part)


def bundled_generation(key_hash: str) -> int:
    """Changes whenever ``key_hash``'s bundled entries change."""
    with _lock:
        return _generations.get(key_hash, 0)


def bundled(key_hash: str) -> list[tuple[str, bytes]]:
    """``key_hash``'s bundled entries (name, bytes), by name."""
    with _lock:
        return sorted(_entries.get(key_hash, {}).items())


def give_torch_its_artifacts() -> None:
    """Load the torch artifacts of the bundles loaded into torch's caches (once)."""
    with _lock:
        parts = list(_torch_parts)
        _torch_parts.clear()
    for part in parts:
        try:
            torch.compiler.load_cache_artifacts(part)
        except Exception as exc:  # (torch's caches stay cold: Inductor compiles)
            warn_once(f"torch's artifacts cannot be loaded: {type(exc).__name__}: {exc}", "bundle")


def clear_bundled() -> None:
    with _lock:
        _entries.clear()
        _torch_parts.clear()
        for key_hash in _generations:
            _generations[key_hash] += 1
