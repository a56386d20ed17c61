"""What ``base.name`` reads: the attribute rules, tried in ``registry.ATTR_RULE_ORDER``.

``load_attr(m, base, name, real)`` gives the shadow of an attribute whose real value CPython
already computed (``real``). Each rule decides from the base's shadow (is it from outside, a
constant, built by the run, a tensor...) how that value is known: a guarded access path, a
constant, a value replayed by the mock, or a graph node. This module registers the rules that
need only the core; the tensor, array and object-model cases are registered by
``libs/torch/rules.py``, ``libs/numpy/rules.py`` and ``pyobj/rules.py``.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable
from typing import Any, cast

import torch

from magpy_refgraph import Attr, Const, GuardKind, Outcome

from .capture import Capture
from .frame import FrameMonitor
from .registry import ATTR_RULES
from .values import BoundMethod, Val
from .valuetypes import FROZEN_MODULE_ROOTS, is_value_type

__all__ = [
    "MISSING",
    "AttrRead",
    "ClassEntry",
    "NamedCheck",
    "Read",
    "attr_rule",
    "guard_class_attr",
    "guard_method",
    "load_attr",
    "mutable_class",
    "static_lookup",
    "user_class",
]


class Read:
    """One attribute read being modelled: ``base.name`` gave ``real``."""

    __slots__ = ("base", "cap", "name", "real")

    def __init__(self, cap: Capture, base: Val, name: str, real: Any) -> None:
        self.cap = cap
        self.base = base
        self.name = name
        self.real = real

    @property
    def obj(self) -> Any:
        return self.base.obj

    def __repr__(self) -> str:
        return f"Read({type(self.base.obj).__name__}.{self.name})"


AttrHandler = Callable[[FrameMonitor, Read], Val]


def attr_rule(name: str, applies: Callable[[Read], Any]) -> Callable[[AttrHandler], AttrHandler]:
    """Register the decorated function as the attribute rule ``name``: it returns the shadow
    of the attribute for every read ``applies`` accepts."""
    return ATTR_RULES.register(name, applies)


def load_attr(m: FrameMonitor, base: Val, name: str, real: Any) -> Val:
    """The shadow of ``base.name`` whose real value is ``real``: the first rule that applies."""
    read = Read(m.cap, base, name, real)
    for rule in ATTR_RULES:
        if rule.applies(read):
            val: Val = rule.handle(m, read)
            return val
    raise m.unsupported(f"attribute {name!r} of a {type(base.obj).__name__} created during the run")


# ---------------------------------------------------------------------- class lookups
_HEAPTYPE = 1 << 9


def mutable_class(cls: Any) -> bool:
    """A class whose attributes a program may replace between calls: any class defined in
    Python, a library's included (``nn.Linear.forward = ...``, the way PEFT- and Liger-style
    libraries patch models)."""
    return isinstance(cls, type) and bool(cls.__flags__ & _HEAPTYPE)


def user_class(cls: Any) -> bool:
    """A mutable class of the program's own (not of the libraries in FROZEN_MODULE_ROOTS)."""
    return mutable_class(cls) and (
        str(getattr(cls, "__module__", "")).split(".")[0] not in FROZEN_MODULE_ROOTS
    )


def static_lookup(cls: type, name: str) -> Any:
    for k in cls.__mro__:
        found = vars(k).get(name, MISSING)
        if found is not MISSING:
            return found
    return MISSING


MISSING = object()


def guard_class_attr(cap: Capture, cls: Any, name: str) -> None:
    """CPython looks ``name`` up through ``cls``'s MRO on every call: guard what the lookup
    gives (``cls.name``: a function, a property, a value), so a method replaced on the
    class, a base, or shadowed in a subclass misses."""
    if not mutable_class(cls):
        return
    known = cap.known(cls)
    if known is not None and not known.const and not known.external:
        return  # a class the run made: what it holds is followed
    desc = static_lookup(cls, name)
    if isinstance(desc, staticmethod):
        desc = desc.__func__
    if not (isinstance(desc, types.FunctionType | property) or is_value_type(desc)):
        if desc is not MISSING and hasattr(type(desc), "__get__"):
            # a descriptor object of the program's (reading cls.name would run its
            # __get__): which object the class holds, looked up without running it
            root = cap.root(Const(cls), cls)
            assert root.node is not None
            cap.graph.observe(root.node, GuardKind.CUSTOM, Outcome(ClassEntry(name), desc))
        return
    found = cap.child(cap.root(Const(cls), cls), Attr(name), desc)
    if is_value_type(desc):
        cap.observe(found)
    else:
        cap.observe_identity(found)  # (a property is a plain object: its type is not enough)


def guard_method(cap: Capture, base: Val, name: str, func: Any) -> None:
    """``base.name`` found the Python function ``func`` on ``base``'s class (a method,
    bound by the read): guard that the read finds it again (``base.name.__func__``), which
    also misses when the instance's own ``__dict__`` shadows it."""
    obj = base.obj
    if not isinstance(func, types.FunctionType) or not mutable_class(type(obj)):
        return
    if not (base.external and base.node is not None and hasattr(obj, "__dict__")):
        guard_class_attr(cap, type(obj), name)
        return
    existing = cap.graph.lookup(base.node, Attr(name))
    if existing is not None and existing.meta.get("val") is not None:
        method = cast(Val, existing.meta["val"])
    else:
        method = cap.child(base, Attr(name), types.MethodType(func, obj))
    if type(method.obj) is types.MethodType and method.obj.__func__ is func:
        cap.observe(cap.child(method, Attr("__func__"), func))
    else:
        guard_class_attr(cap, type(obj), name)


# ---------------------------------------------------------------------- constants and known
@attr_rule(
    "library module",
    lambda r: (
        isinstance(r.obj, types.ModuleType) and r.obj.__name__.split(".")[0] in FROZEN_MODULE_ROOTS
    ),
)
def _library_module(m: FrameMonitor, r: Read) -> Val:
    """An attribute of torch's or the stdlib's modules. Libraries change their own state
    (``torch.backends.cudnn.benchmark``, ``warnings.filters``) and programs patch them
    (``torch.nn.ReLU = MyReLU``, ``F.gelu = fast_gelu``), so the read is guarded like any
    other: an entry of the module's dict where it lives (by identity; a value by value; a list
    or dict, or an object holding settings, is followed as state), and an attribute found past
    the dict (a property of the module's class, as torch.backends' flags are, or a module
    ``__getattr__`` such as ``torch._VF``'s) by what reading it again gives (a value exactly,
    an object by identity)."""
    cap, real, module = m.cap, r.real, r.obj
    cap.observe_identity(r.base)
    root = cap.root(Const(module), module)
    if r.name in vars(module):
        found = cap.child(root, Attr(r.name), real)
        if isinstance(real, _LIBRARY_STATE) or _library_object(real):
            return found  # (what the program reads of it is guarded as it reads it)
        if type(real) in _SCALARS:
            cap.observe(found)
        else:
            cap.observe_identity(found)  # (a dtype or device is one object: which one it is)
        return cap.new(real, const=True)
    assert root.node is not None
    cap.graph.observe(root.node, GuardKind.CUSTOM, Outcome(AttrRead(r.name), real))
    return cap.new(real, const=True)


# plain values a library keeps in its module (a flag, a size, a name): guarded by value
_SCALARS = (bool, int, float, complex, str, bytes, type(None))

# a library's own mutable state, read from its module (``warnings.filters``, a registry dict)
_LIBRARY_STATE = (list, dict, set, collections.OrderedDict, collections.defaultdict)


def _library_object(obj: Any) -> bool:
    """An instance a library keeps its settings on (``torch.backends.cuda.matmul``, a logger):
    not a value, class, module or function, whose attributes are the settings."""
    return not (
        is_value_type(obj)
        or isinstance(obj, type | types.ModuleType | types.FunctionType | types.BuiltinFunctionType)
        or callable(obj)
        or obj is None
    )


class NamedCheck:
    """A guard's outcome function over one name: equal to another of its kind and name (so a
    record's checks are kept once); ``__call__`` is the subclass's."""

    __slots__ = ("name",)
    label = "check"

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    def __repr__(self) -> str:
        return f"{self.label}({self.name!r})"


class ClassEntry(NamedCheck):
    """What a class holds under ``name`` through its MRO, found without running a descriptor."""

    __slots__ = ()
    label = "class_entry"

    def __call__(self, cls: Any) -> Any:
        return static_lookup(cls, self.name)


class AttrRead(NamedCheck):
    """``getattr(obj, name)``: an attribute read again by the guard, for attributes computed on
    each read."""

    __slots__ = ()
    label = "attr_read"

    def __call__(self, obj: Any) -> Any:
        return getattr(obj, self.name)


@attr_rule("known attribute", lambda r: r.base.attrs is not None and r.name in r.base.attrs)
def _known_attribute(m: FrameMonitor, r: Read) -> Val:
    assert r.base.attrs is not None
    found = r.base.attrs[r.name]
    real = r.real
    if found.obj is not real and not (is_value_type(real) and found.obj == real):
        raise m.unsupported(f"attribute {r.name!r} changed where the monitor did not see it")
    return found


@attr_rule("constant", lambda r: r.base.const)
def _of_constant(m: FrameMonitor, r: Read) -> Val:
    obj, real, cap = r.obj, r.real, m.cap
    if (
        isinstance(obj, type)
        and is_value_type(real)
        and any(r.name in vars(k) for k in obj.__mro__)
    ):
        # a setting kept on a library class (``Distribution._validate_args``, changed by
        # ``set_default_validate_args``): guarded where it lives, not frozen
        return cap.child(cap.root(Const(obj), obj), Attr(r.name), real)
    return cap.new(real, const=True)


@attr_rule("from outside", lambda r: r.base.external)
def _from_outside(m: FrameMonitor, r: Read) -> Val:
    base, obj, real, cap = r.base, r.obj, r.real, m.cap
    cap.observe_type(base)
    if isinstance(obj, type):
        cap.observe_identity(base)  # class attributes depend on which class this is
    if (
        type(real) is types.MethodType
        and real.__self__ is obj
        and r.name not in getattr(obj, "__dict__", {})
    ):
        # a method of the (guarded) type, bound anew on every read: what the lookup found
        guard_method(cap, base, r.name, real.__func__)
        return Val(real, payload=BoundMethod(base))
    if (
        type(real) in (types.MethodType, types.BuiltinMethodType)
        and isinstance(obj, type)
        and real.__self__ is obj
    ):
        # a classmethod read from a guarded class (``dict.fromkeys``: bound anew on each read)
        return Val(real, payload=BoundMethod(base))
    return cap.child(base, Attr(r.name), real)


@attr_rule("of a scalar expression", lambda r: r.base.expr is not None or is_value_type(r.obj))
def _of_scalar_expression(m: FrameMonitor, r: Read) -> Val:
    return Val(r.real, expr=(getattr, (r.base, m.cap.const(r.name))))


def _namedtuple_field(r: Read) -> bool:
    fields = getattr(type(r.obj), "_fields", None) or getattr(type(r.obj), "n_fields", None)
    return isinstance(r.base.items, list) and isinstance(fields, tuple) and r.name in fields


@attr_rule("namedtuple field", _namedtuple_field)
def _field(m: FrameMonitor, r: Read) -> Val:
    fields = getattr(type(r.obj), "_fields", None) or getattr(type(r.obj), "n_fields", None)
    assert isinstance(fields, tuple) and isinstance(r.base.items, list)
    item: Val = r.base.items[fields.index(r.name)]
    return item


def _bound_to_built(r: Read) -> bool:
    real, obj = r.real, r.obj
    if type(real) in (types.MethodType, types.BuiltinMethodType) and real.__self__ is obj:
        return True
    return type(real) is types.MethodType and real.__self__ is type(obj) and not r.base.external


@attr_rule("bound method of a built object", _bound_to_built)
def _bound_method(m: FrameMonitor, r: Read) -> Val:
    # (what the lookup through its class found, guarded: a method replaced on the class
    # between calls misses)
    guard_class_attr(m.cap, type(r.obj), r.name)
    if r.real.__self__ is r.obj:
        return Val(r.real, payload=BoundMethod(r.base))  # (``kwds.pop`` of a dict the run built)
    # a classmethod read through an object the run built (``qt._make``): bound to its class
    # (the shadow of a class the run made itself: a new class on every call)
    cls = m.cap.known(type(r.obj))
    return Val(r.real, payload=BoundMethod(cls if cls is not None else m.cap.const(type(r.obj))))


@attr_rule("known object", lambda r: r.cap.known(r.real) is not None)
def _known_object(m: FrameMonitor, r: Read) -> Val:
    known = m.cap.known(r.real)
    assert known is not None
    return known


_STRUCTSEQ_LIKE: tuple[type, ...] = (torch.finfo, torch.iinfo)


@attr_rule("structseq value", lambda r: is_value_type(r.real) and type(r.obj) in _STRUCTSEQ_LIKE)
def _structseq_value(m: FrameMonitor, r: Read) -> Val:
    return m.cap.new(r.real, const=True)
