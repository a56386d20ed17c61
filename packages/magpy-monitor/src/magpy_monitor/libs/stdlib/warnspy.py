"""Warnings that an instruction issues while it runs natively in a monitored run.

What a record keeps of an operation (a node of the graph, a constant) does not warn as the
operation did: a graph node warns from the graph's own code (another file, line and module
registry: a ``"default"`` filter shows it again), a compiled kernel or a constant not at all, and
an operation that warns only on its first call (``TORCH_WARN_ONCE``) would warn from the graph
once more. So an instruction whose native run issued a warning is a graph break: it runs
natively on every call, from the program's own frame, and its warnings reach the program's
filters, registries and ``showwarning`` as in eager. (``warnings.warn`` of the program is
replayed by the mock instead, ``warn.py``: those instructions are not watched.)

The monitor must see a warning whatever the program's filters do with it (``"ignore"`` today,
``"always"`` on the next call), without changing what they do. While an instruction runs
natively, a filter of the monitor's own stands first in ``warnings.filters``: its message
pattern's ``match`` notes the text and answers no, so the program's filters decide as before.
The entry is put into the list in place and taken out at the next event, without
``_filters_mutated()``, so no registry of warnings already shown is reset. A warning already
shown at the same place under ``"default"``/``"once"``/``"module"`` never reaches the filters
(its registry answers first): eager does not show it either, and the record keeps it.
Warnings of other threads are not this run's (a background compile): the spy notes only its
own thread's.

The program must never find the spy there: only instructions that compute a value are watched
(calls, operators, subscripts, attribute reads: ``WATCHED``), never one that enters or leaves a
context manager (``catch_warnings`` copies the list), nor one that may read the filter list or
change it (``touches_filters``: the list among its operands, in a container or under an
iterator, or a callable of the ``warnings`` module). At ``disarm`` the entry leaves the list it
was put in and also the list ``warnings.filters`` names now (where native code made a copy
meanwhile), and any entry of a spy no longer armed.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

__all__ = ["WATCHED", "arm", "disarm", "note_replay", "replays", "touches_filters"]

#: instructions (neutral names) that compute a value natively: the ones watched
WATCHED = frozenset(
    """
    CALL CALL_KW CALL_FUNCTION_EX BINARY_OP BINARY_SUBSCR BINARY_SLICE STORE_SUBSCR STORE_SLICE
    COMPARE_OP CONTAINS_OP UNARY_NEGATIVE UNARY_POSITIVE UNARY_INVERT UNARY_NOT TO_BOOL
    LOAD_ATTR LOAD_METHOD FORMAT_VALUE FORMAT_SIMPLE FORMAT_WITH_SPEC GET_ITER FOR_ITER
    """.split()
)

_local = threading.local()


class _Spy:
    """The message pattern of the monitor's filter: notes every text it is asked about."""

    __slots__ = ("seen", "thread")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.seen: list[str] = []

    def match(self, text: Any) -> None:
        if threading.get_ident() == self.thread:
            self.seen.append(str(text))
        return None  # (never matches: the program's filters decide)

    def __repr__(self) -> str:
        return "<magpy warning spy>"


def arm() -> None:
    """Watch for warnings until ``disarm()`` (an instruction is about to run natively)."""
    if getattr(_local, "entry", None) is not None:
        return
    entry = ("default", _Spy(), Warning, None, 0)
    filters: Any = warnings.filters
    filters.insert(0, entry)  # (in place: no registry is reset)
    _local.entry, _local.filters = entry, filters


def disarm() -> list[str]:
    """Stop watching; the texts of the warnings issued since ``arm()``."""
    entry = getattr(_local, "entry", None)
    if entry is None:
        return []
    lists = [_local.filters]
    _local.entry = _local.filters = None
    now: Any = warnings.filters
    if now is not lists[0]:
        lists.append(now)  # (a copy native code made meanwhile: catch_warnings)
    for filters in lists:
        stale = [i for i, item in enumerate(filters) if _is_spy(item)]
        for i in reversed(stale):
            del filters[i]
    seen: list[str] = entry[1].seen
    return seen


def _is_spy(item: Any) -> bool:
    return type(item) is tuple and len(item) == 5 and type(item[1]) is _Spy


_LIST_ITERATOR: Any = type(iter([]))


def touches_filters(operands: list[Any], depth: int = 2) -> bool:
    """Whether ``operands`` (an instruction's inputs) may read or change ``warnings.filters``:
    the list itself, an iterator over it, a list, tuple, set or dict holding either (``depth``
    levels down), or a callable or object of the ``warnings`` module."""
    filters = warnings.filters
    for obj in operands:
        if obj is filters:
            return True
        kind = type(obj)
        if kind is _LIST_ITERATOR:
            reduced = obj.__reduce__()
            if len(reduced) > 1 and reduced[1] and reduced[1][0] is filters:
                return True
        elif depth and kind in (list, tuple, set, frozenset):
            if touches_filters(list(obj), depth - 1):
                return True
        elif depth and kind is dict:
            if touches_filters(list(obj.values()), depth - 1):
                return True
        elif getattr(obj, "__module__", None) == "warnings" or kind.__module__ == "warnings":
            return True
    return False


def note_replay() -> None:
    """The instruction being handled issues a warning the mock replays (``warnings.warn``)."""
    _local.replays = replays() + 1


def replays() -> int:
    """How many replayed warnings this thread's runs have noted (``note_replay``)."""
    return int(getattr(_local, "replays", 0))
