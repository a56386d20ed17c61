"""Unit tests for the RefGraph data model (_graph.py)."""

from __future__ import annotations

import attrs
import pytest
from _refgraph_strategies import PROPERTY, graphs
from hypothesis import given

from magpy_refgraph import (
    Attr,
    Edge,
    Global,
    GuardKind,
    InternalError,
    Item,
    Local,
    NodeKind,
    RefGraph,
    ShadowNode,
)


def ext(g: RefGraph, label: str = "", kind: NodeKind = NodeKind.OBJECT) -> ShadowNode:
    return g.new_node(kind, external=True, label=label)


def new(g: RefGraph, label: str = "") -> ShadowNode:
    return g.new_node(NodeKind.OBJECT, external=False, label=label)


class TestNodes:
    def test_root_is_sn0(self) -> None:
        """A new graph has SN#0: id 0, EXTERNAL_STATE, external, one 'entry' version."""
        g = RefGraph()
        assert g.nodes == [g.root]
        assert (g.root.id, g.root.kind, g.root.external) == (0, NodeKind.EXTERNAL_STATE, True)
        assert [v.reason for v in g.root.versions] == ["entry"]

    def test_new_node_ids_dense_with_version_zero(self) -> None:
        """new_node assigns ids 1, 2, ... and creates version 0 ('entry' or 'new')."""
        g = RefGraph()
        a, b = ext(g, "a"), new(g, "b")
        assert (a.id, b.id) == (1, 2)
        assert g.nodes == [g.root, a, b]
        assert a.versions[0].reason == "entry" and b.versions[0].reason == "new"
        assert g.first(a) is g.current(a) is a.versions[0]
        assert a.label == "a" and a.meta == {} and a.observations == []

    def test_new_node_rejects_external_state_kind(self) -> None:
        """Only SN#0 may be EXTERNAL_STATE."""
        with pytest.raises(InternalError):
            RefGraph().new_node(NodeKind.EXTERNAL_STATE, external=True)

    def test_nodes_hash_by_identity(self) -> None:
        """Two nodes with equal fields are still distinct set members."""
        a = ShadowNode(1, NodeKind.OBJECT, True)
        b = ShadowNode(1, NodeKind.OBJECT, True)
        assert a != b and len({a, b}) == 2

    def test_foreign_node_rejected(self) -> None:
        """Using a node of another graph raises InternalError."""
        g, h = RefGraph(), RefGraph()
        other = ext(h)
        with pytest.raises(InternalError, match="does not belong"):
            g.current(other)
        with pytest.raises(InternalError):
            g.read(g.root, Local("x"), other)

    def test_reprs(self) -> None:
        """Nodes, versions, edges and graphs have short reprs (no recursion)."""
        g = RefGraph()
        a = ext(g, "self", NodeKind.MODULE)
        edge = g.read(g.root, Local("self"), a)
        assert repr(a) == "<SN#1 MODULE ext 'self' v0>"
        assert str(a) == "SN#1"
        assert repr(edge) == "Edge(L.self -> SN#1 [read])"
        assert repr(g.root.versions[0]) == "<SN#0 v0 'entry' 1 edges>"
        assert repr(g) == "<RefGraph 2 nodes>"


class TestRead:
    def test_read_from_root_makes_version0_edge(self) -> None:
        """A read from SN#0 adds a read, not-created edge to version 0."""
        g = RefGraph()
        x = ext(g)
        edge = g.read(g.root, Local("x"), x)
        assert g.root.versions[0].edges[Local("x")] is edge
        assert (edge.read, edge.created, edge.target) == (True, False, x)
        assert g.lookup(g.root, Local("x")) is x
        assert g.lookup(g.root, Local("y")) is None

    def test_read_is_idempotent(self) -> None:
        """Reading the same access with the same target returns the same edge."""
        g = RefGraph()
        x = ext(g)
        assert g.read(g.root, Local("x"), x) is g.read(g.root, Local("x"), x)
        assert len(g.root.versions) == 1

    def test_read_conflicting_target_is_internal_error(self) -> None:
        """Reading an access whose current edge points elsewhere raises InternalError."""
        g = RefGraph()
        x, y = ext(g), ext(g)
        g.read(g.root, Local("x"), x)
        with pytest.raises(InternalError, match="already points"):
            g.read(g.root, Local("x"), y)

    def test_read_uses_dict_key_semantics(self) -> None:
        """Item(True) finds the edge recorded as Item(1)."""
        g = RefGraph()
        lst, a = ext(g, kind=NodeKind.LIST), ext(g)
        g.read(lst, Item(1), a)
        assert g.lookup(lst, Item(True)) is a

    def test_read_from_new_node_stays_in_current_version(self) -> None:
        """Reads from a node created during the run go to its current version only."""
        g = RefGraph()
        obj, a, b = new(g), new(g), ext(g)
        g.write(obj, Attr("a"), a)
        edge = g.read(obj, Attr("b"), b)
        assert Attr("b") not in obj.versions[0].edges
        assert obj.versions[1].edges[Attr("b")] is edge

    def test_untouched_read_spreads_to_version0(self) -> None:
        """A read of an access no later version touched lands in every version, v0 included."""
        g = RefGraph()
        obj, a, b = ext(g), new(g), ext(g)
        g.write(obj, Attr("a"), a)
        g.update_in_place(obj, "tensor.add_")
        edge = g.read(obj, Attr("b"), b)
        assert [v.edges.get(Attr("b")) for v in obj.versions] == [edge, edge, edge]

    def test_touched_read_does_not_spread(self) -> None:
        """After a delete of the access, a read goes to the current version only."""
        g = RefGraph()
        obj, b = ext(g), ext(g)
        g.delete(obj, Attr("b"))
        g.read(obj, Attr("b"), b)
        assert Attr("b") not in obj.versions[0].edges
        assert obj.versions[1].edges[Attr("b")].target is b

    def test_read_after_unknown_update_does_not_spread(self) -> None:
        """After update_in_place(keep_edges=False) (e.g. list.sort), reads are not entry facts."""
        g = RefGraph()
        lst, a = ext(g, kind=NodeKind.LIST), ext(g)
        g.update_in_place(lst, "list.sort", keep_edges=False)
        g.read(lst, Item(0), a)
        assert lst.versions[0].edges == {}

    def test_entry_read_of_new_object_is_internal_error(self) -> None:
        """An entry-state read cannot produce an object created during the run."""
        g = RefGraph()
        obj, fresh = ext(g), new(g)
        with pytest.raises(InternalError, match="created during the run"):
            g.read(obj, Attr("p"), fresh)

    def test_non_entry_read_of_new_object_is_fine(self) -> None:
        """After the access was written, reading it back may give a new object."""
        g = RefGraph()
        obj, fresh = ext(g), new(g)
        g.write(obj, Attr("p"), fresh)
        edge = g.read(obj, Attr("p"), fresh)
        assert edge.read and edge.created
        assert obj.versions[1].edges[Attr("p")] is edge

    def test_reread_of_created_edge_updates_all_sharing_versions(self) -> None:
        """Marking a created edge read replaces it in every version that shares it."""
        g = RefGraph()
        obj, fresh, other = ext(g), new(g), ext(g)
        g.write(obj, Attr("p"), fresh)
        g.write(obj, Attr("q"), other)
        edge = g.read(obj, Attr("p"), fresh)
        assert obj.versions[1].edges[Attr("p")] is edge is obj.versions[2].edges[Attr("p")]
        g.verify()

    @pytest.mark.parametrize("bad", ["root-derived", "node-root", "dst-root", "not-access"])
    def test_access_kind_must_match_source(self, bad: str) -> None:
        """SN#0 takes only root accesses, other nodes only derived ones, SN#0 is never a target."""
        g = RefGraph()
        x = ext(g)
        with pytest.raises(InternalError):
            if bad == "root-derived":
                g.read(g.root, Attr("x"), x)
            elif bad == "node-root":
                g.read(x, Local("x"), x)
            elif bad == "dst-root":
                g.read(x, Attr("x"), g.root)
            else:
                g.read(x, "x", x)  # type: ignore[arg-type]


class TestMutations:
    def test_write_creates_version_with_created_edge(self) -> None:
        """write() appends a version whose edge is created, and keeps the old version intact."""
        g = RefGraph()
        obj, a, b = ext(g), ext(g), new(g)
        g.read(obj, Attr("a"), a)
        v1 = g.write(obj, Attr("x"), b)
        assert (v1.index, v1.reason, v1.changed) == (1, "write .x", frozenset({Attr("x")}))
        assert v1.edges[Attr("x")].created and not v1.edges[Attr("x")].read
        assert v1.edges[Attr("a")] is obj.versions[0].edges[Attr("a")]
        assert Attr("x") not in obj.versions[0].edges
        assert g.current(obj) is v1 and g.lookup(obj, Attr("x")) is b

    def test_write_custom_reason_and_root_write(self) -> None:
        """write() accepts a reason; writing a global makes a new SN#0 version."""
        g = RefGraph()
        val = new(g)
        v = g.write(g.root, Global("G"), val, reason="STORE_GLOBAL G")
        assert v.reason == "STORE_GLOBAL G" and len(g.root.versions) == 2

    def test_delete_removes_edge_in_new_version(self) -> None:
        """delete() appends a version without the access."""
        g = RefGraph()
        d, a = ext(g, kind=NodeKind.DICT), ext(g)
        g.read(d, Item("k"), a)
        v1 = g.delete(d, Item("k"))
        assert Item("k") not in v1.edges and v1.reason == "delete ['k']"
        assert g.lookup(d, Item("k")) is None
        assert Item("k") in d.versions[0].edges

    def test_update_in_place_keeps_or_drops_edges(self) -> None:
        """update_in_place keeps edges (changed empty) or drops them all (changed None)."""
        g = RefGraph()
        t, a = ext(g, kind=NodeKind.TENSOR), ext(g)
        g.read(t, Attr("grad"), a)
        v1 = g.update_in_place(t, "add_")
        assert v1.edges == t.versions[0].edges and v1.changed == frozenset()
        v2 = g.update_in_place(t, "sort", keep_edges=False)
        assert v2.edges == {} and v2.changed is None
        g.verify()

    def test_reads_never_create_versions(self) -> None:
        """Only writes, deletes and in-place updates create versions."""
        g = RefGraph()
        x, y = ext(g), ext(g)
        g.read(g.root, Local("x"), x)
        g.read(x, Attr("y"), y)
        assert [len(n.versions) for n in g.nodes] == [1, 1, 1]


class TestObserve:
    def test_observe_records_and_deduplicates(self) -> None:
        """observe() appends (kind, payload) once and returns whether it was new."""
        g = RefGraph()
        x = ext(g)
        assert g.observe(x, GuardKind.TYPE, int) is True
        assert g.observe(x, GuardKind.TYPE, int) is False
        assert g.observe(x, GuardKind.VALUE, 1) is True
        assert g.observe(x, GuardKind.VALUE, True) is True
        assert g.observe(x, GuardKind.NOT_NONE) is True
        assert x.observations == [
            (GuardKind.TYPE, int),
            (GuardKind.VALUE, 1),
            (GuardKind.VALUE, True),
            (GuardKind.NOT_NONE, None),
        ]

    def test_observe_unhashable_payload_by_identity(self) -> None:
        """Unhashable payloads are deduplicated by identity."""
        g = RefGraph()
        x = ext(g)
        keys = ["a"]
        assert g.observe(x, GuardKind.KEYS, keys)
        assert not g.observe(x, GuardKind.KEYS, keys)
        assert g.observe(x, GuardKind.KEYS, ["a"])

    def test_observe_needs_guard_kind(self) -> None:
        """observe() with a non-GuardKind raises InternalError."""
        g = RefGraph()
        with pytest.raises(InternalError):
            g.observe(ext(g), "TYPE", int)  # type: ignore[arg-type]


def _sample() -> tuple[RefGraph, ShadowNode, ShadowNode, ShadowNode]:
    g = RefGraph()
    obj, a, fresh = ext(g), ext(g), new(g)
    g.read(g.root, Local("obj"), obj)
    g.read(obj, Attr("a"), a)
    g.write(obj, Attr("n"), fresh)
    return g, obj, a, fresh


def _tamper(case: str, g: RefGraph, obj: ShadowNode, a: ShadowNode, fresh: ShadowNode) -> None:
    v0 = obj.versions[0]
    if case == "ids":
        a.id = 7
    elif case == "version-index":
        obj.versions[1].index = 5
    elif case == "created-in-v0":
        v0.edges[Attr("a")] = attrs.evolve(v0.edges[Attr("a")], created=True)
    elif case == "entry-to-new":
        v0.edges[Attr("z")] = Edge(Attr("z"), fresh, read=True, seq=0)
    elif case == "wrong-key":
        v0.edges[Attr("b")] = v0.edges[Attr("a")]
    elif case == "lost-edge":
        del obj.versions[1].edges[Attr("a")]
    elif case == "root-kind-on-node":
        v0.edges[Local("q")] = Edge(Local("q"), a, read=True, seq=0)
    elif case == "derived-on-root":
        g.root.versions[0].edges[Attr("q")] = Edge(Attr("q"), a, read=True, seq=0)
    elif case == "observations":
        obj.observations.append((GuardKind.TYPE, int))
    elif case == "root-position":
        g.nodes.reverse()
    elif case == "second-root":
        a.kind = NodeKind.EXTERNAL_STATE
    elif case == "flagless":
        obj.versions[1].edges[Attr("m")] = Edge(Attr("m"), a, seq=0)
    elif case == "foreign-target":
        v0.edges[Attr("a")] = Edge(
            Attr("a"), ShadowNode(2, NodeKind.OBJECT, True), read=True, seq=0
        )
    elif case == "seq":
        v0.edges[Attr("a")] = attrs.evolve(v0.edges[Attr("a")], seq=99)
    elif case == "no-versions":
        a.versions.clear()


TAMPER_CASES = [
    "ids", "version-index", "created-in-v0", "entry-to-new", "wrong-key", "lost-edge",
    "root-kind-on-node", "derived-on-root", "observations", "root-position", "second-root",
    "flagless", "foreign-target", "seq", "no-versions",
]  # fmt: skip


class TestVerify:
    def test_verify_passes_on_api_built_graph(self) -> None:
        """verify() accepts a graph built through the public API."""
        _sample()[0].verify()

    @pytest.mark.parametrize("case", TAMPER_CASES)
    def test_verify_detects_corruption(self, case: str) -> None:
        """verify() raises InternalError for each kind of broken invariant."""
        g, obj, a, fresh = _sample()
        _tamper(case, g, obj, a, fresh)
        with pytest.raises(InternalError):
            g.verify()

    def test_magpy_verify_env_checks_every_mutation(self) -> None:
        """With verify=True (the runtime's MAGPY_VERIFY=1) the next mutation after a
        corruption raises."""
        g = RefGraph(verify=True)
        x = ext(g)
        x.versions[0].index = 3
        with pytest.raises(InternalError, match="version index"):
            g.read(g.root, Local("x"), x)

    def test_without_env_mutations_do_not_verify(self) -> None:
        """Without verify=True, mutations do not run verify()."""
        g = RefGraph()
        x = ext(g)
        x.versions[0].index = 3
        g.read(g.root, Local("x"), x)

    @PROPERTY
    @given(graphs())
    def test_verify_passes_on_random_graphs(self, g: RefGraph) -> None:
        """verify() passes on every graph built by random public-API calls."""
        g.verify()

    @PROPERTY
    @given(graphs())
    def test_entry_edges_are_read_and_external(self, g: RefGraph) -> None:
        """Version-0 edges are read, not created; external nodes' ones target external nodes."""
        for node in g.nodes:
            for edge in node.versions[0].edges.values():
                assert edge.read and not edge.created
                assert edge.target.external or not node.external

    def test_random_graphs_verify_under_magpy_verify(self) -> None:
        """Random API programs also pass when verify() runs after every call."""

        @PROPERTY
        @given(graphs(verify=True))
        def check(g: RefGraph) -> None:
            g.verify()

        check()
