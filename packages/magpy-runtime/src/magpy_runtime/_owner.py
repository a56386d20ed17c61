"""What the record sources see of a compiled callable: ``RecordOwner``.

``cache._cache.CacheState`` holds a compiled callable's records and counters and asks the
record sources (``cache._sources``: ``cache._pool``, siblings' records; ``store._store``,
records on disk and in loaded bundles; ``store._libraries``: their native libraries) for
records. Those modules see the state only through this Protocol, so that they import nothing
from ``cache._cache`` (which imports them): the layering is ``_owner < store._libraries <
store._store < cache._pool < cache._sources < cache._cache``, without a circle, and ``store``
imports nothing of ``cache``.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from magpy_codegen import Record

from ._settings import Settings

__all__ = ["RecordOwner"]


class RecordOwner(Protocol):
    """The part of ``CacheState`` the record sources read and call."""

    qualname: str
    settings: Settings  # what it is compiled with, that its records depend on (frozen)
    background_compile: bool | None  # its own option (None: ``config``'s)
    records: list[Record]
    site_records: list[Record]  # records of a program split at breaks (segments)
    eager_reason: str | None  # why it runs eagerly from now on (None: it does not)
    epoch: int  # reset() count: a record made before a reset is not stored
    siblings: weakref.WeakSet[RecordOwner] | None  # callables sharing records (``_pool``)

    @property
    def backend(self) -> Any:
        """``settings.backend``."""
        ...

    def adopted(self, rec: Record) -> None:
        """Take ``rec`` (a sibling's record, or one loaded from disk) as a record of its own."""
        ...

    def note_uncompiled(self, rec: Record) -> None:
        """``rec``'s graph runs uncompiled (its backend could not compile it)."""
        ...
