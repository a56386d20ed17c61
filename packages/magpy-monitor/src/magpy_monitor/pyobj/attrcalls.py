"""The attribute builtins: ``getattr``, ``hasattr``, ``setattr`` and ``delattr``.

They mean what the attribute opcodes mean (``bytecode/attributes.py``): a read through a class's
own ``__getattribute__``, ``__getattr__`` or a property follows it (``attrhooks``,
``instances``); ``hasattr`` of a name an object from outside does not have (and no hook
decides) is guarded absent; of an object built in the run, its own attributes are the
shadow's (every store and deletion followed) and the class decides the rest (its having the
name or not guarded).
"""

from __future__ import annotations

from typing import Any

import torch

from magpy_refgraph import Const, GuardKind

from ..bytecode.attributes import store_attr, stored
from ..core import registry
from ..core.attributes import guard_class_attr, load_attr
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
from .instances import _follow_getter, external_attr_followed, lookup, python_descriptor

__all__: list[str] = []


@register_builtin(getattr)
def _getattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    base, name = pos[0], pos[1]
    m.cap.observe(name)
    if type(name.obj) is str:  # its class's own __getattribute__
        if len(pos) == 3 and hooked_getattr(m, inst, base, name.obj, pos[2]):
            return
        if (
            len(pos) == 2
            and (hooked(base) or hooked_missing(base, name.obj))
            and follow_attribute(m, inst, base, name.obj, method=False)
        ):
            return
    if python_descriptor(base.obj, name.obj) is not None:
        # (a getter that raises AttributeError makes getattr give the default: that stops
        # capture, see external_attr_followed)
        if external_attr_followed(m, inst, base, name.obj, method=False):
            return
        if registry.IS_PYOBJ.impl(base) and registry.LOAD_ATTR_FOLLOWED.impl(
            m, inst, base, name.obj
        ):
            return  # ``getattr(cache, "is_compileable", False)``: a property, object built here
        if len(pos) == 3:  # (asking here would run the getter a second time)
            raise m.unsupported("getattr() with a default of an attribute a Python getter gives")
    if len(pos) == 3 and not hasattr(base.obj, name.obj):
        _hasattr_guard(m, base, name.obj, False)
        m.push(pos[2])
        m.expect_outputs(inst, 0, lambda real: [])
        m.pop()
        m.push(pos[2])
        return
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name.obj, real[0])])


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
        and not _class_decides(m, base, name, present)
    ):
        raise m.unsupported("hasattr() on an object created during the run")


def _class_decides(m: FrameMonitor, base: Val, name: str, present: bool) -> bool:
    """``hasattr(obj, name)`` of a plain object built in the run that has no such attribute of
    its own (the shadow follows all of them, deletions included), or of a namedtuple built in
    the run (it has none of its own): its class decides, and the class's having it or not is
    guarded (True), unless the class runs Python to look attributes up or is itself built in
    the run (False)."""
    cls = type(base.obj)
    if attribute_hook(base.obj) is not None or lookup(cls, "__getattr__") is not None:
        return False
    inst = base.payload(Instance)
    if inst is None and _replayed_namedtuple(base):
        cls_val = m.cap.root(Const(cls), cls)  # (its fields are the class's descriptors)
    elif inst is None or base.attrs is None:
        return False
    else:
        cls_val = inst.cls_val
    if cls_val.external and cls_val.node is not None:
        kind = GuardKind.HASATTR if present else GuardKind.NOT_HASATTR
        m.cap.graph.observe(cls_val.node, kind, name)
        return True
    return cls_val.const


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
    base, name = pos
    m.cap.observe(name)
    if type(name.obj) is str and hooked_hasattr(m, inst, base, name.obj):
        return  # its class's own __getattribute__, followed
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
    """The Python getter of ``name`` on a plain object built in the run, followed (a getter
    that raises leaves the monitor without a result: capture stops there)."""
    state = base.payload(Instance)
    found = python_descriptor(base.obj, name)
    if state is None or found is None or not registry.IS_PYOBJ.impl(base):
        return False
    guard_class_attr(m.cap, type(base.obj), name)  # the descriptor the class holds now
    _follow_getter(m, inst, found, base, state.cls_val, method=False, outputs=outputs)
    return True


@register_builtin(setattr)
def _setattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``setattr(obj, name, value)``: like ``obj.name = value`` (STORE_ATTR)."""
    if len(pos) != 3 or kw or type(pos[1].obj) is not str:
        raise m.unsupported("setattr() with unusual arguments")
    m.cap.observe(pos[1])
    base, name, value = pos[0], pos[1].obj, pos[2]
    if registry.IS_PYOBJ.impl(base) and registry.STORE_ATTR_FOLLOWED.impl(
        m, inst, base, name, value, pushes=True
    ):
        return  # a Python __setattr__ or property setter of an object built in the run
    store_attr(m, base, name, value)
    m.expect_outputs(inst, 1, lambda real: stored(m, base, value, [m.cap.const(None)]))


@register_builtin(delattr)
def _delattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``delattr(obj, name)``: like ``del obj.name`` (DELETE_ATTR)."""
    if len(pos) != 2 or kw or type(pos[1].obj) is not str:
        raise m.unsupported("delattr() with unusual arguments")
    m.cap.observe(pos[1])
    m.cap.del_attr(pos[0], pos[1].obj)
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
