"""Shadow values: what the monitor knows about each stack slot, local and container element.

A ``Val`` travels beside the real object it describes. Provenance is carried by the ``Val``, not
by ``id()``: two equal ints from different sources are two ``Val``s, so a small int or ``True``
read from a guarded attribute is never confused with a literal. Heap objects (tensors, lists,
dicts, modules, user objects, cells) get one ``Val`` per object, found again through the
capture's identity table when they come back out of native code.
"""

from __future__ import annotations

import collections
import types
from typing import Any

__all__ = ["UNBOUND", "AppendLog", "Val", "plain_container"]

# what reading a container's contents runs: none of it may be Python for observe() to guard
# the contents as the builtin base's
_READS = ("__iter__", "__getitem__", "__len__", "__eq__", "__contains__", "keys")


def plain_container(obj: Any) -> type | None:
    """``list``, ``tuple``, ``dict`` or ``deque``: the builtin container ``obj`` is, or a
    subclass of, when its contents read the builtin way (a namedtuple, ``OrderedDict``,
    ``defaultdict``, a structseq): guards may compare them item by item. None otherwise (an
    output class with a Python ``__getitem__``, a user class)."""
    for base in (tuple, list, dict, collections.deque):
        if isinstance(obj, base):
            t = type(obj)
            if t is base or not any(
                isinstance(getattr(t, name, None), types.FunctionType) for name in _READS
            ):
                return base
            return None
    return None


class _Unbound:
    def __repr__(self) -> str:
        return "UNBOUND"


UNBOUND: Any = _Unbound()


class AppendLog:
    """The ``items`` of a pre-existing list the run has only appended to so far.

    The mock replays the appends (no guard on the list's length or contents is needed). The
    first time the run reads the list's contents, ``flush(val)`` materializes it: its length at
    entry is guarded and its shadow contents become complete.
    """

    __slots__ = ("flush", "values")

    def __init__(self, flush: Any) -> None:
        self.flush = flush
        self.values: list[Val] = []


class Val:
    """One shadow value.

    ``obj``: the real object (kept alive while monitoring). ``node``: its RefGraph node, if the
    object is part of the captured state (external objects, objects written outside). ``external``:
    it existed at entry and was reached from SN#0. ``fx``: the operator-graph node producing a
    tensor. ``expr``: ``(fn, args)`` when the value was computed by a pure function of other
    ``Val``s and can be replayed. ``const``: the value is a constant of the program (a literal, or
    fixed by a guard). ``items``/``attrs``: known contents of containers/objects.
    ``extra``: small per-kind data (bound-method self, function closure, iterator state).
    """

    __slots__ = ("_items", "attrs", "const", "expr", "external", "extra", "fx", "node", "obj")

    def __init__(
        self,
        obj: Any,
        *,
        const: bool = False,
        external: bool = False,
        fx: Any = None,
        expr: tuple[Any, tuple[Val, ...]] | None = None,
        node: Any = None,
        items: Any = None,
        extra: Any = None,
    ) -> None:
        self.obj = obj
        self.const = const
        self.external = external
        self.fx = fx
        self.expr = expr
        self.node = node
        self._items = items
        self.attrs: dict[str, Val] | None = None
        self.extra = extra

    @property
    def items(self) -> Any:
        """Known contents (list/dict of ``Val``s), or None; reading flushes an ``AppendLog``."""
        items = self._items
        if type(items) is AppendLog:
            items.flush(self)
            return self._items
        return items

    @items.setter
    def items(self, value: Any) -> None:
        self._items = value

    def __repr__(self) -> str:
        tags = [k for k in ("const", "external") if getattr(self, k)]
        if self.fx is not None:
            tags.append(f"fx={self.fx}")
        if self.expr is not None:
            tags.append(f"expr={getattr(self.expr[0], '__name__', self.expr[0])}")
        text = repr(self.obj)
        if len(text) > 40:
            text = text[:37] + "..."
        return f"Val({text}{', ' if tags else ''}{', '.join(tags)})"
