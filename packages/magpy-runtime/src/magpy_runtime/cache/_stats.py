"""The counters of one compiled callable: ``Stats`` (what ``magpy.stats`` reports of it, and
the times its outside-graphs warning weighs), apart from its records and policies."""

from __future__ import annotations

import attrs

__all__ = ["Stats"]


@attrs.define(eq=False)
class Stats:
    """Counts and times of one compiled callable's calls (whole calls and its sites)."""

    hits: int = 0
    misses: int = 0
    breaks: int = 0
    fallbacks: int = 0
    # calls that ran natively because another thread was monitoring a call of this callable
    # (one thread records at a time: concurrent first calls make one record, not one each)
    busy: int = 0
    assumption_misses: int = 0  # calls no record served because an assumed value differed
    eager_sites: int = 0  # sites from which no record could start (their code runs natively)
    # wall time of the calls served (monitored calls left out), the part of it the program's
    # own code ran natively, outside compiled graphs, and the time in site records' graphs
    # (split mode); calls that ran the program natively (see ``run``)
    time_total: float = 0.0
    time_outside: float = 0.0
    graph_time: float = 0.0
    native_calls: int = 0
    # segments monitored in split mode (their calls are not timed); not cleared by ``clear``:
    # a call running across a ``reset`` compares it before and after
    segments_started: int = 0

    def clear(self) -> None:
        """Every counter and time back to zero (``magpy.reset``), but ``segments_started``."""
        self.hits = self.misses = self.breaks = self.fallbacks = self.busy = 0
        self.assumption_misses = self.eager_sites = self.native_calls = 0
        self.time_total = self.time_outside = self.graph_time = 0.0
