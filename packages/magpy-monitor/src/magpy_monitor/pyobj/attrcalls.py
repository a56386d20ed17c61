"""The attribute builtins: ``getattr``, ``hasattr``, ``setattr`` and ``delattr``.

They mean what the attribute opcodes mean (``bytecode/attributes.py``): a read through a class's
own ``__getattribute__``, ``__getattr__`` or a property follows it (``attrhooks``,
``instances``); ``hasattr`` of a name an object from outside does not have (and no hook
decides) is guarded absent; of an object built in the run, its own attributes are the
shadow's (every store and deletion followed) and the class decides the rest (its having the
name or not guarded).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from magpy_refgraph import Const, GuardKind

from ..bytecode.attributes import store_attr
from ..core import registry
from ..core.attributes import guard_class_attr, load_attr, mutable_class
from ..core.frame import FrameMonitor, Inst
from ..core.registry import register_builtin
from ..core.values import Construction, Instance, Val
from ..core.valuetypes import is_value_type
from .attrhooks import (
    attribute_hook,
    follow_attribute,
    hooked,
    hooked_getattr,
    hooked_hasattr,
    hooked_missing,
)
from .attrreads import (
    class_of,
    external_attr_followed,
    follow_getter,
    follow_read,
    followed_here,
    own_state,
    plainly_found,
    python_descriptor,
)
from .classes import MadeClass
from .instances import lookup
from .replayed import change

__all__: list[str] = []


@register_builtin(getattr)
def _getattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    base, name = registry.REFERENT.impl(pos[0]) or pos[0], pos[1]  # (a weak proxy: its referent)
    m.cap.observe(name)
    default = pos[2] if len(pos) == 3 else None
    if type(name.obj) is str:  # its class's own __getattribute__ or __getattr__
        if default is not None and hooked_getattr(m, inst, base, name.obj, default):
            return
        if (
            default is None
            and (hooked(base) or hooked_missing(base, name.obj))
            and follow_attribute(m, inst, base, name.obj, method=False)
        ):
            return
        if _missing_followed(m, inst, base, name.obj, default):
            return
        if (
            default is None
            and registry.BUILT_OBJECT.impl(base)
            and registry.LOAD_ATTR_FOLLOWED.impl(m, inst, base, name.obj)
        ):
            return  # ``getattr(cache, "is_compileable")``: a property, object built here
    if python_descriptor(base.obj, name.obj) is not None:
        # (a getter that raises AttributeError makes getattr give the default: that stops
        # capture, see external_attr_followed)
        if external_attr_followed(m, inst, base, name.obj, method=False):
            return
        if _built_getter(m, inst, base, name.obj, None):
            return  # ``getattr(cache, "is_compileable", False)``: a property, object built here
        if default is not None:  # (asking here would run the getter a second time)
            raise m.unsupported("getattr() with a default of an attribute a Python getter gives")
    if default is not None and not hasattr(base.obj, name.obj):
        _hasattr_guard(m, base, name.obj, False)
        m.push(default)
        m.expect_outputs(inst, 0, lambda real: [])
        m.pop()
        m.push(default)
        return
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name.obj, real[0])])


def _missing_followed(
    m: FrameMonitor, inst: Inst, base: Val, name: str, default: Val | None, *, has: bool = False
) -> bool:
    """``getattr(obj, name[, default])`` or ``hasattr`` (``has``) of an object built in the run
    that does not hold ``name``, nor its class, whose class has a Python ``__getattr__``: the
    hook is followed (True); its ``AttributeError`` gives the default, or False. The class's
    lacking the name is guarded."""
    cls = type(base.obj)
    hook = lookup(cls, "__getattr__")
    if (
        not registry.BUILT_OBJECT.impl(base)
        or not isinstance(hook, types.FunctionType)
        or attribute_hook(base.obj) is not None
        or plainly_found(base.obj, name)
        or not followed_here(base, hook)
        or not _class_has(m, class_of(m, base), name, False)
    ):
        return False
    true = m.cap.const(True)
    fallback = m.cap.const(False) if has else default

    def absent(real: list[Any], exc: BaseException) -> list[Val]:
        if not isinstance(exc, AttributeError) or fallback is None:
            raise m.unsupported(f"{cls.__name__}.__getattr__ raised {type(exc).__name__}")
        return [fallback]

    outputs = (lambda real, got: [true]) if has else None
    args = [base, m.cap.const(name)]
    follow_read(m, inst, hook, args, method=False, outputs=outputs, raised=absent)
    return True


def _hasattr_guard(m: FrameMonitor, base: Val, name: str, present: bool) -> None:
    cap = m.cap
    if base.external and base.node is not None:
        cap.observe_type(base)
        cap.graph.observe(base.node, GuardKind.HASATTR if present else GuardKind.NOT_HASATTR, name)
    elif isinstance(base.obj, torch.Tensor):
        pass  # a tensor the run computed: its attributes are its type's (and those it set)
    elif (
        not base.const
        and not is_value_type(base.obj)
        and (base.attrs is None or name not in base.attrs)
        and not _built_decides(m, base, name, present)
    ):
        raise m.unsupported("hasattr() on an object created during the run")


def _built_decides(m: FrameMonitor, base: Val, name: str, present: bool) -> bool:
    """``hasattr(obj, name)`` of an object built in the run that has no such attribute the
    shadow knows: a plain object (the shadow follows all its attributes, deletions included),
    a namedtuple (it has none of its own), or one the mock rebuilds by calling its class (what
    it holds of its own, its ``__dict__`` and slots, its construction and the changes the run
    made gave it, and the mock makes the same: ``pyobj.replayed``). A name it does not hold is
    its class's to decide (``_class_has``), unless its class runs Python to look it up (False:
    a break)."""
    cls = type(base.obj)
    if attribute_hook(base.obj) is not None:
        return False
    if lookup(cls, "__getattr__") is not None and not plainly_found(base.obj, name):
        return False  # (its __getattr__ would run: followed, ``_missing_followed``, or a break)
    if not mutable_class(cls) and not cls.__dictoffset__:
        return True  # (a builtin type's instance with no ``__dict__``: its fixed type decides)
    inst = base.payload(Instance)
    if inst is not None:
        if base.attrs is None:
            return False
        return _class_has(m, inst.cls_val, name, present)
    if _replayed_namedtuple(base):
        return _class_has(m, m.cap.root(Const(cls), cls), name, present)  # (fields: descriptors)
    if base.payload(Construction) is None:
        return False
    if own_state(base.obj, name):
        return True
    return _class_has(m, class_of(m, base), name, present)


def _class_has(m: FrameMonitor, cls_val: Val, name: str, present: bool) -> bool:
    """Whether the class ``cls_val`` has ``name`` (``present``) follows from guarded state
    (True): a class from outside has it or not guarded; a constant one decides; one the run
    made, by its namespace, then its bases' having it or not guarded."""
    cap = m.cap
    kind = GuardKind.HASATTR if present else GuardKind.NOT_HASATTR
    if cls_val.external and cls_val.node is not None:
        cap.graph.observe(cls_val.node, kind, name)
        return True
    made = cls_val.payload(MadeClass)
    if made is None:
        return cls_val.const
    if isinstance(made.namespace.items, dict) and name in made.namespace.items:
        return present
    bases = made.bases or [cap.const(object)]
    if present:  # (one base that has it is enough)
        bases = [next((b for b in bases if hasattr(b.obj, name)), bases[0])]
    return all(_class_has(m, b, name, present) for b in bases)


def _replayed_namedtuple(base: Val) -> bool:
    """A namedtuple built in the run: no ``__dict__``, every attribute is its class's."""
    ctor = base.payload(Construction)
    return (
        ctor is not None
        and ctor.cls is type(base.obj)
        and isinstance(base.obj, tuple)
        and (not hasattr(base.obj, "__dict__"))
    )


@register_builtin(hasattr)
def _hasattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    base, name = registry.REFERENT.impl(pos[0]) or pos[0], pos[1]  # (a weak proxy: its referent)
    m.cap.observe(name)
    if type(name.obj) is str and hooked_hasattr(m, inst, base, name.obj):
        return  # its class's own __getattribute__, followed
    if type(name.obj) is str and _missing_followed(m, inst, base, name.obj, None, has=True):
        return  # its class's own __getattr__, followed
    if python_descriptor(base.obj, name.obj) is not None:
        true = m.cap.const(True)  # (once the getter returned)
        if external_attr_followed(
            m, inst, base, name.obj, method=False, outputs=lambda r, g: [true]
        ):
            return
        if _built_getter(m, inst, base, name.obj, lambda r, g: [true]):
            return  # ``hasattr(cache, "is_sliding")``: a property of an object built here
        raise m.unsupported("hasattr() of an attribute a Python getter gives (it would run)")
    _hasattr_guard(m, base, name.obj, hasattr(base.obj, name.obj))
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


def _built_getter(m: FrameMonitor, inst: Inst, base: Val, name: str, outputs: Any) -> bool:
    """The Python getter of ``name`` on an object built in the run, followed (a getter that
    raises leaves the monitor without a result: capture stops there)."""
    found = python_descriptor(base.obj, name)
    if found is None or not registry.BUILT_OBJECT.impl(base) or not followed_here(base, found[0]):
        return False
    guard_class_attr(m.cap, type(base.obj), name)  # the descriptor the class holds now
    follow_getter(m, inst, found, base, class_of(m, base), method=False, outputs=outputs)
    return True


@register_builtin(setattr)
def _setattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``setattr(obj, name, value)``: like ``obj.name = value`` (STORE_ATTR)."""
    if len(pos) != 3 or kw or type(pos[1].obj) is not str:
        raise m.unsupported("setattr() with unusual arguments")
    m.cap.observe(pos[1])
    base, name, value = registry.REFERENT.impl(pos[0]) or pos[0], pos[1].obj, pos[2]
    if base.payload(Construction) is not None:  # a dataclass built in the run: replayed
        change(m, inst, base, "attr", pos[1], value, pushes=True)
        return
    if registry.IS_PYOBJ.impl(base) and registry.STORE_ATTR_FOLLOWED.impl(
        m, inst, base, name, value, pushes=True
    ):
        return  # a Python __setattr__ or property setter of an object built in the run
    store_attr(m, base, name, value)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(None)])


@register_builtin(delattr)
def _delattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``delattr(obj, name)``: like ``del obj.name`` (DELETE_ATTR)."""
    if len(pos) != 2 or kw or type(pos[1].obj) is not str:
        raise m.unsupported("delattr() with unusual arguments")
    m.cap.observe(pos[1])
    base = registry.REFERENT.impl(pos[0]) or pos[0]  # (a weak proxy: its referent)
    if base.payload(Construction) is not None:  # a dataclass built in the run: replayed
        change(m, inst, base, "delattr", pos[1], None, pushes=True)
        return
    if registry.IS_PYOBJ.impl(base) and registry.DELETE_ATTR_FOLLOWED.impl(
        m, inst, base, pos[1].obj, pushes=True
    ):
        return  # a property's deleter, of an object built in the run
    m.cap.del_attr(base, pos[1].obj)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(None)])


@register_builtin(vars)
def _vars(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``vars(obj)``: ``obj.__dict__`` (through the class's own ``__getattribute__``, if any)."""
    if len(pos) != 1 or kw:
        raise m.unsupported("vars() without exactly one argument (the caller's locals)")
    base = pos[0]
    if hooked(base) is not None and follow_attribute(m, inst, base, "__dict__", method=False):
        return
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, "__dict__", real[0])])
