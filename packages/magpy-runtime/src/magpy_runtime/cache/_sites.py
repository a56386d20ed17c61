"""The frame hook: instrumented code objects, sites, and per-site record caches.

When a compiled program has graph breaks, the user functions involved run an instrumented copy
of their code (``magpy_codegen.instrument``) with a *site* at the function's entry and after
each break; the copy is their ``__code__`` only while a compiled call runs, and the program's
reads of ``__code__`` give the original (``_codes``). At a site the frame calls
``__magpy_site(key, stack)``:

- runtime inactive on this thread (the function is called outside a compiled call, in another
  thread), or a monitor already running: a miss, the original code runs;
- a record's guard passes: its mock runs the compiled graph and the frame jumps past the
  segment with the locals and stack the mock produced;
- otherwise: the monitor records the segment from here, while the frame runs natively.

``reset()`` puts every original code object back, also while a compiled call runs (here or in
another thread): keys of code states are never reused, so a frame still running an older
instrumented code never reaches a site of another function, and an activation made before the
reset is stale (its sites are misses, its callbacks record nothing), so that call finishes
natively. MagPy's own functions are never instrumented. See docs/frame-hook.md.
"""

from __future__ import annotations

import builtins
import functools
import sys
import threading
import types
import warnings
from typing import Any

import torch

from magpy_codegen import Layout, Record, build_record
from magpy_monitor import (
    FROZEN_MODULE_ROOTS,
    CodeInfo,
    Segment,
    ambient_state,
    is_monitoring,
    start_segment,
)
from magpy_refgraph import Unsupported

from .._config import background_compile, config, graph_backend
from .._disable import disabled
from .._errors import MagPyWarning, StanceError
from .._logging import log_topic
from . import _depth
from ._codes import ENTRY, REGISTRY, CodeState, installed, uninstalled
from ._dynamic import changed_on_miss, changed_scalars
from ._recordcache import NATIVE, Hit
from ._sitestate import SiteState
from ._stance import current as current_stance
from ._stance import site_records, stance_records
from ._tree import memoize_guard

__all__ = [
    "HOST",
    "activate",
    "deactivate",
    "ensure_entry_site",
    "restore_all",
    "split_loops_of",
    "user_function",
]

_tls = threading.local()


def _served(cs: CodeState, state: Any, entry_locals: dict[str, Any]) -> bool:
    """Whether a record of ``state``'s backend at the entry of ``cs`` accepts these locals."""
    site = cs.sites.get(ENTRY)
    if site is None:
        return False
    for rec in site.mine(state.backend):
        try:
            if rec.guard.check(entry_locals, ()) is not None:
                return True
        except Exception:  # a local the guard reads is missing: not this record's input
            continue
    return False


def split_loops_of(fn: types.FunctionType, dynamic: set[Any] | None = None) -> CodeState:
    """Give ``fn`` an entry site and make each iteration of its range() loops a segment;
    its sites start with the ``dynamic`` paths of its locals (``_dynamic.as_locals``)."""
    st = ensure_entry_site(fn)
    with REGISTRY.lock:
        st.split_loops = True
        st.dynamic_paths |= dynamic or set()
        for site in st.sites.values():
            site.dynamic_paths |= st.dynamic_paths
    return st


def ensure_entry_site(fn: types.FunctionType) -> CodeState:
    """Give ``fn`` a site at its entry (a compiled call's root, or a callee that broke)."""
    with REGISTRY.lock:
        st = REGISTRY.state(fn.__code__)
        if st.original.co_flags & 0xA0:  # generators/coroutines keep their code
            raise Unsupported(f"{st.original.co_qualname} is a generator or coroutine")
        st.add_function(fn)
        if ENTRY not in st.sites:
            st.sites[ENTRY] = SiteState(ENTRY, 0)
            st.reinstrument()
        return st


def restore_all() -> None:
    """Put every original code object back and forget all sites.

    Safe while compiled calls run: their activations become stale (see ``_current``).
    """
    with REGISTRY.lock:
        REGISTRY.epoch += 1
        states = list(REGISTRY.by_code.values())
        REGISTRY.by_code.clear()
        REGISTRY.by_key.clear()
        for st in states:
            st.restore()


def forget_backend(backend: Any) -> None:
    """Drop every site record compiled with ``backend`` (``magpy.explain``'s own records)."""
    with REGISTRY.lock:
        for st in list(REGISTRY.by_code.values()):
            for site in st.sites.values():
                site.forget(backend)


# ---------------------------------------------------------------------- activation
def activate(state: Any) -> None:
    """Enter a compiled call on this thread (``state`` is its CacheState); the functions run
    their instrumented code from now until the last compiled call ends (``_codes``)."""
    stack = getattr(_tls, "states", None)
    if stack is None:
        stack = _tls.states = []
    installed()
    stack.append([state, REGISTRY.epoch, 0])  # the state, its epoch, the headroom it added


def deactivate() -> None:
    _state, _epoch, headroom = _tls.states.pop()
    uninstalled()
    if headroom:
        _depth.shrink(headroom)


def _current() -> Any:
    """The CacheState of this thread's innermost compiled call; None outside one, and None
    for a call that began before a ``reset()`` (it finishes natively, recording nothing)."""
    stack = getattr(_tls, "states", None)
    if not stack:
        return None
    state, epoch, _headroom = stack[-1]
    return state if epoch == REGISTRY.epoch else None


def _monitoring_headroom() -> None:
    """A segment is about to be monitored in the innermost compiled call: the monitor's
    callbacks run on top of the program's frames, give it their depth (once per call)."""
    top = _tls.states[-1]
    if not top[2]:
        top[2] = _depth.MONITOR_CALLBACKS
        _depth.grow(top[2])


def _give_up(site: Any, state: Any) -> None:
    """From now on ``site`` runs the program natively (counted in ``stats().eager_sites`` of
    the compiled callable whose call found it so)."""
    if not site.eager:
        site.eager = True
        if state is not None:
            state.stats.eager_sites += 1


# ---------------------------------------------------------------------- the site function
def _miss(stack: tuple[Any, ...]) -> tuple[int, tuple[Any, ...]]:
    return (0, stack[::-1])


def site_entry(key: tuple[int, int, int], stack: tuple[Any, ...]) -> tuple[int, Any]:
    """Called by instrumented code at a site. Never raises."""
    try:
        state = _current()
        if state is None or is_monitoring() or disabled():
            return _miss(stack)
        stance = current_stance()
        if stance is not None and stance.stance == "force_eager":
            return _miss(stack)
        return _at_site(state, key, stack)
    except StanceError:  # (fail_on_recompile: raised in the program, as TorchDynamo does)
        raise
    except Exception as exc:  # the program must never see our failures
        cs = REGISTRY.by_key.get(key[0])
        site = cs.sites.get(key[1]) if cs is not None else None
        state = _current()
        if site is not None:
            _give_up(site, state)
        if state is not None:
            state.stats.fallbacks += 1
        _warn_once(f"site {key} failed: {type(exc).__name__}: {exc}")
        return _miss(stack)


def _at_site(state: Any, key: tuple[int, int, int], stack: tuple[Any, ...]) -> tuple[int, Any]:
    cs = REGISTRY.by_key.get(key[0])
    site = cs.sites.get(key[1]) if cs is not None else None
    if cs is None or site is None or site.eager:
        return _miss(stack)
    frame = sys._getframe(2)
    f_locals = frame.f_locals
    layouts = cs.variants.get(key[2], {}).get(key[1], [])
    backend = state.settings.backend
    stats = state.stats
    cache = site.cache_of(backend)
    layout_of = site.layout_of
    found = cache.lookup(
        (f_locals, stack), lambda rec: _branch(layouts, layout_of[rec]), stats
    )  # (the branch: this generation of the code must know the record's layout)
    if found.__class__ is Hit:
        _note_hit(state, found.record, cs.original, f_locals, key[1])
        return (found.tag, found.value)
    stats.misses += 1
    if found is NATIVE:  # the program's error: the frame runs on natively
        return _miss(stack)
    if found.assumed_wrong:  # type: ignore[union-attr]
        stats.assumption_misses += 1
        site.assumption_misses += 1
        if site.speculate and site.assumption_misses >= config.max_assumption_misses:
            site.speculate = False  # value reads are breaks here from now on
            site.keep(lambda r: not r.plan.speculative)
    mine = len(cache.records)
    log_topic("sites", "miss at %s offset %d (%d records)", cs.original.co_qualname, key[1], mine)
    if state.dynamic is not False and mine:
        site.dynamic_paths |= changed_on_miss(cache.records, {"L": f_locals, "S": stack})
    limit = site.limit(state.limit(), f_locals)
    if cache.full(limit):
        _give_up(site, state)
        _warn_once(
            f"{cs.original.co_qualname}: more than {limit.allowed} records at one "
            f"site (the limit {limit.source} sets); it runs eagerly from now on"
        )
        return _miss(stack)
    # (a stance that serves records makes none; MagPy's own calls are never monitored)
    if not site_records(current_stance()) or _called_by_magpy(frame):
        return _miss(stack)
    _monitoring_headroom()
    stats.segments_started += 1  # (this call records: compile time, not run time)
    start_segment(HOST, frame, key[1], stack)
    return _miss(stack)


builtins.__dict__["__magpy_site"] = site_entry


_ENTRY_MODULE = "magpy_runtime.cache._boundary_importlib_bootstrap"


def _called_by_magpy(frame: types.FrameType) -> bool:
    """Whether MagPy's own work (building a record, decoding a frame) called ``frame``'s
    function: a MagPy frame other than the compiled call's entry is below it. Such a frame is
    never monitored (MagPy's frames would be followed as the program's)."""
    f = frame.f_back
    while f is not None:
        name = f.f_globals.get("__name__")
        if isinstance(name, str) and name.split(".")[0] in _depth.OWN_ROOTS:
            return name != _ENTRY_MODULE
        f = f.f_back
    return False


def _branch(layouts: list[Layout], layout: Layout) -> int:
    """The site block's branch for ``layout``: 1 + its position in ``layouts``, 0 if this
    generation of the code has none. A record holds its site's own ``Layout`` object (see
    ``on_segment``), so identity decides: no attrs ``__eq__`` on every hit."""
    for i, known in enumerate(layouts):
        if known is layout:
            return i + 1
    return 0


def _note_hit(
    state: Any, rec: Record, code: types.CodeType, f_locals: dict[str, Any], offset: int
) -> None:
    """Count a site hit; the record's guard gets its memo on the first."""
    state.stats.hits += 1
    if rec.memoize is not None:
        _memoize_site(rec, code, f_locals)
    log_topic("sites", "hit at %s offset %d", code.co_qualname, offset)


def _memoize_site(rec: Any, code: types.CodeType, f_locals: dict[str, Any]) -> None:
    """A site's guard keeps a memo for the frame's first argument (``self`` of a method: its
    module tree, parameters and classes), where that is an object that stays, not a tensor."""
    anchor = f_locals.get(code.co_varnames[0])
    if isinstance(anchor, torch.Tensor | int | float | str | tuple | list | dict):
        rec.memoize = None
        return
    memoize_guard(rec, anchor, None, None)


def _confirmed_enough(code: types.CodeType, offset: int, calls: int) -> bool:
    """``CacheState.confirmed_enough`` for a record of the site at ``offset`` of ``code``."""
    info = REGISTRY.infos.get(code)
    st = REGISTRY.by_code.get(info.original if info is not None else code)
    site = st.sites.get(offset) if st is not None else None
    return calls > (site.assumption_misses if site is not None else 0)


def _warn_once(msg: str) -> None:
    state = _current()
    if state is not None and not state.warned_sites:
        state.warned_sites = True
        warnings.warn(f"magpy: {msg}", MagPyWarning, stacklevel=_depth.user_level())
    log_topic("breaks", "%s", msg)


# ---------------------------------------------------------------------- monitor callbacks
# never instrumented: libraries the monitor models, MagPy and the libraries MagPy itself runs
# on. (The rest of the standard library is: ``contextlib``'s ``__exit__`` resumes the program's
# generator. MagPy's own calls into an instrumented function never start a monitor, see
# ``_called_by_magpy``.)
_NOT_INSTRUMENTED = (
    FROZEN_MODULE_ROOTS
    | _depth.OWN_ROOTS
    | frozenset({"attr", "attrs", "bytecode", "typing_extensions"})
)


def user_function(fn: types.FunctionType) -> bool:
    """Only user code gets instrumented; torch's, MagPy's own and its dependencies' stay
    untouched."""
    return (fn.__module__ or "").split(".")[0] not in _NOT_INSTRUMENTED


def _segment_record(seg: Segment, state: Any) -> Any:
    """The record of segment ``seg`` for ``state``'s cache."""
    return build_record(
        seg.plan,
        seg.graph,
        seg.example_inputs,
        graph_backend(state.backend, seg.capture),
        qualname=seg.code.co_qualname,
        roots="frame",
        grad_enabled=seg.capture.grad_enabled,
        ambient=(ambient_state, seg.capture.ambient),
        restore_rng=seg.capture.draws_random,
        restore_inputs=seg.capture.mutated_inputs,
        undo_inputs=seg.capture.undo_inputs,
        anchor=seg.code.co_varnames[0] if seg.code.co_argcount else None,
        background=background_compile(state.background_compile),
        on_compiled=state.note_uncompiled,
        confirmed_enough=functools.partial(_confirmed_enough, seg.code, seg.site),
    )


class _Host:
    """The runtime side of ``magpy_monitor.SegmentHost``."""

    def code_info(self, code: types.CodeType) -> CodeInfo | None:
        return REGISTRY.infos.get(code)

    def on_segment(self, seg: Segment) -> None:
        state = _current()
        if state is None:
            return
        try:
            with torch._C.DisableTorchFunction():  # (MagPy's own tensors, as for a call)
                rec = _segment_record(seg, state)
        except Exception as exc:
            self.on_failure(seg.code, seg.site, exc)
            return
        state.note_uncompiled(rec)
        layout = Layout(seg.end, seg.stores, seg.nulls)
        with REGISTRY.lock:
            cs = REGISTRY.state(seg.code)
            site = cs.sites.get(seg.site)
            if site is None:
                return
            known = [k for k in site.layouts if k == layout]
            layout = known[0] if known else layout  # the site's own object (see _branch)
            if state.dynamic is not False:
                site.dynamic_paths |= changed_scalars(rec.plan, site.mine(state.backend))
            site.add(rec, layout, state.backend)
            if seg.site == ENTRY and state.pending_graphs:  # pieces this record now serves
                state.pending_graphs[:] = [
                    p
                    for p in state.pending_graphs
                    if p[0] is not cs.original or not _served(cs, state, p[2])
                ]
            state.note_record(rec, seg)
            if not known:
                site.layouts.append(layout)
                cs.reinstrument()

    def on_break(self, reason: Unsupported, chain: list[tuple[types.CodeType, Any]]) -> None:
        state = _current()
        if state is None:  # a reset() happened during this call: nothing is instrumented
            return
        state.note_break(reason)
        for _code, fn in chain[1:]:
            if isinstance(fn, types.FunctionType) and user_function(fn):
                try:
                    ensure_entry_site(fn)
                except Unsupported:
                    continue

    def on_callee_site(self, chain: list[tuple[types.CodeType, Any]]) -> None:
        """A segment ended at a call into a function with an entry site: the functions between
        the segment's frame and that callee get entry sites too (so the next call settles)."""
        if _current() is None:
            return
        for _code, fn in chain[1:-1]:
            if isinstance(fn, types.FunctionType) and user_function(fn):
                try:
                    ensure_entry_site(fn)
                except Unsupported:
                    continue

    def split_loops(self, code: types.CodeType) -> bool:
        with REGISTRY.lock:
            info = REGISTRY.infos.get(code)
            st = REGISTRY.by_code.get(info.original if info is not None else code)
            return st is not None and st.split_loops

    def on_callee_pieces(self, pieces: list[tuple[Any, Any, dict[str, Any]]]) -> None:
        """Graphs the callees of a broken chain will compile from the next call on.

        Kept (for ``magpy.explain``) until a record at the callee's entry site would serve the
        locals that callee began with; then that record stands for the piece.
        """
        state = _current()
        if state is None:
            return
        with REGISTRY.lock:
            for fn, gm, entry_locals in pieces:
                if not (isinstance(fn, types.FunctionType) and user_function(fn)):
                    continue
                cs = REGISTRY.state(fn.__code__)
                if not _served(cs, state, entry_locals):
                    state.pending_graphs.append((cs.original, gm, entry_locals))

    def on_failure(self, code: types.CodeType, site: int, exc: BaseException) -> None:
        with REGISTRY.lock:
            st = REGISTRY.by_code.get(code)
            s = st.sites.get(site) if st is not None else None
            state = _current()
            if s is not None:
                _give_up(s, state)
        if state is not None:
            state.stats.fallbacks += 1
        _warn_once(f"{code.co_qualname} at offset {site} runs eagerly: {type(exc).__name__}: {exc}")

    def dynamic_for(self, code: types.CodeType, site: int) -> tuple[frozenset[Any], bool]:
        state = _current()
        with REGISTRY.lock:
            info = REGISTRY.infos.get(code)
            st = REGISTRY.by_code.get(info.original if info is not None else code)
            s = st.sites.get(site) if st is not None else None
            paths = frozenset(s.dynamic_paths) if s is not None else frozenset()
        if state is not None and state.dynamic is False:  # sites are shared: honour the caller
            paths = frozenset()
        return paths, bool(state is not None and state.dynamic is True)

    def on_empty(self, code: types.CodeType, site: int) -> None:
        log_topic("sites", "no record possible at %s offset %d: eager", code.co_qualname, site)
        with REGISTRY.lock:
            st = REGISTRY.by_code.get(code)
            s = st.sites.get(site) if st is not None else None
            if s is not None:
                _give_up(s, _current())

    def speculate_for(self, code: types.CodeType, site: int) -> bool:
        state = _current()
        if state is not None and not state.speculate:
            return False  # the callable's whole-call records kept missing their assumptions
        with REGISTRY.lock:
            info = REGISTRY.infos.get(code)
            st = REGISTRY.by_code.get(info.original if info is not None else code)
            s = st.sites.get(site) if st is not None else None
        return config.speculate and (s is None or s.speculate)

    def verify_graphs(self) -> bool:
        return config.verify

    def resume(
        self, frame: types.FrameType, code: types.CodeType, offset: int, stack: tuple[Any, ...]
    ) -> Any:
        state = _current()
        with REGISTRY.lock:
            cs = REGISTRY.by_code.get(code)
            if cs is None:
                return None
            if offset not in cs.sites:
                cs.sites[offset] = SiteState(
                    offset, len(stack), dynamic_paths=set(cs.dynamic_paths)
                )
                cs.reinstrument()
            site = cs.sites[offset]
        if state is None or site.eager or is_monitoring() or not stance_records():
            return None
        _monitoring_headroom()
        mine = list(site.mine(state.backend))
        dry = False
        if mine:
            # this frame runs an older generation of the code, without the site's block: where
            # a record would hit, it covers this segment already, and a dry segment only
            # follows the frame to its next break (so later segments of this call are still
            # found); otherwise record the new variant
            f_locals = frame.f_locals
            dry = any(rec.guard.check(f_locals, stack) is not None for rec in mine)
            if not dry:
                if site.cache_of(state.backend).full(site.limit(state.limit(), f_locals)):
                    return None
                if state.dynamic is not False:
                    site.dynamic_paths |= changed_on_miss(mine, {"L": f_locals, "S": stack})
        return start_segment(self, frame, offset, stack, now=True, dry=dry)


HOST = _Host()
