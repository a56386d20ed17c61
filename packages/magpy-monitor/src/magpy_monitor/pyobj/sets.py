"""Sets and frozensets: membership, iteration order, rebuilding and write-backs.

Membership is decided by hashing. Elements that are values (ints, strs, tuples of values...)
hash by value: each is guarded by value as it enters a set or is looked up. Modules, tensors
and plain objects hash by identity: a membership test depends on *which* objects they are, so
every entry object that meets a set must stay distinct from the others on later calls
(``Capture.distinct_nodes``, checked by the record's guard); two reads of one object share one
node, and the alias guards keep them one object. With those guards every membership answer of
the record holds on every call it admits. The answers are also checked against the real set
while recording, so a set the shadow cannot follow is a graph break, never a wrong record.

Iteration order follows the hash table's layout, which depends on the hashes (identity hashes
change from call to call) and on the set's history (resizes, deletions, ``pop``'s finger). The
shadow keeps that history (``SetState.history``):

- ``FRESH``: made during the run by adding elements one after another to an empty set (a
  literal, a comprehension, ``set(list)``, ``add``, ``update(list)``). The mock rebuilds it the
  same way, so even a set of objects comes out with eager's layout.
- ``CLEAN``: made during the run from sets of values with known layouts by other operations
  (``discard``, set algebra, ``set(dict)``): the same guarded values give the same layout on
  every call, but the mock cannot rebuild it.
- ``FIXED``: a constant (a ``frozenset`` literal of the code, a pure call's result).
- ``ENTRY``: a set from outside the run, unchanged: its contents are guarded, and its order too
  where the run iterates it.
- ``DIRTY``: anything else (an entry set the run changed, a set of objects after a deletion).

Iterating is followed only where the order is the same on every admitted call: sets of values
with a known layout (FRESH, CLEAN, FIXED), entry sets, and sets of at most one element. Changes
to an entry set are replayed by the mock as the same calls (``s.add(x)``, ``s.discard(x)``,
``s.clear()``), which leave it as eager does.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Hashable
from typing import Any

import torch

from magpy_refgraph import GuardKind, Unsupported, set_contents, set_order

from ..bytecode.iteration import is_generator, unpack
from ..core.capture import Capture, Write, is_value_type
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS
from ..core.values import Val

__all__ = [
    "SET_TYPES",
    "SetState",
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

SET_TYPES = (set, frozenset)
FRESH, CLEAN, FIXED, ENTRY, DIRTY = "fresh", "clean", "fixed", "entry", "dirty"
_ID_STABLE = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)
_IDENTITY_TENSORS = (torch.Tensor, torch.nn.Parameter)


class SetState:
    """The shadow of a set: its elements by key (insertion order while FRESH), its history."""

    __slots__ = ("history", "keys")

    def __init__(self, keys: dict[Hashable, Val], history: str) -> None:
        self.keys = keys
        self.history = history


class _IdKey:
    """The key of an element hashed by identity: its entry node, its shadow, or the object."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def __hash__(self) -> int:
        return id(self.ref)

    def __eq__(self, other: object) -> bool:
        return type(other) is _IdKey and other.ref is self.ref


def _state(v: Val) -> SetState | None:
    extra = v.extra
    if isinstance(extra, dict):
        st = extra.get("set")
        if isinstance(st, SetState):
            return st
    return None


def _layout_known(st: SetState) -> bool:
    """The set's layout is the same on every admitted call (values only, known history)."""
    return st.history in (FRESH, CLEAN, FIXED) and not any(type(k) is _IdKey for k in st.keys)


def _order_known(st: SetState) -> bool:
    return len(st.keys) <= 1 or _layout_known(st)


def _order_reason(st: SetState) -> str:
    if any(type(k) is _IdKey for k in st.keys):
        return "a set of objects hashed by identity (its order changes from call to call)"
    return "a set whose layout depends on its history before the call"


def _identity_hashed(obj: Any) -> bool:
    t = type(obj)
    if t in _IDENTITY_TENSORS:
        return True
    hash_, eq = getattr(t, "__hash__", None), getattr(t, "__eq__", None)
    return hash_ is object.__hash__ and eq is object.__eq__


def elem_key(cap: Capture, v: Val) -> Hashable:
    """The key under which ``v`` sits in a set; guards what that key depends on."""
    obj = v.obj
    if obj is None or is_value_type(obj):
        cap.observe(v)
        return obj
    if not _identity_hashed(obj):
        raise Unsupported(f"a {type(obj).__name__} in a set (its own __hash__/__eq__ decide)")
    if v.external and v.node is not None:
        cap.observe_type(v)  # (its hash and == stay identity-based)
        cap.distinct_nodes.setdefault(v.node, None)
        return _IdKey(v.node)
    if v.const:
        if isinstance(obj, _ID_STABLE):
            return _IdKey(obj)
        raise Unsupported(f"a constant {type(obj).__name__} in a set")
    return _IdKey(v)  # an object made during the run


def _keys_of(cap: Capture, items: list[Val]) -> dict[Hashable, Val]:
    """Keys of ``items`` added one after another (the first of equal elements stays)."""
    keys: dict[Hashable, Val] = {}
    for v in items:
        keys.setdefault(elem_key(cap, v), v)
    return keys


def _values_only(obj: Any) -> bool:
    return all(x is None or is_value_type(x) for x in obj)


def set_state(cap: Capture, v: Val) -> SetState:
    """The shadow of set ``v`` (an entry set's contents are guarded on first use)."""
    st = _state(v)
    if st is not None:
        return st
    obj = v.obj
    if v.external and v.node is not None:
        if not _values_only(obj):
            raise Unsupported("a set of objects from outside (its elements have no entry paths)")
        cap.observe_type(v)
        cap.graph.observe(v.node, GuardKind.CUSTOM, ("set_items", set_contents(obj)))
        st = SetState({x: cap.const(x) for x in obj}, ENTRY)
    elif isinstance(v.items, list):  # built by code that gave it no state
        st = SetState(_keys_of(cap, v.items), DIRTY)
    elif v.const and _values_only(obj):
        st = SetState({x: cap.const(x) for x in obj}, FIXED)
    else:
        raise Unsupported(f"a {type(obj).__name__} of unknown contents")
    if isinstance(v.extra, dict):
        v.extra["set"] = st
    elif v.extra is None:
        v.extra = {"set": st}
    if not v.const:
        v.items = list(st.keys.values())
    return st


def empty_set(cap: Capture, obj: Any) -> Val:
    """The shadow of a new empty set ``obj`` (made by native code, e.g. a defaultdict)."""
    return _new_set(cap, obj, {}, FRESH)


def _store(v: Val, keys: dict[Hashable, Val], history: str) -> None:
    st = _state(v)
    assert st is not None
    st.keys, st.history = keys, history
    v.items = list(keys.values())


def _new_set(cap: Capture, obj: Any, keys: dict[Hashable, Val], history: str) -> Val:
    v = cap.new(obj, items=list(keys.values()), extra={"set": SetState(keys, history)})
    _verify(v)
    return v


def _verify(v: Val) -> None:
    """The shadow holds exactly the real set's elements (checked while recording)."""
    st = _state(v)
    assert st is not None
    real = v.obj
    if len(st.keys) != len(real) or not all(x.obj in real for x in st.keys.values()):
        raise Unsupported("a set whose contents the monitor could not follow")


def _resync(cap: Capture, real: Any, candidates: list[Val]) -> dict[Hashable, Val]:
    """Keys of the real set ``real``, naming each object by one of ``candidates``."""
    by_id = {id(v.obj): v for v in candidates if not (v.obj is None or is_value_type(v.obj))}
    keys: dict[Hashable, Val] = {}
    for x in real:
        if x is None or is_value_type(x):
            keys[x] = cap.const(x)  # (every value in a set is guarded)
            continue
        v = by_id.get(id(x))
        if v is None or v.obj is not x:
            raise Unsupported("a set holds an object the monitor cannot name")
        keys[elem_key(cap, v)] = v
    return keys


# ---------------------------------------------------------------------- reading
def observe_set(cap: Capture, v: Val) -> None:
    """The program depends on the whole of set ``v``, its iteration order included."""
    st = _state(v)
    if v.external and v.node is not None and (st is None or st.history == ENTRY):
        set_state(cap, v)
        cap.graph.observe(v.node, GuardKind.CUSTOM, ("set_order", set_order(v.obj)))
        return
    st = set_state(cap, v)
    if not _order_known(st):
        raise Unsupported(f"reads the order of {_order_reason(st)}")


def set_iter_items(m: FrameMonitor, v: Val) -> list[Val]:
    """The values iterating set ``v`` gives, where their order is the same on every call."""
    cap = m.cap
    st = set_state(cap, v)
    vals = list(st.keys.values())
    if len(vals) <= 1:
        return vals
    if st.history == ENTRY:
        cap.graph.observe(v.node, GuardKind.CUSTOM, ("set_order", set_order(v.obj)))
    elif not _layout_known(st):
        raise m.unsupported(f"iterating {_order_reason(st)}")
    return [st.keys[x] for x in v.obj]  # values only here: looked up by equality


def set_contains(m: FrameMonitor, inst: Inst, item: Val, container: Val) -> None:
    """``item in s`` (CONTAINS_OP)."""
    cap = m.cap
    st = set_state(cap, container)
    key = elem_key(cap, item)
    if (key in st.keys) != (item.obj in container.obj):
        raise m.unsupported("set membership the monitor cannot follow")
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


class _Operand:
    """An argument of a set operation: its elements by key, and whether its iteration order
    (and, for a set, its layout) is the same on every admitted call."""

    __slots__ = ("is_set", "keys", "ordered", "sequential", "src", "vals")
    src: Val | None

    def __init__(self, m: FrameMonitor, v: Val) -> None:
        cap = m.cap
        self.src = v
        if type(v.obj) in SET_TYPES:
            st = set_state(cap, v)
            self.keys, self.is_set = st.keys, True
            self.ordered = _layout_known(st)
            self.sequential = False  # a set operand is merged table to table
        else:
            items = unpack(m, v, None)
            self.keys, self.is_set = _keys_of(cap, items), False
            self.ordered = True
            # set.update(dict) sizes the table first; other iterables are added one by one
            self.sequential = type(v.obj) is not dict
        self.vals = list(self.keys.values())


def _operands(m: FrameMonitor, args: list[Val]) -> list[_Operand]:
    return [_Operand(m, a) for a in args]


# ---------------------------------------------------------------------- building
def build_set(m: FrameMonitor, inst: Inst, parts: list[Val]) -> None:
    """BUILD_SET: a literal ``{a, b}`` adds its elements one after another."""
    cap = m.cap
    keys = _keys_of(cap, parts)
    m.expect_outputs(inst, 1, lambda real: [_new_set(cap, real[0], keys, FRESH)])


def _constructor(kind: type) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        cap = m.cap
        if kw or len(pos) > 1:
            raise m.unsupported(f"{kind.__name__}() with {len(pos)} arguments")
        if not pos:
            m.expect_outputs(inst, 1, lambda real: [_new_set(cap, real[0], {}, FRESH)])
            return
        (src,) = pos
        if is_generator(src):

            def make_gen(real: list[Any]) -> list[Val]:
                return [_new_set(cap, real[0], _keys_of(cap, list(p.yields)), FRESH)]

            p = m.expect_outputs(inst, 1, make_gen)
            p.gen = src
            return
        op = _Operand(m, src)
        if op.is_set:
            history = CLEAN if op.ordered else DIRTY
        else:
            history = FRESH if op.sequential else CLEAN

        def make(real: list[Any]) -> list[Val]:
            if real[0] is src.obj:  # frozenset(fs) is fs
                return [src]
            keys = dict(op.keys) if history == FRESH else _resync(cap, real[0], op.vals)
            return [_new_set(cap, real[0], keys, history)]

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


def _write_each(cap: Capture, base: Val, name: str, operands: list[_Operand]) -> None:
    """``base.name(v)`` replayed for each operand element, when ``base`` is an entry set."""
    if base.external:
        for o in operands:
            for v in o.vals:
                _write(cap, base, name, v)


def _after(st: SetState, base: Val, fresh: bool, operands: list[_Operand]) -> str:
    """The history of a set after a change."""
    if base.external:
        return DIRTY
    if fresh and st.history == FRESH:
        return FRESH
    if _layout_known(st) and all(o.ordered for o in operands):
        return CLEAN
    return DIRTY


def _insert(
    m: FrameMonitor, inst: Inst, base: Val, operands: list[_Operand], name: str, out: str
) -> None:
    """``add``/``update``/``|=``/SET_ADD/SET_UPDATE: the operands' elements join the set."""
    cap = m.cap
    st = _mutable(m, base, name)
    sequential = all(not o.is_set and o.sequential for o in operands)
    if base.external:
        if not sequential:
            raise m.unsupported(f"{name} from a set or dict into a set from outside")
        if any(type(k) is _IdKey for o in operands for k in o.keys):
            raise m.unsupported("adding an object to a set from outside")
    _begin(cap, base, st, name)
    _write_each(cap, base, "add", operands)

    def make(real: list[Any]) -> list[Val]:
        keys = dict(st.keys)
        for o in operands:
            for k, v in o.keys.items():
                keys.setdefault(k, v)
        _store(base, keys, _after(st, base, sequential, operands))
        _verify(base)
        return _result(cap, base, out)

    m.expect_outputs(inst, 0 if out == NOTHING else 1, make)


def _remove(
    m: FrameMonitor,
    inst: Inst,
    base: Val,
    operands: list[_Operand],
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
        _store(base, keys, history)
        _verify(base)
        return _result(cap, base, out)

    m.expect_outputs(inst, 0 if out == NOTHING else 1, make)


def _rebuild_in_place(
    m: FrameMonitor, inst: Inst, base: Val, operands: list[_Operand], name: str, out: str
) -> None:
    """``intersection_update``/``symmetric_difference_update``/``&=``/``^=``."""
    cap = m.cap
    st = _mutable(m, base, name)
    if base.external:
        raise m.unsupported(f"{name} on a set from outside")
    candidates = list(st.keys.values()) + [v for o in operands for v in o.vals]
    _begin(cap, base, st, name)

    def make(real: list[Any]) -> list[Val]:
        keys = _resync(cap, base.obj, candidates)
        _store(base, keys, _after(st, base, False, operands))
        _verify(base)
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
        _store(base, {}, history)  # (the table is back to its initial size)
        return [cap.const(None)]

    m.expect_outputs(inst, 1, make)


def _pop(m: FrameMonitor, inst: Inst, base: Val) -> None:
    cap = m.cap
    if base.external:
        raise m.unsupported("set.pop on a set from outside (which element depends on its layout)")
    st = _mutable(m, base, "set.pop")
    if not st.keys:
        raise m.unsupported("set.pop of an empty set raises KeyError")
    if not _order_known(st):
        raise m.unsupported(f"set.pop of {_order_reason(st)}")
    candidates = list(st.keys.values())
    _begin(cap, base, st, "set.pop")

    def make(real: list[Any]) -> list[Val]:
        keys = _resync(cap, base.obj, candidates)
        popped = [v for k, v in st.keys.items() if k not in keys]
        if len(popped) != 1 or popped[0].obj is not real[0]:
            raise m.unsupported("set.pop gave an element the monitor cannot name")
        _store(base, keys, _after(st, base, False, []))
        return [popped[0]]

    m.expect_outputs(inst, 1, make)


# ---------------------------------------------------------------------- new sets and queries
_NEW_SET_METHODS = frozenset(
    "union intersection difference symmetric_difference copy __or__ __and__ __sub__ __xor__".split()
)


def _new_from(m: FrameMonitor, inst: Inst, base: Val, operands: list[_Operand], name: str) -> None:
    """``a | b``, ``a.union(b)``, ``a.copy()``...: a new set of the operands' elements."""
    cap = m.cap
    st = set_state(cap, base)
    candidates = list(st.keys.values()) + [v for o in operands for v in o.vals]
    ordered = _layout_known(st) and all(o.ordered for o in operands)

    def make(real: list[Any]) -> list[Val]:
        if real[0] is base.obj:  # frozenset.copy() is the frozenset itself
            return [base]
        keys = _resync(cap, real[0], candidates)
        return [_new_set(cap, real[0], keys, CLEAN if ordered else DIRTY)]

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


def _query(m: FrameMonitor, inst: Inst, base: Val, operands: list[_Operand], name: str) -> None:
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


def compare_sets(m: FrameMonitor, inst: Inst, a: Val, b: Val, symbol: str) -> None:
    """COMPARE_OP between two sets."""
    names = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__"}
    names |= {">": "__gt__", ">=": "__ge__"}
    _query(m, inst, a, [_Operand(m, b)], names[symbol])


_BINARY = {"|": "__or__", "&": "__and__", "-": "__sub__", "^": "__xor__"}


def binary_set_op(m: FrameMonitor, inst: Inst, a: Val, b: Val, symbol: str) -> None:
    """BINARY_OP ``| & - ^`` (and their in-place forms) with two set operands."""
    operands = [_Operand(m, b)]
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


def set_add_inst(m: FrameMonitor, inst: Inst, target: Val, v: Val) -> None:
    """SET_ADD (a set comprehension)."""
    _insert(m, inst, target, [_single(m, v)], "set comprehension", NOTHING)


def set_update_inst(m: FrameMonitor, inst: Inst, target: Val, it: Val) -> None:
    """SET_UPDATE (``{*a, *b}``)."""
    _insert(m, inst, target, [_Operand(m, it)], "set display", NOTHING)


def _single(m: FrameMonitor, v: Val) -> _Operand:
    op = _Operand.__new__(_Operand)
    op.keys = {elem_key(m.cap, v): v}
    op.vals, op.is_set, op.ordered, op.sequential, op.src = [v], False, True, True, None
    return op


# ---------------------------------------------------------------------- method table
def _method(name: str) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if kw:
            raise m.unsupported(f"set.{name} with keyword arguments")
        base, args = pos[0], pos[1:]
        if name in ("add", "discard", "remove"):
            if len(args) != 1:
                raise m.unsupported(f"set.{name} with {len(args)} arguments")
            one = [_single(m, args[0])]
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
        operands = _operands(m, args)
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
    st = _state(v)
    if st is None or st.history != FRESH:
        raise Unsupported("a set built with deletions or merges reaches the output")
