"""Weak references: ``weakref.ref(obj)`` and ``weakref.proxy(obj)`` made in the run, and
``ref()``.

Making one is a pure native call over an object the monitor knows (built in the run, or from
outside): its shadow remembers the referent's (a ``Construction``: the mock makes it again
over the rebuilt referent, should it leave the region; CPython hands out the same basic
reference again while one lives, in the mock as in eager). A callback would run whenever the
referent dies, at a time the record does not reproduce: a break.

``ref()`` gives the referent: for a reference made in the run, the shadow it was made over,
alive since the run holds it (a dead one is a break); for one from outside, the object it
refers to, which the run must know already (the reference is guarded to be the same, so it
refers to the same object while that lives). Reading or writing an attribute through a proxy
made in the run is reading or writing the referent's (``bytecode.attributes``); anything else
done with a proxy is not modelled (a break where a rule meets it).
"""

from __future__ import annotations

import weakref
from typing import Any

from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.programcode import program_frames
from ...core.registry import REFERENT, register_builtin
from ...core.values import Construction, Val
from ...core.valuetypes import is_value_type

__all__: list[str] = []


def _make(kind: Any) -> Any:
    """``weakref.ref(obj[, callback])`` or ``weakref.proxy(obj[, callback])``."""

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        name = kind.__name__
        if kw or not 1 <= len(pos) <= 2:
            raise m.unsupported(f"weakref.{name}() with unusual arguments")
        if len(pos) == 2 and pos[1].obj is not None:
            raise m.unsupported(f"weakref.{name}() with a callback (run when the object dies)")
        target = pos[0]
        if target.obj is None or is_value_type(target.obj) or target.const:
            raise m.unsupported(f"weakref.{name}() of a {type(target.obj).__name__}")
        m.cap.observe_identity(target)

        def make(real: list[Any]) -> list[Val]:
            known = m.cap.known(real[0])  # (the basic reference made before in the run)
            if known is not None:
                return [known]
            return [m.cap.new(real[0], payload=Construction(kind, [target], {}))]

        p = m.expect_outputs(inst, 1, make)
        p.calls_back = program_frames()  # (the program's Python must not run unseen)

    return handle


register_builtin(weakref.ref)(_make(weakref.ref))
register_builtin(weakref.proxy)(_make(weakref.proxy))


@REFERENT.provide
def referent(v: Val) -> Val | None:
    """The shadow of the object ``v`` stands for, if ``v`` is a weak proxy made in the run."""
    ctor = v.payload(Construction)
    return ctor.pos[0] if ctor is not None and ctor.cls is weakref.proxy else None


@call_rule("weak reference", lambda c: type(c.fn) is weakref.ReferenceType)
def _dereference(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """``ref()``: the shadow of the object it refers to (see the module's doc)."""
    cap = m.cap
    if c.pos or c.kwargs:
        raise m.unsupported("calling a weak reference with arguments")  # (TypeError)
    target = c.fn()
    if target is None:
        raise m.unsupported("a weak reference to an object that died")
    ctor = c.fn_val.payload(Construction)
    if ctor is not None and ctor.cls is weakref.ref and ctor.pos[0].obj is target:
        known: Val | None = ctor.pos[0]
    else:
        cap.observe_identity(c.fn_val)
        known = cap.known(target)
    if known is None:
        raise m.unsupported(f"a weak reference to a {type(target).__name__} the run has not seen")

    def make(real: list[Any]) -> list[Val]:
        if real[0] is not target:
            raise m.unsupported("a weak reference gave another object")
        return [known]

    m.expect_outputs(inst, 1, make)
