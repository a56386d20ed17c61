"""Dataclass instances built during the run (``return ModelOutput(logits=x)``): replayed calls.

A dataclass that is a plain class (``pyobj.instances``) is followed like one. Another (Hugging
Face's ``ModelOutput``, an ``OrderedDict`` subclass with a Python ``__delitem__`` that mirrors
its non-None fields as items; a frozen or slotted dataclass) is replayed: its generated
``__init__`` only stores its fields, and a library's ``__post_init__`` is taken to be a
deterministic function of them. So the monitor does not follow the construction: the call runs
natively, and the object's shadow remembers the class and the shadows of the arguments. The
mock rebuilds the object by calling the class again with the rebuilt arguments, so it is equal
to what eager builds, type included. The program's own Python that the construction would run
(its ``__post_init__``, a default factory, a metaclass ``__call__``) is a break
(``core.programcode``).

Reading the object: attributes and items give the shadows of the objects passed in (found by
identity) or constants (value-typed fields, the arguments being guarded); methods are followed
like any Python method; the read-only dict methods (``keys``, ``items``, ``values``, ``get``)
see the items it holds. Changing the object after construction (items and attributes set,
attributes deleted) is logged and made again by the mock once it has built the object
(``pyobj.replayed``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
from typing import Any

import torch

from magpy_refgraph import Build, BuildKind, Constant, Recipe, Unsupported

from ..bytecode.iteration import consume_items, iter_items
from ..core.attributes import guard_class_attr
from ..core.calls import inline
from ..core.frame import FrameMonitor, Inst
from ..core.programcode import program_frames
from ..core.registry import BUILTIN_HANDLERS, FILLING_CONSTRUCTIONS
from ..core.values import Change, Construction, Payload, Val
from ..core.valuetypes import is_value_type
from .instances import native_base, rebuild_object

__all__ = [
    "PartialCall",
    "construct",
    "ctor_of",
    "ctor_recipe",
    "filled_recipe",
    "generated_inits",
    "is_generated_init",
    "is_replayable_class",
    "item_shadow",
]


class PartialCall(Payload):
    """A ``functools.partial`` built during the run (``libs/torch/tensorctors``): the shadows
    of its parts. A call is followed as ``func(*args, *more, **keywords, **kw)``; the mock
    builds it again from them."""

    __slots__ = ("args", "func", "keywords")

    def __init__(self, func: Val, args: list[Val], keywords: dict[str, Val]) -> None:
        self.func, self.args, self.keywords = func, args, keywords


def is_replayable_class(cls: Any) -> bool:
    """True for a dataclass whose constructor the mock may call again."""
    return (
        isinstance(cls, type)
        and dataclasses.is_dataclass(cls)
        and not issubclass(cls, BaseException)
    )


def is_namedtuple_class(cls: Any) -> bool:
    """A ``collections.namedtuple``/``typing.NamedTuple`` class (or a subclass adding only
    methods): building one runs nothing but ``tuple.__new__`` over its fields."""
    if not (isinstance(cls, type) and issubclass(cls, tuple)):
        return False
    base = next((b for b in cls.__mro__ if "_fields" in b.__dict__), None)
    new = getattr(base.__dict__.get("__new__"), "__func__", None) if base is not None else None
    return (
        isinstance(new, types.FunctionType)
        and cls.__new__ is new
        and new.__globals__.get("_tuple_new") == tuple.__new__
        and cls.__init__ is tuple.__init__
    )


def python_tuple_new(cls: Any) -> types.FunctionType | None:
    """The Python ``__new__`` of a tuple subclass that defines one over a namedtuple
    (``PackedSequence``), when ``cls(...)`` is that call and nothing more (no Python
    ``__init__``, no metaclass ``__call__``)."""
    if not (isinstance(cls, type) and issubclass(cls, tuple)) or is_namedtuple_class(cls):
        return None
    if type(cls) is not type or cls.__init__ is not tuple.__init__:
        return None
    for klass in cls.__mro__:
        new = vars(klass).get("__new__")
        if new is not None:
            func = getattr(new, "__func__", new)  # (a staticmethod)
            return func if isinstance(func, types.FunctionType) else None
    return None


def follow_tuple_new(
    m: FrameMonitor, inst: Inst, cls_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``cls(...)`` of such a class: its ``__new__`` is followed like a call with ``cls``
    first; ``tuple.__new__`` at the bottom builds the instance (``_tuple_new``)."""
    cap = m.cap
    cap.observe_identity(cls_val)
    new = python_tuple_new(cls_val.obj)
    assert new is not None
    inline(m, inst, cap.const(new), [cls_val, *pos], kwargs)


def _tuple_new(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``tuple.__new__(cls, iterable)`` (a namedtuple's ``__new__``): a ``cls`` instance over
    the iterable's values, rebuilt by the mock the same way (no Python ``__new__`` runs)."""
    if kw or len(pos) != 2 or not (isinstance(pos[0].obj, type) and issubclass(pos[0].obj, tuple)):
        raise m.unsupported("tuple.__new__ with unusual arguments")
    m.cap.observe_identity(pos[0])
    items = consume_items(m, pos[1])
    if items is None:
        raise m.unsupported("tuple.__new__ over an iterable of unknown contents")

    def make(real: list[Any]) -> list[Val]:
        if len(real[0]) != len(items) or any(
            v.obj is not x for v, x in zip(items, real[0], strict=True)
        ):
            raise m.unsupported("tuple.__new__ built other values than it was given")
        val = m.cap.new(real[0], items=list(items))
        fields = getattr(type(real[0]), "_fields", ())
        val.attrs = dict(zip(fields, items, strict=False))
        return [val]

    m.expect_outputs(inst, 1, make)


BUILTIN_HANDLERS[id(tuple.__new__)] = (tuple.__new__, _tuple_new)


def construct_namedtuple(
    m: FrameMonitor, inst: Inst, cls_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``cls(*pos, **kwargs)`` of a namedtuple class: a tuple of the (bound) arguments, with
    their shadows as its items and attributes; the mock builds it again with ``cls(*items)``."""
    cap = m.cap
    cls = cls_val.obj
    cap.observe_identity(cls_val)
    fields: tuple[str, ...] = cls._fields

    def make(real: list[Any]) -> list[Val]:
        obj = real[0]
        given = dict(zip(fields, pos, strict=False)) | kwargs
        items = [
            given.get(f) or item_shadow(m, x, cls.__name__)
            for f, x in zip(fields, obj, strict=True)
        ]
        if any(i.obj is not x for i, x in zip(items, obj, strict=True)):
            raise m.unsupported(f"{cls.__name__} built from values it does not hold")
        val = cap.new(obj, items=items, payload=Construction(cls, items, {}))
        val.attrs = dict(zip(fields, items, strict=True))
        return [val]

    p = m.expect_outputs(inst, 1, make)
    p.calls_back = program_frames([cls.__new__.__code__])  # (a metaclass's __call__: a break)


_REPLACE_CODE = vars(collections.namedtuple("_Probe", "a"))["_replace"].__code__


def is_namedtuple_replace(fn: Any) -> bool:
    """``fn`` is a namedtuple's ``_replace`` (every class's shares one code object)."""
    return isinstance(fn, types.FunctionType) and fn.__code__ is _REPLACE_CODE


def namedtuple_replace(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``nt._replace(**changes)``: ``tuple.__new__(type(nt), fields)`` with the named fields
    swapped; CPython runs ``map(kwds.pop, field_names, nt)`` natively, so the monitor builds
    the result from the shadows directly. The new tuple is rebuilt by the mock the same way."""
    if len(pos) != 1:
        raise m.unsupported("namedtuple _replace with positional arguments")
    self_val = pos[0]
    m.cap.observe_type(self_val)
    fields: tuple[str, ...] = type(self_val.obj)._fields
    if not set(kw) <= set(fields):
        raise m.unsupported("namedtuple _replace of fields it does not have")
    items = iter_items(m, self_val)
    if items is None or len(items) != len(fields):
        raise m.unsupported("namedtuple _replace of a tuple of unknown contents")
    new_items = [kw.get(f, v) for f, v in zip(fields, items, strict=True)]

    def make(real: list[Any]) -> list[Val]:
        if any(v.obj is not x for v, x in zip(new_items, real[0], strict=True)):
            raise m.unsupported("namedtuple _replace built other values than it was given")
        val = m.cap.new(real[0], items=list(new_items))
        val.attrs = dict(zip(fields, new_items, strict=True))
        return [val]

    m.expect_outputs(inst, 1, make)


def ctor_of(v: Val) -> Construction | None:
    """The class and the positional and keyword shadows of the call that built ``v``, if it
    was one."""
    return v.payload(Construction)


def item_shadow(m: FrameMonitor, real: Any, what: str, ctor: Construction | None = None) -> Val:
    """The shadow of ``real``, an object a replayed construction stored: a value passed in, or a
    constant. With ``ctor``, an argument of the construction (or a value set on it since)
    that is ``real`` itself is its shadow: a class passed in (pytree's ``TreeSpec(tuple,
    ...)``) is no heap object the run knows, yet the mock passes the same one again."""
    known = m.cap.known(real)
    if known is not None:
        return known
    if ctor is not None:
        changed = (c.value for c in reversed(ctor.changes) if c.value is not None)
        for v in (*ctor.pos, *ctor.kwargs.values(), *changed):
            if v.obj is real:
                return v
    if real is None or is_value_type(real):
        return m.cap.const(real)
    raise m.unsupported(f"{what} holds a {type(real).__name__} of unknown origin")


def construct(
    m: FrameMonitor, inst: Inst, cls_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``cls(*pos, **kwargs)`` for a dataclass ``cls``: run natively, replayed by the mock."""
    cap = m.cap
    cls = cls_val.obj
    cap.observe_identity(cls_val)
    guard_class_attr(cap, cls, "__init__")  # (``Cls.__init__ = other`` between calls misses)
    for v in (*pos, *kwargs.values()):
        if isinstance(v.obj, torch.Tensor):
            cap.tensor_node(v)
        elif v.obj is None or is_value_type(v.obj):
            cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        obj = real[0]
        items = None
        if isinstance(obj, dict):  # (its native base's items: no Python ``items`` runs)
            mapping: Any = native_base(type(obj))
            pairs = mapping.items(obj)
            items = {k: (cap.const(k), item_shadow(m, x, cls.__name__)) for k, x in pairs}
        return [cap.new(obj, items=items, payload=Construction(cls, list(pos), dict(kwargs)))]

    p = m.expect_outputs(inst, 1, make)
    # (the program's own __post_init__, default factory, __setattr__ or metaclass __call__
    # would run unseen, and the mock would call it again or not at all: a break)
    p.calls_back = program_frames(generated_inits(cls))


def generated_inits(cls: type) -> list[types.CodeType]:
    """The ``__init__`` code that ``@dataclass`` generated for ``cls`` and its bases: it only
    stores the arguments (and the defaults it was built with) into the object."""
    codes = []
    for klass in cls.__mro__:
        init: Any = vars(klass).get("__init__")
        if dataclasses.is_dataclass(klass) and is_generated_init(init):
            codes.append(init.__code__)
    return codes


def is_generated_init(fn: Any) -> bool:
    """``fn`` is an ``__init__`` that ``@dataclass`` generated."""
    if not isinstance(fn, types.FunctionType):
        return False
    code = fn.__code__
    return code.co_filename == "<string>" and code.co_qualname == _GENERATED_INIT


_GENERATED_INIT = "__create_fn__.<locals>.__init__"


def _construct(
    cls: Any, names: tuple[str, ...], ops: tuple[tuple[Any, int], ...], *values: Any
) -> Any:
    """Call ``cls`` with the first of ``values``, the last ``len(names)`` of those passed by
    keyword; then make each change of ``ops`` again, in order: ``op(obj, *args)`` with the
    next ``n`` values as its ``args``."""
    n_changes = sum(n for _, n in ops)
    values, changed = values[: len(values) - n_changes], values[len(values) - n_changes :]
    split = len(values) - len(names)
    obj = cls(*values[:split], **dict(zip(names, values[split:], strict=True)))
    at = 0
    for op, n in ops:
        op(obj, *changed[at : at + n])  # (the class's own __setattr__ or __setitem__, as run)
        at += n
    return obj


_construct.__name__ = "construct_dataclass"


def filled_recipe(v: Val, recipe: Any, known: Any) -> Recipe | None:
    """The mock's recipe for a replayed construction that only fills the object it builds
    (``registry.FILLING_CONSTRUCTIONS``): a new instance from the native ``__new__`` holding the
    final items and ``__dict__`` the run gave it, each the shadow of what the run passed in or
    made (``known``: the capture's ``Val`` of a heap object), with no Python code of the class
    run. None when it does not apply or the state holds something of unknown origin: the mock
    then calls the class again (``ctor_recipe``)."""
    ctor = ctor_of(v)
    if ctor is None or not any(fills(ctor) for fills in FILLING_CONSTRUCTIONS):
        return None
    obj, cls = v.obj, ctor.cls
    base: Any = native_base(cls)
    if type(obj) is not cls or base not in (object, dict, collections.OrderedDict):
        return None
    try:
        state = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None

    def part(x: Any) -> Recipe | None:
        shadow = known(x)
        if shadow is None:
            changed = (c.value for c in ctor.changes if c.value is not None)
            given = (*ctor.pos, *ctor.kwargs.values(), *changed)
            shadow = next((a for a in given if a.obj is x), None)
        if shadow is not None and shadow is not v:
            try:
                built: Recipe = recipe(shadow)
            except Unsupported:
                return None
            return built
        return Constant(x) if x is None or is_value_type(x) else None

    names = tuple(state)
    pairs = list(base.items(obj)) if base is not object else []
    parts = [part(x) for x in (*state.values(), *(y for kv in pairs for y in kv))]
    if any(p is None for p in parts):
        return None
    head: list[Recipe] = [Constant(rebuild_object), Constant(cls), Constant(names)]
    return Build(id(v), BuildKind.CALL, (*head, *(p for p in parts if p is not None)))


def ctor_recipe(v: Val, recipe: Any) -> Recipe | None:
    """The mock's recipe for a replayed construction (``recipe``: the planner's, per value)."""
    ctor, partial = ctor_of(v), v.payload(PartialCall)
    changes: list[Change] = []
    if ctor is not None:
        cls, pos, kwargs, changes = ctor.cls, ctor.pos, ctor.kwargs, ctor.changes
    elif partial is not None:  # functools.partial built during the run
        cls, pos, kwargs = functools.partial, [partial.func, *partial.args], partial.keywords
    else:
        return None
    args = [[c.key] if c.value is None else [c.key, c.value] for c in changes]
    ops = tuple((c.op, len(a)) for c, a in zip(changes, args, strict=True))
    parts: list[Recipe] = [Constant(_construct), Constant(cls), Constant(tuple(kwargs))]
    parts += [Constant(ops)]
    parts += [recipe(a) for a in (*pos, *kwargs.values(), *(x for a in args for x in a))]
    return Build(id(v), BuildKind.CALL, tuple(parts))
