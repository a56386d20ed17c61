"""Generated source treated as real source: registered in ``linecache`` before it runs.

Tracebacks and pdb then show the generated guard or mock lines, and users can print them. An
entry lives as long as what uses it: the ``GeneratedCode`` and the code objects of the functions
the source defined (a frame in a traceback keeps its code object, so its lines stay readable);
when the last of them is collected the entry goes (a dropped record takes its lines along).
"""

from __future__ import annotations

import itertools
import linecache
import types
import weakref
from typing import Any

import attrs

__all__ = ["GeneratedCode", "NameAllocator", "comment", "forget_generated"]

_counter = itertools.count()


class _Entry:
    """The ``linecache`` entry ``name`` and weak references to what keeps it."""

    __slots__ = ("holders", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.holders: list[weakref.ref[Any]] = []

    def hold(self, obj: Any) -> None:
        self.holders.append(weakref.ref(obj, self._dropped))

    def _dropped(self, ref: weakref.ref[Any]) -> None:
        # (a weakref callback, so it may run in any thread, in the middle of a collection)
        self.holders = [h for h in self.holders if h is not ref]
        if not self.holders and _registered.get(self.name) is self:
            del _registered[self.name]
            linecache.cache.pop(self.name, None)


# the entries MagPy registered in linecache (their weak references live as long as this does)
_registered: dict[str, _Entry] = {}


def comment(text: str) -> str:
    """``# text`` as one line of generated source, whatever ``text`` holds.

    Names come from the program (a ``__qualname__`` can be any string, newlines included):
    every character that is not printable ASCII is written as its escape, so nothing in
    ``text`` can end the comment and become code.
    """
    escaped = "".join(
        ch if " " <= ch <= "~" else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
    return f"# {escaped}"


def forget_generated() -> None:
    """Drop every generated source MagPy registered in ``linecache`` (``magpy.reset``)."""
    for name in list(_registered):
        linecache.cache.pop(name, None)
        _registered.pop(name, None)


@attrs.define
class GeneratedCode:
    """Python source plus the globals it runs with, under a unique pseudo-filename."""

    source: str
    globals: dict[str, Any]
    filename: str
    # a guard's memo (``_memo.Memo``), if it has one
    memo: Any = None

    def load(self) -> dict[str, Any]:
        """Compile and execute the source; returns its namespace.

        The ``linecache`` entry lives while this object or a function the source defined does.
        """
        name = f"<magpy-{self.filename} #{next(_counter)}>"
        lines = self.source.splitlines(keepends=True)
        entry = _registered[name] = _Entry(name)
        linecache.cache[name] = (len(self.source), None, lines, name)
        entry.hold(self)
        namespace = dict(self.globals)
        exec(compile(self.source, name, "exec"), namespace)
        for value in namespace.values():
            if isinstance(value, types.FunctionType) and value.__code__.co_filename == name:
                entry.hold(value.__code__)
        self.filename = name
        return namespace


class NameAllocator:
    """Hands out fresh identifiers with a reserved prefix and interns constants."""

    def __init__(self, prefix: str = "__magpy_") -> None:
        self.prefix = prefix
        self.consts: dict[str, Any] = {}
        self._by_id: dict[int, str] = {}
        self._n = itertools.count()

    def fresh(self, hint: str = "v") -> str:
        """A new local name."""
        return f"{hint}{next(self._n)}"

    def const(self, obj: Any, hint: str = "k") -> str:
        """A global name bound to ``obj`` (interned by identity)."""
        name = self._by_id.get(id(obj))
        if name is None:
            name = f"{self.prefix}{hint}{len(self.consts)}"
            self.consts[name] = obj
            self._by_id[id(obj)] = name
        return name
