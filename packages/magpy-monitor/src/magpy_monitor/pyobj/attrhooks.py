"""Objects from outside whose class has its own Python ``__getattribute__``.

Every attribute read of such an object runs the hook (transformers' configs: an alias map,
then a check for per-layer attributes, then ``super().__getattribute__(key)``). The hook is
followed like a call, so what it reads is guarded where it is stored: the plain reads it makes
through ``object.__getattribute__`` become ``ObjAttr`` paths, which the guard reads the same
way (no hook runs in the guard, and its memo can keep them), a property it finds is followed,
and a name it does not find is guarded as absent (``NoPlainAttr``). ``hasattr`` and
``getattr`` with a default follow it too: where the hook raises ``AttributeError`` and the
native caller catches it, the result is ``False`` or the default.

A class's Python ``__getattr__`` (diffusers' ``ModelMixin``/``ConfigMixin``: a config name
first, then ``super().__getattr__(name)``) runs only where the plain lookup misses: for such a
name (``missing_hook``) it is followed the same way, with that miss guarded
(``NoPlainAttr``). So ``self.conv_in`` of a diffusers model is recorded as what the hook read
(``self.__dict__["_modules"]["conv_in"]``, which ``Module.__getattr__`` found), a path the
guard's memo keeps, rather than an attribute the guard reads again, hook and all, on every
call. (``Module.__getattr__`` itself is modelled where it finds the name,
``libs.torch.modattrs``.)
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import Attr, GuardKind, NoPlainAttr, ObjAttr, plain_attr_absent

from ..core import registry
from ..core.attributes import guard_class_attr, load_attr
from ..core.frame import FrameMonitor, Inst
from ..core.registry import METHOD_HANDLERS
from ..core.values import BoundMethod, Instance, Val
from .attrreads import external_attr_followed, follow_getter, follow_read, python_descriptor
from .instances import lookup, native_base

__all__ = [
    "attribute_hook",
    "follow_attribute",
    "hooked",
    "hooked_getattr",
    "hooked_hasattr",
    "hooked_missing",
    "missing_hook",
]

Outputs = Callable[[list[Any], Val], list[Val]]
Raised = Callable[[list[Any], BaseException], list[Val]]


def attribute_hook(obj: Any) -> types.FunctionType | None:
    """The Python ``__getattribute__`` reading an attribute of ``obj`` runs, if its class has
    one and no ``__getattr__`` (which would run when the hook raises)."""
    if isinstance(obj, type | types.ModuleType):
        return None
    cls = type(obj)
    hook = lookup(cls, "__getattribute__")
    if not isinstance(hook, types.FunctionType) or lookup(cls, "__getattr__") is not None:
        return None
    return hook


def hooked(base: Val) -> types.FunctionType | None:
    """The hook reading an attribute of ``base`` runs, if ``base`` is from outside."""
    if not base.external or base.node is None:
        return None
    return attribute_hook(base.obj)


# native bases whose attribute lookup is CPython's generic one (the class dict, then the
# instance's): below them a Python ``__getattr__`` runs exactly where that lookup misses
_GENERIC_BASES = (object, dict, list, tuple, set, frozenset, collections.OrderedDict)


def missing_hook(obj: Any, name: str) -> types.FunctionType | None:
    """The Python ``__getattr__`` reading ``obj.name`` runs: its class has one (not
    ``Module.__getattr__``: see ``libs.torch.modattrs``) over CPython's generic lookup, and
    neither the class (its MRO) nor the object's own ``__dict__`` has ``name``."""
    if isinstance(obj, type | types.ModuleType):
        return None
    cls = type(obj)
    hook = lookup(cls, "__getattr__")
    if not isinstance(hook, types.FunctionType) or hook is torch.nn.Module.__getattr__:
        return None
    base = native_base(cls)
    if base not in _GENERIC_BASES or lookup(cls, "__getattribute__") is not lookup(
        base, "__getattribute__"
    ):
        return None  # (a Python __getattribute__ as well: ``attribute_hook``'s, unsupported)
    return hook if plain_attr_absent(obj, name) else None


def hooked_missing(base: Val, name: str) -> types.FunctionType | None:
    """The ``__getattr__`` reading ``base.name`` runs, if ``base`` is from outside."""
    if not base.external or base.node is None:
        return None
    return missing_hook(base.obj, name)


@registry.EXTERNAL_ATTR_FOLLOWED.provide
def follow_attribute(
    m: FrameMonitor,
    inst: Inst,
    base: Val,
    name: str,
    *,
    method: bool,
    outputs: Outputs | None = None,
    raised: Raised | None = None,
) -> bool:
    """LOAD_ATTR/LOAD_METHOD/``getattr``/``hasattr`` on an object from outside that runs
    Python to read ``name``: its class's own ``__getattribute__``, else a property or
    descriptor's getter (``attrreads.external_attr_followed``), followed like a call."""
    hook = hooked(base)
    if hook is not None:
        m.cap.observe_type(base)
        guard_class_attr(m.cap, type(base.obj), "__getattribute__")
    else:
        hook = hooked_missing(base, name)
        if hook is None:
            return external_attr_followed(m, inst, base, name, method=method, outputs=outputs)
        assert base.node is not None
        m.cap.observe_type(base)
        guard_class_attr(m.cap, type(base.obj), "__getattr__")
        # (the plain lookup misses, so the hook runs: nothing of that name on the class or in
        # the object's own dict, checked without running the object's code)
        m.cap.graph.observe(base.node, GuardKind.CUSTOM, NoPlainAttr(name))
    args = [base, m.cap.const(name)]
    follow_read(m, inst, hook, args, method=method, outputs=outputs, raised=raised)
    return True


def hooked_hasattr(m: FrameMonitor, inst: Inst, base: Val, name: str) -> bool:
    """``hasattr(base, name)`` through the class's own ``__getattribute__`` or ``__getattr__``
    (True: followed)."""
    true, false = m.cap.const(True), m.cap.const(False)

    def absent(real: list[Any], exc: BaseException) -> list[Val]:
        if not isinstance(exc, AttributeError) or real[0] is not False:
            raise m.unsupported(f"hasattr() through a __getattribute__ raising {exc!r}")
        return [false]

    return _follow_hook(m, inst, base, name, lambda r, g: [true], absent)


def hooked_getattr(m: FrameMonitor, inst: Inst, base: Val, name: str, default: Val) -> bool:
    """``getattr(base, name, default)`` through the class's own ``__getattribute__`` or
    ``__getattr__``."""

    def absent(real: list[Any], exc: BaseException) -> list[Val]:
        if not isinstance(exc, AttributeError) or real[0] is not default.obj:
            raise m.unsupported(f"getattr() through a __getattribute__ raising {exc!r}")
        return [default]

    return _follow_hook(m, inst, base, name, None, absent)


def _follow_hook(
    m: FrameMonitor, inst: Inst, base: Val, name: str, outputs: Outputs | None, raised: Raised
) -> bool:
    """Follow the attribute hook of ``base``'s class for ``hasattr``/``getattr`` with a
    default: an object from outside, or one the run built (a configuration it copied; its
    class is known to the record); also the ``__getattr__`` of an object from outside that
    lacks ``name`` (``missing_hook``)."""
    if hooked(base) is not None or hooked_missing(base, name) is not None:
        return follow_attribute(m, inst, base, name, method=False, outputs=outputs, raised=raised)
    hook = attribute_hook(base.obj) if registry.IS_PYOBJ.impl(base) else None
    if hook is None:
        return False
    follow_read(
        m, inst, hook, [base, m.cap.const(name)], method=False, outputs=outputs, raised=raised
    )
    return True


def _object_getattribute(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``object.__getattribute__(obj, name)`` (``super().__getattribute__(name)`` inside a
    Python ``__getattribute__``): the plain read, with no hook."""
    if kw or len(pos) != 2 or type(pos[1].obj) is not str:
        raise m.unsupported("object.__getattribute__ with unusual arguments")
    m.cap.observe(pos[1])
    base, name = pos[0], pos[1].obj
    found = python_descriptor(base.obj, name)
    if hooked(base) is None:
        state = base.payload(Instance)
        if found is not None and state is not None:  # a property of an object built here
            guard_class_attr(m.cap, type(base.obj), name)
            follow_getter(m, inst, found, base, state.cls_val, method=False)
            return
        m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name, real[0])])
        return
    if found is not None:  # a property the plain read finds: its getter, followed
        m.cap.observe_type(base)
        guard_class_attr(m.cap, type(base.obj), name)
        follow_getter(m, inst, found, base, m.cap.const(type(base.obj)), method=False)
        return
    p = m.expect_outputs(inst, 1, lambda real: [_plain_read(m, base, name, real[0])])
    p.on_raise = lambda exc: _not_found(m, base, name, exc)


def _plain_read(m: FrameMonitor, base: Val, name: str, real: Any) -> Val:
    """What ``object.__getattribute__(base, name)`` gave: an ``ObjAttr`` path (a method of
    the class is bound anew on each read: the function is guarded)."""
    cap = m.cap
    cap.observe_type(base)
    if type(real) is types.MethodType and real.__self__ is base.obj:
        guard_class_attr(cap, type(base.obj), name)
        return Val(real, payload=BoundMethod(base))
    written = base.attrs.get(name) if base.attrs is not None else None
    if written is not None and (base.node, Attr(name)) in cap.written and written.obj is real:
        return written  # (stored by the run, through the class's ``__setattr__``)
    return cap.child(base, ObjAttr(name), real)


def _not_found(m: FrameMonitor, base: Val, name: str, exc: BaseException) -> None:
    if not isinstance(exc, AttributeError):
        raise m.unsupported(f"object.__getattribute__ raised {type(exc).__name__}")
    assert base.node is not None
    m.cap.observe_type(base)
    m.cap.graph.observe(base.node, GuardKind.CUSTOM, NoPlainAttr(name))


METHOD_HANDLERS.setdefault((object, "__getattribute__"), _object_getattribute)
