"""Unit tests for entry paths, guard sets, aliases and mock sets (_algorithms.py)."""

from __future__ import annotations

import random
import time

import pytest
from _refgraph_strategies import PROPERTY, World, build_from_world, graphs, walk_entry, worlds
from hypothesis import given
from hypothesis import strategies as st

from magpy_refgraph import (
    Access,
    Attr,
    Global,
    GuardKind,
    GuardReq,
    Item,
    Local,
    NodeKind,
    Path,
    RefGraph,
    ShadowNode,
    aliases,
    entry_paths,
    guard_requirements,
    guard_set,
    mock_set,
    node_aliases,
    primary_path,
)


def ext(g: RefGraph, kind: NodeKind = NodeKind.OBJECT) -> ShadowNode:
    return g.new_node(kind, external=True)


def new(g: RefGraph) -> ShadowNode:
    return g.new_node(NodeKind.OBJECT, external=False)


def P(*parts: object) -> Path:
    """Path from a root access followed by steps."""
    root, *steps = parts
    return Path(root, tuple(steps))  # type: ignore[arg-type]


def _incoming(g: RefGraph, node: ShadowNode) -> list[tuple[ShadowNode, Access]]:
    """The version-0 read edges into ``node`` from nodes reachable at entry, as (source,
    access)."""
    return [
        (src, access)
        for src in g.nodes
        if src is g.root or primary_path(g, src) is not None
        for access, edge in src.versions[0].edges.items()
        if edge.read and edge.target is node
    ]


def _last_edge(g: RefGraph, path: Path) -> tuple[ShadowNode, Access]:
    """The (source, access) of the last edge ``path`` walks."""
    parent = path.parent
    return (g.root if parent is None else walk_entry(g, parent)), path.last


def model_graph() -> tuple[RefGraph, dict[str, ShadowNode]]:
    """self.layers[2].weight, also reachable as local w; a global CFG['act']."""
    g = RefGraph()
    n = {k: ext(g) for k in ("self", "layers", "l2", "w", "cfg", "act")}
    g.read(g.root, Local("self"), n["self"])
    g.read(n["self"], Attr("layers"), n["layers"])
    g.read(n["layers"], Item(2), n["l2"])
    g.read(n["l2"], Attr("weight"), n["w"])
    g.read(g.root, Local("w"), n["w"])
    g.read(g.root, Global("CFG"), n["cfg"])
    g.read(n["cfg"], Item("act"), n["act"])
    return g, n


class TestEntryPaths:
    def test_shortest_first_then_creation_order(self) -> None:
        """Paths come shortest first; equal lengths in edge creation order."""
        g, n = model_graph()
        assert entry_paths(g, n["w"]) == [
            P(Local("w")),
            P(Local("self"), Attr("layers"), Item(2), Attr("weight")),
        ]
        assert entry_paths(g, n["act"]) == [P(Global("CFG"), Item("act"))]

    def test_creation_order_breaks_ties(self) -> None:
        """Two paths of equal length are ordered by when their edges were read."""
        g = RefGraph()
        x = ext(g)
        g.read(g.root, Local("b"), x)
        g.read(g.root, Local("a"), x)
        assert entry_paths(g, x) == [P(Local("b")), P(Local("a"))]

    def test_unreachable_and_root_have_no_paths(self) -> None:
        """Nodes not reachable at entry (and SN#0 itself) have no entry paths."""
        g = RefGraph()
        lone, fresh = ext(g), new(g)
        g.write(g.root, Local("n"), fresh)
        assert entry_paths(g, lone) == [] and entry_paths(g, fresh) == []
        assert entry_paths(g, g.root) == []
        assert primary_path(g, fresh) is None

    def test_only_version0_edges_count(self) -> None:
        """Edges that exist only in later versions are not entry paths."""
        g = RefGraph()
        obj, a = ext(g), ext(g)
        g.read(g.root, Local("obj"), obj)
        g.write(obj, Attr("p"), a)
        g.delete(obj, Attr("q"))
        g.read(obj, Attr("q"), a)
        assert entry_paths(g, a) == []

    def test_cycles_give_simple_paths_only(self) -> None:
        """A reference cycle does not produce infinitely many paths."""
        g = RefGraph()
        a, b = ext(g, NodeKind.LIST), ext(g, NodeKind.LIST)
        g.read(g.root, Local("a"), a)
        g.read(a, Item(0), b)
        g.read(b, Item(0), a)
        assert entry_paths(g, a) == [P(Local("a"))]
        assert entry_paths(g, b) == [P(Local("a"), Item(0))]
        # the run read a[0][0] and found a: the guard checks that it still does
        assert aliases(g) == [(P(Local("a")), P(Local("a"), Item(0), Item(0)))]

    def test_limit_and_exponential_graphs(self) -> None:
        """A chain of 30 diamonds (2**30 paths) returns at most `limit` paths, quickly."""
        g = RefGraph()
        cur = ext(g)
        g.read(g.root, Local("x"), cur)
        for _ in range(30):
            left, right, join = ext(g), ext(g), ext(g)
            g.read(cur, Attr("l"), left)
            g.read(cur, Attr("r"), right)
            g.read(left, Attr("j"), join)
            g.read(right, Attr("j"), join)
            cur = join
        start = time.perf_counter()
        paths = entry_paths(g, cur, limit=10)
        assert len(paths) == 10 and len(set(paths)) == 10
        assert len(aliases(g)) > 0
        assert time.perf_counter() - start < 5
        assert entry_paths(g, cur, limit=0) == []

    def test_primary_path_is_first_entry_path(self) -> None:
        """primary_path returns the first of entry_paths."""
        g, n = model_graph()
        for node in n.values():
            assert primary_path(g, node) == entry_paths(g, node)[0]


class TestGuards:
    def test_guard_set_only_observed_reachable_external(self) -> None:
        """guard_set holds observed external nodes reachable at entry, by (depth, id)."""
        g, n = model_graph()
        hidden = ext(g)
        g.observe(hidden, GuardKind.TYPE, int)
        g.observe(n["w"], GuardKind.TENSOR_META, "meta")
        g.observe(n["act"], GuardKind.VALUE, "relu")
        g.observe(n["self"], GuardKind.ID, object())
        g.observe(g.root, GuardKind.CUSTOM, "never")
        assert guard_set(g) == [n["self"], n["w"], n["act"]]

    def test_guard_requirements_use_primary_paths(self) -> None:
        """One requirement per observation, on the node's primary path, nothing else."""
        g, n = model_graph()
        g.observe(n["w"], GuardKind.TENSOR_META, "meta")
        g.observe(n["act"], GuardKind.VALUE, "relu")
        g.observe(n["act"], GuardKind.TYPE, str)
        reqs = list(guard_requirements(g))
        assert reqs == [
            GuardReq(P(Local("w")), GuardKind.TENSOR_META, "meta"),
            GuardReq(P(Global("CFG"), Item("act")), GuardKind.TYPE, str),
            GuardReq(P(Global("CFG"), Item("act")), GuardKind.VALUE, "relu"),
        ]

    def test_no_observations_no_guards(self) -> None:
        """A graph without observations has an empty guard set."""
        g, _ = model_graph()
        assert guard_set(g) == [] and len(guard_requirements(g)) == 0


class TestAliases:
    def test_alias_pairs_primary_first(self) -> None:
        """A node with two entry paths yields (primary, other)."""
        g, _ = model_graph()
        assert aliases(g) == [
            (P(Local("w")), P(Local("self"), Attr("layers"), Item(2), Attr("weight")))
        ]

    def test_children_through_one_edge_need_no_pair(self) -> None:
        """A child read through one edge of an aliased node is one read: no pair of its own
        (an attribute that makes a new object per read, a bound method, would never be `is`)."""
        g = RefGraph()
        x, y = ext(g), ext(g)
        g.read(g.root, Local("a"), x)
        g.read(g.root, Local("b"), x)
        g.read(x, Attr("y"), y)
        assert aliases(g) == [(P(Local("a")), P(Local("b")))]

    def test_a_child_reached_through_two_edges_is_paired(self) -> None:
        """m.l and m._modules['l'] are two edges into one node: one pair, checked once."""
        g = RefGraph()
        m, mods, sub, fn = ext(g), ext(g), ext(g), ext(g)
        g.read(g.root, Local("m"), m)
        g.read(m, Attr("l"), sub)
        g.read(m, Attr("_modules"), mods)
        g.read(mods, Item("l"), sub)
        g.read(sub, Attr("forward"), fn)
        assert aliases(g) == [
            (P(Local("m"), Attr("l")), P(Local("m"), Attr("_modules"), Item("l")))
        ]

    def test_parallel_edges_alias(self) -> None:
        """Two accesses of the same object to the same target are aliases."""
        g = RefGraph()
        x, y = ext(g), ext(g)
        g.read(g.root, Local("x"), x)
        g.read(x, Item(0), y)
        g.read(x, Item(1), y)
        assert aliases(g) == [(P(Local("x"), Item(0)), P(Local("x"), Item(1)))]

    def test_node_aliases_name_the_node_both_paths_reach(self) -> None:
        """Each pair comes with the node it is about: both of its paths walk to it."""
        g = RefGraph()
        m, mods, sub, x = ext(g), ext(g), ext(g), ext(g)
        g.read(g.root, Local("m"), m)
        g.read(m, Attr("l"), sub)
        g.read(m, Attr("_modules"), mods)
        g.read(mods, Item("l"), sub)
        g.read(g.root, Local("a"), x)
        g.read(g.root, Local("b"), x)
        triples = node_aliases(g)
        assert [(a, b) for _, a, b in triples] == aliases(g)
        assert [n for n, _, _ in triples] == [x, sub]
        for node, primary, other in triples:
            assert {primary, other} <= set(entry_paths(g, node))


class TestMockSet:
    def test_untouched_graph_has_empty_mock(self) -> None:
        """Reads alone produce an empty mock set."""
        g, _ = model_graph()
        assert mock_set(g) == mock_set(RefGraph())
        assert mock_set(g).updated == [] and mock_set(g).created == []

    def test_created_updated_new_reachable(self) -> None:
        """Visible writes are listed in creation order with updated and new nodes."""
        g, n = model_graph()
        out, tmp, t2 = new(g), new(g), new(g)
        g.write(n["self"], Attr("out"), out)
        g.write(out, Attr("inner"), tmp)
        g.write(g.root, Global("RESULT"), t2)
        g.update_in_place(n["w"], "mul_")
        ms = mock_set(g)
        assert ms.created == [
            (n["self"], Attr("out"), out),
            (out, Attr("inner"), tmp),
            (g.root, Global("RESULT"), t2),
        ]
        assert ms.updated == [n["self"], n["w"]]
        assert ms.new_reachable == [out, tmp, t2]
        assert ms.deleted == []

    def test_overwritten_and_invisible_writes_are_dropped(self) -> None:
        """Only the last write of an access counts, and writes to unreachable nodes do not."""
        g, n = model_graph()
        first, second, hidden_val = new(g), new(g), new(g)
        g.write(n["self"], Attr("x"), first)
        g.write(n["self"], Attr("x"), second)
        hidden = new(g)
        g.write(hidden, Attr("v"), hidden_val)
        ms = mock_set(g)
        assert ms.created == [(n["self"], Attr("x"), second)]
        assert ms.new_reachable == [second]

    def test_removed_reference_makes_node_unreachable(self) -> None:
        """A new object stored then deleted is not reachable at exit; the deletion is listed."""
        g, n = model_graph()
        tmp = new(g)
        g.write(n["cfg"], Item("tmp"), tmp)
        g.delete(n["cfg"], Item("tmp"))
        g.delete(n["cfg"], Item("act"))
        ms = mock_set(g)
        assert ms.created == [] and ms.new_reachable == []
        assert ms.updated == [n["cfg"]]
        assert ms.deleted == [(n["cfg"], Item("tmp")), (n["cfg"], Item("act"))]

    def test_updated_excludes_root_and_new_nodes(self) -> None:
        """SN#0 and run-created nodes never appear in `updated`."""
        g = RefGraph()
        fresh, val = new(g), new(g)
        g.write(g.root, Local("f"), fresh)
        g.write(fresh, Attr("v"), val)
        assert mock_set(g).updated == []


# -- properties ------------------------------------------------------------------------------------


def _all_simple_paths(g: RefGraph, node: ShadowNode) -> set[Path]:
    """Brute-force DFS enumeration of simple entry paths (reference implementation)."""
    out: set[Path] = set()

    def dfs(cur: ShadowNode, steps: tuple, seen: frozenset) -> None:  # type: ignore[type-arg]
        for access, edge in cur.versions[0].edges.items():
            if not edge.read or edge.target in seen:
                continue
            path = (*steps, access)
            if edge.target is node:
                out.add(Path(path[0], path[1:]))
            else:
                dfs(edge.target, path, seen | {edge.target})

    dfs(g.root, (), frozenset({g.root}))
    return out


class TestProperties:
    @PROPERTY
    @given(graphs())
    def test_entry_paths_match_brute_force(self, g: RefGraph) -> None:
        """entry_paths are the simple v0 read paths, shortest first, primary first."""
        for node in g.nodes:
            paths = entry_paths(g, node, limit=10_000)
            assert set(paths) == _all_simple_paths(g, node) if node is not g.root else paths == []
            assert len(set(paths)) == len(paths)
            assert [len(p) for p in paths] == sorted(len(p) for p in paths)
            assert primary_path(g, node) == (paths[0] if paths else None)
            for path in paths:
                assert walk_entry(g, path) is node

    @PROPERTY
    @given(graphs())
    def test_guard_set_nodes_reachable_at_version0(self, g: RefGraph) -> None:
        """Every guard-set node is external, observed, and reached by its primary path at v0."""
        guarded = guard_set(g)
        depths = [(len(primary_path(g, n) or ()), n.id) for n in guarded]
        assert depths == sorted(depths)
        for node in guarded:
            path = primary_path(g, node)
            assert path is not None and walk_entry(g, path) is node
            assert node.external and node.observations
        reqs = guard_requirements(g)
        assert len(reqs) == sum(len(n.observations) for n in guarded)
        primaries = {primary_path(g, n) for n in guarded}
        assert all(req.path in primaries for req in reqs)

    @PROPERTY
    @given(graphs())
    def test_mock_set_never_lists_untouched_nodes(self, g: RefGraph) -> None:
        """updated holds only external nodes with several versions; created edges are live."""
        ms = mock_set(g)
        for node in ms.updated:
            assert node.external and len(node.versions) > 1 and node is not g.root
        untouched = [n for n in g.nodes if n.external and len(n.versions) == 1]
        assert not set(untouched) & set(ms.updated)
        for src, access, dst in ms.created:
            edge = src.versions[-1].edges[access]
            assert edge.created and edge.target is dst
        seqs = [src.versions[-1].edges[a].seq for src, a, _ in ms.created]
        assert seqs == sorted(seqs)
        assert all(not n.external for n in ms.new_reachable)
        for node, access in ms.deleted:
            assert node.external and access not in node.versions[-1].edges

    @PROPERTY
    @given(graphs())
    def test_aliases_are_symmetric(self, g: RefGraph) -> None:
        """Alias pairs reach one node; per node they cover exactly its incoming entry edges."""
        groups: dict[Path, set[Path]] = {}
        for a, b in aliases(g):
            assert a != b
            assert walk_entry(g, a) is walk_entry(g, b)
            groups.setdefault(a, {a}).add(b)
        for primary, paths in groups.items():
            node = walk_entry(g, primary)
            assert primary == primary_path(g, node)
            last_edges = {_last_edge(g, p) for p in paths}
            assert last_edges == set(_incoming(g, node))
            assert len(last_edges) == len(paths)
        multi = [n for n in g.nodes if n is not g.root and len(_incoming(g, n)) >= 2]
        assert {primary_path(g, n) for n in multi} == set(groups)

    @PROPERTY
    @given(worlds(), st.randoms(use_true_random=False))
    def test_aliases_do_not_depend_on_read_order(self, world: World, rnd: random.Random) -> None:
        """Reading the same object graph in two orders gives the same alias path sets."""
        first = build_from_world(world, random.Random(rnd.random()), read_prob=1.0)
        second = build_from_world(world, random.Random(rnd.random()), read_prob=1.0)
        assert first.node_of.keys() == second.node_of.keys()

        def alias_sets(built: object) -> dict[int, frozenset[tuple[int, Access]]]:
            """Per aliased object: the (source object, access) edges its pairs check."""
            graph = built.graph  # type: ignore[attr-defined]
            obj_of = built.obj_of  # type: ignore[attr-defined]
            out: dict[int, set[tuple[int, Access]]] = {}
            for a, b in aliases(graph):
                target = id(obj_of[walk_entry(graph, a)])
                for p in (a, b):
                    src, access = _last_edge(graph, p)
                    src_id = id(obj_of[src]) if src is not graph.root else 0
                    out.setdefault(target, set()).add((src_id, access))
            return {k: frozenset(v) for k, v in out.items()}

        assert alias_sets(first) == alias_sets(second)

    @PROPERTY
    @given(worlds(), st.randoms(use_true_random=False))
    def test_world_graphs_verify_and_guard(self, world: World, rnd: random.Random) -> None:
        """Graphs built by walking object graphs verify, and guard nodes are entry-reachable."""
        built = build_from_world(world, rnd)
        built.graph.verify()
        for node in guard_set(built.graph):
            path = primary_path(built.graph, node)
            assert path is not None and walk_entry(built.graph, path) is node
        assert mock_set(built.graph).updated == []


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_limit_truncates_in_order(limit: int) -> None:
    """A smaller limit returns a prefix of the full path list."""
    g = RefGraph()
    x = ext(g)
    for i in range(6):
        g.read(g.root, Local(f"v{i}"), x)
    assert entry_paths(g, x, limit=limit) == entry_paths(g, x)[:limit]
