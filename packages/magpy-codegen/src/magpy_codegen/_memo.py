"""The guard's memo: skip re-walking what a call reaches through the compiled object and
globals while nothing it depends on changed.

Most of a large model's guard walks structure that does not change from call to call: the
module tree (``fn._modules['encoder']._modules['layer']...``), its parameters, the globals,
closures and module attributes the code reads, the classes whose methods ran. The walk and its
checks cost a few hundred Python lines per hit. The memo splits the guard in two (``_guard``):

- the **stable part**: paths from ``fn`` (the same object every call), globals, builtins,
  closure cells and constants, through attributes and items; and their checks that depend on
  nothing but those objects (identity, type, exact immutable values and enum members, lengths
  and keys of dicts and of dict subclasses with native methods, hasattr, module hooks, which
  entry a class holds). It runs in full the first time and whenever the memo is not valid;
  when it passes, ``Memo.arm`` takes a *snapshot* of everything its result depends on.
- the **per-call part**: paths from the arguments, tensor metadata (in place changes such as
  ``p.requires_grad_()`` touch no dict), aliasing, and checks that compute (``Outcome``).

While the snapshot holds, the stable part would give the same variables and the same verdict,
so the guard takes the variables from the memo instead (``Memo.valid``: a few C-level passes
over flat lists, no Python per object). The snapshot holds, per kind of dependency:

- ``fn`` is the same object;
- ``items``: ``dict.get(d, key)`` is the same object (a dict entry an attribute, global or item
  read came from; ``_ABSENT`` for a name that must stay absent, e.g. ``forward`` in a module's
  ``__dict__``);
- ``versions``: a dict whose whole content a check depends on (keys, length; a class's own
  dict, which decides every lookup through the class) has the same version: a number every
  mutation of the dict renews and that is never reused (``_snapcheck.c``'s ``version``: 3.11's
  own dict tag, a dict watcher from 3.12; ``torch._C._dynamo.guards.dict_version`` where the
  C check is not built). 3.13 stores an attribute of an object whose values live inline
  without touching its dict: such instance dicts are checked entry by entry (``items``);
- ``types``: an object's ``__class__``; ``mros``: a class's ``__mro__`` (``__bases__``
  assignment); ``owners``: an object's ``__dict__`` is the same dict (``obj.__dict__ = {}``);
- ``funcs``: a function's ``__code__``, ``__defaults__`` and ``__kwdefaults__`` (assignable
  slots, not dict entries); ``cells``: a closure cell's contents;
- ``empties``: hook dicts that must stay empty.

``arm`` derives this from the live objects and refuses (the memo is then off for the record,
which keeps its full guard: exact, as before) any step it cannot vouch for: a property, a slot,
a custom ``__getattribute__``/``__getattr__``/``__getitem__``, a list item. A memo re-armed more
than ``MAX_ARMS`` times (something it depends on changes every call) turns itself off.

**The record's own writes** (``self.steps += 1``, ``self.features = []`` in a forward): a
plan's ``SetAttr``/``DelAttr`` (``SetItem``/``DelItem`` of a constant key) on a stable object
would renew that object's dict version on every hit, so the snapshot would never hold twice
and the memo would turn itself off. So (``written``): the paths the record writes (the
attribute or item itself, and everything read through it) are left to the per-call part, which
reads them fresh every call, and the dict of each object written to is checked entry by entry
(the entries the stable part read, as a module's globals are) rather than by its version. A
write by anyone else to an entry the stable part read still fails the snapshot; the written
entries' new values are checked by the per-call part.

A change made by another thread *during* a call is a data race in eager too; the snapshot is
taken right after the checks it stands for.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import attrs
from torch._C._dynamo.guards import dict_version

from magpy_monitor import ClassEntry, CodeOf, Defines
from magpy_refgraph import (
    Access,
    AccessKind,
    Constant,
    DelAttr,
    DelItem,
    FromPath,
    GuardKind,
    GuardReq,
    ModuleCall,
    ModuleNoHooks,
    NoPlainAttr,
    NotInInstanceDict,
    Outcome,
    Path,
    SetAttr,
    SetItem,
    immutable_value,
)

from ._cbuild import load_snapcheck, load_values_state, load_version
from ._snapshot import (
    _ABSENT,
    Frozen,
    _attr_step,
    _check,
    _entry,
    _item_step,
    _root,
    _Snapshot,
    _Unsafe,
    holds_python,
)

__all__ = [
    "MAX_ARMS",
    "PYTHON_CHECK",
    "Memo",
    "MemoPlan",
    "SnapshotCheck",
    "classify",
    "holds_python",
    "stable_check",
    "stable_path",
]

MAX_ARMS = 16
_STABLE_ROOTS = (AccessKind.GLOBAL, AccessKind.BUILTIN, AccessKind.CELL, AccessKind.CONST)
_STABLE_STEPS = (AccessKind.ATTR, AccessKind.OBJATTR, AccessKind.ITEM, AccessKind.DICTITEM)
_STABLE_KINDS = (
    GuardKind.ID,
    GuardKind.TYPE,
    GuardKind.NONE,
    GuardKind.NOT_NONE,
    GuardKind.LEN,
    GuardKind.KEYS,
    GuardKind.HASATTR,
    GuardKind.NOT_HASATTR,
)
# assignable attributes that live outside any dict: their values are in the snapshot


def _identity_value(value: Any) -> bool:
    """A value whose check depends on nothing but the object found: an immutable value, or an
    enum member (checked by identity)."""
    return immutable_value(value) or isinstance(value, enum.Enum)


def stable_path(path: Path, anchor: str = "fn") -> bool:
    """Whether ``path`` may belong to the stable part: ``anchor`` is the root local that is the
    memo's fixed object (``fn`` of a whole call; a site's first argument, e.g. ``self``)."""
    root = path.root
    if root.kind is AccessKind.LOCAL:
        if root.key != anchor:
            return False
    elif root.kind not in _STABLE_ROOTS:
        return False
    return all(step.kind in _STABLE_STEPS for step in path.steps)


def stable_check(req: GuardReq) -> bool:
    """Whether requirement ``req`` on a stable path may belong to the stable part."""
    kind = req.kind
    if kind in _STABLE_KINDS:
        return True
    if kind is GuardKind.VALUE:
        return _identity_value(req.payload)
    if kind is GuardKind.CUSTOM:
        payload = req.payload
        if isinstance(payload, Outcome):
            return type(payload.fn) in (CodeOf, Defines, ClassEntry)
        return isinstance(payload, (ModuleCall, ModuleNoHooks, NotInInstanceDict, NoPlainAttr))
    return False


@attrs.frozen
class MemoPlan:
    """Which paths of a plan the stable part evaluates (``safe``) and which requirements it
    checks (``checks``: indexes into ``plan.guards``), as ``classify`` found them; ``anchor``:
    the root local whose object the memo is kept for; ``written``: the paths of the objects
    the record writes attributes or items of (their dicts are checked entry by entry)."""

    safe: frozenset[Path]
    checks: frozenset[int]
    anchor: str = "fn"
    written: frozenset[Path] = frozenset()


_ATTR_STEPS = (AccessKind.ATTR, AccessKind.OBJATTR)
_ITEM_STEPS = (AccessKind.ITEM, AccessKind.DICTITEM)


def written(plan: Any) -> dict[Path, set[tuple[bool, Any]]]:
    """What ``plan``'s writebacks store to or delete from pre-existing objects found at entry
    paths: per target path, its ``(attribute?, name or key)`` written (an item only with a
    constant key)."""
    out: dict[Path, set[tuple[bool, Any]]] = {}
    for w in plan.writebacks:
        if not isinstance(w, SetAttr | DelAttr | SetItem | DelItem):
            continue
        if not isinstance(w.target, FromPath):
            continue
        if isinstance(w, SetAttr | DelAttr):
            out.setdefault(w.target.path, set()).add((True, w.name))
        elif isinstance(w.key, Constant):
            out.setdefault(w.target.path, set()).add((False, w.key.value))
    return out


def _under_write(path: Path, writes: dict[Path, set[tuple[bool, Any]]]) -> bool:
    """Whether ``path`` is, or is read through, an attribute or item the record writes."""
    while path.parent is not None:
        step, parent = path.steps[-1], path.parent
        names = writes.get(parent)
        if names and step.kind in (*_ATTR_STEPS, *_ITEM_STEPS):
            key = (step.kind in _ATTR_STEPS, step.key)
            try:
                if key in names:
                    return True
            except TypeError:  # (an unhashable key: never a constant one)
                pass
        path = parent
    return False


def classify(plan: Any, fn: Any, anchor: str = "fn") -> tuple[MemoPlan, dict[Path, Any]] | None:
    """The stable part of ``plan``'s guard on ``fn`` (the object at root local ``anchor``)
    now, and the value of each of its paths (read here, each step only once it is known to run
    no user code); None if it is empty."""
    parents: dict[Path, Path | None] = {}  # the stable paths, each with its parent
    writes = written(plan)
    wanted = [req.path for req in plan.guards]
    for path in (
        *wanted,
        *plan.inputs,
        *plan.distinct,
        *(p for pair in plan.aliases for p in pair),
    ):
        if writes and _under_write(path, writes):
            path = path.parent  # (its parents may still be stable: climb from the first one)
            while path is not None and _under_write(path, writes):
                path = path.parent
        while path is not None and path not in parents and stable_path(path, anchor):
            parents[path] = parent = path.parent
            path = parent
    _load_holds()  # (vouched for as ``arm`` will: 3.13's values state included)
    s = _Snapshot(_CHECK[0].values_state)
    values: dict[Path, Any] = {}
    for path in sorted(parents, key=len):
        parent = parents[path]
        if parent is not None and parent not in values:
            continue
        try:
            values[path] = value = _entry(s, parent and values[parent], path, fn)
        except (_Unsafe, LookupError, AttributeError):
            continue
        if path in writes:
            s.per_entry(value)
    checks = set()
    for i, req in enumerate(plan.guards):
        if req.path in values and stable_check(req):
            try:
                _check(s, req, values[req.path])
            except _Unsafe:
                continue
            checks.add(i)
    if not values:
        return None
    targets = frozenset(p for p in writes if p in values)
    return MemoPlan(frozenset(values), frozenset(checks), anchor, targets), values


class SnapshotCheck(NamedTuple):
    """How snapshots are checked: ``holds(state, absent)`` and the dict ``version`` it compares
    (a snapshot is frozen with the versions its check reads); ``values_state``, where the check
    has one, vouches for an instance dict whose values a store changes without a new version
    (3.13), so that such a dict is checked whole rather than entry by entry."""

    holds: Callable[[Frozen, Any], bool]
    version: Callable[[Any], int]
    values_state: Callable[[Any], bytes] | None = None


PYTHON_CHECK = SnapshotCheck(holds_python, dict_version)
_CHECK: list[SnapshotCheck] = [PYTHON_CHECK]  # the one in use, once chosen: the C one if built
_LOADED = [False]


def _load_holds() -> None:
    if not _LOADED[0]:
        _LOADED[0] = True
        holds, version = load_snapcheck(), load_version()
        if holds is not None and version is not None:
            _CHECK[0] = SnapshotCheck(holds, version, load_values_state())


class Memo:
    """The stable part's snapshot and variables of one guard (see the module docstring).

    ``entries``: the stable variables in evaluation order, each ``(parent index or None,
    access)`` (a root access when the parent is None), ``names`` their names in the guard;
    ``checks``: the stable requirements, each ``(variable index, requirement)``; ``needed``:
    the indexes of the variables the rest of the guard uses (what ``valid`` returns). Filled
    in by the guard's generator.
    """

    def __init__(self) -> None:
        self.entries: list[tuple[int | None, Access]] = []
        self.checks: list[tuple[int, GuardReq]] = []
        self.names: list[str] = []
        self.paths: list[Path] = []
        self.needed: list[int] = []
        self.distinct: list[Path] = []  # stable paths that must reach distinct objects
        self.written: list[int] = []  # the variables the record writes attributes or items of
        self.state: Frozen | None = None
        self.arms = 0
        self.off: str | None = None  # why the memo is off for good

    def valid(self, fn: Any) -> tuple[Any, ...] | None:
        """The needed variables, where the snapshot holds; else None."""
        s = self.state
        if s is None or fn is not s.fn or not _CHECK[0].holds(s, _ABSENT):
            return None
        return s.kept

    def arm(self, fn: Any, values: tuple[Any, ...], ids: frozenset[int] | None = None) -> None:
        """The stable part passed with ``values`` (and ``ids``, those of the ``distinct``
        paths' objects): snapshot what it depended on."""
        self.state = None
        if self.off is not None:
            return
        _load_holds()
        self.arms += 1
        if self.arms > MAX_ARMS:
            self.off = f"re-armed more than {MAX_ARMS} times: what it depends on keeps changing"
            return
        check = _CHECK[0]
        s = _Snapshot(check.values_state)
        for i in self.written:
            s.per_entry(values[i])
        try:
            for parent, access in self.entries:  # (the values the guard read are kept)
                if parent is None:
                    _root(s, access, fn)
                elif access.kind in (AccessKind.ATTR, AccessKind.OBJATTR):
                    generic = access.kind is AccessKind.OBJATTR
                    _attr_step(s, values[parent], str(access.key), generic=generic)
                else:
                    dict_item = access.kind is AccessKind.DICTITEM
                    _item_step(s, values[parent], access.key, stored=dict_item)
            for i, req in self.checks:
                _check(s, req, values[i])
        except (_Unsafe, LookupError, AttributeError) as exc:
            self.off = str(exc) or type(exc).__name__
            return
        kept = tuple(values[i] for i in self.needed)
        self.state = s.frozen(fn, (*kept, ids) if self.distinct else kept, check)

    def arm_first(self, fn: Any, values: dict[Path, Any]) -> None:
        """Arm from the values ``classify`` read (where the stable part would pass: its
        distinct paths reach distinct objects)."""
        ids = frozenset(id(values[p]) for p in self.distinct)
        if len(ids) == len(self.distinct):
            self.arm(fn, tuple(values[p] for p in self.paths), ids)
