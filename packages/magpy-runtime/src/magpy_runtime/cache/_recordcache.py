"""The hit loop: ``RecordCache.lookup(roots) -> Hit | Miss | Native``.

One loop serves both kinds of record: a compiled callable's whole-call records (roots
``(fn, args, kwargs)``, ``_cache.CacheState.lookup``) and a site's segment records for one
backend (roots ``(L, S)``: the frame's locals and stack, ``_sites._at_site``). A record is
tried in order (most recently used first): its guard's ``check(*roots)`` gives the graph's
inputs or None (the next record); a passing record's mock runs ``mock(*roots, inputs)``.

- ``Hit``: the mock's result (and the record, and what ``accept`` said of it).
- ``Miss``: no record served the call; ``assumed_wrong`` where a record's guard passed but its
  graph found a value it assumed (a tensor read into Python) differed: nothing was written.
- ``NATIVE``: a record's graph raised the program's own error (``Record.program_failed``): the
  call runs natively, which raises it as eager does.

**The limit and the go-eager policy** are the cache's too: ``limit_of`` says how many records
a callable may have (``Limit``: its own ``options["magpy.max_records"]``, else the config's),
``RecordCache.full`` whether a cache holds as many as its limit allows (then a call none of
them serves makes the cache's owner run eagerly from now on: the callable, or the site), and
``RecordCache.last`` whether the next record is the last one allowed. A site's limit is the
callable's, scaled by the site (``SiteState.limit``).

What happens around a lookup stays with its caller: the counters (``_stats``), the memo of a
site's guard (anchored on the frame's first argument, after the mock), a site's branch for a
record's layout (``accept``), and what an exception in a record means (the callable goes eager;
the site gives up). The whole call's memo comes before its first mock (``memoize``).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from operator import itemgetter
from time import perf_counter
from typing import Any, Final, NamedTuple, Protocol

from magpy_codegen import Record
from magpy_refgraph import SpeculationMiss

from .._config import record_limit

__all__ = [
    "MISSED",
    "NATIVE",
    "Hit",
    "Limit",
    "Miss",
    "Native",
    "RecordCache",
    "Then",
    "Timer",
    "limit_of",
]


class Hit(tuple[Any, Record, int]):
    """A record served the call: ``value`` is its result, ``record`` the record, ``tag``
    what ``accept`` returned for it (a site's branch; 1 without ``accept``). A tuple made
    and read in C: a hit runs no Python line for it."""

    __slots__ = ()

    value = property(itemgetter(0))
    record = property(itemgetter(1))
    tag = property(itemgetter(2))


class Miss:
    """No record served the call (``assumed_wrong``: one failed an assumed value)."""

    __slots__ = ("assumed_wrong",)

    def __init__(self, assumed_wrong: bool) -> None:
        self.assumed_wrong = assumed_wrong


class Native:
    """A record's graph raised the program's own error: the call runs natively."""

    __slots__ = ()


MISSED: Final = Miss(False)
ASSUMED_WRONG: Final = Miss(True)
NATIVE: Final = Native()


class Then(enum.Enum):
    """What a whole call that missed does next (``CacheState.missed``)."""

    NATIVE = "native"  # it runs natively (eager, split, busy, a stance, the limit)
    RECORD = "record"  # it is monitored and becomes a record
    RECORD_LAST = "record_last"  # the same, the last record the limit allows
    AGAIN = "again"  # a record came since it looked (a sibling's, a stored one): look again


class Limit(NamedTuple):
    """How many records a cache may hold (``allowed``), and the setting that says so
    (``source``: named in the warning when the cache goes eager)."""

    allowed: int
    source: str


def limit_of(max_records: int | None) -> Limit:
    """A compiled callable's limit: its own ``options["magpy.max_records"]`` (``max_records``),
    else ``_config.record_limit``'s (``magpy.config.max_records``, or TorchDynamo's
    ``recompile_limit`` where it was set), read at each miss."""
    if max_records is not None:
        return Limit(max_records, "options['magpy.max_records']")
    return Limit(*record_limit())


class Timer(Protocol):
    """What counts the seconds spent in records' mocks (``_stats.Stats.graph_time``)."""

    graph_time: float


class RecordCache:
    """Records tried in order, most recently used first, and the loop that tries them.

    ``records`` is the list itself (the owner's: a ``CacheState``'s ``records``, a site's
    records of one backend); ``lock`` guards its reordering against another thread adding a
    record. ``move_to_front``: a hit moves its record to the front (whole calls; a site keeps
    its order). ``memoize(rec, roots)``: called on a record's first passing check, before its
    mock (None: the caller memoizes after the hit).
    """

    __slots__ = ("lock", "memoize", "move_to_front", "records")

    def __init__(
        self,
        records: list[Record],
        *,
        lock: threading.Lock | None = None,
        move_to_front: bool = True,
        memoize: Callable[[Record, tuple[Any, ...]], None] | None = None,
    ) -> None:
        self.records = records
        self.lock = lock if lock is not None else threading.Lock()
        self.move_to_front = move_to_front
        self.memoize = memoize

    def lookup(
        self,
        roots: tuple[Any, ...],
        accept: Callable[[Record], int] | None = None,
        timer: Timer | None = None,
    ) -> Hit | Miss | Native:
        """The first record whose guard passes for ``roots`` (and that ``accept`` takes:
        nonzero), run; ``timer`` adds the time of each mock run. An exception of a record's
        guard or mock propagates: the caller decides what it means."""
        records = self.records
        assumed_wrong, tag = False, 1
        for i, rec in enumerate(records):
            inputs = rec.guard.check(*roots)
            if inputs is None or (accept is not None and not (tag := accept(rec))):
                continue
            if rec.memoize is not None and self.memoize is not None:
                self.memoize(rec, roots)
            try:
                value = (
                    rec.mock(*roots, inputs) if timer is None else _timed(rec, roots, inputs, timer)
                )
            except SpeculationMiss as miss:
                if rec.program_failed(miss):  # the program's error: eager raises it
                    return NATIVE
                assumed_wrong = True  # the graph ran, nothing was written: try on
                continue
            rec.hits += 1
            if i and self.move_to_front:
                with self.lock:
                    if i < len(records) and records[i] is rec:
                        records.insert(0, records.pop(i))
            return Hit((value, rec, tag))
        return ASSUMED_WRONG if assumed_wrong else MISSED

    def full(self, limit: Limit) -> bool:
        """The go-eager policy: it holds as many records as ``limit`` allows, so no record is
        added and a call none of them serves makes its owner run eagerly from now on, with one
        warning (a callable: ``CacheState._go_eager``; a site: ``_sites._give_up``)."""
        return len(self.records) >= limit.allowed

    def last(self, limit: Limit) -> bool:
        """The next record is the last one ``limit`` allows (or beyond it)."""
        return len(self.records) + 1 >= limit.allowed


def _timed(rec: Record, roots: tuple[Any, ...], inputs: Any, timer: Timer) -> Any:
    """``rec``'s mock run, its time added to ``timer`` (also when it raises ``SpeculationMiss``)."""
    start = perf_counter()
    try:
        value = rec.mock(*roots, inputs)
    except SpeculationMiss:
        timer.graph_time += perf_counter() - start
        raise
    timer.graph_time += perf_counter() - start
    return value
