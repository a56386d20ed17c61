"""Attribute reads of objects that run their class's Python: a property's getter, a Python
``__get__`` (``lazy_property``), a Python ``__getattr__`` or ``__getattribute__``.

The reading code is followed like a call (``pyobj.instances.follow``), on an object built in
the run (LOAD_ATTR/LOAD_METHOD: ``registry.LOAD_ATTR_FOLLOWED``) and on one from outside (a
module's ``@property``, a config's computed setting: ``external_attr_followed``), so what it
computes is in the record and what it reads is guarded. On an object the mock rebuilds by
calling its class again (a dataclass built in the run), only the program's own code is
followed; a library's runs natively, taken to be as deterministic as its constructor
(``followed_here``).
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import Const

from ..core import registry
from ..core.attributes import MISSING, guard_class_attr, static_lookup
from ..core.frame import FrameMonitor, Inst
from ..core.programcode import program_function
from ..core.values import Instance, Val
from ..cpython.current import INTERP
from ..cpython.frameio import NULL
from .instances import follow, lookup

__all__ = [
    "class_of",
    "external_attr_followed",
    "follow_getter",
    "follow_read",
    "followed_here",
    "getattr_followed",
    "load_attr_followed",
    "own_state",
    "plainly_found",
    "python_descriptor",
]


@registry.LOAD_ATTR_FOLLOWED.provide
def load_attr_followed(
    m: FrameMonitor, inst: Inst, base: Val, name: str, *, method: bool = False
) -> bool:
    """LOAD_ATTR (or LOAD_METHOD: ``method``) on an object built during the run that runs a
    descriptor of its class: a property's getter, or a Python ``__get__`` (``lazy_property``),
    is followed (on an object the mock rebuilds by calling its class, where it is the
    program's: ``followed_here``)."""
    cls = type(base.obj)
    if getattr_followed(m, inst, base, name, method=method):
        return True
    desc = lookup(cls, name)
    state = base.payload(Instance)
    if isinstance(desc, property) and not isinstance(desc.fget, types.FunctionType) and state:
        raise m.unsupported(f"property {cls.__name__}.{name} is not Python")
    found = python_descriptor(base.obj, name)
    if found is None or not followed_here(base, found[0]):
        return False
    guard_class_attr(m.cap, cls, name)  # the descriptor the class holds now
    follow_getter(m, inst, found, base, class_of(m, base), method=method)
    return True


def followed_here(base: Val, fn: Any) -> bool:
    """Whether ``fn``, the Python that reading or writing an attribute of ``base`` (built in
    the run) runs, is followed: always for an instance of a plain class; for an object the mock
    rebuilds by calling its class again, where ``fn`` is the program's own (a library's runs
    natively, taken to be as deterministic as the constructor: ``core.programcode``)."""
    return base.payload(Instance) is not None or program_function(fn)


def class_of(m: FrameMonitor, base: Val) -> Val:
    """The shadow of the class of ``base``, an object built in the run (a class the run made
    is its own shadow; one from outside is guarded where the object was built)."""
    state = base.payload(Instance)
    if state is not None:
        return state.cls_val
    known = m.cap.known(type(base.obj))
    return known if known is not None else m.cap.const(type(base.obj))


def follow_getter(
    m: FrameMonitor,
    inst: Inst,
    found: tuple[types.FunctionType, tuple[Any, ...]],
    base: Val,
    cls_val: Val,
    *,
    method: bool,
    outputs: Callable[[list[Any], Val], list[Val]] | None = None,
) -> None:
    """Follow the getter ``python_descriptor`` found for reading an attribute of ``base``.
    The descriptor is part of the (guarded) class, like its methods; an object of its own
    (``__get__(desc, obj, cls)``) has state the program may read and write, so it is an object
    from outside (what the getter reads of it is guarded, what it writes replayed)."""
    getter, lead = found
    args = [_descriptor_object(m, x) for x in lead] + [base]
    if lead:
        args.append(cls_val)  # (``__get__(desc, obj, cls)``)
    follow_read(m, inst, getter, args, method=method, outputs=outputs)


def _descriptor_object(m: FrameMonitor, desc: Any) -> Val:
    known = m.cap.known(desc)
    if known is not None:
        return known
    return m.cap.root(Const(desc), desc)


def follow_read(
    m: FrameMonitor,
    inst: Inst,
    fn: types.FunctionType,
    args: list[Val],
    *,
    method: bool,
    outputs: Callable[[list[Any], Val], list[Val]] | None = None,
    raised: Callable[[list[Any], BaseException], list[Val]] | None = None,
) -> None:
    """Follow ``fn(*args)`` run natively by LOAD_ATTR, or by LOAD_METHOD, which pushes NULL
    and the attribute (there is no method to bind; the NULL above it on 3.13)."""
    if method:
        null = Val(NULL, const=True)
        if INTERP.null_above_callable:
            follow(m, inst, fn, args, 2, lambda real, got: [got, null])
        else:
            follow(m, inst, fn, args, 2, lambda real, got: [null, got])
    else:
        follow(m, inst, fn, args, 1, outputs, raised)


def getattr_followed(m: FrameMonitor, inst: Inst, base: Val, name: str, *, method: bool) -> bool:
    """LOAD_ATTR/LOAD_METHOD on an object built during the run whose class has a Python
    ``__getattribute__`` (every read runs it), or a Python ``__getattr__`` and not the name
    (an ``AttrDict``): the hook is followed (see ``followed_here``)."""
    cls = type(base.obj)
    hook = lookup(cls, "__getattribute__")
    if not isinstance(hook, types.FunctionType):
        hook = lookup(cls, "__getattr__")
        if not isinstance(hook, types.FunctionType) or plainly_found(base.obj, name):
            return False
    elif lookup(cls, "__getattr__") is not None:
        raise m.unsupported(f"{cls.__name__} has both __getattribute__ and __getattr__")
    if not followed_here(base, hook):
        return False
    follow_read(m, inst, hook, [base, m.cap.const(name)], method=method)
    return True


def own_state(obj: Any, name: str) -> bool:
    """``name`` is in ``obj``'s own ``__dict__``, or a slot of its class that is set: state the
    object holds itself, not its class (read without running any Python)."""
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        own = None
    if type(own) is dict and name in own:
        return True
    slot = static_lookup(type(obj), name)
    if not isinstance(slot, types.MemberDescriptorType):
        return False
    try:
        slot.__get__(obj, type(obj))
    except AttributeError:  # (an unset slot)
        return False
    return True


def plainly_found(obj: Any, name: str) -> bool:
    """Reading ``obj.name`` finds it without ``__getattr__``: its own state, or its class's
    (a descriptor's getter that raises ``AttributeError`` aside)."""
    if own_state(obj, name):
        return True
    found = static_lookup(type(obj), name)
    return found is not MISSING and not isinstance(found, types.MemberDescriptorType)


def python_descriptor(obj: Any, name: str) -> Any:
    """The Python getter that reading ``obj.name`` runs, with the arguments after ``obj`` it
    takes: a property's ``fget`` (no more arguments) or a Python ``__get__`` (the descriptor
    first, the class last); None where the read runs no Python of a descriptor."""
    cls = type(obj)
    desc = lookup(cls, name)
    if desc is None or isinstance(obj, type | types.ModuleType | torch.Tensor | enum.Enum):
        return None
    if isinstance(desc, property):
        return (desc.fget, ()) if isinstance(desc.fget, types.FunctionType) else None
    get = lookup(type(desc), "__get__")
    if not isinstance(get, types.FunctionType):
        return None
    if not hasattr(type(desc), "__set__") and name in getattr(obj, "__dict__", {}):
        return None  # a non-data descriptor hidden by the instance's own attribute
    return (get, (desc,))


def external_attr_followed(
    m: FrameMonitor,
    inst: Inst,
    base: Val,
    name: str,
    *,
    method: bool,
    outputs: Callable[[list[Any], Val], list[Val]] | None = None,
) -> bool:
    """LOAD_ATTR/LOAD_METHOD/``getattr`` on an object from outside whose class runs Python to
    read ``name`` (a module's ``@property``, a parametrization's weight, a config's computed
    setting): the getter is followed like a call, so what it computes is in the record and
    what it reads is guarded. (Read as a plain attribute instead, the guard would run the
    getter on every call, its effects included, and the graph take its result as an input.)
    ``outputs``: as for ``follow`` (``hasattr``: True once the getter returned; a getter that
    raises, for ``hasattr``/``getattr`` with a default to catch, leaves the monitor without a
    result, which stops capture)."""
    if not base.external or base.node is None:
        return False
    found = python_descriptor(base.obj, name)
    if found is None:
        return False
    m.cap.observe_type(base)  # (the descriptor belongs to the class, like its methods)
    guard_class_attr(m.cap, type(base.obj), name)  # (and is guarded where it lives)
    cls_val = m.cap.const(type(base.obj))
    follow_getter(m, inst, found, base, cls_val, method=method, outputs=outputs)
    return True
