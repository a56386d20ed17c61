"""``copy.copy`` and ``copy.deepcopy``.

``copy.deepcopy(x)`` runs natively (its Python code keys a memo by ``id()``, which a record
cannot replay), and the copy's shadow is built by walking ``x``'s shadow and the copy side by
side: a new list, tuple, dict or plain-class instance for each one ``deepcopy`` made, whose
items or attributes are the shadows of the source's (read as paths from outside, or the
run's own shadows), and the source's own shadow where ``deepcopy`` kept the object (values:
ints, strings, dtypes, enums, tuples of them). Every object visited has its type guarded and
every container its length or keys, so a hit makes the same copy; a source shared twice is
copied once, as ``deepcopy``'s memo does. That is how a configuration object is copied inside a
forward (transformers' ``get_text_config(decoder=True)`` and ``to_dict()``).

What the walk does not know (a tensor, a class with its own ``__deepcopy__``, ``__reduce_ex__``,
``__getstate__``/``__setstate__``, ``__slots__`` or ``__new__``, a ``copyreg`` entry, a memo
argument) keeps the previous behaviour: plain data is a fresh constant, anything else follows
``copy``'s Python code. ``copy.copy`` does the same.
"""

from __future__ import annotations

import abc
import collections
import copy
import copyreg
from typing import Any

from magpy_refgraph import Item, ObjAttr

from ..bytecode.iteration import iter_items
from ..core.calls import inline, pure_call
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, BuiltinHandler
from ..core.values import Instance, Val
from ..core.valuetypes import is_value_type
from .containers import plain_data
from .instances import is_pyobj

__all__: list[str] = []

_SEQUENCES = (list, tuple)
_MAPPINGS = (dict, collections.OrderedDict)
_LIMIT = 4096  # objects one deepcopy may visit before the walk gives up


def _plain_instance(cls: type) -> bool:
    """``deepcopy`` copies an instance of ``cls`` by ``cls.__new__(cls)`` and a deep copy of
    its ``__dict__``, running none of the class's code."""
    if cls.__module__ == "builtins" or type(cls) not in (type, abc.ABCMeta):
        return False
    if cls in copyreg.dispatch_table or getattr(cls, "__deepcopy__", None) is not None:
        return False
    if any("__slots__" in vars(k) for k in cls.__mro__[:-1]):
        return False
    plain = {name: getattr(object, name, None) for name in _PROTOCOL}
    return all(getattr(cls, name, None) is plain[name] for name in _PROTOCOL)


# what deepcopy calls on an instance: the class must inherit each from object (or lack it)
_PROTOCOL = ("__reduce_ex__", "__reduce__", "__getstate__", "__setstate__", "__new__")


def _walkable(obj: Any, seen: set[int]) -> bool:
    """``deepcopy(obj)`` is a copy the walk below can describe."""
    if id(obj) in seen or is_value_type(obj) or obj is None:
        return True
    seen.add(id(obj))
    if len(seen) > _LIMIT:
        return False
    kind = type(obj)
    if kind in _SEQUENCES:
        return all(_walkable(x, seen) for x in obj)
    if kind in _MAPPINGS:
        return all(is_value_type(k) and _walkable(x, seen) for k, x in obj.items())
    return _plain_instance(kind) and all(
        type(k) is str and _walkable(x, seen) for k, x in vars(obj).items()
    )


class _Walk:
    """The shadow of one ``deepcopy`` result."""

    def __init__(self, m: FrameMonitor) -> None:
        self.m = m
        self.memo: dict[int, tuple[Any, Val]] = {}  # id(source) -> (copy, its shadow)

    def copy_of(self, src: Val, dst: Any) -> Val:
        cap = self.m.cap
        obj = src.obj
        if id(obj) in self.memo:
            made, shadow = self.memo[id(obj)]
            if made is not dst:
                raise self.m.unsupported("deepcopy: the copy does not share what its source shares")
            return shadow
        cap.observe_type(src)
        if dst is obj:  # a value deepcopy keeps (an int, a dtype, a tuple of values)
            if not (obj is None or is_value_type(obj)):
                raise self.m.unsupported(f"deepcopy kept a {type(obj).__name__}")
            if type(obj) is tuple:  # (still values on a hit: still kept)
                for item in iter_items(self.m, src) or []:
                    cap.observe_type(item)
            return src
        if type(dst) is not type(obj):
            raise self.m.unsupported(f"deepcopy of a {type(obj).__name__} made a {type(dst)}")
        if type(obj) in _SEQUENCES:
            return self._sequence(src, dst)
        if type(obj) in _MAPPINGS:
            return self._mapping(src, dst, self._entries(src))
        return self._instance(src, dst)

    def _remember(self, src: Val, dst: Any, shadow: Val) -> Val:
        self.memo[id(src.obj)] = (dst, shadow)
        return shadow

    def _sequence(self, src: Val, dst: Any) -> Val:
        items = iter_items(self.m, src)
        if items is None or len(items) != len(dst):
            raise self.m.unsupported("deepcopy of a sequence of unknown contents")
        if type(dst) is list:  # (a list is in the memo before its items are copied)
            shadow = self._remember(src, dst, self.m.cap.new(dst, items=[]))
            assert isinstance(shadow.items, list)
            shadow.items.extend(self.copy_of(x, y) for x, y in zip(items, dst, strict=True))
            return shadow
        copies = [self.copy_of(x, y) for x, y in zip(items, dst, strict=True)]
        return self._remember(src, dst, self.m.cap.new(dst, items=copies))

    def _entries(self, src: Val) -> dict[Any, Val]:
        """The source mapping's values by key (its keys guarded)."""
        cap = self.m.cap
        if isinstance(src.items, dict):
            return {k: v for k, (_, v) in src.items.items()}
        if not src.external:
            raise self.m.unsupported("deepcopy of a dict of unknown contents")
        cap.observe_keys(src)
        return {k: cap.child(src, Item(k), x) for k, x in src.obj.items()}

    def _mapping(self, src: Val, dst: Any, entries: dict[Any, Val]) -> Val:
        cap = self.m.cap
        if list(entries) != list(dst):
            raise self.m.unsupported("deepcopy of a dict whose keys changed")
        items: dict[Any, tuple[Val, Val]] = {}
        shadow = self._remember(src, dst, cap.new(dst, items=items))
        for k, v in entries.items():
            items[k] = (cap.const(k), self.copy_of(v, dst[k]))
        return shadow

    def _instance(self, src: Val, dst: Any) -> Val:
        cap = self.m.cap
        attrs: dict[str, Val] = {}
        if is_pyobj(src) and src.attrs is not None:
            cls_val = src.require(Instance).cls_val
            source = dict(src.attrs)
        elif src.external:
            # (its class as a path: class attributes the copy reads are guarded there)
            cls_val = cap.child(src, ObjAttr("__class__"), type(src.obj))
            state = cap.child(src, ObjAttr("__dict__"), vars(src.obj))
            cap.observe_keys(state)
            source = {k: cap.child(state, Item(k), x) for k, x in vars(src.obj).items()}
        else:
            raise self.m.unsupported(f"deepcopy of a {type(src.obj).__name__} of unknown state")
        shadow = cap.new(dst, payload=Instance(cls_val))
        shadow.attrs = attrs
        self._remember(src, dst, shadow)
        if list(source) != list(vars(dst)):
            raise self.m.unsupported("deepcopy of an object whose attributes changed")
        for name, v in source.items():
            attrs[name] = self.copy_of(v, vars(dst)[name])
        return shadow


def _deepcopy(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    src_is_constant = bool(pos) and pos[0].const and not pos[0].external
    if len(pos) == 1 and not kw and not src_is_constant and _walkable(pos[0].obj, set()):
        src = pos[0]
        m.expect_outputs(inst, 1, lambda real: [_Walk(m).copy_of(src, real[0])])
        return
    _fallback(copy.deepcopy)(m, inst, pos, kw)


def _fallback(fn: Any) -> BuiltinHandler:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if len(pos) == 1 and not kw and plain_data(pos[0].obj):
            pure_call(m, inst, pos, kw)  # the copy is a fresh constant, rebuilt by the mock
            return
        inline(m, inst, m.cap.const(fn), pos, kw)

    return handle


BUILTIN_HANDLERS[id(copy.copy)] = (copy.copy, _fallback(copy.copy))
BUILTIN_HANDLERS[id(copy.deepcopy)] = (copy.deepcopy, _deepcopy)
