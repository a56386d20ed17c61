"""Lists from outside that the run grows without reading: an output buffer, a history.

A module that keeps a Python list across calls and adds to it on each one (``self.outputs
.append(y)``, ``self.values.insert(len(self.values), v)``) must not be guarded on that list's
length or contents: both change on every call, and a record per call is what such a guard gives.
While the run has not read the list's contents, its appends and inserts are *logged*
(``AppendLog``): the mock replays them as the same calls, in program order, on the real list.
The first read of the contents flushes the log: the entry length is guarded and the shadow
contents become complete (each logged insert at the index it had in this run, pinned).

``len(lst)`` of such a list is its *entry length* (a graph path ``lst→length``, computed
by the guard or the mock before anything is written) plus what the run added so far. It is an
entry int like any other: guarded by value where the program depends on it, a dynamic scalar
once it changed between calls (``length_key``), and, as an insert's index, recomputed by the
mock on each call. Until a length changed between calls, ``len`` reads the list as before
(a LEN guard): only a list seen growing pays for the entry-length path.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from magpy_refgraph import GuardKind, Item, Length, Path

from .shapes import SymInt
from .speculation import Speculated
from .values import AppendLog, Payload, Val, Write

if TYPE_CHECKING:
    from .capture import Capture

__all__ = ["flush_log", "length_key", "live_length", "log_append", "log_insert"]


def length_key(path: Path) -> Path:
    """The key naming the entry length of the list at ``path`` in ``dynamic_paths``."""
    return path.child(Length())


def _unread(val: Val) -> bool:
    """A list from outside whose contents the run has not read (at most logged changes)."""
    return (
        val.external
        and val.node is not None
        and type(val.obj) is list
        and (val._items is None or type(val._items) is AppendLog)
    )


def log_append(cap: Capture, val: Val, item: Val) -> bool:
    """``val.append(item)`` on a list whose contents the run has not read: replayed by the mock,
    without a guard on the list's length or contents (an output list a loop appends to).
    False when the list needs materializing instead."""
    return _unread(val) and _logged(cap, val, None, item)


def log_insert(cap: Capture, val: Val, index: Val, item: Val) -> bool:
    """``val.insert(index, item)`` on a list whose contents the run has not read, where the
    mock can compute ``index`` again on each call (a constant, an entry int, or arithmetic over
    them, such as a length): replayed as the same insert. False: materialize instead."""
    if not (_unread(val) and type(index.obj) is int and _recomputable(index)):
        return False
    return _logged(cap, val, index, item)


def _logged(cap: Capture, val: Val, index: Val | None, item: Val) -> bool:
    log = val._items
    if log is None:
        cap.observe_type(val)
        log = val._items = AppendLog(lambda v: flush_log(cap, v))
    assert type(log) is AppendLog
    log.values.append(item)
    # (before the call runs: where ``list.insert`` puts the item in a list of this length)
    log.positions.append(None if index is None else (index, _landing(index.obj, len(val.obj))))
    op = "append" if index is None else "insert"
    cap.writes.append(Write(op, val, index, item))
    cap.mutations += 1
    return True


# (a size that follows a dynamic dim, a tensor's value read into Python: graph outputs)
_GRAPH_VALUES = (SymInt, Speculated)
_ARITHMETIC = frozenset({operator.add, operator.sub, operator.neg, operator.mul, operator.index})


def _recomputable(val: Val, depth: int = 0) -> bool:
    """An int the mock computes from constants and entry ints (no graph value, no object)."""
    if depth > 8 or type(val.obj) is not int or isinstance(val.payload(Payload), _GRAPH_VALUES):
        return False
    if val.expr is not None:
        fn, args = val.expr
        return fn in _ARITHMETIC and all(_recomputable(a, depth + 1) for a in args)
    return val.const or (val.external and val.node is not None)


def flush_log(cap: Capture, val: Val) -> None:
    """The run reads a list it only grew so far: guard its entry length, complete its shadow
    contents (each logged insert observed, so its index is the one of this run)."""
    log = val._items
    assert type(log) is AppendLog and val.node is not None
    val._items = None
    entry = list(val.obj)  # (what it held at entry: the logged changes taken back, last first)
    for position in reversed(log.positions):
        entry.pop(-1 if position is None else position[1])
    cap.graph.observe(val.node, GuardKind.LEN, len(entry))
    items = [cap.child(val, Item(i), x) for i, x in enumerate(entry)]
    for position, item in zip(log.positions, log.values, strict=True):
        if position is None:
            items.append(item)
        else:
            cap.observe(position[0])  # (its value, with the entry length: where it went)
            items.insert(position[1], item)
    val._items = items
    cap.writes = [w for w in cap.writes if not (w.op in _LOGGED and w.target is val)]
    cap.graph.update_in_place(val.node, "list.append", keep_edges=False)
    if val not in cap.mutated_containers:
        cap.mutated_containers.append(val)


_LOGGED = ("append", "insert")


def _landing(index: int, n: int) -> int:
    """The position ``list.insert(index, x)`` gives ``x`` in a list of length ``n``."""
    if index < 0:
        return max(index + n, 0)
    return min(index, n)


def live_length(cap: Capture, val: Val) -> Val | None:
    """``len(val)`` of a list from outside whose contents the run has not read and
    whose length changed between calls: its entry length plus what the run added. None where
    ``len`` reads the list as before."""
    if not _unread(val) or not (
        cap.promote_all or length_key(cap.paths[val.node]) in cap.dynamic_paths
    ):
        return None
    log = val._items
    added = len(log.values) if type(log) is AppendLog else 0
    real = len(val.obj)  # (a list: no Python ``__len__`` runs)
    entry = cap.child(val, Length(), real - added)
    if not added:
        return entry
    return Val(real, expr=(operator.add, (entry, cap.const(added))))
