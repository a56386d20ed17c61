"""The records of one site of an instrumented function (``_sites``)."""

from __future__ import annotations

from typing import Any

import attrs

from magpy_codegen import Layout, Record
from magpy_refgraph import IterLen

__all__ = ["SiteState"]


@attrs.define(eq=False)
class SiteState:
    """Records of one site, most recently used first."""

    offset: int
    depth: int
    records: list[tuple[Record, Layout, Any]] = attrs.field(factory=list)
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

    def limit(self, per_instance: int, f_locals: dict[str, Any]) -> int:
        """Records allowed at this site, ``per_instance`` for each ``self`` seen here, and
        two more for each further chunk of a split loop (a first record specialised on the
        values it saw, then a dynamic one; ``magpy_monitor.driver.segments.LOOP_CHUNK``)."""
        this = f_locals.get("self")
        if this is not None and len(self.selves) < 64:
            self.selves.add(id(this))
        return per_instance * max(1, len(self.selves)) + 2 * max(0, len(self.chunks) - 1)

    def add(self, rec: Record, layout: Layout, backend: Any) -> None:
        self.records.insert(0, (rec, layout, backend))
        chunk = tuple(g.payload for g in rec.plan.guards if isinstance(g.payload, IterLen))
        if chunk:
            self.chunks.add(chunk)
