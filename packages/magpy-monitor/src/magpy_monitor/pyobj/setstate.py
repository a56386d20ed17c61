"""The shadow of a set: its elements by key, and the history its iteration order follows.

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

import types
from collections.abc import Hashable
from typing import Any

import torch

from magpy_refgraph import GuardKind, SetItems, Unsupported, set_contents

from ..bytecode.iteration import unpack
from ..core.capture import Capture
from ..core.frame import FrameMonitor
from ..core.values import Payload, Val
from ..core.valuetypes import is_value_type

__all__ = [
    "CLEAN",
    "DIRTY",
    "ENTRY",
    "FIXED",
    "FRESH",
    "SET_TYPES",
    "IdKey",
    "Operand",
    "SetState",
    "elem_key",
    "keys_of",
    "layout_known",
    "new_set",
    "operands_of",
    "order_known",
    "order_reason",
    "resync",
    "set_state",
    "single",
    "state_of",
    "store_keys",
    "verify",
]

SET_TYPES = (set, frozenset)
FRESH, CLEAN, FIXED, ENTRY, DIRTY = "fresh", "clean", "fixed", "entry", "dirty"
_ID_STABLE = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)
_IDENTITY_TENSORS = (torch.Tensor, torch.nn.Parameter)


class SetState(Payload):
    """The shadow of a set: its elements by key (insertion order while FRESH), its history."""

    __slots__ = ("history", "keys")

    def __init__(self, keys: dict[Hashable, Val], history: str) -> None:
        self.keys = keys
        self.history = history


class IdKey:
    """The key of an element hashed by identity: its entry node, its shadow, or the object."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def __hash__(self) -> int:
        return id(self.ref)

    def __eq__(self, other: object) -> bool:
        return type(other) is IdKey and other.ref is self.ref


def state_of(v: Val) -> SetState | None:
    return v.payload(SetState)


def layout_known(st: SetState) -> bool:
    """The set's layout is the same on every admitted call (values only, known history)."""
    return st.history in (FRESH, CLEAN, FIXED) and not any(type(k) is IdKey for k in st.keys)


def order_known(st: SetState) -> bool:
    return len(st.keys) <= 1 or layout_known(st)


def order_reason(st: SetState) -> str:
    if any(type(k) is IdKey for k in st.keys):
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
    if v.external and v.node is not None and isinstance(obj, _ID_STABLE):
        cap.observe_identity(v)  # (a class or function: which one it is, as a constant is)
        return IdKey(obj)
    if v.external and v.node is not None:
        cap.observe_type(v)  # (its hash and == stay identity-based)
        cap.distinct_nodes.setdefault(v.node, None)
        return IdKey(v.node)
    if v.const:
        if isinstance(obj, _ID_STABLE):
            return IdKey(obj)
        raise Unsupported(f"a constant {type(obj).__name__} in a set")
    return IdKey(v)  # an object made during the run


def keys_of(cap: Capture, items: list[Val]) -> dict[Hashable, Val]:
    """Keys of ``items`` added one after another (the first of equal elements stays)."""
    keys: dict[Hashable, Val] = {}
    for v in items:
        keys.setdefault(elem_key(cap, v), v)
    return keys


def _values_only(obj: Any) -> bool:
    return all(x is None or is_value_type(x) for x in obj)


def _const_key(x: Any) -> Hashable:
    return x if x is None or is_value_type(x) else IdKey(x)


def set_state(cap: Capture, v: Val) -> SetState:
    """The shadow of set ``v`` (an entry set's contents are guarded on first use)."""
    st = state_of(v)
    if st is not None:
        return st
    obj = v.obj
    if v.external and v.node is not None:
        if not _values_only(obj):
            raise Unsupported("a set of objects from outside (its elements have no entry paths)")
        cap.observe_type(v)
        cap.graph.observe(v.node, GuardKind.CUSTOM, SetItems(set_contents(obj)))
        st = SetState({x: cap.const(x) for x in obj}, ENTRY)
    elif isinstance(v.items, list):  # built by code that gave it no state
        st = SetState(keys_of(cap, v.items), DIRTY)
    elif v.const and _values_only(obj):
        st = SetState({x: cap.const(x) for x in obj}, FIXED)
    elif v.const and all(x is None or is_value_type(x) or isinstance(x, _ID_STABLE) for x in obj):
        # a constant set of classes or functions (pytree's BUILTIN_TYPES): keyed by identity
        st = SetState({_const_key(x): cap.const(x) for x in obj}, FIXED)
    else:
        raise Unsupported(f"a {type(obj).__name__} of unknown contents")
    if v.payload(Payload) is None:  # (a value that carries something else keeps it)
        v.set_payload(st)
    if not v.const:
        v.items = list(st.keys.values())
    return st


def store_keys(v: Val, keys: dict[Hashable, Val], history: str) -> None:
    st = state_of(v)
    assert st is not None
    st.keys, st.history = keys, history
    v.items = list(keys.values())


def new_set(cap: Capture, obj: Any, keys: dict[Hashable, Val], history: str) -> Val:
    v = cap.new(obj, items=list(keys.values()), payload=SetState(keys, history))
    verify(v)
    return v


def verify(v: Val) -> None:
    """The shadow holds exactly the real set's elements (checked while recording)."""
    st = state_of(v)
    assert st is not None
    real = v.obj
    if len(st.keys) != len(real) or not all(x.obj in real for x in st.keys.values()):
        raise Unsupported("a set whose contents the monitor could not follow")


def resync(cap: Capture, real: Any, candidates: list[Val]) -> dict[Hashable, Val]:
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


class Operand:
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
            self.ordered = layout_known(st)
            self.sequential = False  # a set operand is merged table to table
        else:
            items = unpack(m, v, None)
            self.keys, self.is_set = keys_of(cap, items), False
            self.ordered = True
            # set.update(dict) sizes the table first; other iterables are added one by one
            self.sequential = type(v.obj) is not dict
        self.vals = list(self.keys.values())


def operands_of(m: FrameMonitor, args: list[Val]) -> list[Operand]:
    return [Operand(m, a) for a in args]


def single(m: FrameMonitor, v: Val) -> Operand:
    op = Operand.__new__(Operand)
    op.keys = {elem_key(m.cap, v): v}
    op.vals, op.is_set, op.ordered, op.sequential, op.src = [v], False, True, True, None
    return op
