"""Whether a compiled callable's first call changed its own state (lazy initialisation).

A first call that meets a graph break is captured whole once more on the second call, instead of
splitting the callable into segments at once, when the first call wrote the callable's own
state: ``if not self.ready: ...; self.ready = True``, a buffer registered, a size or a mask
cached in an attribute. The path of the second call may then avoid the break (it took the lazy
branch only once); see docs/lazy-init.md. A first call that changed none of it reaches the same
break again on the same kind of inputs, and splits at once: no call is monitored in vain.

``own_state(fn)`` takes a shallow picture of that state before the first call, ``changed``
compares it with the state after. The callable's own state is:

- the attributes of the object called (a module, a callable instance, a bound method's
  ``self``), and of every submodule of a module: each attribute's value by identity, the size of
  a list, dict, set or deque held there (a cache filled, a list of hooks), and the entries of a
  module's parameter, buffer and submodule tables;
- the bindings its function reads: the globals its code names, its closure cells, the
  function's own attributes, by identity (a global rebound by ``global _mask; _mask = ...``).
  The contents of a global container are shared by every caller, not the callable's own: a log
  a program appends to on every call is no initialisation.

Identity, never equality: the picture keeps the values it saw, so an identity cannot be reused
by a new object meanwhile; and it runs none of the program's code (no ``__getattribute__``,
``__dict__`` property or ``__len__`` of the program's classes), which eager would not run. What
the picture misses leaves the callable split after its first call, as before; what it wrongly
reports as changed (a counter bumped on every call) costs one monitored call, the second; the
results are eager's either way.
"""

from __future__ import annotations

import collections
import functools
import types
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["OwnState", "changed", "own_state"]

# the most objects whose attributes are looked at (a larger model: its first MAX_OBJECTS)
MAX_OBJECTS = 10_000
_ABSENT = object()  # a global the code names that is not bound (yet)
_TABLES = ("_parameters", "_buffers", "_modules")
# the containers whose size is pictured (their ``len`` is CPython's, never the program's)
_SIZED = (list, dict, set, collections.OrderedDict, collections.defaultdict, collections.deque)

# an entry of the picture: how to read the items again, and the items read before
Entry = tuple[Callable[[], list[tuple[Any, Any, int]]], list[tuple[Any, Any, int]]]
OwnState = list[Entry]


def own_state(fn: Any) -> OwnState | None:
    """The own state of the callable ``fn`` now (None: it could not be read)."""
    try:
        return [(read, read()) for read in _readers(fn)]
    except Exception:  # (a program's __dict__ property, a __getattr__ that raises: no picture)
        return None


def changed(before: OwnState | None) -> bool:
    """Whether any of the state in ``before`` was rebound, added, removed or resized since."""
    if before is None:
        return False
    try:
        return any(not _same(read(), items) for read, items in before)
    except Exception:
        return False


def _same(now: list[tuple[Any, Any, int]], then: list[tuple[Any, Any, int]]) -> bool:
    if len(now) != len(then):
        return False
    pairs = zip(now, then, strict=True)
    return all(k1 == k2 and v1 is v2 and n1 == n2 for (k1, v1, n1), (k2, v2, n2) in pairs)


def _size(value: Any) -> int:
    return len(value) if type(value) in _SIZED else -1  # (exact types: no program __len__ runs)


def _items(table: dict[Any, Any], sizes: bool) -> list[tuple[Any, Any, int]]:
    return [(k, v, _size(v) if sizes else -1) for k, v in list(table.items())]


def _readers(fn: Any) -> list[Callable[[], list[tuple[Any, Any, int]]]]:
    """How to read each part of ``fn``'s own state (see the module docstring)."""
    kind = type(fn)
    if kind is types.MethodType:
        owner, func = fn.__self__, fn.__func__
    elif kind is types.FunctionType:
        owner, func = None, fn
    else:
        owner = fn
        method = kind.forward if issubclass(kind, torch.nn.Module) else kind.__call__
        func = getattr(method, "__func__", method)
    readers = [] if owner is None else _object_readers(owner)
    if isinstance(func, types.FunctionType):
        readers.extend(_function_readers(func))
    return readers


def _object_readers(owner: Any) -> list[Callable[[], list[tuple[Any, Any, int]]]]:
    readers: list[Callable[[], list[tuple[Any, Any, int]]]] = []
    todo: list[Any] = [owner]
    seen: set[int] = set()
    while todo and len(seen) < MAX_OBJECTS:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        attrs = _instance_dict(obj)
        if attrs is None:
            continue
        readers.append(functools.partial(_items, attrs, True))
        if issubclass(type(obj), torch.nn.Module):
            for name in _TABLES:
                table = attrs.get(name)
                if isinstance(table, dict):
                    readers.append(functools.partial(_items, table, False))
            todo.extend(m for m in attrs.get("_modules", {}).values() if m is not None)
    return readers


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """``obj.__dict__`` read without running any of the program's code (no ``__getattribute__``
    of its class, no ``__dict__`` property: the picture must not show in what the program
    sees): only the slot CPython gives an instance of a class without ``__slots__``."""
    for klass in type(obj).__mro__:
        slot = klass.__dict__.get("__dict__")
        if slot is not None:
            if type(slot) is not types.GetSetDescriptorType:
                return None
            attrs = slot.__get__(obj, type(obj))
            return attrs if type(attrs) is dict else None
    return None


def _function_readers(func: types.FunctionType) -> list[Callable[[], list[tuple[Any, Any, int]]]]:
    names, globs = func.__code__.co_names, func.__globals__
    cells = func.__closure__ or ()

    def bindings() -> list[tuple[Any, Any, int]]:
        out: list[tuple[Any, Any, int]] = [(n, globs.get(n, _ABSENT), -1) for n in names]
        out.extend((i, _contents(c), -1) for i, c in enumerate(cells))
        return out

    return [bindings, functools.partial(_items, func.__dict__, False)]


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # (an empty cell)
        return _ABSENT
