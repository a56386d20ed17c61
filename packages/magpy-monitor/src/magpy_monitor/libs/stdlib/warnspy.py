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
own thread's. An instruction that may read the filter list itself (``len(warnings.filters)``,
a loop over it, a container that holds it among its operands: ``reads_filters``) runs without
the spy, so the program never finds it there.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

__all__ = ["arm", "disarm", "note_replay", "reads_filters", "replays"]

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
    filters = _local.filters
    _local.entry = _local.filters = None
    if filters and filters[0] is entry:
        del filters[0]
    else:  # (something put a filter before it meanwhile)
        for i, item in enumerate(filters):
            if item is entry:
                del filters[i]
                break
    seen: list[str] = entry[1].seen
    return seen


_LIST_ITERATOR: Any = type(iter([]))


def reads_filters(operands: list[Any], depth: int = 2) -> bool:
    """Whether ``operands`` (an instruction's inputs) hold ``warnings.filters``: the list
    itself, an iterator over it, or a list, tuple, set or dict holding either (``depth``
    levels down)."""
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
            if reads_filters(list(obj), depth - 1):
                return True
        elif depth and kind is dict and reads_filters(list(obj.values()), depth - 1):
            return True
    return False


def note_replay() -> None:
    """The instruction being handled issues a warning the mock replays (``warnings.warn``)."""
    _local.replays = replays() + 1


def replays() -> int:
    """How many replayed warnings this thread's runs have noted (``note_replay``)."""
    return int(getattr(_local, "replays", 0))
