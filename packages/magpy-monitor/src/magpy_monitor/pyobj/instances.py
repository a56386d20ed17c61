"""Instances of plain Python classes built during the run (``out = ModelOutput()``,
``box = Get(x)``, ``with Timer():``).

A *plain* class is one whose instances are made by a native ``__new__`` (``object``'s, or
``dict``'s/``OrderedDict``'s for a mapping subclass) through ``type.__call__``, hold their
state in ``__dict__`` (and, for a mapping, in their items), and whose ``__init__`` is Python or
the native one. The monitor follows construction: ``__new__`` runs natively, ``__init__`` is
inlined with ``self`` bound to a fresh shadow. From then on the shadow knows the object's whole
state: attributes stored by STORE_ATTR or ``object.__setattr__`` (a Python ``__setattr__`` is
followed like any call), items stored by STORE_SUBSCR or the native ``__setitem__`` (a Python
``__setitem__`` is followed too, so ``super().__setitem__`` inside it stores the item).

The mock rebuilds such an object without running the class's Python code: a new instance from
the native ``__new__``, its items put with the native base's ``__setitem__`` and its attributes
written into its ``__dict__``. The rebuilt object's state is checked against the real one when
the record is made, so anything the monitor did not see (native code storing into the object)
makes the record fail rather than differ.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import Build, BuildKind, Constant, Recipe, Unsupported

from ..bytecode.subscripts import store_item
from ..core import registry
from ..core.attributes import guard_class_attr
from ..core.calls import _closure, _fresh, bind_args, function_source, guard_code
from ..core.frame import Callback, FrameMonitor, Inst, Pending, initial_fast
from ..core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS
from ..core.values import Change, Construction, Instance, Val
from ..core.valuetypes import FROZEN_MODULE_ROOTS
from .classes import MadeClass
from .collections import put_item

__all__ = [
    "construct_object",
    "delete_attr_followed",
    "follow",
    "instance_dict",
    "is_plain_class",
    "is_pyobj",
    "lookup",
    "native_base",
    "object_recipe",
    "plain_store",
    "python_meta_call",
    "rebuild_object",
    "store_attr_followed",
    "store_item_followed",
]

_HEAPTYPE = 1 << 9
# native bases whose instances start empty and whose state the shadow can hold
_NATIVE_BASES: tuple[type, ...] = (object, dict, collections.OrderedDict)
# dunder methods that would make the object behave other than its shadow says, when Python
_UNFOLLOWED = ("__delattr__", "__delitem__", "__del__")


def lookup(cls: type, name: str) -> Any:
    """``name`` as defined on ``cls`` or its bases (read without running descriptors)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def native_base(cls: type) -> type:
    """The first class of ``cls``'s MRO written in C: the one whose layout instances have."""
    return next(k for k in cls.__mro__ if not k.__flags__ & _HEAPTYPE)


def is_plain_class(cls: Any, *, metaclass_call: bool = False) -> bool:
    """True when ``cls(...)`` can be followed and its instances rebuilt (see the module doc).

    ``metaclass_call``: asked for ``type.__call__(cls, ...)`` reached from the Python
    ``__call__`` of ``cls``'s metaclass (which is followed), so that ``__call__`` is allowed.
    """
    if not isinstance(cls, type) or not cls.__flags__ & _HEAPTYPE:
        return False
    if issubclass(cls, BaseException | torch.nn.Module | torch.Tensor | tuple | type):
        return False
    base = native_base(cls)
    if base not in _NATIVE_BASES or lookup(cls, "__new__") is not lookup(base, "__new__"):
        return False
    metaclass: Any = type(cls)
    if not metaclass_call and any(
        "__call__" in vars(meta) for meta in metaclass.__mro__ if meta is not type
    ):
        return False
    heap = [k for k in cls.__mro__ if k.__flags__ & _HEAPTYPE]
    # slot attributes live outside ``__dict__`` (an empty ``__slots__``, as ``typing.Generic``
    # has, adds none)
    if not cls.__dictoffset__ or any(vars(k).get("__slots__", ()) for k in heap):
        return False
    if any(isinstance(lookup(cls, name), types.FunctionType) for name in _UNFOLLOWED):
        return False
    init = lookup(cls, "__init__")
    return init is lookup(base, "__init__") or isinstance(init, types.FunctionType)


@registry.IS_PYOBJ.provide
def is_pyobj(v: Val) -> bool:
    """``v`` is an instance of a plain class built during the run."""
    return v.payload(Instance) is not None


def construct_object(
    m: FrameMonitor, inst: Inst, cls_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``cls(*pos, **kwargs)`` of a plain class: native ``__new__``, then ``__init__`` inlined."""
    cap = m.cap
    cls = cls_val.obj
    cap.observe_identity(cls_val)
    guard_class_attr(cap, cls, "__init__")  # (``Cls.__init__ = other`` between calls misses)
    init = lookup(cls, "__init__")
    mapping = issubclass(cls, dict)

    def shadow(obj: Any) -> Val:
        v = cap.new(obj, items={} if mapping else None, payload=Instance(cls_val))
        v.attrs = {}
        return v

    if not isinstance(init, types.FunctionType):  # the native base's own __init__
        if pos or (kwargs and not mapping):
            raise m.unsupported(f"{cls.__name__}(...) with arguments for a native __init__")
        _native_init(m, inst, cls, kwargs, shadow)
        return
    follow_init(m, inst, cls, init, pos, kwargs, shadow)


def follow_init(
    m: FrameMonitor,
    inst: Inst,
    cls: type,
    init: types.FunctionType,
    pos: list[Val],
    kwargs: dict[str, Val],
    shadow: Callable[[Any], Val],
    finish: Callable[[Val], None] | None = None,
) -> Pending:
    """``cls(*pos, **kwargs)`` whose Python ``__init__`` is followed like a call: ``self`` is
    bound to ``shadow(obj)`` once the frame starts, and the call gives that shadow (checked by
    ``finish`` first). Returns the pending call, for a caller to refine."""
    cap = m.cap
    self_val = Val(None)  # the object exists once __init__'s frame starts
    fn_val = cap.const(init)
    bound = bind_args(m, fn_val, [self_val, *pos], kwargs)
    closure = _closure(m, fn_val)
    built: list[Val] = []

    def start(frame: types.FrameType) -> FrameMonitor:
        obj = frame.f_locals[init.__code__.co_varnames[0]]
        if type(obj) is not cls:
            raise m.unsupported(f"{cls.__name__}.__init__ called on a {type(obj).__name__}")
        made = shadow(obj)
        built.append(made)
        args = {k: made if v is self_val else v for k, v in _fresh(frame, bound).items()}
        mon = FrameMonitor(cap, frame, initial_fast(cap, frame, args, closure))
        mon.func = init
        return mon

    def make(real: list[Any]) -> list[Val]:
        if not built or built[0].obj is not real[0]:
            raise m.unsupported(f"{cls.__name__}.__init__ was not seen running")
        if finish is not None:
            finish(built[0])
        return [built[0]]

    p = m.expect_outputs(inst, 1, make, opaque=True)
    p.expect = (init.__code__, start)
    p.on_result = lambda val: None  # __init__ returns None; the call gives the object
    return p


def _native_init(
    m: FrameMonitor,
    inst: Inst,
    cls: type,
    kwargs: dict[str, Val],
    shadow: Callable[[Any], Val],
) -> None:
    """``cls(**kwargs)`` of a mapping class with the native ``__init__``: the keywords become
    its items. ``OrderedDict.__init__`` stores them through ``self[key] = value``, so a Python
    ``__setitem__`` is followed for each (``dict.__init__`` stores them directly)."""
    cap = m.cap
    setitem = lookup(cls, "__setitem__")
    follows = bool(kwargs) and isinstance(setitem, types.FunctionType)
    follows = follows and native_base(cls) is collections.OrderedDict
    made: list[Val] = []

    def make(real: list[Any]) -> list[Val]:
        v = made[0] if made else shadow(real[0])
        if v.obj is not real[0] or (follows and list(v.obj) != list(kwargs)):
            raise m.unsupported(f"{cls.__name__}(**kwargs) was not seen storing its items")
        if not follows:
            for k, x in kwargs.items():
                put_item(v.items, cap.const(k), x)
        return [v]

    p = m.expect_outputs(inst, 1, make, opaque=True)
    if not follows:
        return
    code = setitem.__code__
    if code.co_argcount != 3 or code.co_flags & 0x0C:
        raise m.unsupported(f"{cls.__name__}.__setitem__ takes unusual arguments")
    me, key_name, value_name = code.co_varnames[:3]

    def bind(frame: types.FrameType) -> dict[str, Val]:
        obj, key = frame.f_locals[me], frame.f_locals[key_name]
        if not made:
            made.append(shadow(obj))
        if made[0].obj is not obj or key not in kwargs:
            raise m.unsupported(f"{cls.__name__}.__setitem__ called on unexpected arguments")
        value = kwargs[key]
        if frame.f_locals[value_name] is not value.obj:
            raise m.unsupported(f"{cls.__name__}.__setitem__ called on unexpected arguments")
        return {me: made[0], key_name: cap.const(key), value_name: value}

    p.callbacks[code] = Val(setitem, payload=Callback(bind))


@registry.FOLLOW.provide
def follow(
    m: FrameMonitor,
    inst: Inst,
    fn: types.FunctionType,
    args: list[Val],
    n_out: int,
    outputs: Callable[[list[Any], Val], list[Val]] | None = None,
    raised: Callable[[list[Any], BaseException], list[Val]] | None = None,
    kwargs: dict[str, Val] | None = None,
) -> None:
    """Inline ``fn(*args, **kwargs)``, called natively by ``inst`` (a Python ``__setattr__``,
    a property getter, ``__enter__``, a wrapper whose own frames run untraced). ``inst``
    pushes ``n_out`` values: ``outputs(real, result)`` gives their shadows (by default:
    ``fn``'s result when ``n_out`` is 1); ``raised(real, exc)`` where ``fn`` raised and the
    native caller went on (``hasattr``)."""
    cap = m.cap
    known = cap.known(fn)  # (a function the run made: its closure's cells are shadows)
    fn_val = known if known is not None else cap.const(fn)
    src = function_source(m, fn_val)
    if src is not None:  # CPython runs the function's current code object
        guard_code(cap, src, fn.__code__)
    bound = bind_args(m, fn_val, args, kwargs or {})
    closure = _closure(m, fn_val)
    seen: list[Val] = []

    def start(frame: types.FrameType) -> FrameMonitor:
        mon = FrameMonitor(cap, frame, initial_fast(cap, frame, _fresh(frame, bound), closure))
        mon.func = fn
        return mon

    def make(real: list[Any]) -> list[Val]:
        if not seen and raised is not None and p.raised is not None:
            return raised(real, p.raised)
        if not seen:
            raise m.unsupported(f"{fn.__qualname__} was called but its frame was not seen")
        return outputs(real, seen[0]) if outputs is not None else seen[:n_out]

    p = m.expect_outputs(inst, n_out, make, opaque=True)
    p.expect = (fn.__code__, start)
    p.on_result = seen.append


@registry.PLAIN_STORE.provide
def plain_store(cls: type, name: str) -> bool:
    """``setattr(obj, name, v)`` on a ``cls`` only writes ``obj.__dict__``."""
    return not isinstance(lookup(cls, "__setattr__"), types.FunctionType) and not hasattr(
        type(lookup(cls, name)), "__set__"
    )


@registry.PYTHON_DUNDER.provide
def python_dunder(obj: Any, name: str) -> types.FunctionType | None:
    """The Python function ``type(obj)`` defines for special method ``name``, if it does
    (native code calls it: ``__contains__`` for ``in``, ``__len__`` for ``len``)."""
    fn = lookup(type(obj), name)
    return fn if isinstance(fn, types.FunctionType) else None


@registry.STORE_ATTR_FOLLOWED.provide
def store_attr_followed(
    m: FrameMonitor, inst: Inst, base: Val, name: str, value: Val, *, pushes: bool = False
) -> bool:
    """STORE_ATTR (``pushes``: the ``setattr()`` call, which pushes None) on an object built
    during the run whose class runs Python for it (its ``__setattr__``, or a property's
    setter): followed, True. False: a plain store."""
    cls = type(base.obj)
    none = m.cap.const(None)
    n_out, outputs = (1, lambda real, got: [none]) if pushes else (0, None)
    setattr_ = lookup(cls, "__setattr__")
    if isinstance(setattr_, types.FunctionType):
        follow(m, inst, setattr_, [base, m.cap.const(name), value], n_out, outputs)
        return True
    desc = lookup(cls, name)
    if isinstance(desc, property) and isinstance(desc.fset, types.FunctionType):
        follow(m, inst, desc.fset, [base, value], n_out, outputs)
        return True
    if hasattr(type(desc), "__set__"):
        raise m.unsupported(f"setting {cls.__name__}.{name}, a {type(desc).__name__}")
    return False


@registry.DELETE_ATTR_FOLLOWED.provide
def delete_attr_followed(
    m: FrameMonitor, inst: Inst, base: Val, name: str, *, pushes: bool = False
) -> bool:
    """DELETE_ATTR (``pushes``: the ``delattr()`` call, which pushes None) on an object built
    during the run: a property's Python deleter is followed (True); another descriptor's
    deletion would run unseen (a break). False: a plain deletion from its ``__dict__``."""
    cls = type(base.obj)
    desc = lookup(cls, name)
    none = m.cap.const(None)
    if isinstance(desc, property) and isinstance(desc.fdel, types.FunctionType):
        if pushes:
            follow(m, inst, desc.fdel, [base], 1, lambda real, got: [none])
        else:
            follow(m, inst, desc.fdel, [base], 0)
        return True
    if hasattr(type(desc), "__delete__"):
        raise m.unsupported(f"deleting {cls.__name__}.{name}, a {type(desc).__name__}")
    return False


@registry.STORE_ITEM_FOLLOWED.provide
def store_item_followed(m: FrameMonitor, inst: Inst, base: Val, key: Val, value: Val) -> bool:
    """STORE_SUBSCR on an object built during the run: a Python ``__setitem__`` is followed
    (True); a mapping's native one stores into the shadow's items (True); else False."""
    setitem = lookup(type(base.obj), "__setitem__")
    if isinstance(setitem, types.FunctionType):
        follow(m, inst, setitem, [base, key, value], 0)
        return True
    if isinstance(base.items, dict):
        m.cap.observe_key(key)
        put_item(base.items, key, value)
        m.expect_outputs(inst, 0, lambda real: [])
        return True
    return False


def instance_dict(m: FrameMonitor, base: Val, real: Any) -> Val:
    """``obj.__dict__`` of an object built during the run: a dict whose shadow items are the
    object's attributes, kept in step with them (``Capture.set_attr``/``del_attr``)."""
    state = base.require(Instance)
    view = state.dict_view
    if view is None:
        assert base.attrs is not None
        items = {k: (m.cap.const(k), v) for k, v in base.attrs.items()}
        view = state.dict_view = m.cap.new(real, items=items)
    return view


# ---------------------------------------------------------------------- native setters
def _native_setattr(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``object.__setattr__(obj, name, value)`` (``super().__setattr__`` in a Python
    ``__setattr__``): stores into the ``__dict__`` whatever the class's own ``__setattr__``.
    On an object the mock rebuilds by calling its class (a followed hook of the program's),
    the store is one of its changes, made again natively (``pyobj.replayed``)."""
    if kw or len(pos) != 3 or type(pos[1].obj) is not str:
        raise m.unsupported("object.__setattr__ with unusual arguments")
    base, name, value = pos
    ctor = base.payload(Construction)
    if not is_pyobj(base) and ctor is None:
        raise m.unsupported(f"object.__setattr__ on a {type(base.obj).__name__} not built here")
    m.cap.observe(name)
    if ctor is None and hasattr(type(lookup(type(base.obj), name.obj)), "__set__"):
        raise m.unsupported(f"object.__setattr__ of descriptor {name.obj!r}")
    if ctor is None:
        m.cap.set_attr(base, name.obj, value)  # (not external: no write-back)
    m.expect_outputs(inst, 1, lambda real: _logged(m, ctor, object.__setattr__, name, value))


def _logged(m: FrameMonitor, ctor: Construction | None, op: Any, key: Val, value: Val) -> list[Val]:
    """A native store into an object built in the run ran (it pushed None): on one the mock
    rebuilds by calling its class, it is one of the changes the mock makes again."""
    if ctor is not None:
        ctor.changes.append(Change(op, key, value))
    return [m.cap.const(None)]


def _native_setitem(owner: Any) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        """``dict.__setitem__(obj, key, value)`` on a mapping built during the run (``super().
        __setitem__`` in a Python ``__setitem__``): stores into the shadow's items (and, for
        an object the mock rebuilds by calling its class, is one of its changes)."""
        if kw or len(pos) != 3:
            raise m.unsupported("__setitem__ with unusual arguments")
        base, key, value = pos
        m.cap.observe_key(key)
        ctor = base.payload(Construction)
        if (is_pyobj(base) or ctor is not None) and isinstance(base.items, dict):
            put_item(base.items, key, value)
        else:
            ctor = None
            store_item(m, base, key, value)  # d.__setitem__(k, v) on any dict: d[k] = v
        m.expect_outputs(inst, 1, lambda real: _logged(m, ctor, owner.__setitem__, key, value))

    return handle


def _object_init(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``super().__init__()`` reaching ``object.__init__``: nothing to do."""
    if kw or len(pos) != 1:
        raise m.unsupported("object.__init__ with arguments")
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(None)])


def python_meta_call(cls: Any) -> Any:
    """The Python ``__call__`` of the metaclass of ``cls`` (a program's own metaclass, such
    as a registry's), or None."""
    for meta in type(cls).__mro__:
        if meta is type:
            return None
        call = vars(meta).get("__call__")
        if call is not None:
            own = meta.__module__.split(".")[0] not in FROZEN_MODULE_ROOTS
            return call if own and isinstance(call, types.FunctionType) else None
    return None


def _type_call(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``type.__call__(cls, ...)`` (``super().__call__(*args)`` in a metaclass's ``__call__``):
    the construction of a plain class."""
    if not pos or not is_plain_class(pos[0].obj, metaclass_call=True):
        raise m.unsupported("type.__call__ of a class the monitor cannot build")
    construct_object(m, inst, pos[0], pos[1:], kw)


def _simple_namespace(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``types.SimpleNamespace(**kw)``: an object whose attributes are the keywords."""
    if pos:
        raise m.unsupported("SimpleNamespace() of a mapping")
    cls_val = m.cap.const(types.SimpleNamespace)

    def make(real: list[Any]) -> list[Val]:
        if type(real[0]) is not types.SimpleNamespace or list(vars(real[0])) != list(kw):
            raise m.unsupported("SimpleNamespace() made other attributes")
        v = m.cap.new(real[0], payload=Instance(cls_val))
        v.attrs = dict(kw)
        return [v]

    m.expect_outputs(inst, 1, make)


def _register() -> None:
    BUILTIN_HANDLERS[id(types.SimpleNamespace)] = (types.SimpleNamespace, _simple_namespace)
    METHOD_HANDLERS.setdefault((type, "__call__"), _type_call)
    METHOD_HANDLERS.setdefault((object, "__init__"), _object_init)
    METHOD_HANDLERS.setdefault((object, "__setattr__"), _native_setattr)
    for owner in (dict, collections.OrderedDict):
        METHOD_HANDLERS.setdefault((owner, "__setitem__"), _native_setitem(owner))


_register()


# ---------------------------------------------------------------------- the mock's rebuild
def object_recipe(v: Val, recipe: Callable[[Val], Recipe]) -> Recipe:
    """The mock's recipe for ``v``: a new instance of its class holding the rebuilt items and
    attributes the run gave it (checked against the real object's state)."""
    obj = v.obj
    cls_val = v.require(Instance).cls_val
    if cls_val.payload(MadeClass) is not None:
        raise Unsupported(f"an instance of the class {cls_val.obj.__qualname__} made in the run")
    cls = cls_val.obj
    attrs = v.attrs or {}
    try:
        real = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        real = None
    if (
        type(obj) is not cls
        or real is None
        or set(real) != set(attrs)
        or any(attrs[k].obj is not real[k] or attrs[k] is v for k in attrs)
    ):
        raise Unsupported(f"cannot rebuild the {cls.__name__} made during the run")
    names = tuple(attrs)
    parts: list[Recipe] = [Constant(rebuild_object), Constant(cls), Constant(names)]
    parts += [recipe(attrs[k]) for k in names]
    if isinstance(v.items, dict):
        pairs = list(v.items.values())
        if list(obj.keys()) != [k.obj for k, _ in pairs] or any(
            obj[k.obj] is not x.obj or x is v for k, x in pairs
        ):
            raise Unsupported(f"cannot rebuild the {cls.__name__} made during the run")
        for k, x in pairs:
            parts += [recipe(k), recipe(x)]
    return Build(id(v), BuildKind.CALL, tuple(parts))


def rebuild_object(cls: type, names: tuple[str, ...], *values: Any) -> Any:
    """A new ``cls`` whose ``__dict__`` holds ``names`` (the first values) and whose items are
    the pairs in the rest, stored without running the class's Python code."""
    base: Any = native_base(cls)
    obj: Any = base.__new__(cls)
    n = len(names)
    if n < len(values):
        setitem = base.__setitem__
        for i in range(n, len(values), 2):
            setitem(obj, values[i], values[i + 1])
    # (``object.__getattribute__``: a Python ``__getattribute__`` of the class must not run)
    object.__getattribute__(obj, "__dict__").update(zip(names, values[:n], strict=True))
    return obj


rebuild_object.__name__ = "rebuild_object"
