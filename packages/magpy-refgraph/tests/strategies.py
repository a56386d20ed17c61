"""Hypothesis strategies and helpers for the refgraph tests.

Two generators:

* :func:`graphs` builds a RefGraph through random public-API calls (new_node, read, write,
  delete, update_in_place, observe), always respecting the API's preconditions.
* :func:`worlds` builds a random *object* graph (nested lists, dicts, tuples and plain objects
  with weird attribute names and keys, aliases and cycles) plus the frame roots that reach it;
  :func:`build_from_world` then plays a monitor that walks it and records reads.

Loaded by ``conftest.py`` under the module name ``_refgraph_strategies``.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator
from typing import Any

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from magpy_refgraph import (
    Access,
    AccessKind,
    Attr,
    Builtin,
    Cell,
    Const,
    Global,
    GuardKind,
    Item,
    IterPos,
    Local,
    NodeKind,
    Path,
    RefGraph,
    ShadowNode,
)

#: Settings for every property test of this package (local, not a global profile).
PROPERTY = settings(
    max_examples=int(os.environ.get("REFGRAPH_MAX_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- names and keys --------------------------------------------------------------------------

WEIRD_NAMES = [
    "x",
    "weight",
    "class",
    "def",
    "None",
    "match",
    "_",
    "__p",
    "__dunder__",
    "__",
    "a b",
    "",
    "x\ny",
    "'",
    '"',
    "\\",
    "'''",
    '");import os;("',
    "a.b",
    "0abc",
    "ﬁ",
    "ǅ",
    "名前",
    "é",
    "\u2028",
    "\x00",
    "\ud800",
    "}{|<>",
    "\\N{BULLET}",
    "x" * 300,
]

names = st.one_of(
    st.sampled_from(WEIRD_NAMES),
    st.text(max_size=8),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
)


class Obj:
    """A plain object; attributes are set with arbitrary names through setattr."""

    def __repr__(self) -> str:
        return f"<Obj {id(self):#x}>"


class Key:
    """A hashable dict key compared by identity."""


class StrKey(str):
    """A str subclass (must not be rendered as a plain literal)."""


class IntKey(int):
    """An int subclass (must not be rendered as a plain literal)."""


simple_keys = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
    st.sampled_from(WEIRD_NAMES),
    st.binary(max_size=4),
)
keys = st.one_of(
    simple_keys,
    st.tuples(simple_keys, simple_keys),
    st.tuples(st.tuples(st.integers(), st.text(max_size=3))),
    st.frozensets(st.integers(-3, 3), max_size=3),
    st.just(10**5000),
    st.just(2**130),
    st.builds(Key),
    st.builds(StrKey, st.text(max_size=4)),
    st.builds(IntKey, st.integers(-5, 5)),
)
leaves = st.one_of(
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.none(),
    st.booleans(),
    st.builds(object),
    st.builds(Obj),
)


def _make_closure(value: object) -> Any:
    captured = value

    def fn() -> object:
        return captured

    return fn


# -- object worlds -----------------------------------------------------------------------------


@attrs.define
class World:
    """Random objects plus the roots of a frame that can reach them."""

    objs: list[object]
    locals: dict[str, object]
    globals: dict[str, object]
    builtins: dict[str, object]
    other_globals: dict[str, object]
    closure: Any
    consts: list[object]

    def roots(self) -> list[tuple[Access, object]]:
        """Every root access with the object it reaches."""
        out: list[tuple[Access, object]] = [(Local(k), v) for k, v in self.locals.items()]
        out += [(Global(k), v) for k, v in self.globals.items()]
        out += [(Builtin(k), v) for k, v in self.builtins.items()]
        out += [(Global(k, scope=self.other_globals), v) for k, v in self.other_globals.items()]
        out.append(
            (Cell("captured", scope=self.closure), self.closure.__closure__[0].cell_contents)
        )
        out += [(Const(o), o) for o in self.consts]
        return out


def _fill(draw: Any, kinds: list[str], objs: list[object]) -> None:
    n = len(objs)
    targets = st.integers(0, n - 1)
    for i, kind in enumerate(kinds):
        if kind == "tuple":  # tuples may only hold earlier tuples (no tuple-only cycles)
            ok = st.integers(0, n - 1).filter(lambda j, i=i: kinds[j] != "tuple" or j < i)
            objs[i] = tuple(objs[j] for j in draw(st.lists(ok, max_size=3)))
    for obj in objs:
        if isinstance(obj, list):
            obj.extend(objs[j] for j in draw(st.lists(targets, max_size=3)))
        elif isinstance(obj, dict):
            for key in draw(st.lists(keys, max_size=3)):
                obj[key] = objs[draw(targets)]
        elif isinstance(obj, Obj):
            for name in draw(st.lists(names, max_size=3)):
                if name in ("__dict__", "__class__"):
                    continue  # assigning these replaces the object's namespace or class
                setattr(obj, name, objs[draw(targets)])


def _root_dict(draw: Any, objs: list[object], max_size: int = 3) -> dict[str, object]:
    picked = draw(st.dictionaries(names, st.integers(0, len(objs) - 1), max_size=max_size))
    return {name: objs[j] for name, j in picked.items()}


@st.composite
def worlds(draw: Any, max_objects: int = 7) -> World:
    """A random object graph with aliases and cycles, and the roots reaching it."""
    n = draw(st.integers(1, max_objects))
    kinds = draw(
        st.lists(st.sampled_from(["list", "dict", "obj", "tuple", "leaf"]), min_size=n, max_size=n)
    )
    objs: list[object] = []
    for kind in kinds:
        new: object = {"list": list, "dict": dict, "obj": Obj}.get(kind, lambda: None)()
        objs.append(draw(leaves) if kind == "leaf" else new)
    _fill(draw, kinds, objs)
    pick = st.integers(0, n - 1)
    return World(
        objs=objs,
        locals=_root_dict(draw, objs),
        globals=_root_dict(draw, objs),
        builtins=_root_dict(draw, objs, max_size=1),
        other_globals=_root_dict(draw, objs, max_size=1),
        closure=_make_closure(objs[draw(pick)]),
        consts=[objs[j] for j in draw(st.lists(pick, max_size=2))],
    )


def children(obj: object) -> Iterator[tuple[Access, object]]:
    """The references an object holds, as (derived access, child)."""
    if isinstance(obj, list | tuple):
        for i, item in enumerate(obj):
            yield Item(i), item
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield Item(key), value
    elif isinstance(obj, Obj):
        for name, value in vars(obj).items():
            yield Attr(name), value


def node_kind(obj: object) -> NodeKind:
    """The NodeKind a monitor would pick for ``obj``."""
    table: dict[type, NodeKind] = {
        list: NodeKind.LIST,
        dict: NodeKind.DICT,
        tuple: NodeKind.TUPLE,
        str: NodeKind.STRING,
        int: NodeKind.SCALAR,
        float: NodeKind.SCALAR,
        bool: NodeKind.SCALAR,
        type(None): NodeKind.NONE,
        Obj: NodeKind.OBJECT,
    }
    return table.get(type(obj), NodeKind.OPAQUE)


@attrs.define
class Built:
    """A RefGraph built from a World, with the node <-> object maps."""

    graph: RefGraph
    node_of: dict[int, ShadowNode]
    obj_of: dict[ShadowNode, object]


def build_from_world(world: World, rnd: random.Random, read_prob: float = 0.8) -> Built:
    """Walk ``world`` like a monitor: read references in random order, observe some nodes."""
    g = RefGraph()
    node_of: dict[int, ShadowNode] = {}
    obj_of: dict[ShadowNode, object] = {}
    frontier: list[tuple[ShadowNode, Access, object]] = [(g.root, a, o) for a, o in world.roots()]
    while frontier:
        src, access, obj = frontier.pop(rnd.randrange(len(frontier)))
        if rnd.random() > read_prob:
            continue
        node = node_of.get(id(obj))
        if node is None:
            node = g.new_node(node_kind(obj), external=True, label=type(obj).__name__)
            node_of[id(obj)] = node
            obj_of[node] = obj
            frontier.extend((node, a, child) for a, child in children(obj))
        g.read(src, access, node)
    for node, obj in obj_of.items():
        _observe_some(g, node, obj, rnd)
    return Built(g, node_of, obj_of)


def _observe_some(g: RefGraph, node: ShadowNode, obj: object, rnd: random.Random) -> None:
    if rnd.random() < 0.5:
        g.observe(node, GuardKind.TYPE, type(obj))
    if rnd.random() < 0.2:
        g.observe(node, GuardKind.ID, obj)
    if isinstance(obj, list | tuple | dict) and rnd.random() < 0.3:
        g.observe(node, GuardKind.LEN, len(obj))
    if isinstance(obj, dict) and rnd.random() < 0.3:
        g.observe(node, GuardKind.KEYS, list(obj))


def resolve(world: World, path: Path) -> object:
    """Walk ``path`` on the real objects of ``world`` (the reference semantics of a path)."""
    root = path.root
    obj: Any
    if root.kind is AccessKind.LOCAL:
        obj = world.locals[str(root.key)]
    elif root.kind is AccessKind.GLOBAL:
        scope: Any = root.scope if root.scope is not None else world.globals
        obj = scope[root.key]
    elif root.kind is AccessKind.BUILTIN:
        obj = world.builtins[str(root.key)]
    elif root.kind is AccessKind.CELL:
        fn: Any = root.scope
        obj = fn.__closure__[fn.__code__.co_freevars.index(root.key)].cell_contents
    else:
        obj = root.key
    for step in path.steps:
        obj = getattr(obj, str(step.key)) if step.kind is AccessKind.ATTR else obj[step.key]
    return obj


# -- random API programs -------------------------------------------------------------------------


def _scope_fn() -> Any:
    c = 1

    def fn() -> int:
        return c

    return fn


SCOPE_FN = _scope_fn()
CONST_OBJ: list[int] = [1, 2]
ROOT_POOL = [
    Local("x"),
    Local("y"),
    Global("g"),
    Builtin("len"),
    Cell("c", scope=SCOPE_FN),
    Const(CONST_OBJ),
]
DERIVED_POOL = [
    Attr("a"),
    Attr("b"),
    Attr("class"),
    Item(0),
    Item(1),
    Item(True),
    Item("k"),
    IterPos(0),
]
PAYLOADS: list[object] = [
    None,
    0,
    1,
    True,
    0.0,
    -0.0,
    math.nan,
    "s",
    (1, 2),
    [1, 2],
    int,
    CONST_OBJ,
]


def _pool(g: RefGraph, src: ShadowNode) -> list[Access]:
    return ROOT_POOL if src is g.root else DERIVED_POOL


def _spreads(src: ShadowNode, access: Access) -> bool:
    """Would a fresh read of ``access`` land in version 0 (documented read() rule)?"""
    untouched = all(v.changed is not None and access not in v.changed for v in src.versions[1:])
    return src.external and untouched


def _op_read(draw: Any, g: RefGraph) -> None:
    src = draw(st.sampled_from(g.nodes))
    access = draw(st.sampled_from(_pool(g, src)))
    dst = g.lookup(src, access)
    if dst is None:
        ok = [n for n in g.nodes[1:] if n.external or not _spreads(src, access)]
        if not ok:
            return
        dst = draw(st.sampled_from(ok))
    g.read(src, access, dst)


def _op(draw: Any, g: RefGraph, op: str) -> None:
    others = g.nodes[1:]
    if op == "new":
        kind = draw(st.sampled_from([k for k in NodeKind if k is not NodeKind.EXTERNAL_STATE]))
        g.new_node(kind, external=draw(st.booleans()), label=draw(names))
    elif op == "read":
        _op_read(draw, g)
    elif op in ("write", "delete"):
        src = draw(st.sampled_from(g.nodes))
        access = draw(st.sampled_from(_pool(g, src)))
        if op == "write":
            g.write(src, access, draw(st.sampled_from(others)))
        else:
            g.delete(src, access)
    elif op == "inplace":
        g.update_in_place(draw(st.sampled_from(others)), "inplace", keep_edges=draw(st.booleans()))
    else:
        g.observe(
            draw(st.sampled_from(others)),
            draw(st.sampled_from(list(GuardKind))),
            draw(st.sampled_from(PAYLOADS)),
        )


OPS = ["new", "read", "read", "read", "read", "write", "delete", "inplace", "observe", "observe"]


@st.composite
def graphs(draw: Any, max_ops: int = 40, verify: bool = False) -> RefGraph:
    """A RefGraph built by a random, valid sequence of public-API calls (``verify``: one that
    runs verify() after every call)."""
    g = RefGraph(verify=verify)
    for _ in range(draw(st.integers(1, 4))):
        g.new_node(NodeKind.OBJECT, external=True, label="seed")
    for op in draw(st.lists(st.sampled_from(OPS), max_size=max_ops)):
        _op(draw, g, op)
    return g


def walk_entry(g: RefGraph, path: Path) -> ShadowNode:
    """Follow ``path`` over version-0 read edges; AssertionError if it is not an entry path."""
    node = g.root
    for access in path.accesses:
        edge = node.versions[0].edges.get(access)
        assert edge is not None and edge.read, f"{path} breaks at {access}"
        node = edge.target
    return node
