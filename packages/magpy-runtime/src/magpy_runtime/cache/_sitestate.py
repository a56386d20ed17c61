"""The records of one site of an instrumented function (``_sites``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from magpy_codegen import Layout, Record
from magpy_refgraph import IterLen

from ._recordcache import Limit, RecordCache

__all__ = ["SiteState"]


@attrs.define(eq=False)
class SiteState:
    """Records of one site, most recently made first, one ``RecordCache`` per backend (the
    compiled callables of several backends may run the same function)."""

    offset: int
    depth: int
    caches: list[tuple[Any, RecordCache]] = attrs.field(factory=list)  # (backend, its records)
    layout_of: dict[Record, Layout] = attrs.field(factory=dict)  # (by identity)
    layouts: list[Layout] = attrs.field(factory=list)
    eager: bool = False
    dynamic_paths: set[Any] = attrs.field(factory=set)
    # ids of the ``self`` objects seen at this site: a method shared by several module
    # instances (the blocks of a model) keeps up to ``max_records`` records per instance
    selves: set[int] = attrs.field(factory=set)
    speculate: bool = True  # assume the values of tensors read into Python (see _speculation)
    assumption_misses: int = 0
    # the chunks of iterations (``IterLen`` guards) of the records at a split loop's head
    chunks: set[tuple[IterLen, ...]] = attrs.field(factory=set)

    def limit(self, per_instance: Limit, f_locals: dict[str, Any]) -> Limit:
        """Records allowed at this site (of one backend): ``per_instance`` (the callable's
        limit) for each ``self`` seen here, and two more for each further chunk of a split loop
        (a first record specialised on the values it saw, then a dynamic one;
        ``magpy_monitor.driver.segments.LOOP_CHUNK``)."""
        this = f_locals.get("self")
        if this is not None and len(self.selves) < 64:
            self.selves.add(id(this))
        selves, chunks = max(1, len(self.selves)), max(0, len(self.chunks) - 1)
        return Limit(per_instance.allowed * selves + 2 * chunks, per_instance.source)

    @property
    def records(self) -> list[tuple[Record, Layout, Any]]:
        """Every record of the site with its layout and backend (grouped by backend)."""
        return [(r, self.layout_of[r], b) for b, cache in self.caches for r in cache.records]

    def cache_of(self, backend: Any) -> RecordCache:
        """The records of ``backend`` at this site (the hit loop over them)."""
        for known, cache in self.caches:
            if known is backend:
                return cache
        cache = RecordCache([], move_to_front=False)
        self.caches.append((backend, cache))
        return cache

    def mine(self, backend: Any) -> list[Record]:
        """The records of ``backend`` at this site (the list itself: do not change it)."""
        for known, cache in self.caches:
            if known is backend:
                return cache.records
        return []

    def keep(self, keep: Callable[[Record], bool]) -> None:
        """Drop the records for which ``keep`` is false."""
        for _backend, cache in self.caches:
            cache.records[:] = [r for r in cache.records if keep(r)]
        self.layout_of = {r: layout for r, layout in self.layout_of.items() if keep(r)}

    def forget(self, backend: Any) -> None:
        """Drop every record of ``backend``."""
        for known, cache in self.caches:
            if known is backend:
                for r in cache.records:
                    del self.layout_of[r]
        self.caches = [(b, c) for b, c in self.caches if b is not backend]

    def add(self, rec: Record, layout: Layout, backend: Any) -> None:
        self.cache_of(backend).records.insert(0, rec)
        self.layout_of[rec] = layout
        chunk = tuple(g.payload for g in rec.plan.guards if isinstance(g.payload, IterLen))
        if chunk:
            self.chunks.add(chunk)
