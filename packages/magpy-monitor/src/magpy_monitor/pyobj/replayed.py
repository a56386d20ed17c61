"""Changes the run makes to an object the mock rebuilds by calling its class again
(``pyobj.objects``: a dataclass such as a ``ModelOutput`` built in the run).

The mock builds such an object by calling its class with the rebuilt arguments, then makes the
changes the run made to it afterwards again, in the run's order (``Construction.changes``):

* a store or deletion (``obj.k = v``, ``obj[k] = v``, ``del obj.k``, ``setattr``) whose hook
  (``__setattr__``, ``__setitem__``, ``__delattr__``, a property's setter) is native or a
  library's runs natively in the run and again in the mock, through the same hook: a library's
  code is taken to be as deterministic as its constructor (``core.programcode``), and a frame of
  the program's that it starts is a break;
* a hook of the program's own is followed like a call; the native stores it makes
  (``super().__setattr__``, ``super().__setitem__``: ``pyobj.instances``) are the changes, made
  again natively.

After a change runs natively, the shadow's items are read back from the object (a
``ModelOutput`` mirrors its fields as items), each the shadow of the object it holds. What the
object holds of its own (its ``__dict__``, its slots) is then what its construction and these
changes gave it, so ``hasattr`` can answer from it (``pyobj.attrcalls``).
"""

from __future__ import annotations

import operator
import types
from typing import Any

from ..core import registry
from ..core.frame import FrameMonitor, Inst
from ..core.programcode import program_frames, program_function
from ..core.values import Change, Construction, Val
from .instances import follow, lookup, native_base
from .objects import item_shadow

__all__ = ["change", "read_back"]

_HOOKS = {"attr": "__setattr__", "item": "__setitem__", "delattr": "__delattr__"}
_OPS: dict[str, Any] = {"attr": setattr, "item": operator.setitem, "delattr": delattr}


@registry.CHANGE_REPLAYED.provide
def change(
    m: FrameMonitor,
    inst: Inst,
    base: Val,
    kind: str,
    key: Val,
    value: Val | None,
    *,
    pushes: bool = False,
) -> None:
    """``base.key = value`` (``kind`` "attr"), ``base[key] = value`` ("item") or ``del
    base.key`` ("delattr", ``value`` None) on an object the mock rebuilds; ``pushes``: the
    builtin (``setattr``, ``delattr``), which pushes None."""
    ctor = base.require(Construction)
    cls = type(base.obj)
    if isinstance(base.obj, tuple):
        raise m.unsupported(f"changing a {cls.__name__} (a namedtuple) made in the run")
    none = m.cap.const(None)
    n_out = 1 if pushes else 0
    tail = [] if value is None else [value]
    program = _program_hook(cls, kind, key.obj)
    if program is not None:  # the program's own code: followed, its native stores logged
        fn, with_key = program
        args = [base, key, *tail] if with_key else [base, *tail]
        follow(m, inst, fn, args, n_out, (lambda real, got: [none]) if pushes else None)
        return
    if kind == "item":
        m.cap.observe_key(key)
    else:
        m.cap.observe(key)

    def make(real: list[Any]) -> list[Val]:
        ctor.changes.append(Change(_OPS[kind], key, value))  # (once it ran)
        read_back(m, base)
        return [none] if pushes else []

    def raised(exc: BaseException) -> None:
        # (what a hook left behind before it raised is not known, nor made again)
        raise m.unsupported(f"changing a {cls.__name__} made in the run raised {exc!r}")

    p = m.expect_outputs(inst, n_out, make)
    p.calls_back = program_frames()  # (a library's hook calling the program's code: unseen)
    p.on_raise = raised


def _program_hook(cls: type, kind: str, key: Any) -> tuple[types.FunctionType, bool] | None:
    """The program's own Python that the change runs, and whether it takes the key: the
    class's hook, else a property's setter or deleter (a library's, or native code: None)."""
    hook = lookup(cls, _HOOKS[kind])
    if isinstance(hook, types.FunctionType):
        return (hook, True) if program_function(hook) else None
    if kind == "item" or type(key) is not str:
        return None
    desc = lookup(cls, key)
    if isinstance(desc, property):
        fn = desc.fset if kind == "attr" else desc.fdel
        if isinstance(fn, types.FunctionType) and program_function(fn):
            return fn, False
    return None


def read_back(m: FrameMonitor, base: Val) -> None:
    """After a change ran natively: the shadow's items are the object's items again (its
    class's own hooks may have stored items too), each the shadow of the object it holds."""
    if not isinstance(base.items, dict):
        return
    obj, ctor = base.obj, base.require(Construction)
    what = type(obj).__name__
    old: dict[Any, tuple[Val, Val]] = base.items
    items: dict[Any, tuple[Val, Val]] = {}
    mapping: Any = native_base(type(obj))
    for k, x in mapping.items(obj):  # (no Python ``items`` of the class runs)
        key = old[k][0] if k in old else (m.cap.known(k) or m.cap.const(k))
        items[k] = (key, item_shadow(m, x, what, ctor))
    old.clear()
    old.update(items)
