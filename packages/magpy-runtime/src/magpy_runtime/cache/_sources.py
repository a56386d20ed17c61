"""Where a whole call that its own records do not serve looks for a record, in order.

1. its own records (``CacheState.records``, tried by ``RecordCache.lookup``: the hit);
2. ``SOURCES``, each a ``RecordSource`` (``find(state, fn, args, kwargs) -> Record | None``):
   a. ``_pool.SIBLINGS``: records made by compiled callables of the same code and settings
      (a twin, ``Record.fork``);
   b. ``STORED``: records stored on disk by an earlier process (``config.records_dir``), and
      those of the bundles loaded in this process (``magpy.load_cache_artifacts``: their
      entries join the store's, ``_store.add_bundled``), trusted only after their checks;
3. otherwise the call is monitored and becomes a record.

A record a source finds is added to the callable's own records (``RecordOwner.adopted``) and
the call looks again (``Then.AGAIN``): the hit loop serves it. A site looks only at its own
records.
"""

from __future__ import annotations

from typing import Any, Protocol

from magpy_codegen import Record

from .._owner import RecordOwner
from ..store._store import serve
from ._pool import SIBLINGS

__all__ = ["SOURCES", "RecordSource", "adopt"]


class RecordSource(Protocol):
    """A place records of a compiled callable come from besides its own calls."""

    name: str

    def find(
        self, state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Record | None:
        """A record for ``state`` whose guard passes for this call (taken: it is not found
        again), or None."""
        ...


class Stored:
    """The record source of the store on disk and of loaded bundles (``_store.serve``)."""

    name = "stored"

    def find(
        self, state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Record | None:
        return serve(state, fn, args, kwargs)


STORED = Stored()

SOURCES: tuple[RecordSource, ...] = (SIBLINGS, STORED)


def adopt(state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Add to ``state`` the first record a source finds for this call (``SOURCES``, in
    order); whether one did."""
    for source in SOURCES:
        rec = source.find(state, fn, args, kwargs)
        if rec is not None:
            state.adopted(rec)
            return True
    return False
