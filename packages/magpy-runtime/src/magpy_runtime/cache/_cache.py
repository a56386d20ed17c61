"""The record cache of one compiled callable, and what happens on a hit or a miss.

Guards are tried most-recently-used first; a hit runs the record's mock (no user Python runs); a
miss monitors the call (which runs it for real) and adds a record. Past ``max_records`` the
callable runs eagerly, with one warning. Internal failures make it run eagerly for good, with
one warning naming the cause; graph breaks are recorded as reasons.

Dynamic values (``dynamic=None``): on a miss, the scalars and tensor sizes that differ from what
an earlier record specialised on become dynamic for the next capture (see ``_dynamic``). Once
the callable has graph breaks, its calls run the user's code with sites in it (see ``_sites``).
"""

from __future__ import annotations

import threading
import types
import warnings
import weakref
from threading import get_ident
from typing import Any

import attrs
import torch

from magpy_codegen import Record, build_record, resolve_backend
from magpy_monitor import ambient_state
from magpy_refgraph import (
    InternalError,
    MagPyError,
    StateNotReady,
    Unsupported,
    dump,
)

from .._config import background_compile, config, graph_backend
from .._errors import FullGraphError, MagPyWarning
from .._logging import log_topic
from .._owner import RecordOwner
from .._settings import Settings
from ..store._store import commit, snapshot
from . import _depth
from ._boundary_importlib_bootstrap import run
from ._dynamic import as_locals, changed_on_miss, changed_scalars, promote_all
from ._ownstate import OwnState, changed, own_state
from ._recordcache import NATIVE, Hit, Limit, Miss, Native, RecordCache, Then, limit_of
from ._sites import ensure_entry_site, split_loops_of, user_function
from ._sources import adopt
from ._stance import records_here
from ._stats import Stats
from ._tree import memoize_guard

__all__ = ["BreakReason", "CacheState", "all_states"]


@attrs.frozen
class BreakReason:
    """Why capture stopped: ``reason`` and the user's source location."""

    reason: str
    filename: str | None = None
    lineno: int | None = None

    def __str__(self) -> str:
        where = f" ({self.filename}:{self.lineno})" if self.filename else ""
        return f"{self.reason}{where}"


_states: weakref.WeakSet[CacheState] = weakref.WeakSet()
_states_lock = threading.Lock()


def all_states() -> list[CacheState]:
    """Every live cache (for ``magpy.reset``)."""
    with _states_lock:
        return list(_states)


# MagPy warns (once per callable) when more than OUTSIDE_WARN_SHARE of the run time is outside
# compiled graphs after a graph break, and that time is on average more than
# OUTSIDE_WARN_SECONDS per call that ran the program natively where a site gave up (its code
# always runs uncompiled: ``stats().eager_sites``), or OUTSIDE_BREAK_SECONDS where none did.
# Below that, the program's own Python between sites and MagPy's site checks dominate a small
# program (a share that depends on the machine's load), and there is no cliff to report.
OUTSIDE_WARN_SHARE = 0.5
OUTSIDE_WARN_SECONDS = 1e-3
OUTSIDE_BREAK_SECONDS = 5e-3

# whole-call records of runs over a range() of different trip counts before a miss may split the
# function's loops (``CacheState._splits_now``): fewer is not yet a loop whose count keeps changing
SPLIT_AFTER = 3

# a lookup in which a record raised (not the program's error): the callable went eager
BROKEN = Miss(False)


@attrs.define(eq=False)
class CacheState:
    """Records and counters of one compiled callable."""

    qualname: str
    # what it is compiled with, that its records depend on (frozen: a callable compiled with
    # other settings, such as a stance's forced backend, is another ``CacheState``)
    settings: Settings
    background_compile: bool | None = None  # its own option (None: ``config``'s)
    records: list[Record] = attrs.field(factory=list)  # (``own`` tries them)
    stats: Stats = attrs.field(factory=Stats)
    break_reasons: list[BreakReason] = attrs.field(factory=list)
    eager_reason: str | None = None
    split: bool = False
    # a break on the first call is tried once more whole before splitting (see _retry_whole)
    second_chance: bool = True
    retrying: BreakReason | None = None
    first_state: OwnState | None = None  # the callable's own state before its first call
    dynamic_paths: set[Any] = attrs.field(factory=set)
    site_records: list[Record] = attrs.field(factory=list)
    warned_sites: bool = False
    last_refgraph: str = ""
    trip_records: int = 0  # whole-call records of runs that iterated over a range()
    speculate: bool = True  # assume the values of tensors read into Python (see _speculation)
    # graphs of callee pieces cut out of a segment by a break deeper in the chain; each is
    # compiled at the callee's entry site from the next call on (shown by ``magpy.explain``)
    pending_graphs: list[tuple[Any, Any, dict[str, Any]]] = attrs.field(factory=list)
    # why graphs of this callable run uncompiled (the backend could not compile them)
    uncompiled_reasons: list[str] = attrs.field(factory=list)
    # reset() count: a call that began before a reset records nothing
    epoch: int = 0
    _warned_outside: bool = False
    _recorder: int | None = None  # the thread monitoring a call now
    added: int = 0  # records added so far (a call that missed retries if one came meanwhile)
    _recording: int = 0  # its monitored calls in progress (a recursive call nests)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _warned: bool = False
    # the caches of other compiled callables of the same code, whose records this one may
    # adopt (``_pool``); None: it shares with none
    siblings: weakref.WeakSet[RecordOwner] | None = None
    # the first call no record served under an ``eager_then_compile`` stance (``_stance``)
    first_example: dict[Any, Any] | None = None
    # caches of this callable for backends a stance forces (``set_stance(force_backend=)``)
    forced_states: dict[Any, CacheState] = attrs.field(factory=dict)
    # the hit loop over ``records`` (the same list, reordered under the same lock)
    own: RecordCache = attrs.field(init=False)

    @property
    def backend(self) -> Any:
        return self.settings.backend

    @property
    def fullgraph(self) -> bool:
        return self.settings.fullgraph

    @property
    def dynamic(self) -> bool | None:
        return self.settings.dynamic

    @property
    def max_records(self) -> int | None:
        return self.settings.max_records

    def __attrs_post_init__(self) -> None:
        self.own = RecordCache(self.records, lock=self._lock, memoize=_memoize_call)
        with _states_lock:
            _states.add(self)

    def reset(self) -> None:
        """Forget every record and counter (also during a call: that call records nothing)."""
        with self._lock:
            self.epoch += 1
            self.records.clear()
            self.stats.clear()
            self.split = False
            self.second_chance, self.retrying, self.first_state = True, None, None
            self.trip_records = 0
            self.speculate = True
            self.dynamic_paths.clear()
            self.site_records.clear()
            self.pending_graphs.clear()
            self.uncompiled_reasons.clear()
            self.break_reasons.clear()
            self.eager_reason = None
            self._warned = self._warned_outside = False
            self.first_example = None

    # ------------------------------------------------------------------ the call path
    def call(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``fn(*args, **kwargs)`` through the cache (compiled callables enter at
        ``_boundary_importlib_bootstrap.run``, which uses the steps below)."""
        return run(self, fn, *args, **kwargs)

    def lookup(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hit | Miss | Native:
        """The first of its records that serves this call (``RecordCache.lookup``), a hit
        counted (``run`` inlines this on its first look)."""
        try:
            found = self.own.lookup((fn, args, kwargs))
        except Exception as exc:  # a broken record must not break the program
            return self.broken(exc)
        if found.__class__ is Hit:
            self.stats.hits += 1
        return found

    def broken(self, exc: Exception) -> Miss:
        """A record raised ``exc`` (not the program's error): the callable runs eagerly
        from now on (one warning); the call is a miss that is not counted."""
        self._go_eager(f"internal error in a record: {type(exc).__name__}: {exc}", warn=True)
        return BROKEN

    def _counted(self, found: Miss | Native) -> bool:
        """Count a lookup that served no call; whether the call runs natively (the program's
        error in a record's graph, a record broke, or split loops)."""
        if found is BROKEN:
            return False
        stats = self.stats
        if found is NATIVE:  # (a record's graph raised the program's error)
            stats.misses += 1
            return True
        if not self.split:  # (a call of split loops that no whole-call record serves runs split)
            stats.misses += 1
        if found.assumed_wrong:  # type: ignore[union-attr]
            self._assumption_missed()
        return self.split

    def missed(
        self,
        found: Miss | Native,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        seen: int,
        stance: Any,
    ) -> Then:
        """After a miss, what this call does: ``RECORD`` or ``RECORD_LAST`` (the last record
        the limit allows: its capture promotes everything dynamic), both monitored;
        ``NATIVE`` (the cache went eager, or split into segments, or another thread is
        recording, or the compiler's ``stance`` makes no record of it); ``AGAIN`` when a
        record was added since the call looked (``seen``: ``added`` then: a sibling's, a stored
        one, another thread's), which may serve it. ``found``: what the lookup gave (counted
        here)."""
        if self._counted(found) or self.eager_reason is not None:
            return Then.NATIVE
        if stance is not None and not records_here(stance, self, args, kwargs):
            return Then.NATIVE
        records = self.records
        if self.dynamic is not False and records:
            self.dynamic_paths |= changed_on_miss(
                records, {"fn": fn, "args": args, "kwargs": kwargs}
            )
        if self._splits_now() and self._split_loops(fn):
            return Then.NATIVE  # the loops run in chunks of iterations from now on
        own, limit = self.own, self.limit()
        if not own.full(limit) and adopt(self, fn, args, kwargs):
            self.stats.misses -= 1
            return Then.AGAIN  # a sibling's record serves it
        if own.full(limit):
            self._go_eager(
                f"more than {limit.allowed} records (the limit {limit.source} sets); the inputs "
                "keep changing",
                warn=True,
            )
            return Then.NATIVE
        with self._lock:
            me = get_ident()
            if self._recorder not in (None, me):
                self.stats.busy += 1  # another thread records: this call runs as in eager
                return Then.NATIVE
            if self.added != seen:
                self.stats.misses -= 1
                return Then.AGAIN
            self._recorder = me
            self._recording += 1
            first = self._recording == 1 and self.second_chance and not self.records
        if first and not self.split:  # (what the first call writes of it: see _retry_whole)
            self.first_state = own_state(fn)
        return Then.RECORD_LAST if own.last(limit) and limit.allowed > 1 else Then.RECORD

    def release(self) -> None:
        """A monitored call that ``missed`` let in has ended (recorded or raised)."""
        with self._lock:
            self._recording -= 1
            if not self._recording:
                self._recorder = None
                self.first_state = None  # (the values it holds are let go)

    def capture_options(self, then: Then) -> dict[str, Any]:
        last = then is Then.RECORD_LAST
        return {
            "name": self.qualname,
            "dynamic_paths": frozenset(self.dynamic_paths),
            "promote_all": promote_all(self.dynamic, last),
            "speculate": self.speculate and config.speculate,
            "verify": config.verify,
            "stop_at_break": self._fullgraph_error if self.fullgraph else None,
        }

    def _fullgraph_error(self, failure: Unsupported) -> FullGraphError:
        """fullgraph=True: the error raised in the program at its first graph break."""
        self.note_break(failure)
        return FullGraphError(
            f"fullgraph=True but {self.qualname} has a graph break: {failure.reason}",
            failure.filename,
            failure.lineno,
        )

    def recorded(self, result: Any, epoch: int) -> Any:
        """What a monitored call captured becomes a record (or a break, or eager mode)."""
        failure = result.failure
        if epoch != self.epoch and not (self.fullgraph and isinstance(failure, Unsupported)):
            return result.value  # reset() ran during this call: it records nothing
        if failure is None and result.plan is not None and result.graph is not None:
            stored = snapshot(self, result)  # (before the backend may rewrite the graph)
            try:
                rec = build_record(
                    result.plan,
                    result.graph,
                    result.example_inputs,
                    graph_backend(self.backend, result.capture),
                    qualname=self.qualname,
                    grad_enabled=result.capture.grad_enabled,
                    ambient=(ambient_state, result.capture.ambient),
                    restore_rng=result.capture.draws_random,
                    restore_inputs=result.capture.mutated_inputs,
                    undo_inputs=result.capture.undo_inputs,
                    background=background_compile(self.background_compile),
                    on_compiled=self.note_uncompiled,
                    confirmed_enough=self.confirmed_enough,
                )
            except MagPyError as exc:
                failure = exc
            except Exception as exc:  # a failure of ours is absorbed, never the user's
                failure = InternalError(f"building the record failed: {type(exc).__name__}: {exc}")
            else:
                self._add_record(rec, result, epoch)
                commit(self, stored, epoch)  # (to ``config.cache_dir``, if set)
        if failure is not None:
            self._failed(failure, result.chain)
        return result.value

    def _add_record(self, rec: Record, result: Any, epoch: int) -> None:
        self.note_uncompiled(rec)
        with self._lock:
            if epoch != self.epoch:
                return  # reset() ran meanwhile (another thread)
            if self.dynamic is not False:
                self.dynamic_paths |= changed_scalars(rec.plan, self.records)
            self.records.insert(0, rec)
            self.added += 1
            if result.capture.range_trip:
                self.trip_records += 1
        self.last_refgraph = dump(result.capture.graph)
        log_topic(
            "records",
            "new record for %s (%d ops, %d guards)",
            self.qualname,
            rec.op_count,
            len(result.plan.guards),
        )
        log_topic("guards", "%s", rec.guard_source)
        log_topic("mocks", "%s", rec.mock_source)
        if rec.graph_module is not None:
            log_topic("graphs", "%s", rec.graph_module.code)

    def adopted(self, rec: Record) -> None:
        """Add ``rec``, found by a record source (``_sources.adopt``): a sibling's twin, a
        stored record."""
        with self._lock:
            self.records.insert(0, rec)
            self.added += 1

    def confirmed_enough(self, calls: int) -> bool:
        """Whether a record that assumes tensor values has served enough calls to be compiled:
        more than calls of this callable missed an assumption (none missed: the first)."""
        return calls > self.stats.assumption_misses

    def _splits_now(self) -> bool:
        """Whether a miss splits the function's range() loops: once records came for
        ``SPLIT_AFTER`` trip counts and the next one would use up the record budget. Until then
        each trip count gets a whole-call record: its loop unrolled into one graph, the fastest
        tier (one guard, one graph call); the split loops serve every other trip count."""
        if self.split:
            return True
        return self.trip_records >= SPLIT_AFTER and self.own.last(self.limit())

    def _split_loops(self, fn: Any) -> bool:
        """Records keep coming for new trip counts of a range() loop: from now on each loop
        iteration of the function is a segment (its records serve every trip count)."""
        func = getattr(fn, "forward", fn) if isinstance(fn, torch.nn.Module) else fn
        bound = hasattr(func, "__func__")
        func = getattr(func, "__func__", func)
        if not isinstance(func, types.FunctionType) or not user_function(func):
            return False
        try:
            split_loops_of(func, as_locals(func, bound, self.dynamic_paths))
        except MagPyError:
            return False
        log_topic("records", "%s: range() loops split per iteration", self.qualname)
        self.split = True
        return True

    def _assumption_missed(self) -> None:
        """No record served a call because values its graph read differed from the records'
        assumptions: after ``config.max_assumption_misses`` such calls, stop assuming (the
        reads become graph breaks) and drop the records that assume."""
        self.stats.assumption_misses += 1
        if self.speculate and self.stats.assumption_misses >= config.max_assumption_misses:
            self.speculate = False
            with self._lock:
                self.records[:] = [r for r in self.records if not r.plan.speculative]
            log_topic("records", "%s: tensor values read into Python keep changing", self.qualname)

    def note_break(self, failure: Unsupported) -> None:
        """A graph break was met (whole-call capture or a segment)."""
        reason = BreakReason(failure.reason, failure.filename, failure.lineno)
        again, self.retrying = reason == self.retrying, None
        if again:
            return  # (the same break, met again by the second whole capture: counted once)
        self.stats.breaks += 1
        self.break_reasons.append(reason)
        log_topic("breaks", "graph break in %s: %s", self.qualname, reason)

    def note_record(self, rec: Record, seg: Any) -> None:
        """A segment record was added at a site."""
        self.site_records.append(rec)
        self.last_refgraph = dump(seg.capture.graph)
        log_topic(
            "records", "new segment record for %s (%d ops)", seg.code.co_qualname, rec.op_count
        )
        log_topic("guards", "%s", rec.guard_source)
        log_topic("mocks", "%s", rec.mock_source)

    def forced(self, backend: Any) -> CacheState:
        """The cache of this callable's calls under a stance that forces ``backend`` (a name
        or a callable, as ``magpy.compile`` takes it): same settings, records of its own."""
        key = backend if isinstance(backend, str) else id(backend)
        state = self.forced_states.get(key)
        if state is None:
            resolve_backend(backend)  # (an unknown name: the error magpy.compile gives)
            state = CacheState(
                f"{self.qualname} [force_backend={backend!r}]",
                attrs.evolve(self.settings, backend=backend),
                background_compile=self.background_compile,
            )
            self.forced_states[key] = state
        return state

    def limit(self) -> Limit:
        """Records allowed to this callable (``_recordcache.limit_of``); a site scales it
        (``SiteState.limit``)."""
        return limit_of(self.max_records)

    def _split(self, chain: list[Any]) -> bool:
        """Switch to segments: give the functions on the break's call chain entry sites."""
        funcs = [f for _, f in chain[1:] if isinstance(f, types.FunctionType) and user_function(f)]
        if not funcs:
            return False
        try:
            for f in funcs:
                ensure_entry_site(f)
        except MagPyError:
            return False
        self.split = True
        return True

    def _failed(self, failure: MagPyError, chain: list[Any] | None = None) -> None:
        if isinstance(failure, Unsupported):
            self.note_break(failure)
            reason = self.break_reasons[-1]
            if self.fullgraph:  # (a break found after the program ran: raised here)
                raise FullGraphError(
                    f"fullgraph=True but {self.qualname} has a graph break: {failure.reason}",
                    failure.filename,
                    failure.lineno,
                )
            if not self._retry_whole(failure, reason) and not self._split(chain or []):
                # no segment can start: a break in frames none of which is the program's own
                # (library code the call entered first, e.g. DistributedDataParallel's
                # forward), at the call itself (a module's hooks MagPy cannot run: FSDP's), or
                # a whole call whose result cannot be replayed. The callable runs eagerly from
                # now on, and says so once (explain and stats().fallbacks report it too)
                outside = bool(chain and len(chain) > 1)
                why = f"a graph break outside the program's own code: {reason}"
                self._go_eager(why if outside else str(reason), warn=True)
        else:
            self._go_eager(f"internal error: {failure}", warn=True)

    def _retry_whole(self, failure: Unsupported, reason: BreakReason) -> bool:
        """A break on the first call: the next call is captured whole once more, before the
        callable is split into segments, when the first call wrote the callable's own state
        (lazy initialisation: ``if not self.ready: ...; self.ready = True``, a buffer
        registered, a size or a mask cached; see ``_ownstate``) or broke on state it creates
        (``StateNotReady``: an optimizer's state, made by its first step). Its path may have
        met the break only because it initialised: splitting at once would keep every later
        call in segments, part of it native, though no later call breaks. A break that comes
        again splits on the second call (and counts once). A first call that changed nothing
        of its own meets the same break on the next call: it splits at once."""
        if not self.second_chance or self.records or self.split:
            return False
        if not isinstance(failure, StateNotReady) and not changed(self.first_state):
            return False
        self.second_chance = False
        self.retrying = reason
        return True

    def note_uncompiled(self, rec: Record) -> None:
        """``rec``'s graph runs as is because the backend could not compile it (one warning
        per compiled callable; the reason stays in ``uncompiled_reasons``)."""
        if rec.uncompiled is None:
            return
        self.uncompiled_reasons.append(rec.uncompiled)
        if len(self.uncompiled_reasons) == 1:
            warnings.warn(
                f"magpy: a graph of {self.qualname} runs uncompiled (its operations one by "
                f"one, as in eager): {rec.uncompiled}",
                MagPyWarning,
                stacklevel=_depth.user_level(),
            )

    def ran_natively(self, elapsed: float, in_graphs: float) -> None:
        """A call ran the program's code natively for ``elapsed`` seconds, ``in_graphs`` of
        them in compiled graphs (site hits); once most of the time of several calls is
        outside graphs, one warning says so (a break that leaves the model uncompiled)."""
        stats = self.stats
        stats.native_calls += 1
        stats.time_total += elapsed
        stats.time_outside += max(elapsed - in_graphs, 0.0)
        share = stats.time_outside / stats.time_total
        if (
            share > OUTSIDE_WARN_SHARE
            and self.break_reasons
            and stats.native_calls >= 5
            and stats.time_outside
            > stats.native_calls
            * (OUTSIDE_WARN_SECONDS if stats.eager_sites else OUTSIDE_BREAK_SECONDS)
            and not (self._warned_outside or self._warned)
        ):
            self._warned_outside = True
            reasons = "; ".join(dict.fromkeys(str(r) for r in self.break_reasons[:3]))
            warnings.warn(
                f"magpy: {self.qualname}: {share:.0%} of its run time is outside compiled "
                f"graphs ({reasons}); see magpy.explain",
                MagPyWarning,
                stacklevel=_depth.user_level(),
            )

    def _go_eager(self, reason: str, *, warn: bool) -> None:
        self.stats.fallbacks += 1
        self.eager_reason = reason
        if warn and not self._warned:
            self._warned = True
            warnings.warn(
                f"magpy: {self.qualname} runs eagerly from now on: {reason}",
                MagPyWarning,
                stacklevel=_depth.user_level(),
            )


def _memoize_call(rec: Record, roots: tuple[Any, ...]) -> None:
    """A whole-call record's guard gets its memo on its first hit, before its mock."""
    memoize_guard(rec, roots[0], roots[1], roots[2])
