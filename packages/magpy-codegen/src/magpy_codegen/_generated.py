"""Generated source treated as real source: registered in ``linecache`` before it runs.

Tracebacks and pdb then show the generated guard or mock lines, and users can print them.
"""

from __future__ import annotations

import itertools
import linecache
from typing import Any

import attrs

__all__ = ["GeneratedCode", "NameAllocator", "forget_generated"]

_counter = itertools.count()
_registered: list[str] = []


def forget_generated() -> None:
    """Drop every generated source MagPy registered in ``linecache`` (``magpy.reset``)."""
    for name in _registered:
        linecache.cache.pop(name, None)
    _registered.clear()


@attrs.define
class GeneratedCode:
    """Python source plus the globals it runs with, under a unique pseudo-filename."""

    source: str
    globals: dict[str, Any]
    filename: str

    def load(self) -> dict[str, Any]:
        """Compile and execute the source; returns its namespace."""
        name = f"<magpy-{self.filename} #{next(_counter)}>"
        lines = self.source.splitlines(keepends=True)
        linecache.cache[name] = (len(self.source), None, lines, name)
        _registered.append(name)
        namespace = dict(self.globals)
        exec(compile(self.source, name, "exec"), namespace)
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
