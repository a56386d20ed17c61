"""The call and attribute rules of the Python object model (see ``core.registry``).

Each rule names a case of ``core.dispatch``'s protocols that needs what this layer knows:
context managers, dataclasses and namedtuples built by the run, plain Python classes and their
instances, ``super()``, classes made by the run. Their place in the order is declared in
``core.registry``; this module only says when each applies and what it does.
"""

from __future__ import annotations

import types
from typing import Any

from ..core.attributes import Read, attr_rule, load_attr, static_lookup
from ..core.calls import inline
from ..core.dispatch import Call, call_rule
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILT_OBJECT, BUILT_OBJECT_TRUTH, MISSING_ITEM, MODELLED_MISSING
from ..core.values import Instance, Val
from .classes import MadeClass, class_attr
from .collections import missing_item, modelled_missing
from .contexts import context_exit, is_python_context_class
from .highorder import factory_missing_item
from .instances import (
    construct_object,
    instance_dict,
    is_plain_class,
    is_pyobj,
    lookup,
    python_meta_call,
)
from .objects import (
    construct,
    construct_namedtuple,
    ctor_of,
    follow_tuple_new,
    is_namedtuple_class,
    is_namedtuple_replace,
    is_replayable_class,
    item_shadow,
    namedtuple_replace,
    python_tuple_new,
)
from .special import SuperProxy, super_attr

__all__: list[str] = []


# ---------------------------------------------------------------------- call rules
@call_rule("context exit", lambda c: True)
def _context_exit(m: FrameMonitor, inst: Inst, c: Call) -> Call | None:
    """``__exit__`` of a context manager the monitor models; other calls go on."""
    return None if context_exit(m, inst, c.fn_val, c.pos) else c


@call_rule("replayable class", lambda c: is_replayable_class(c.fn) and not _plain_class(c))
def _replayable_class(m: FrameMonitor, inst: Inst, c: Call) -> None:
    construct(m, inst, c.fn_val, c.pos, c.kwargs)


@call_rule("namedtuple class", lambda c: is_namedtuple_class(c.fn))
def _namedtuple_class(m: FrameMonitor, inst: Inst, c: Call) -> None:
    construct_namedtuple(m, inst, c.fn_val, c.pos, c.kwargs)


@call_rule("namedtuple _replace", lambda c: is_namedtuple_replace(c.fn))
def _namedtuple_replace(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    namedtuple_replace(m, inst, c.pos, c.kwargs)  # nt._replace(x=...): native map(kwds.pop, ...)


@call_rule("tuple __new__", lambda c: python_tuple_new(c.fn) is not None)
def _tuple_new(m: FrameMonitor, inst: Inst, c: Call) -> None:
    follow_tuple_new(m, inst, c.fn_val, c.pos, c.kwargs)  # PackedSequence(data, batch_sizes)


@call_rule(
    "metaclass __call__",
    lambda c: isinstance(c.fn, type) and python_meta_call(c.fn) is not None,
)
def _metaclass_call(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)  # a metaclass's Python __call__ (a registry, a singleton)
    meta_call = python_meta_call(c.fn)
    inline(m, inst, m.cap.const(meta_call), [c.fn_val, *c.pos], c.kwargs)


def _plain_class(c: Call) -> bool:
    fn: Any = c.fn
    return isinstance(fn, type) and (is_python_context_class(fn) or is_plain_class(fn))


@call_rule("plain class", _plain_class)
def _construct_object(m: FrameMonitor, inst: Inst, c: Call) -> None:
    construct_object(m, inst, c.fn_val, c.pos, c.kwargs)  # `with Timer():`, `ModelOutput()`


# ---------------------------------------------------------------------- attribute rules
@attr_rule("super()", lambda r: r.base.payload(SuperProxy) is not None)
def _super_attr(m: FrameMonitor, r: Read) -> Val:
    return super_attr(m, r.base, r.name, r.real)


@attr_rule("replayed object", lambda r: ctor_of(r.base) is not None)
def _replayed_object(m: FrameMonitor, r: Read) -> Val:
    return item_shadow(m, r.real, f"{type(r.obj).__name__}.{r.name}", ctor_of(r.base))


def _class_attribute(r: Read) -> bool:
    obj = r.obj
    # (a name the class lacks is MISSING there: a None ``__getattr__`` gave is no class attribute)
    return (
        is_pyobj(r.base) and r.name not in vars(obj) and static_lookup(type(obj), r.name) is r.real
    )


@attr_rule("class attribute of an instance", _class_attribute)
def _class_attribute_of_instance(m: FrameMonitor, r: Read) -> Val:
    return load_attr(m, r.base.require(Instance).cls_val, r.name, r.real)  # a class attribute


@attr_rule("instance __dict__", lambda r: is_pyobj(r.base) and r.name == "__dict__")
def _instance_dict(m: FrameMonitor, r: Read) -> Val:
    return instance_dict(m, r.base, r.real)


@attr_rule("made class", lambda r: r.base.payload(MadeClass) is not None)
def _made_class_attr(m: FrameMonitor, r: Read) -> Val:
    return class_attr(m, r.base, r.name, r.real)


# ---------------------------------------------------------------------- hooks
@BUILT_OBJECT.provide
def _built_object(v: Val) -> bool:
    return ctor_of(v) is not None or is_pyobj(v)


@BUILT_OBJECT_TRUTH.provide
def _built_object_truth(v: Val) -> bool:
    """``bool(v)`` of an object built in the run follows from its shadow: no Python
    ``__bool__``/``__len__``, and its items (if a mapping) are known."""
    if not is_pyobj(v):
        return False
    cls = type(v.obj)
    python = (types.FunctionType, types.MethodType)
    if isinstance(lookup(cls, "__bool__"), python) or isinstance(lookup(cls, "__len__"), python):
        return False
    return isinstance(v.items, dict) or not hasattr(cls, "__len__")


def _missing_item(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    factory = getattr(container.obj, "default_factory", None)
    if isinstance(factory, types.FunctionType) and modelled_missing(container.obj, key.obj):
        factory_missing_item(m, inst, container, key)  # (GradScaler's per-optimizer states)
    else:
        missing_item(m, inst, container, key)


MISSING_ITEM.provide(_missing_item)
MODELLED_MISSING.provide(modelled_missing)
