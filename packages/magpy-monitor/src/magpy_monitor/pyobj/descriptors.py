"""Descriptors made in the run: ``property(fget, fset, fdel, doc)``, ``staticmethod(f)``,
``classmethod(f)`` (``@property`` in a class statement run inside the region), and the copies
a property's ``getter``/``setter``/``deleter`` make.

Each is a pure constructor of a new object over the callables it is given: it runs natively
(no Python of the program's runs: a frame of the program's it starts is a break), and the
object's shadow remembers its parts, a ``Construction`` the mock calls again over the rebuilt
parts should the object leave the region (``pyobj.objects``). What the object then does runs
Python only through those parts: a read through a property follows its getter, a store its
setter (``pyobj.instances``); a static method read from a class the run made is its function,
a class method is bound to that class's shadow (``core.attributes``, ``pyobj.classes``).
"""

from __future__ import annotations

from typing import Any

from ..core.frame import FrameMonitor, Inst
from ..core.programcode import program_frames
from ..core.registry import METHOD_HANDLERS, register_builtin
from ..core.values import Construction, Val

__all__: list[str] = []

_PROPERTY_PARTS = ("fget", "fset", "fdel", "doc")


def _bind(
    m: FrameMonitor, what: str, names: tuple[str, ...], pos: list[Val], kw: dict[str, Val]
) -> list[Val]:
    """The shadows of ``names`` as a call of ``what(*pos, **kw)`` binds them (None: missing)."""
    if len(pos) > len(names) or not set(kw) <= set(names[len(pos) :]):
        raise m.unsupported(f"{what}() with unusual arguments")
    bound = dict(zip(names, pos, strict=False)) | kw
    return [bound.get(n) or m.cap.const(None) for n in names]


def _made(m: FrameMonitor, inst: Inst, cls: type, parts: list[Val], names: tuple[str, ...]) -> None:
    """``cls(*parts)`` runs natively; its result holds the parts (checked) and is rebuilt by
    calling ``cls`` again."""
    cap = m.cap
    for v in parts:
        if isinstance(v.obj, str):
            cap.observe(v)  # (a doc string)
        else:
            cap.observe_identity(v)  # (a function from outside: the same one, rebuilt or not)

    def make(real: list[Any]) -> list[Val]:
        obj = real[0]
        held = [getattr(obj, n) for n in names if n != "doc"]
        if type(obj) is not cls or any(x is not v.obj for x, v in zip(held, parts, strict=False)):
            raise m.unsupported(f"{cls.__name__}() made another object than its parts")
        return [cap.new(obj, payload=Construction(cls, list(parts), {}))]

    p = m.expect_outputs(inst, 1, make)
    p.calls_back = program_frames()  # (a callable's Python ``__doc__``, ``__isabstractmethod__``)


@register_builtin(property)
def _property(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    _made(m, inst, property, _bind(m, "property", _PROPERTY_PARTS, pos, kw), _PROPERTY_PARTS)


def _wrapper(cls: type) -> Any:
    """``staticmethod(f)`` or ``classmethod(f)``."""

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if kw or len(pos) != 1:
            raise m.unsupported(f"{cls.__name__}() with unusual arguments")
        _made(m, inst, cls, pos, ("__func__",))

    return handle


for _cls in (staticmethod, classmethod):
    register_builtin(_cls)(_wrapper(_cls))


def _copy(part: str) -> Any:
    """``prop.getter(f)`` (``setter``, ``deleter``): ``property`` over the parts of ``prop``
    with ``f`` as that part. (Its doc string: the one it was given; one it took from its getter
    is taken again from the new getter, as CPython's copy does.)"""

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if kw or len(pos) != 2 or type(pos[0].obj) is not property:
            raise m.unsupported(f"property.{part}() with unusual arguments")
        ctor = pos[0].payload(Construction)
        if ctor is None or ctor.cls is not property:
            raise m.unsupported(f"property.{part}() of a property made outside the run")
        parts = list(ctor.pos)
        parts[("fget", "fset", "fdel").index(part)] = pos[1]
        _made(m, inst, property, parts, _PROPERTY_PARTS)

    return handle


for _part, _method in (("fget", "getter"), ("fset", "setter"), ("fdel", "deleter")):
    METHOD_HANDLERS[(property, _method)] = _copy(_part)
