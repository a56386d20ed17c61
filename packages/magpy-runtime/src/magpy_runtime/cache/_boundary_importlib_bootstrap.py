"""The frames a compiled call puts between the program's caller and the program.

``run`` is where every call of a compiled callable enters (from C: the callable's
``__call__`` is a ``functools.partial`` of it); ``entry`` is the root frame of a monitored
call. They are the only MagPy frames below the program's code: one (``run``) on a hit or a
native call, two (``run``, ``entry``) while a whole call is monitored. Before, a native call
had two (``CompiledFunction.__call__``, ``CacheState.call``) and a monitored one six (also
``_record``, ``capture``, ``Monitor.run`` and the monitor's ``entry``).

Why this file has this name: CPython 3.11's ``warnings.warn`` skips, when it counts
``stacklevel``, frames whose file name contains both ``importlib`` and ``_bootstrap`` (that is
how it hides the import machinery; 3.11 has no other way to hide a frame from it, 3.12 adds
``skip_file_prefixes``). So ``warnings.warn(..., stacklevel=2)`` in a compiled function names
the program's calling line, as in eager, on every call and in every mode, and the default
filter de-duplicates it per calling line as in eager (the warning goes to the caller's
``__warningregistry__``). The monitor's model of ``stacklevel`` skips the same frames, so a
warning that names the compiled function's caller is a graph break and is issued natively.
Nothing else treats such a file specially: the import machinery only hides the frozen
``<frozen importlib._bootstrap>`` frames, by exact name.

Where the program's code runs (natively, or monitored), ``run`` raises the recursion limit by
what MagPy adds to the stack meanwhile (see ``_depth``); a hit runs no program code. The path
of a hit and of a miss, and the policies they meet: docs/runtime.md.

A frame cannot be hidden from ``sys._getframe``: ``sys._getframe(1)`` in the compiled
function returns ``run``'s frame (eager: the caller's); ``sys._getframe(2)`` is the caller.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import torch
from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

from magpy_monitor import finish, prepare

from .._disable import disabled
from . import _depth
from ._recordcache import Hit, Then
from ._sites import activate, deactivate
from ._stance import current as current_stance
from ._stance import under_stance

__all__ = ["entry", "run"]


def run(state: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` through ``state``, a compiled callable's cache (see above)."""
    stance = current_stance()  # None: the default stance (see ``_stance``)
    if disabled() or (stance is not None and (state := under_stance(stance, state)) is None):
        return fn(*args, **kwargs)  # (magpy.disable, or force_eager: the original code)
    start = perf_counter()
    # (split loops: earlier whole-call records serve their trip counts, other calls run split)
    if state.eager_reason is None and (state.records or not state.split):
        seen = state.added
        try:  # (``CacheState.lookup``, inlined: a hit runs no other frame of MagPy's)
            found = state.own.lookup((fn, args, kwargs))
        except Exception as exc:  # a broken record must not break the program
            found = state.broken(exc)
        if found.__class__ is Hit:
            state.stats.hits += 1
            state.stats.time_total += perf_counter() - start
            return found.value
        then = state.missed(found, fn, args, kwargs, seen, stance)
        if then is Then.AGAIN:  # rare: a record came meanwhile (a sibling's, a stored one)
            again = _again(state, fn, args, kwargs, stance)
            if again.__class__ is Hit:
                state.stats.time_total += perf_counter() - start
                return again.value
            then = again
        if then is not Then.NATIVE:  # monitor this call, and record it
            epoch = state.epoch
            try:
                mon = prepare(entry_fn=entry, **state.capture_options(then))
                _depth.grow(_depth.MONITORED)
                try:
                    mon.trace_on()
                    value = entry(fn, args, kwargs)
                finally:
                    mon.trace_off()
                    _depth.shrink(_depth.MONITORED)
                # (making the record reads and builds tensors of MagPy's own: no torch
                # function mode or subclass hook of the program sees them)
                with torch._C.DisableTorchFunction():
                    return state.recorded(finish(mon, value), epoch)
            finally:
                state.release()
    _depth.grow(_depth.NATIVE)
    # (a call that runs natively while another thread records, or that records segments of
    # its own, is compile time: not counted)
    stats = state.stats
    counted = state.split or state.eager_reason is not None
    in_graphs, segments = stats.graph_time, stats.segments_started
    try:
        if state.split:  # the program runs on its instrumented code (see ``_sites``)
            activate(state)
            try:
                return fn(*args, **kwargs)
            finally:
                deactivate()
        return fn(*args, **kwargs)
    finally:
        _depth.shrink(_depth.NATIVE)
        if counted and stats.segments_started == segments:
            state.ran_natively(perf_counter() - start, stats.graph_time - in_graphs)


def _again(state: Any, fn: Any, args: Any, kwargs: Any, stance: Any) -> Hit | Then:
    """Look again, while records keep coming meanwhile: a hit, or what the call does next."""
    then = Then.AGAIN
    while then is Then.AGAIN:
        seen = state.added
        found = state.lookup(fn, args, kwargs)
        if found.__class__ is Hit:
            return found
        then = state.missed(found, fn, args, kwargs, seen, stance)
    return then


def entry(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The root frame of a monitored call (the same body as ``magpy_monitor.entry``)."""
    return fn(*args, **kwargs)


# TorchDynamo leaves these frames and every frame they call alone (``torch.compile`` of a
# compiled callable, or one called inside a function TorchDynamo compiles): MagPy then works as
# without it, instead of TorchDynamo tracing MagPy's own code. What ``torch._dynamo.skip`` does,
# set in C on the code objects (nothing of TorchDynamo's Python is imported), recursively, and
# the attribute its inliner reads (a call to them from traced code is a graph break).
_fn: Any
for _fn in (run, entry):
    set_code_exec_strategy(_fn.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    _fn._torchdynamo_disable = True
    _fn._torchdynamo_disable_msg = "MagPy compiles it"
