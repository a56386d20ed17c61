"""Attributes: LOAD_ATTR, LOAD_METHOD, STORE_ATTR and DELETE_ATTR.

What a read means is decided by ``core.attributes.load_attr``. Where reading or writing the
attribute runs Python code of the object's class (a property, a ``__getattr__``, a
``__setattr__``), that code is followed like a call: the object model (``pyobj.instances``)
says so through the registry's ``*_FOLLOWED`` hooks. A store into, or deletion from, an object
the mock rebuilds by calling its class again (a dataclass built in the run) is one of the
changes the mock makes again (``CHANGE_REPLAYED``, ``pyobj.replayed``).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ..core import registry
from ..core.attributes import guard_method, load_attr
from ..core.frame import FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import Construction, Val
from ..core.valuetypes import library_module
from ..cpython.frameio import NULL

__all__ = ["store_attr"]


@opcode("LOAD_ATTR")
def _load_attr(m: FrameMonitor, inst: Inst) -> None:
    (base,) = m.pop()
    base = registry.REFERENT.impl(base) or base  # (a weak proxy: its referent's attribute)
    name = inst.argval
    if registry.BUILT_OBJECT.impl(base) and registry.LOAD_ATTR_FOLLOWED.impl(m, inst, base, name):
        return  # a property of an object built in the run: its getter is followed
    if registry.EXTERNAL_ATTR_FOLLOWED.impl(m, inst, base, name, method=False):
        return  # a property of an object from outside: likewise
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name, real[0])])


@opcode("LOAD_METHOD")
def _load_method(m: FrameMonitor, inst: Inst) -> None:
    (base,) = m.pop()
    base = registry.REFERENT.impl(base) or base  # (a weak proxy: its referent's attribute)
    name = inst.argval
    if registry.BUILT_OBJECT.impl(base) and registry.LOAD_ATTR_FOLLOWED.impl(
        m, inst, base, name, method=True
    ):
        return  # a Python __getattr__ or a property of an object built in the run
    if registry.EXTERNAL_ATTR_FOLLOWED.impl(m, inst, base, name, method=True):
        return  # ``self.prop(x)``: a property of an object from outside giving a callable

    def make(real: list[Any]) -> list[Val]:
        if real[0] is NULL:  # [NULL, attr]
            return [Val(NULL, const=True), load_attr(m, base, name, real[1])]
        if real[1] is NULL:  # [attr, NULL] (3.13)
            return [load_attr(m, base, name, real[0]), Val(NULL, const=True)]
        if base.external:
            m.cap.observe_type(base)
        guard_method(m.cap, base, name, real[0])  # the lookup through the class's MRO
        return [m.cap.const(real[0]), base]

    m.expect_outputs(inst, 2, make)


@opcode("STORE_ATTR")
def _store_attr(m: FrameMonitor, inst: Inst) -> None:
    base, value = m.pop(2)[::-1]
    base = registry.REFERENT.impl(base) or base  # (a weak proxy: its referent's attribute)
    name = inst.argval
    if base.payload(Construction) is not None:  # a dataclass built in the run: replayed
        registry.CHANGE_REPLAYED.impl(m, inst, base, "attr", m.cap.const(name), value)
        return
    if registry.IS_PYOBJ.impl(base) and registry.STORE_ATTR_FOLLOWED.impl(
        m, inst, base, name, value
    ):
        return  # a Python __setattr__ or property setter of an object built in the run
    store_attr(m, base, name, value)
    m.expect_outputs(inst, 0, lambda real: [])


def store_attr(m: FrameMonitor, base: Val, name: str, value: Val) -> None:
    """``base.name = value`` (STORE_ATTR or ``setattr``), about to run natively (an object
    the mock rebuilds by calling its class again is ``CHANGE_REPLAYED``'s)."""
    if isinstance(base.obj, torch.Tensor):
        registry.STORE_TENSOR_ATTR.impl(m, base, name, value)  # p.data = new, t.requires_grad
        return
    if registry.IS_PYOBJ.impl(base) and not registry.PLAIN_STORE.impl(type(base.obj), name):
        raise m.unsupported(f"setattr on a {type(base.obj).__name__} runs Python code")
    if isinstance(base.obj, types.ModuleType) and library_module(base.obj):
        # torch.backends.cudnn.benchmark = True: a property setter into native state, or a
        # library's own global; the store runs eagerly on every call
        raise m.unsupported(f"sets {base.obj.__name__}.{name}: the state of a library")
    m.cap.set_attr(base, name, value)


@opcode("DELETE_ATTR")
def _delete_attr(m: FrameMonitor, inst: Inst) -> None:
    (base,) = m.pop()
    base = registry.REFERENT.impl(base) or base  # (a weak proxy: its referent's attribute)
    if base.payload(Construction) is not None:  # a dataclass built in the run: replayed
        registry.CHANGE_REPLAYED.impl(m, inst, base, "delattr", m.cap.const(inst.argval), None)
        return
    if registry.IS_PYOBJ.impl(base) and registry.DELETE_ATTR_FOLLOWED.impl(
        m, inst, base, inst.argval
    ):
        return  # a property's deleter, of an object built in the run
    m.cap.del_attr(base, inst.argval)
    m.expect_outputs(inst, 0, lambda real: [])
