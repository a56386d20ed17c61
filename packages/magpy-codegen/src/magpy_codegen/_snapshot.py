"""What a guard memo's verdict depends on (``_memo``): each step of a stable path read where
it is stored once it is known to run no user code, with the state that decides it recorded in a
``_Snapshot``; ``_Unsafe`` where that cannot be vouched for. ``_Snapshot.frozen`` gives a
``Frozen`` snapshot, which ``holds_python`` checks (``_snapcheck.c`` does the same in C)."""

from __future__ import annotations

import builtins
import collections
import enum
import gc
import itertools
import operator
import types
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import torch
from torch._C._dynamo.guards import dict_version

from magpy_monitor import INTERP, ClassEntry, CodeOf, Defines
from magpy_refgraph import (
    Access,
    AccessKind,
    GuardKind,
    GuardReq,
    ModuleCall,
    ModuleNoHooks,
    NoPlainAttr,
    NotInInstanceDict,
    Outcome,
    Path,
    immutable_value,
)

__all__ = ["Frozen", "holds_python"]

_ABSENT = object()  # dict.get's default: the key must stay absent
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class whose dict and bases can change
_DICTS = (dict, collections.OrderedDict, collections.defaultdict)
_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")  # Module.__getattr__'s order
_SLOTS_KEPT = {
    types.FunctionType: ("__code__", "__defaults__", "__kwdefaults__", "__name__", "__qualname__"),
    type: ("__name__", "__qualname__"),
}
_READONLY = {
    types.FunctionType: ("__closure__", "__globals__"),
    types.MethodType: ("__func__", "__self__"),
}
_PLAIN_DESCRIPTORS = (
    types.FunctionType,
    staticmethod,
    classmethod,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
)
# (an instance's ``__dict__`` as ``obj()`` read it, past any ``__getattribute__`` of its class:
# ``attrgetter("__dict__")`` would run that hook, the program's code, on every hit)
_DICT_NAMES = itertools.repeat("__dict__")
_getmro = operator.attrgetter("__mro__")
_getcontents = operator.attrgetter("cell_contents")
_is = operator.is_


class _Unsafe(Exception):
    """A step or check whose result the snapshot cannot vouch for."""


def _static(cls: type, name: str) -> Any:
    for k in cls.__mro__:
        d = k.__dict__
        if name in d:
            return d[name]
    return _ABSENT


# builtin types whose attribute lookup is CPython's generic one (PyObject_GenericGetAttr)
# (3.13 leaves the inherited slot out of some of these types' own dicts)
_GENERIC_GETATTR = tuple(
    k.__dict__["__getattribute__"]
    for k in (object, dict, tuple, list, set, frozenset, types.CodeType, types.MethodType)
    if "__getattribute__" in k.__dict__
)


def _generic_getattr(kind: type) -> bool:
    """Whether ``obj.name`` of a ``kind`` looks in the class and the instance dict only."""
    return any(_static(kind, "__getattribute__") is g for g in _GENERIC_GETATTR)


def _data_descriptor(desc: Any) -> bool:
    kind = type(desc)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


def _real_dict(cls: type) -> dict[str, Any]:
    """The dict behind ``cls.__dict__`` (a mappingproxy), whose version tag tells changes."""
    (d,) = gc.get_referents(cls.__dict__)
    if type(d) is not dict:
        raise _Unsafe(f"the namespace of {cls.__qualname__} is not a dict")
    return d


class Frozen(NamedTuple):
    """A memo's snapshot as its check reads it: parallel lists, one pair (or triple) per kind
    of dependency (see ``_memo``), each element compared by identity unless said otherwise.
    ``_snapcheck.c`` reads these fields by position, in this order (its ``holds`` refuses a
    tuple of another length); a change here is a change there."""

    fn: Any  # the memo's anchor object
    item_dicts: list[Any]  # dict.get(item_dicts[i], item_keys[i], absent) is item_values[i]
    item_keys: list[Any]
    item_values: list[Any]
    version_dicts: list[Any]  # the version of version_dicts[i] is versions[i] (==)
    versions: list[int]
    type_objs: list[Any]  # type(type_objs[i]) is types[i]
    types: list[type]
    owner_objs: list[Any]  # owner_objs[i]'s __dict__ (past any hook) is owner_dicts[i]
    owner_dicts: list[Any]
    mro_classes: list[type]  # mro_classes[i].__mro__ is mros[i]
    mros: list[Any]
    slot_objs: list[Any]  # getattr(slot_objs[i], slot_names[i]) is slot_values[i]
    slot_names: list[str]
    slot_values: list[Any]
    # 3.13 with the C check: (instance dicts, their ``values_state``s, compared as bytes)
    values: tuple[list[Any], list[bytes]] | None
    cells: list[Any]  # cells[i].cell_contents is cell_values[i]
    cell_values: list[Any]
    empties: list[Any]  # each stays empty
    kept: tuple[Any, ...]  # what the memo gives back while the snapshot holds


class _Snapshot:
    """The dependencies being collected by one ``arm``."""

    def __init__(self, values_state: Callable[[Any], bytes] | None = None) -> None:
        self.items: dict[tuple[int, Any], tuple[Any, Any, Any]] = {}
        self.versions: dict[int, dict[Any, Any]] = {}
        self.types: dict[int, tuple[Any, type]] = {}
        self.owners: dict[int, tuple[Any, Any]] = {}
        self.mros: dict[int, type] = {}
        self.slots: dict[tuple[int, str], tuple[Any, str, Any]] = {}
        self.cells: dict[int, Any] = {}
        self.empties: dict[int, Any] = {}
        self.namespaces: set[int] = set()  # ids of the modules' ``__dict__``s met
        # ids of the instance ``__dict__``s whose version tag a store can leave as it was
        self.untagged: set[int] = set()
        # 3.13 with the C check: such a dict's version and its values (``values_state``)
        # together stand for all its entries
        self.values_state = values_state
        self.with_values: dict[int, Any] = {}
        self.entrywise: set[int] = set()  # ids of the objects the record writes to

    def per_entry(self, obj: Any) -> None:
        """``obj`` is written by the record itself (``_memo.written``): its dict (or ``obj``,
        a dict) is checked entry by entry, so that its own writes to entries the snapshot
        does not depend on leave the snapshot holding."""
        self.entrywise.add(id(obj))
        if isinstance(obj, dict):
            self.namespaces.add(id(obj))

    def item(self, d: Any, key: Any) -> None:
        """What ``d[key]`` holds (or that it holds nothing) decides a result: a module's
        namespace (globals change for many reasons: one entry is checked), else the whole
        dict (one version tag stands for all its entries)."""
        if d is builtins.__dict__ or id(d) in self.namespaces:
            self.items[(id(d), key)] = (d, key, dict.get(d, key, _ABSENT))
        else:
            self.version(d)

    def slot(self, obj: Any, name: str) -> None:
        self.slots[(id(obj), name)] = (obj, name, getattr(obj, name))

    def version(self, d: Any) -> None:
        self.versions[id(d)] = d

    def cls(self, kind: type) -> None:
        """Lookups through class ``kind``: its MRO and the namespaces of its mutable classes."""
        if id(kind) in self.mros:
            return
        self.mros[id(kind)] = kind
        for k in kind.__mro__:
            if k.__flags__ & _HEAPTYPE:
                self.version(_real_dict(k))

    def obj(self, obj: Any) -> Any:
        """``obj``'s class (and its lookups); its ``__dict__`` (returned) if it has one."""
        kind = type(obj)
        if kind.__flags__ & _HEAPTYPE or isinstance(obj, types.ModuleType):
            self.types[id(obj)] = (obj, kind)
        self.cls(kind)
        if isinstance(obj, type):
            self.cls(obj)
            return None
        try:
            inst = object.__getattribute__(obj, "__dict__")
        except AttributeError:
            return None
        if type(inst) is not dict:
            raise _Unsafe(f"a {kind.__name__} whose __dict__ is not a dict")
        self.owners[id(obj)] = (obj, inst)
        if id(obj) in self.entrywise:
            self.namespaces.add(id(inst))
            return inst
        whole = INTERP.instance_dict_tags_exact
        if not whole and self.values_state is not None and isinstance(obj, torch.nn.Module):
            whole = True
            self.with_values[id(inst)] = inst
        elif not whole:
            self.untagged.add(id(inst))
        if not isinstance(obj, torch.nn.Module) or not whole:
            # (a module's attributes rarely change: one version tag for its whole dict; other
            # objects often keep state that changes per call: the entries read are checked;
            # so are a module's where a store can leave the tag as it was and no values
            # state vouches for it: 3.13 without the C check)
            self.namespaces.add(id(inst))
        return inst

    def frozen(self, fn: Any, values: tuple[Any, ...], check: Any = None) -> Frozen:
        """The snapshot as ``holds`` reads it (``values``: what the memo keeps); ``check``: the
        ``SnapshotCheck`` whose dict versions it compares (torch's ``dict_version`` for
        ``holds_python``, the default; ``_snapcheck.c``'s own for the C check)."""
        version = dict_version if check is None else check.version
        items = list(self.items.values())
        slots = list(self.slots.values())
        cells = list(self.cells.values())
        versions = list(self.versions.values())
        types_ = list(self.types.values())
        owners = list(self.owners.values())
        mros = list(self.mros.values())
        with_values = [d for i, d in self.with_values.items() if i in self.versions]
        values_state = self.values_state
        state = (
            None
            if values_state is None or not with_values
            else (with_values, list(map(values_state, with_values)))
        )
        return Frozen(
            fn,
            [d for d, _, _ in items],
            [k for _, k, _ in items],
            [v for _, _, v in items],
            versions,
            list(map(version, versions)),
            [o for o, _ in types_],
            [t for _, t in types_],
            [o for o, _ in owners],
            [d for _, d in owners],
            mros,
            list(map(_getmro, mros)),
            [o for o, _, _ in slots],
            [n for _, n, _ in slots],
            [v for _, _, v in slots],
            state,
            cells,
            list(map(_getcontents, cells)),
            list(self.empties.values()),
            values,
        )


def _attr_step(s: _Snapshot, base: Any, name: str, *, generic: bool = False) -> Any:
    """``base.name``, read where it is stored once the lookup is known to run no user code,
    with what decides it in the snapshot; ``_Unsafe`` (before reading) where that is not so.
    ``generic``: read as ``object.__getattribute__`` does (the class's own hook bypassed)."""
    kind = type(base)
    if generic and isinstance(base, type | types.ModuleType):
        raise _Unsafe("object.__getattribute__ of a class or module")
    if isinstance(base, types.ModuleType):
        if _static(kind, "__getattribute__") is not types.ModuleType.__getattribute__:
            raise _Unsafe("a module type with its own __getattribute__")
        s.obj(base)
        s.namespaces.add(id(base.__dict__))
        if name not in base.__dict__:
            raise _Unsafe(f"module attribute {name!r} not in the module's dict")
        s.item(base.__dict__, name)
        return base.__dict__[name]
    if isinstance(base, type):
        return _class_attr(s, base, name)
    if not (generic or _generic_getattr(kind)):
        raise _Unsafe(f"{kind.__name__} has its own __getattribute__")
    read: Any = object.__getattribute__ if generic else getattr
    desc = _static(kind, name)
    if name == "__dict__" and type(desc) is types.GetSetDescriptorType:
        inst = s.obj(base)  # (the snapshot holds which dict it is)
        if inst is None:
            raise _Unsafe(f"a {kind.__name__} without a __dict__")
        return inst
    if desc is not _ABSENT and _data_descriptor(desc):
        if kind is types.FunctionType and name in _SLOTS_KEPT[kind]:
            s.obj(base)
            s.slot(base, name)
        elif name == "__class__" and desc is object.__dict__["__class__"]:
            s.obj(base)  # (its class is in the snapshot where it can change)
        elif not (name in _READONLY.get(kind, ()) or kind is types.CodeType):
            raise _Unsafe(f"{kind.__name__}.{name} is a data descriptor (a property or slot)")
        return read(base, name)  # (a code object never changes)
    inst = s.obj(base)
    if inst is not None:
        s.item(inst, name)  # (if absent: an instance attribute set later would win)
        if name in inst:
            return inst[name]
    if desc is not _ABSENT:
        if hasattr(type(desc), "__get__") and not isinstance(desc, _PLAIN_DESCRIPTORS):
            raise _Unsafe(f"{kind.__name__}.{name} is a descriptor of its own")
        return read(base, name)
    if generic:
        raise _Unsafe(f"{kind.__name__}.{name} not found by object.__getattribute__")
    if isinstance(base, torch.nn.Module) and kind.__getattr__ is torch.nn.Module.__getattr__:
        assert inst is not None
        for slot in _MODULE_SLOTS:
            s.item(inst, slot)
            table = inst.get(slot)
            if type(table) is not dict:
                raise _Unsafe(f"module {slot} is not a dict")
            s.item(table, name)
            if name in table:
                return table[name]
    raise _Unsafe(f"{kind.__name__}.{name} found by __getattr__")


def _class_attr(s: _Snapshot, cls: type, name: str) -> Any:
    if _static(type(cls), "__getattribute__") is not type.__dict__["__getattribute__"]:
        raise _Unsafe(f"the metaclass of {cls.__qualname__} has its own __getattribute__")
    meta = _static(type(cls), name)
    if meta is not _ABSENT and _data_descriptor(meta):
        if name not in _SLOTS_KEPT[type]:
            raise _Unsafe(f"class attribute {name!r} through a metaclass descriptor")
        s.obj(cls)
        s.slot(cls, name)
        return getattr(cls, name)
    desc = _static(cls, name)
    if desc is _ABSENT:
        raise _Unsafe(f"class attribute {name!r} not in the class")
    if hasattr(type(desc), "__get__") and not isinstance(desc, (*_PLAIN_DESCRIPTORS, property)):
        raise _Unsafe(f"class attribute {name!r} is a descriptor of its own")
    s.obj(cls)
    return getattr(cls, name)


def _container(s: _Snapshot, obj: Any) -> None:
    """A module container's ``[...]`` and ``len()``: what its ``_modules`` holds, in order."""
    kind = type(obj)
    base = next(k for k in kind.__mro__ if k in _CONTAINERS)
    for name in ("__getitem__", "__len__"):
        if _static(kind, name) is not base.__dict__[name]:
            raise _Unsafe(f"{kind.__name__} overrides {name}")
    inst = s.obj(obj)
    s.item(inst, "_modules")
    s.version(inst["_modules"])


def _item_step(s: _Snapshot, base: Any, key: Any, *, stored: bool = False) -> Any:
    """``base[key]``, with what decides it in the snapshot (``_Unsafe`` before reading where
    the lookup could run user code); ``stored``: ``dict.__getitem__(base, key)``."""
    kind = type(base)
    if stored and isinstance(base, dict):
        if id(base) in s.namespaces:
            s.item(base, key)
        else:
            s.version(base)  # (any dict's entries change its version tag)
        return _entry_of(base, key)
    if kind in _DICTS or _stored_dict(base, "__getitem__"):
        s.item(base, key)
        return _entry_of(base, key)
    if kind is tuple:
        return base[key]
    if isinstance(base, _CONTAINERS):
        _container(s, base)
        return base[key]
    raise _Unsafe(f"an item of a {kind.__name__}")


def _stored_dict(obj: Any, method: str) -> bool:
    """A dict of a subclass (a library's registry, ``class Registry(dict)``) whose ``method``
    (``__getitem__``, ``__len__``; none for its stored keys, which the guard reads with
    ``dict.keys``; an ``OrderedDict``'s order is never memoized, see ``_check``) is the native
    one: what the guard reads of it is what the dict stores, which its version stands for."""
    if not isinstance(obj, dict):
        return False
    return not method or _static(type(obj), method) is dict.__dict__[method]


def _entry_of(d: dict[Any, Any], key: Any) -> Any:
    """``d[key]`` as stored, without a ``defaultdict``'s ``__missing__`` (which would insert)."""
    found = dict.get(d, key, _ABSENT)
    if found is _ABSENT:
        raise KeyError(key)
    return found


def _root(s: _Snapshot, access: Access, fn: Any) -> Any:
    kind, key = access.kind, access.key
    if kind is AccessKind.GLOBAL:
        s.namespaces.add(id(access.scope))
        s.item(access.scope, key)
        return dict.__getitem__(cast(dict[Any, Any], access.scope), key)
    if kind is AccessKind.BUILTIN:
        s.item(builtins.__dict__, key)
        return builtins.__dict__[cast(str, key)]
    if kind is AccessKind.CELL:
        func = access.scope
        assert isinstance(func, types.FunctionType) and func.__closure__ is not None
        cell = func.__closure__[func.__code__.co_freevars.index(cast(str, key))]
        s.cells[id(cell)] = cell
        return cell.cell_contents
    if kind is AccessKind.CONST:
        return key
    return fn  # (the root ``fn``, see ``stable_path``)


def _hooks(s: _Snapshot, obj: Any, names: tuple[str, ...]) -> None:
    inst = s.obj(obj)
    for name in names:
        s.item(inst, name)
        s.empties[id(inst[name])] = inst[name]


def _check(s: _Snapshot, req: GuardReq, value: Any) -> None:
    """What stable requirement ``req`` on ``value`` depends on, besides the value itself."""
    kind, payload = req.kind, req.payload
    if kind is GuardKind.TYPE:
        s.obj(value)
    elif kind is GuardKind.VALUE:
        if not (immutable_value(value) or isinstance(value, enum.Enum)):
            raise _Unsafe("a value check of a mutable object")  # (an enum member: by identity)
    elif kind in (GuardKind.LEN, GuardKind.KEYS):
        if id(value) in s.untagged:
            # (3.13: ``obj.name = v`` adds a key without a new tag; the check stays unmemoized)
            raise _Unsafe(f"{kind.name} of an instance dict whose tag a store can keep")
        if kind is GuardKind.KEYS and isinstance(value, collections.OrderedDict):
            # (any subclass too: move_to_end reorders the keys and keeps the dict's version)
            raise _Unsafe("the order of an OrderedDict")
        if type(value) in _DICTS or _stored_dict(value, "__len__" if kind is GuardKind.LEN else ""):
            s.version(value)
        elif isinstance(value, _CONTAINERS) and kind is GuardKind.LEN:
            _container(s, value)
        elif kind is GuardKind.KEYS or type(value) not in (tuple, str, bytes, frozenset):
            raise _Unsafe(f"{kind.name} of a {type(value).__name__}")
    elif kind in (GuardKind.HASATTR, GuardKind.NOT_HASATTR):
        _hasattr(s, value, payload)
    elif isinstance(payload, ModuleCall):
        _hooks(s, value, () if payload.grad_off else ("_backward_hooks", "_backward_pre_hooks"))
        if not payload.own_forward:
            s.item(s.obj(value), "forward")
    elif isinstance(payload, ModuleNoHooks):
        _hooks(s, value, ("_forward_hooks", "_forward_pre_hooks"))
    elif isinstance(payload, NotInInstanceDict):
        s.item(s.obj(value), payload.name)
    elif isinstance(payload, NoPlainAttr):
        own = s.obj(value)  # (its class's namespaces are in the snapshot)
        if own is not None:
            s.item(own, payload.name)
    elif isinstance(payload, Outcome) and type(payload.fn) is CodeOf:
        if not isinstance(value, types.FunctionType):
            raise _Unsafe("the code of a callable that is not a function")
        s.slot(value, "__code__")
    elif isinstance(payload, Outcome) and type(payload.fn) is ClassEntry:
        if not isinstance(value, type):
            raise _Unsafe("a class entry of an object that is not a class")
        s.obj(value)  # (its MRO and the namespaces of its mutable classes decide the lookup)
    elif isinstance(payload, Outcome) and type(payload.fn) is Defines:
        if type(value) not in _DICTS:
            raise _Unsafe("a namespace that is not a dict")
        s.namespaces.add(id(value))  # (a module's globals: one entry is checked)
        s.item(value, payload.fn.name)


def _hasattr(s: _Snapshot, value: Any, name: Any) -> None:
    kind = type(value)
    if isinstance(value, type):
        meta = type(value)
        if (
            _static(meta, "__getattr__") is not _ABSENT
            or _static(meta, "__getattribute__") is not type.__dict__["__getattribute__"]
        ):
            raise _Unsafe("hasattr on a class whose metaclass looks attributes up itself")
        s.obj(value)
        return
    if not _generic_getattr(kind):
        raise _Unsafe(f"hasattr on a {kind.__name__} with its own __getattribute__")
    getattr_ = _static(kind, "__getattr__")
    desc = _static(kind, name)
    if desc is not _ABSENT and _data_descriptor(desc):
        raise _Unsafe(f"hasattr of {kind.__name__}.{name}, a data descriptor")
    inst = s.obj(value)
    if desc is not _ABSENT and (
        not hasattr(type(desc), "__get__") or isinstance(desc, _PLAIN_DESCRIPTORS)
    ):
        # (found on the class, a value or a method: present, whatever the instance dict holds
        # and whatever a ``__getattr__`` would do, which never runs; the class's namespaces
        # are in the snapshot)
        return
    if inst is not None:
        s.item(inst, name)
    if getattr_ is _ABSENT:
        return
    if getattr_ is not torch.nn.Module.__getattr__:
        raise _Unsafe(f"hasattr on a {kind.__name__} with __getattr__")
    for slot in _MODULE_SLOTS:
        s.item(inst, slot)
        s.item(inst[slot], name)


def _entry(s: _Snapshot, base: Any, path: Path, fn: Any) -> Any:
    if path.parent is None:
        return _root(s, path.root, fn)
    step = path.steps[-1]
    if step.kind in (AccessKind.ATTR, AccessKind.OBJATTR):
        return _attr_step(s, base, str(step.key), generic=step.kind is AccessKind.OBJATTR)
    return _item_step(s, base, step.key, stored=step.kind is AccessKind.DICTITEM)


_repeat = itertools.repeat


def holds_python(s: Frozen, absent: Any) -> bool:
    """Whether snapshot ``s`` holds (``_snapcheck.c`` computes the same in C)."""
    return (
        all(
            map(
                _is,
                map(dict.get, s.item_dicts, s.item_keys, itertools.repeat(absent)),
                s.item_values,
            )
        )
        and list(map(dict_version, s.version_dicts)) == s.versions
        and all(map(_is, map(type, s.type_objs), s.types))
        and all(map(_is, map(object.__getattribute__, s.owner_objs, _DICT_NAMES), s.owner_dicts))
        and all(map(_is, map(_getmro, s.mro_classes), s.mros))
        and all(map(_is, map(getattr, s.slot_objs, s.slot_names), s.slot_values))
        and all(map(_is, map(_getcontents, s.cells), s.cell_values))
        and not any(map(len, s.empties))
    )


# the snapshot check in use: the compiled one where it builds (``_cbuild``), else Python's
