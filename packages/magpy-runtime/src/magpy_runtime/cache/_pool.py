"""Records shared between compiled callables of the same code: one record for N instances.

A record's guard checks everything the recorded call read from outside, reached from the
call's own ``fn``, arguments and globals: a module's submodules by type, its hyperparameters by
value, its parameters and buffers as graph inputs (their metadata checked, never their
identity). So the record of one block serves every block of the same structure; what kept
twelve identical blocks compiled one by one (``magpy.compile(block)`` each, FSDP-style) at
twelve records and twelve backend compiles is only that each compiled callable had a cache of
its own.

Compiled callables of the same code with the same settings form a *pool*: those of instances
of one ``nn.Module`` class (its ``forward`` is looked up through the class, and the guard
checks that no instance overrides it), or of one Python function (bound methods of different
objects count as their function). A call that no record of its own callable serves tries the
records its siblings made, before anything is monitored; a sibling record whose guard passes
is *adopted*: a twin (``Record.fork``) that shares its plan, mock and compiled graph, with a
guard and memo of its own, is added to the callable's records. Records of a function are
shared only between compilations of that very function object: another function with the same
code may hold other closure cells or globals, which its guard would not read.

Settings that must agree (``_settings.Settings.key``): the backend (a name; Inductor's
``mode``/``options``; a callable backend by identity), ``fullgraph``, ``dynamic`` and
``max_records``. The pool holds its
members weakly; ``magpy.reset()`` empties every member, and with them what can be adopted.

After the siblings' records, a miss tries the records stored on disk for the same code and
settings by an earlier process (``_store``, when ``config.records_dir`` is set): the order of
the record sources is ``_sources.SOURCES``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import Any

import torch

from magpy_codegen import Record

from .._owner import RecordOwner
from ..store._store import attach

__all__ = ["SIBLINGS", "join"]

_pools: dict[Hashable, weakref.WeakSet[RecordOwner]] = {}
_lock = threading.Lock()


def join(state: RecordOwner, model: Any) -> None:
    """Put ``state``, the cache of ``model`` compiled, in the pool of its code and settings
    (a callable whose code cannot be told, or a backend that is not hashable, stays alone)."""
    attach(state, model)  # (its key in the store of records on disk, if any)
    key = _key(model, state)
    if key is None:
        return
    with _lock:
        for gone in [k for k, members in _pools.items() if not members]:
            del _pools[gone]
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = weakref.WeakSet()
        pool.add(state)
    state.siblings = pool


class Siblings:
    """The record source of the pool (``_sources``): a twin of a sibling's record."""

    name = "siblings"

    def find(
        self, state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Record | None:
        """The twin of the first sibling record whose guard passes for this call (a record
        already adopted, or recorded here, is not tried again); None: none does."""
        pool = state.siblings
        if pool is None:
            return None
        have = {id(rec.origin or rec) for rec in state.records}
        for sibling in list(pool):
            if sibling is state or sibling.eager_reason is not None:
                continue
            for rec in list(sibling.records):
                origin = rec.origin or rec
                if id(origin) in have or rec.fork is None:
                    continue
                twin = rec.fork()
                if twin.guard.check(fn, args, kwargs) is None:
                    have.add(id(origin))
                    continue
                return twin
        return None


SIBLINGS = Siblings()


def _key(model: Any, state: RecordOwner) -> Hashable | None:
    if isinstance(model, torch.nn.Module):
        target: Hashable = ("module", type(model))
    else:
        func = getattr(model, "__func__", model)
        if getattr(func, "__code__", None) is None:
            return None
        target = ("function", func)
    settings = state.settings.key()
    if settings is None:
        return None
    key = (target, settings)
    try:
        hash(key)
    except TypeError:
        return None
    return key
