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

A warning a library's Python code issues with ``warnings.warn`` while the instruction runs
(``F.softmax`` without a dim, a deprecated argument of a loss) need not be a break: it is a
function of the call's arguments, which the record guards, so the mock can replay it as it
replays the program's own ``warnings.warn`` (``warn.py``). While armed, ``warnings.warn`` is a
stand-in that notes each call of this thread (message, category, ``stacklevel`` and the calling
frame) and passes it on one level up, so the warning is attributed exactly as without it
(``calls``). The tracer replays the noted calls when every warning the filter saw is one of them
and each names a frame of the recorded code; a warning from native code (``TORCH_WARN``, which
may warn once per process) or any other leaves the instruction a break.

Some warnings of torch's native code are issued on every execution, from the program's frame,
whatever came before: the removed ``t.volatile`` (a getter that warns on each read) and
``t[mask]`` with a uint8 mask (``TORCH_WARN``; the graph indexes with the mask as bool, which
does not warn). The
handler of such an instruction replays the warning itself (``warn.record_warning``) when it
makes the instruction's outputs; ``NATIVE_REPLAYED`` names each such text (its start: torch
appends where in its sources it warned) with the condition under which the handler is sure to
replay it (``native_replayed``): then the instruction is no break. Where the whole text is
needed (``last_seen``) and a registry kept the warning from the filters, the handler breaks.
A test holds each entry to torch's behaviour (it warns on every execution under ``"always"``).
"""

from __future__ import annotations

import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "NATIVE_REPLAYED",
    "WATCHED",
    "WarnCall",
    "arm",
    "calls",
    "disarm",
    "is_internal",
    "last_seen",
    "native_replayed",
    "note_replay",
    "quiet_call",
    "quiet_nodes",
    "replays",
    "target_frame",
    "touches_filters",
]

#: instructions (neutral names) that compute a value natively: the ones watched
WATCHED = frozenset(
    """
    CALL CALL_KW CALL_FUNCTION_EX BINARY_OP BINARY_SUBSCR BINARY_SLICE STORE_SUBSCR STORE_SLICE
    COMPARE_OP CONTAINS_OP UNARY_NEGATIVE UNARY_POSITIVE UNARY_INVERT UNARY_NOT TO_BOOL
    LOAD_ATTR LOAD_METHOD FORMAT_VALUE FORMAT_SIMPLE FORMAT_WITH_SPEC GET_ITER FOR_ITER
    """.split()
)

#: text (its start: torch appends where in its sources it warned) of a warning native code
#: issues on every execution -> whether the handler of the instruction (opname, argval,
#: operands) replays it itself (registered by the library model)
NATIVE_REPLAYED: dict[str, Callable[[str, Any, list[Any]], bool]] = {}

_local = threading.local()
_ORIGINAL_WARN = warnings.warn


class WarnCall(NamedTuple):
    """A ``warnings.warn`` call noted while armed: the frame the warning is attributed to and
    its line then; ``target`` None: one that cannot be replayed (a ``Warning`` object as the
    message, ``source``, ``skip_file_prefixes``, a stacklevel below 1)."""

    message: Any
    category: Any
    target: types.FrameType | None
    lineno: int
    caller: types.FrameType | None = None  # (the frame that called ``warn``)
    stacklevel: int = 1


def is_internal(frame: types.FrameType) -> bool:
    """An importlib bootstrap frame, which ``warnings.warn``'s ``stacklevel`` skips."""
    name = frame.f_code.co_filename
    return "importlib" in name and "_bootstrap" in name


def target_frame(start: types.FrameType, stacklevel: int) -> types.FrameType | None:
    """The frame ``warnings.warn(stacklevel=...)`` called from ``start`` attributes the warning
    to (CPython's ``setup_context``: importlib's bootstrap frames are skipped)."""
    f: types.FrameType | None = start
    if stacklevel <= 0 or is_internal(start):
        while stacklevel > 1 and f is not None:
            f = f.f_back
            stacklevel -= 1
        return f
    while stacklevel > 1 and f is not None:
        f = f.f_back
        while f is not None and is_internal(f):
            f = f.f_back
        stacklevel -= 1
    return f


def _spied_warn(
    message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any
) -> None:
    """``warnings.warn`` while armed: notes the call (this thread's, when armed), then warns as
    the caller would have: one level up, so the same frame is named as without this one (a
    stacklevel below 1 names the caller, as 1 does)."""
    level = max(stacklevel, 1) + 1 if type(stacklevel) is int else stacklevel
    spy = getattr(_local, "entry", None)
    if spy is not None:
        plain = type(message) is str and source is None and not kwargs and level == stacklevel + 1
        target = target_frame(sys._getframe(1), stacklevel) if plain else None
        lineno = target.f_lineno if target is not None else 0
        caller = sys._getframe(1) if plain else None
        spy[1].calls.append(WarnCall(message, category, target, lineno, caller, stacklevel))
    _ORIGINAL_WARN(message, category, level, source, **kwargs)


class _Spy:
    """The message pattern of the monitor's filter: notes every text it is asked about."""

    __slots__ = ("calls", "seen", "thread")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.seen: list[str] = []
        self.calls: list[WarnCall] = []

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
    _local.calls = []
    _ARMED.add(threading.get_ident())
    if warnings.warn is _ORIGINAL_WARN:
        warnings.warn = _spied_warn


def disarm() -> list[str]:
    """Stop watching; the texts of the warnings issued since ``arm()`` (and their
    ``warnings.warn`` calls in ``calls()``)."""
    entry = getattr(_local, "entry", None)
    if entry is None:
        _local.seen = []
        return []
    if warnings.warn is _spied_warn and not _others_armed():
        warnings.warn = _ORIGINAL_WARN
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
    _local.calls, _local.seen = entry[1].calls, seen
    return seen


def calls() -> list[WarnCall]:
    """The ``warnings.warn`` calls of the last armed window (``disarm``), in order."""
    noted: list[WarnCall] = getattr(_local, "calls", [])
    return noted


_ARMED: set[int] = set()


def _others_armed() -> bool:
    _ARMED.discard(threading.get_ident())
    return bool(_ARMED)


def _is_spy(item: Any) -> bool:
    return type(item) is tuple and len(item) == 5 and type(item[1]) is _Spy


_LIST_ITERATOR: Any = type(iter([]))


def touches_filters(operands: list[Any], depth: int = 2) -> bool:
    """Whether ``operands`` (an instruction's inputs) may read or change ``warnings.filters``:
    the list itself, an iterator over it, a list, tuple, set or dict holding either (``depth``
    levels down), the ``warnings`` module (while armed its ``warn`` is a stand-in) or a callable
    or object of it."""
    filters = warnings.filters
    for obj in operands:
        if obj is filters or obj is warnings:  # (the module: ``warnings.warn`` is read)
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


def native_replayed(opname: str, argval: Any, operands: list[Any], seen: list[str]) -> bool:
    """Whether every warning ``seen`` while the instruction ran natively is one its handler
    replays on every hit (``NATIVE_REPLAYED``)."""
    for text in seen:
        known = [p for start, p in NATIVE_REPLAYED.items() if text.startswith(start)]
        if len(known) != 1 or not known[0](opname, argval, operands):
            return False
    return bool(seen)


def last_seen() -> list[str]:
    """The texts of the warnings of the last watched instruction (``disarm``); [] where the
    instruction that ran last was not watched."""
    seen: list[str] = getattr(_local, "seen", [])
    return seen


def note_replay() -> None:
    """The instruction being handled issues a warning the mock replays (``warnings.warn``)."""
    _local.replays = replays() + 1


def replays() -> int:
    """How many replayed warnings this thread's runs have noted (``note_replay``)."""
    return int(getattr(_local, "replays", 0))


# --- an operation whose warnings the mock replays runs quietly in the graph ----------------------
_MUTED = threading.local()
_MUTE_LOCK = threading.Lock()
_MUTERS = [0]


def _muting_warn(
    message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any
) -> None:
    """``warnings.warn`` while some thread runs a quiet operation: that thread's warnings with
    the texts the mock replays are dropped, every other one is passed on as it was issued."""
    if message in getattr(_MUTED, "texts", ()):
        return
    level = max(stacklevel, 1) + 1 if type(stacklevel) is int else stacklevel
    _ORIGINAL_WARN(message, category, level, source, **kwargs)


def quiet_call(texts: frozenset[str], fn: Any) -> Any:
    """``fn`` (a string: the method of that name of the first argument) as a function that runs
    without its ``warnings.warn`` calls whose message is among ``texts``: a graph node whose
    operation warned while recording, whose warnings the mock replays from the place eager
    names (``warn.replay_library_warnings``). No filter or registry is touched."""

    def quietly(*args: Any, **kwargs: Any) -> Any:
        before: frozenset[str] = getattr(_MUTED, "texts", frozenset())
        _MUTED.texts = before | texts
        with _MUTE_LOCK:
            _MUTERS[0] += 1
            if _MUTERS[0] == 1 and warnings.warn is _ORIGINAL_WARN:
                warnings.warn = _muting_warn
        try:
            if isinstance(fn, str):
                return getattr(args[0], fn)(*args[1:], **kwargs)
            return fn(*args, **kwargs)
        finally:
            _MUTED.texts = before
            with _MUTE_LOCK:
                _MUTERS[0] -= 1
                if _MUTERS[0] == 0 and warnings.warn is _muting_warn:
                    warnings.warn = _ORIGINAL_WARN

    name = fn if isinstance(fn, str) else getattr(fn, "__name__", "op")
    quietly.__name__ = quietly.__qualname__ = f"quiet_{name}"
    return quietly


def quiet_nodes(graph: Any) -> None:
    """Make each node of fx ``graph`` marked ``meta["quiet"]`` (by the recorder: its operation
    warned while recording) call its operation through ``quiet_call``."""
    for node in graph.nodes:
        texts = node.meta.get("quiet")
        if texts and node.op in ("call_function", "call_method"):
            node.op, node.target = "call_function", quiet_call(texts, node.target)
            del node.meta["quiet"]
