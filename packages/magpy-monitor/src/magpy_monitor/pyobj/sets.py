"""Sets and frozensets: membership, iteration, building, changes, queries and write-backs.

The shadow of a set, and what its iteration order follows, are in ``pyobj.setstate``. Every
membership answer is checked against the real set while recording, so a set the shadow cannot
follow is a graph break, never a wrong record. Iterating is followed only where the order is
the same on every admitted call. Changes to an entry set are replayed by the mock as the same
calls (``s.add(x)``, ``s.discard(x)``, ``s.clear()``), which leave it as eager does.
"""

from __future__ import annotations

import operator
from typing import Any

from magpy_refgraph import GuardKind, SetOrder, Unsupported, set_order

from ..bytecode.iteration import is_generator
from ..core import registry
from ..core.capture import Capture, Write
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS
from ..core.values import Val
from .setstate import (
    CLEAN,
    DIRTY,
    ENTRY,
    FIXED,
    FRESH,
    SET_TYPES,
    IdKey,
    Operand,
    SetState,
    elem_key,
    keys_of,
    layout_known,
    new_set,
    operands_of,
    order_known,
    order_reason,
    resync,
    set_state,
    single,
    state_of,
    store_keys,
    verify,
)

__all__ = [
    "binary_set_op",
    "build_set",
    "compare_sets",
    "empty_set",
    "observe_set",
    "rebuild_check",
    "set_add_inst",
    "set_contains",
    "set_iter_items",
    "set_update_inst",
]


def empty_set(cap: Capture, obj: Any) -> Val:
    """The shadow of a new empty set ``obj`` (made by native code, e.g. a defaultdict)."""
    return new_set(cap, obj, {}, FRESH)


# ---------------------------------------------------------------------- reading
@registry.OBSERVE_SET.provide
def observe_set(cap: Capture, v: Val) -> None:
    """The program depends on the whole of set ``v``, its iteration order included."""
    st = state_of(v)
    if v.external and v.node is not None and (st is None or st.history == ENTRY):
        set_state(cap, v)
        cap.graph.observe(v.node, GuardKind.CUSTOM, SetOrder(set_order(v.obj)))
        return
    st = set_state(cap, v)
    if not order_known(st):
        raise Unsupported(f"reads the order of {order_reason(st)}")


@registry.register_types(registry.ITER_ITEMS_MODELS, *SET_TYPES)
def set_iter_items(m: FrameMonitor, v: Val) -> list[Val]:
    """The values iterating set ``v`` gives, where their order is the same on every call."""
    cap = m.cap
    st = set_state(cap, v)
    vals = list(st.keys.values())
    if len(vals) <= 1:
        return vals
    if st.history == ENTRY:
        cap.graph.observe(v.node, GuardKind.CUSTOM, SetOrder(set_order(v.obj)))
    elif not layout_known(st):
        raise m.unsupported(f"iterating {order_reason(st)}")
    return [st.keys[x] for x in v.obj]  # values only here: looked up by equality


@registry.register_types(registry.CONTAINS_MODELS, *SET_TYPES)
def set_contains(m: FrameMonitor, inst: Inst, item: Val, container: Val) -> None:
    """``item in s`` (CONTAINS_OP)."""
    cap = m.cap
    st = set_state(cap, container)
    key = elem_key(cap, item)
    if (key in st.keys) != (item.obj in container.obj):
        raise m.unsupported("set membership the monitor cannot follow")
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


# ---------------------------------------------------------------------- building
@registry.BUILD_SET.provide
def build_set(m: FrameMonitor, inst: Inst, parts: list[Val]) -> None:
    """BUILD_SET: a literal ``{a, b}`` adds its elements one after another."""
    cap = m.cap
    keys = keys_of(cap, parts)
    m.expect_outputs(inst, 1, lambda real: [new_set(cap, real[0], keys, FRESH)])


def _constructor(kind: type) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        cap = m.cap
        if kw or len(pos) > 1:
            raise m.unsupported(f"{kind.__name__}() with {len(pos)} arguments")
        if not pos:
            m.expect_outputs(inst, 1, lambda real: [new_set(cap, real[0], {}, FRESH)])
            return
        (src,) = pos
        if is_generator(src):

            def make_gen(real: list[Any]) -> list[Val]:
                return [new_set(cap, real[0], keys_of(cap, list(p.yields)), FRESH)]

            p = m.expect_outputs(inst, 1, make_gen)
            p.gen = src
            return
        op = Operand(m, src)
        if op.is_set:
            history = CLEAN if op.ordered else DIRTY
        else:
            history = FRESH if op.sequential else CLEAN

        def make(real: list[Any]) -> list[Val]:
            if real[0] is src.obj:  # frozenset(fs) is fs
                return [src]
            keys = dict(op.keys) if history == FRESH else resync(cap, real[0], op.vals)
            return [new_set(cap, real[0], keys, history)]

        m.expect_outputs(inst, 1, make)

    return handle


BUILTIN_HANDLERS[id(set)] = (set, _constructor(set))
BUILTIN_HANDLERS[id(frozenset)] = (frozenset, _constructor(frozenset))


# ---------------------------------------------------------------------- changing a set
def _mutable(m: FrameMonitor, base: Val, name: str) -> SetState:
    """The state of a set the program is about to change (checks only: see ``_begin``)."""
    if type(base.obj) is not set:
        raise m.unsupported(f"{name} on a {type(base.obj).__name__}")
    st = set_state(m.cap, base)
    if st.history == FIXED:
        raise m.unsupported(f"{name} on a set constant")
    return st


def _begin(cap: Capture, base: Val, st: SetState, name: str) -> None:
    """The change is modelled: count it; an entry set gets a new version (its changes are
    replayed by the mock through write-backs)."""
    cap.mutations += 1
    if base.external and base.node is not None and st.history == ENTRY:
        cap.graph.update_in_place(base.node, name, keep_edges=False)
        st.history = DIRTY


NOTHING, NONE, BASE = "nothing", "none", "base"  # what a change leaves on the stack


def _result(cap: Capture, base: Val, out: str) -> list[Val]:
    if out == NOTHING:
        return []
    return [base] if out == BASE else [cap.const(None)]


def _write(cap: Capture, base: Val, name: str, arg: Val | None) -> None:
    """A change to an entry set, replayed by the mock as the same method call."""
    cap.writes.append(Write("callmethod", base, name, arg))


def _write_each(cap: Capture, base: Val, name: str, operands: list[Operand]) -> None:
    """``base.name(v)`` replayed for each operand element, when ``base`` is an entry set."""
    if base.external:
        for o in operands:
            for v in o.vals:
                _write(cap, base, name, v)


def _after(st: SetState, base: Val, fresh: bool, operands: list[Operand]) -> str:
    """The history of a set after a change."""
    if base.external:
        return DIRTY
    if fresh and st.history == FRESH:
        return FRESH
    if layout_known(st) and all(o.ordered for o in operands):
        return CLEAN
    return DIRTY


def _insert(
    m: FrameMonitor, inst: Inst, base: Val, operands: list[Operand], name: str, out: str
) -> None:
    """``add``/``update``/``|=``/SET_ADD/SET_UPDATE: the operands' elements join the set."""
    cap = m.cap
    st = _mutable(m, base, name)
    sequential = all(not o.is_set and o.sequential for o in operands)
    if base.external:
        if not sequential:
            raise m.unsupported(f"{name} from a set or dict into a set from outside")
        if any(type(k) is IdKey for o in operands for k in o.keys):
            raise m.unsupported("adding an object to a set from outside")
    _begin(cap, base, st, name)
    _write_each(cap, base, "add", operands)

    def make(real: list[Any]) -> list[Val]:
        keys = dict(st.keys)
        for o in operands:
            for k, v in o.keys.items():
                keys.setdefault(k, v)
        store_keys(base, keys, _after(st, base, sequential, operands))
        verify(base)
        return _result(cap, base, out)

    m.expect_outputs(inst, 0 if out == NOTHING else 1, make)


def _remove(
    m: FrameMonitor,
    inst: Inst,
    base: Val,
    operands: list[Operand],
    name: str,
    out: str,
    *,
    must_exist: bool = False,
) -> None:
    """``discard``/``remove``/``difference_update``/``-=``: the operands' elements leave."""
    cap = m.cap
    st = _mutable(m, base, name)
    gone = [k for o in operands for k in o.keys if k in st.keys]
    if must_exist and not gone:
        raise m.unsupported("set.remove of a missing element raises KeyError")
    if base.external and any(o.src is base for o in operands):
        raise m.unsupported("s -= s on a set from outside (eager clears it)")
    _begin(cap, base, st, name)
    _write_each(cap, base, "discard", operands)

    def make(real: list[Any]) -> list[Val]:
        keys = {k: v for k, v in st.keys.items() if k not in gone}
        history = st.history if not gone and not base.external else _after(st, base, False, [])
        store_keys(base, keys, history)
        verify(base)
        return _result(cap, base, out)

    m.expect_outputs(inst, 0 if out == NOTHING else 1, make)


def _rebuild_in_place(
    m: FrameMonitor, inst: Inst, base: Val, operands: list[Operand], name: str, out: str
) -> None:
    """``intersection_update``/``symmetric_difference_update``/``&=``/``^=``."""
    cap = m.cap
    st = _mutable(m, base, name)
    if base.external:
        raise m.unsupported(f"{name} on a set from outside")
    candidates = list(st.keys.values()) + [v for o in operands for v in o.vals]
    _begin(cap, base, st, name)

    def make(real: list[Any]) -> list[Val]:
        keys = resync(cap, base.obj, candidates)
        store_keys(base, keys, _after(st, base, False, operands))
        verify(base)
        return _result(cap, base, out)

    m.expect_outputs(inst, 0 if out == NOTHING else 1, make)


def _clear(m: FrameMonitor, inst: Inst, base: Val) -> None:
    cap = m.cap
    st = _mutable(m, base, "set.clear")
    _begin(cap, base, st, "set.clear")
    if base.external:
        _write(cap, base, "clear", None)

    def make(real: list[Any]) -> list[Val]:
        history = st.history if st.history == FRESH else _after(st, base, False, [])
        store_keys(base, {}, history)  # (the table is back to its initial size)
        return [cap.const(None)]

    m.expect_outputs(inst, 1, make)


def _pop(m: FrameMonitor, inst: Inst, base: Val) -> None:
    cap = m.cap
    if base.external:
        raise m.unsupported("set.pop on a set from outside (which element depends on its layout)")
    st = _mutable(m, base, "set.pop")
    if not st.keys:
        raise m.unsupported("set.pop of an empty set raises KeyError")
    if not order_known(st):
        raise m.unsupported(f"set.pop of {order_reason(st)}")
    candidates = list(st.keys.values())
    _begin(cap, base, st, "set.pop")

    def make(real: list[Any]) -> list[Val]:
        keys = resync(cap, base.obj, candidates)
        popped = [v for k, v in st.keys.items() if k not in keys]
        if len(popped) != 1 or popped[0].obj is not real[0]:
            raise m.unsupported("set.pop gave an element the monitor cannot name")
        store_keys(base, keys, _after(st, base, False, []))
        return [popped[0]]

    m.expect_outputs(inst, 1, make)


# ---------------------------------------------------------------------- new sets and queries
_NEW_SET_METHODS = frozenset(
    "union intersection difference symmetric_difference copy __or__ __and__ __sub__ __xor__".split()
)


def _new_from(m: FrameMonitor, inst: Inst, base: Val, operands: list[Operand], name: str) -> None:
    """``a | b``, ``a.union(b)``, ``a.copy()``...: a new set of the operands' elements."""
    cap = m.cap
    st = set_state(cap, base)
    candidates = list(st.keys.values()) + [v for o in operands for v in o.vals]
    ordered = layout_known(st) and all(o.ordered for o in operands)

    def make(real: list[Any]) -> list[Val]:
        if real[0] is base.obj:  # frozenset.copy() is the frozenset itself
            return [base]
        keys = resync(cap, real[0], candidates)
        return [new_set(cap, real[0], keys, CLEAN if ordered else DIRTY)]

    m.expect_outputs(inst, 1, make)


_QUERIES = {
    "issubset": operator.le,
    "issuperset": operator.ge,
    "isdisjoint": lambda a, b: not (a & b),
    "__eq__": operator.eq,
    "__ne__": operator.ne,
    "__lt__": operator.lt,
    "__le__": operator.le,
    "__gt__": operator.gt,
    "__ge__": operator.ge,
}


def _query(m: FrameMonitor, inst: Inst, base: Val, operands: list[Operand], name: str) -> None:
    """``a <= b``, ``a.isdisjoint(b)``...: a constant answer, guarded through the elements."""
    cap = m.cap
    mine = set_state(cap, base).keys.keys()
    theirs = operands[0].keys.keys()
    expected = _QUERIES[name](mine, theirs)

    def make(real: list[Any]) -> list[Val]:
        if real[0] is not expected:
            raise m.unsupported(f"set.{name} the monitor cannot follow")
        return [cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


@registry.register_types(registry.COMPARE_MODELS, *SET_TYPES)
def compare_sets(m: FrameMonitor, inst: Inst, a: Val, b: Val, symbol: str) -> None:
    """COMPARE_OP between two sets."""
    names = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__"}
    names |= {">": "__gt__", ">=": "__ge__"}
    _query(m, inst, a, [Operand(m, b)], names[symbol])


_BINARY = {"|": "__or__", "&": "__and__", "-": "__sub__", "^": "__xor__"}


@registry.register_types(registry.BINARY_OP_MODELS, *SET_TYPES)
def binary_set_op(m: FrameMonitor, inst: Inst, a: Val, b: Val, symbol: str) -> None:
    """BINARY_OP ``| & - ^`` (and their in-place forms) with two set operands."""
    operands = [Operand(m, b)]
    plain = symbol.rstrip("=")
    if symbol.endswith("=") and type(a.obj) is set:
        if plain == "|":
            _insert(m, inst, a, operands, "set |=", BASE)
        elif plain == "-":
            _remove(m, inst, a, operands, "set -=", BASE)
        else:
            _rebuild_in_place(m, inst, a, operands, f"set {symbol}", BASE)
        return
    _new_from(m, inst, a, operands, _BINARY[plain])


@registry.SET_ADD.provide
def set_add_inst(m: FrameMonitor, inst: Inst, target: Val, v: Val) -> None:
    """SET_ADD (a set comprehension)."""
    _insert(m, inst, target, [single(m, v)], "set comprehension", NOTHING)


@registry.SET_UPDATE.provide
def set_update_inst(m: FrameMonitor, inst: Inst, target: Val, it: Val) -> None:
    """SET_UPDATE (``{*a, *b}``)."""
    _insert(m, inst, target, [Operand(m, it)], "set display", NOTHING)


# ---------------------------------------------------------------------- method table
def _method(name: str) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if kw:
            raise m.unsupported(f"set.{name} with keyword arguments")
        base, args = pos[0], pos[1:]
        if name in ("add", "discard", "remove"):
            if len(args) != 1:
                raise m.unsupported(f"set.{name} with {len(args)} arguments")
            one = [single(m, args[0])]
            if name == "add":
                _insert(m, inst, base, one, "set.add", NONE)
            else:
                _remove(m, inst, base, one, f"set.{name}", NONE, must_exist=name == "remove")
            return
        if name == "clear":
            _clear(m, inst, base)
            return
        if name == "pop":
            _pop(m, inst, base)
            return
        operands = operands_of(m, args)
        if name == "update":
            _insert(m, inst, base, operands, "set.update", NONE)
        elif name == "difference_update":
            _remove(m, inst, base, operands, "set.difference_update", NONE)
        elif name in ("intersection_update", "symmetric_difference_update"):
            _rebuild_in_place(m, inst, base, operands, f"set.{name}", NONE)
        elif name in _NEW_SET_METHODS:
            _new_from(m, inst, base, operands, name)
        elif len(operands) != 1:
            raise m.unsupported(f"set.{name} with {len(operands)} arguments")
        else:
            _query(m, inst, base, operands, name)

    return handle


_SET_ONLY = "add discard remove pop clear update difference_update intersection_update"
_SET_ONLY += " symmetric_difference_update"
_BOTH = "union intersection difference symmetric_difference copy issubset issuperset isdisjoint"
for _name in (*_SET_ONLY.split(), *_BOTH.split()):
    METHOD_HANDLERS[(set, _name)] = _method(_name)
for _name in _BOTH.split():
    METHOD_HANDLERS[(frozenset, _name)] = _method(_name)


def rebuild_check(v: Val) -> None:
    """Raise unless the mock can rebuild set ``v`` with eager's layout (see ``FRESH``)."""
    st = state_of(v)
    if st is None or st.history != FRESH:
        raise Unsupported("a set built with deletions or merges reaches the output")
