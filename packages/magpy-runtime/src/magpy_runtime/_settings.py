"""What a compiled callable is compiled with, as far as its records depend on it: ``Settings``.

Records are shared (``_pool``) and stored (``_store``) only between callables whose settings
agree; ``Settings.key()`` is that agreement, the one place a backend becomes a key: a name as
is, Inductor's mode and options by value, a callable backend by identity (never stored: it is
the program's own object).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs

from magpy_codegen import ConfiguredInductor

__all__ = ["Settings"]


@attrs.frozen
class Settings:
    """The settings of one compiled callable that decide which records it may take."""

    backend: Any
    fullgraph: bool = False
    dynamic: bool | None = None
    max_records: int | None = None

    def key(self) -> Hashable | None:
        """The settings as one hashable key (equal keys: records are shared); None where the
        backend cannot be told (a callable that is not hashable)."""
        backend = _backend_key(self.backend)
        if backend is None:
            return None
        return (backend, self.fullgraph, self.dynamic, self.max_records)

    def stored_key(self) -> dict[str, Any] | None:
        """The part of ``key()`` a stored record is filed under, as JSON (``max_records``
        left out: it limits the records, it does not make them); None: a callable backend,
        whose records are never stored."""
        backend = _backend_key(self.backend)
        if isinstance(backend, tuple) and backend[0] == "inductor":
            _, mode, options, fast_random = backend
            stored: Any = {"mode": mode, "options": list(options), "fast_random": fast_random}
        elif isinstance(backend, str):
            stored = backend
        else:
            return None
        return {"backend": stored, "fullgraph": self.fullgraph, "dynamic": self.dynamic}


def _backend_key(backend: Any) -> Hashable | None:
    if isinstance(backend, str):
        return backend
    if isinstance(backend, ConfiguredInductor):
        patch = tuple(sorted((str(k), repr(v)) for k, v in backend.patch.items()))
        return ("inductor", backend.mode, patch, backend.fast_random)
    try:
        hash(backend)
    except TypeError:
        return None
    return ("callable", backend)
