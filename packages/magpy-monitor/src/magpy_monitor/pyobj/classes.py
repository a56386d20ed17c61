"""Class statements run inside the compiled region (``class Cfg: ...`` in ``forward``).

``class C(B): body`` compiles to ``__build_class__(<body function>, "C", B)``: the native
``__build_class__`` calls the body with a fresh namespace dict as its locals, then
``type("C", (B,), namespace)``. The monitor follows the body like a call: its frame's
LOAD_NAME/STORE_NAME/DELETE_NAME work on a shadow of the namespace (a name not in it is a global,
then a builtin, as CPython looks it up), LOAD_CLASSDEREF looks in the namespace before the cell
(3.12+: LOAD_LOCALS then LOAD_FROM_DICT_OR_DEREF; an annotation scope's
LOAD_FROM_DICT_OR_GLOBALS looks in it before the globals), and SETUP_ANNOTATIONS adds
``__annotations__``. What the body reads from outside (globals, the enclosing function's
variables, the bases) is guarded like any other read, so the class is a value the record
derives from guarded inputs: on a hit the mock does not build it at all.

That holds while the class stays inside the region. A class that leaves it (returned, stored
outside, or reachable from what is: an instance, a method closing over ``__class__``) would be
the recorded run's class on every call where eager makes a new one, so the record refuses it
(``class_escapes``): a graph break, never a shared class.

Only classes whose metaclass is ``type`` are followed, with no class keywords; a Python
``__init_subclass__`` or ``__set_name__`` that ``type`` would call breaks the graph (the pending
call is not opaque, so any Python frame it enters is unexpected).
"""

from __future__ import annotations

import builtins
import types
from typing import Any

from magpy_refgraph import Unsupported

from ..bytecode.closures import is_made_function
from ..bytecode.variables import global_value, load_deref
from ..core.attributes import load_attr
from ..core.calls import _closure
from ..core.frame import CellBox, FrameMonitor, Inst, initial_fast
from ..core.registry import opcode, register_builtin
from ..core.values import BoundMethod, Payload, Val
from .collections import put_item

__all__ = ["MadeClass", "class_escapes"]


class MadeClass(Payload):
    """A class a class statement built in the run: the shadow of the namespace its body
    filled, and those of its bases (guarded by the statement)."""

    __slots__ = ("bases", "namespace")

    def __init__(self, namespace: Val, bases: list[Val]) -> None:
        self.namespace, self.bases = namespace, bases


# entries type() turns into something else in the class dict (implicit classmethod and
# staticmethod wrappers), or consumes
_CHANGED_BY_TYPE = frozenset(("__init_subclass__", "__class_getitem__", "__new__", "__classcell__"))


def class_escapes(v: Val) -> Unsupported:
    """The error for a class built in the run that the mock would have to hand out."""
    return Unsupported(f"the class {v.obj.__qualname__} made in the region leaves it")


def _namespace(m: FrameMonitor) -> dict[Any, tuple[Val, Val]]:
    """The shadow items of the class body's namespace."""
    ns = m.namespace
    if ns is None or not isinstance(ns.items, dict):
        raise m.unsupported("a name lookup outside a class body (module code, exec)")
    return ns.items


@opcode("LOAD_BUILD_CLASS")
def _load_build_class(m: FrameMonitor, inst: Inst) -> None:
    def make(real: list[Any]) -> list[Val]:
        if real[0] is not builtins.__build_class__:
            raise m.unsupported("builtins.__build_class__ was replaced")
        return [m.cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


@register_builtin(builtins.__build_class__)
def _build_class(m: FrameMonitor, inst: Inst, pos: list[Val], kwargs: dict[str, Val]) -> None:
    cap = m.cap
    if len(pos) < 2 or not is_made_function(pos[0]) or not isinstance(pos[1].obj, str):
        raise m.unsupported("__build_class__ called other than by a class statement")
    body, name, bases = pos[0], pos[1].obj, pos[2:]
    meta = kwargs.pop("metaclass", None)
    if kwargs:
        raise m.unsupported(f"class {name} with keywords {sorted(kwargs)}")
    for b in bases:
        cap.observe_identity(b)  # the class's layout and behaviour follow its bases
        if type(b.obj) is not type:
            raise m.unsupported(f"class {name} with a base of metaclass {type(b.obj).__name__}")
    if meta is not None:
        cap.observe_identity(meta)
        if meta.obj is not type:
            raise m.unsupported(
                f"class {name} with metaclass {getattr(meta.obj, '__name__', meta)}"
            )
    code = body.obj.__code__
    closure = _closure(m, body)
    seen: list[FrameMonitor] = []

    def start(frame: types.FrameType) -> FrameMonitor:
        ns = frame.f_locals
        if type(ns) is not dict or ns:
            raise m.unsupported(f"class {name} body started with a non-empty namespace")
        mon = FrameMonitor(cap, frame, initial_fast(cap, frame, {}, closure))
        mon.namespace = cap.new(ns, items={})
        mon.func = body.obj
        seen.append(mon)
        return mon

    def make(real: list[Any]) -> list[Val]:
        cls = real[0]
        if not seen or type(cls) is not type or cls.__name__ != name:
            raise m.unsupported(f"class {name} was built other than the monitor saw")
        ns = seen[0].namespace
        assert ns is not None and isinstance(ns.items, dict)
        made = cap.new(cls, payload=MadeClass(ns, bases))
        made.attrs = {}
        real_dict = vars(cls)
        for key, (_, value) in ns.items.items():
            if key == "__classcell__":  # type() fills the cell with the class
                cell = value.payload(CellBox)
                if cell is None or value.obj.cell_contents is not cls:
                    raise m.unsupported(f"class {name}: __classcell__ disagrees with the shadow")
                cell.content = made
            elif key == "__qualname__":  # type() takes it out of the class dict
                if cls.__qualname__ != value.obj:
                    raise m.unsupported(f"class {name}: __qualname__ disagrees with the shadow")
            elif key in _CHANGED_BY_TYPE or real_dict.get(key) is not value.obj:
                raise m.unsupported(f"class {name}: type() changed its namespace entry {key!r}")
            elif not isinstance(value.obj, staticmethod | classmethod):
                made.attrs[key] = value  # (C.f of a static or class method is no entry itself)
        return [made]

    p = m.expect_outputs(inst, 1, make, opaque=False)
    p.expect = (code, start)
    p.on_result = lambda val: None  # the body's result (None, or the __class__ cell)


def class_attr(m: FrameMonitor, cls_val: Val, name: str, real: Any) -> Val:
    """``C.name`` of a class built in the run, not among its attributes: its name, a static or
    class method of its namespace (the function, or a method bound to the class), or an
    attribute it inherits (read from the base that has it, which the class statement
    guarded)."""
    cls = cls_val.obj
    if name in ("__name__", "__qualname__") or (name == "__doc__" and real is None):
        return m.cap.const(real)  # from the class statement's constants
    ns = cls_val.require(MadeClass).namespace.items
    entry = ns.get(name) if isinstance(ns, dict) else None
    if entry is not None and isinstance(entry[1].obj, staticmethod | classmethod):
        wrapper = entry[1]  # (read through the class: its function, or bound to the class)
        func = load_attr(m, wrapper, "__func__", wrapper.obj.__func__)
        if real is func.obj:
            return func
        if type(real) is types.MethodType and real.__func__ is func.obj and real.__self__ is cls:
            return Val(real, payload=BoundMethod(cls_val))
        raise m.unsupported(f"attribute {name!r} of the class {cls.__qualname__} made in the run")
    owner = next((k for k in cls.__mro__[1:] if name in vars(k)), None)
    bases = cls_val.require(MadeClass).bases
    base = next((b for b in bases if owner is not None and owner in b.obj.__mro__), None)
    if base is None or getattr(base.obj, name) is not real:
        raise m.unsupported(f"attribute {name!r} of the class {cls.__qualname__} made in the run")
    return load_attr(m, base, name, real)


@opcode("STORE_NAME")
def _store_name(m: FrameMonitor, inst: Inst) -> None:
    (value,) = m.pop()
    put_item(_namespace(m), m.cap.const(inst.argval), value)
    m.expect_outputs(inst, 0, lambda real: [])


@opcode("DELETE_NAME")
def _delete_name(m: FrameMonitor, inst: Inst) -> None:
    names, name = _namespace(m), inst.argval
    if name not in names:
        raise m.unsupported(f"del of {name!r}, not in the class namespace")
    del names[name]
    m.expect_outputs(inst, 0, lambda real: [])


@opcode("LOAD_NAME")
def _load_name(m: FrameMonitor, inst: Inst) -> None:
    name = inst.argval
    hit = _namespace(m).get(name)  # else a global, else a builtin (as CPython looks)
    globals_ = m.frame.f_globals

    def make(real: list[Any]) -> list[Val]:
        if hit is not None:
            return [hit[1]]
        return [global_value(m, globals_, name, real[0])]

    m.expect_outputs(inst, 1, make)


@opcode("LOAD_CLASSDEREF")
def _load_classderef(m: FrameMonitor, inst: Inst) -> None:
    """A class body's read of an enclosing function's variable: the namespace first."""
    hit = _namespace(m).get(m.names[inst.arg])
    if hit is not None:
        m.push(hit[1])
        return
    load_deref(m, inst)


@opcode("LOAD_LOCALS")
def _load_locals(m: FrameMonitor, inst: Inst) -> None:
    """A class body's namespace itself (3.12+: what ``LOAD_FROM_DICT_OR_DEREF`` reads, or the
    ``__classdict__`` cell's content for the body's annotation scopes)."""
    _namespace(m)
    ns = m.namespace
    assert ns is not None
    m.expect_outputs(inst, 1, lambda real: [ns])


def _mapping_items(m: FrameMonitor, mapping: Val) -> dict[Any, tuple[Val, Val]]:
    """The known items of the mapping a ``LOAD_FROM_DICT_OR_*`` looks in first: a class
    namespace (or another dict) the run made, whose every entry the shadow holds."""
    if type(mapping.obj) is not dict or mapping.external or not isinstance(mapping.items, dict):
        raise m.unsupported("a name looked up in a mapping from outside the run")
    items: dict[Any, tuple[Val, Val]] = mapping.items
    return items


@opcode("LOAD_FROM_DICT_OR_DEREF")
def _load_from_dict_or_deref(m: FrameMonitor, inst: Inst) -> None:
    """3.12's ``LOAD_LOCALS; LOAD_FROM_DICT_OR_DEREF`` is 3.11's ``LOAD_CLASSDEREF``: the
    mapping on the stack first, then the cell."""
    (mapping,) = m.pop()
    hit = _mapping_items(m, mapping).get(m.names[inst.arg])
    if hit is not None:
        m.push(hit[1])
        return
    load_deref(m, inst)


@opcode("LOAD_FROM_DICT_OR_GLOBALS")
def _load_from_dict_or_globals(m: FrameMonitor, inst: Inst) -> None:
    """An annotation scope's read of a global name (3.12+): the class namespace on the stack
    first, then the globals, then the builtins (``LOAD_NAME`` with the mapping given)."""
    (mapping,) = m.pop()
    name = inst.argval
    hit = _mapping_items(m, mapping).get(name)
    globals_ = m.frame.f_globals

    def make(real: list[Any]) -> list[Val]:
        if hit is not None:
            return [hit[1]]
        return [global_value(m, globals_, name, real[0])]

    m.expect_outputs(inst, 1, make)


@opcode("SETUP_ANNOTATIONS")
def _setup_annotations(m: FrameMonitor, inst: Inst) -> None:
    names = _namespace(m)
    if "__annotations__" in names:
        m.expect_outputs(inst, 0, lambda real: [])
        return

    def make(real: list[Any]) -> list[Val]:
        made = m.frame.f_locals.get("__annotations__")
        if type(made) is not dict or made:
            raise m.unsupported("SETUP_ANNOTATIONS made no empty dict")
        put_item(names, m.cap.const("__annotations__"), m.cap.new(made, items={}))
        return []

    m.expect_outputs(inst, 0, make)
