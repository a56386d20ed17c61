"""The capture's identity table: from a heap object seen during the run to its ``Val``.

Most objects stay alive as long as the capture (their ``id()`` stays unique). Tensors made
during the run do not: keeping every intermediate alive would make a recording call's memory
the sum of all its intermediates, far above eager's. A tensor made in the run is held only by
the shadows of the places that hold it (stack slots, locals, container items), like eager holds
it; the table refers to it and to its ``Val`` weakly.

The result of a graph operation is the exception: its node is its source, so a tensor an
operation hands back after its shadow was dropped (a DTensor's local shard read again) is a new
value of that node.

An entry is trusted only while its weak reference still points to the very object asked about
(an ``id()`` may be reused once its tensor died). A tensor made in the run that is still alive
while its ``Val`` is gone (native code kept it where no shadow follows it, and hands it back
later) cannot be told apart from an outside tensor: asking for it is a graph break, never a
guess.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from magpy_refgraph import Unsupported

from .values import Val

__all__ = ["IdentityTable"]


def _drop(table: dict[int, Any], key: int, ref: Any) -> None:
    """``ref``'s tensor died: its entry goes (unless ``key`` was registered again since)."""
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        del table[key]


class IdentityTable:
    """``id(obj)`` -> ``Val``: strong for most objects, weak for tensors made in the run."""

    __slots__ = ("_keep", "_strong", "_weak")

    def __init__(self) -> None:
        self._strong: dict[int, Val] = {}
        self._keep: list[Any] = []  # (their ids stay unique while the capture lives)
        # id -> (weakref to the tensor, weakref to its Val); the entry goes with its tensor
        self._weak: dict[int, tuple[weakref.ref[Any], weakref.ref[Val]]] = {}

    def add(self, obj: Any, val: Val, *, made: bool) -> None:
        """Register ``val`` as the shadow of ``obj`` (``made``: created during the run)."""
        key = id(obj)
        if made and isinstance(obj, torch.Tensor):
            ref = weakref.ref(obj, functools.partial(_drop, self._weak, key))
            self._weak[key] = (ref, weakref.ref(val))
            self._strong.pop(key, None)
            return
        self._strong[key] = val
        self._keep.append(obj)
        self._weak.pop(key, None)

    def get(self, obj: Any, *, fresh: bool = False) -> Val | None:
        """The ``Val`` of ``obj``, if seen (a graph break where its shadow was dropped).

        ``fresh``: ``obj`` is the result of a graph operation, whose node is its source: a
        tensor whose shadow was dropped is then new (None) — it is none of the operation's
        arguments, whose shadows live, so no other shadow stands for it."""
        key = id(obj)
        v = self._strong.get(key)
        if v is not None and v.obj is obj:
            return v
        entry = self._weak.get(key)
        if entry is None or entry[0]() is not obj:
            return None
        v = entry[1]()
        if (v is None or v.obj is not obj) and fresh:
            del self._weak[key]
            return None
        if v is None or v.obj is not obj:
            raise Unsupported(
                f"a {type(obj).__name__} made during the run comes back after the run let go of it"
            )
        return v
