"""Unit tests for the text dump and Graphviz DOT output (_inspect.py)."""

from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest
from _refgraph_strategies import PROPERTY, WEIRD_NAMES, World, build_from_world, graphs, worlds
from hypothesis import given
from hypothesis import strategies as st

from magpy_refgraph import (
    Attr,
    GuardKind,
    Item,
    Local,
    NodeKind,
    RefGraph,
    dump,
    to_dot,
)

NODE_DECL = re.compile(r'^  n(\d+) \[label="(?P<label>S)", style=[^;]*\];$')
EDGE_DECL = re.compile(r'^  n(\d+):v(\d+) -> n(\d+) \[label="S", style=(bold|solid|dashed)\];$')


def _split_strings(text: str) -> tuple[str, list[str]]:
    """Replace every double-quoted string by ``"S"``; return the skeleton and raw contents."""
    skeleton: list[str] = []
    strings: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != '"':
            skeleton.append(c)
            i += 1
            continue
        j = i + 1
        while text[j] != '"':
            assert text[j] != "\n", "raw newline inside a DOT string"
            j += 2 if text[j] == "\\" else 1
        strings.append(text[i + 1 : j])
        skeleton.append('"S"')
        i = j + 1
    return "".join(skeleton), strings


def _record_ports(label: str) -> set[str]:
    """Check a record label's structure (escapes, balanced braces) and return its port names."""
    depth, ports, i = 0, set(), 0
    while i < len(label):
        c = label[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            assert depth >= 0, label
        elif c == "<":
            end = label.index(">", i)
            ports.add(label[i + 1 : end])
            i = end
        else:
            assert c != ">", label
        i += 1
    assert depth == 0, label
    return ports


def check_dot(text: str, g: RefGraph) -> None:
    """Assert that ``text`` is well-formed DOT declaring every node and port it uses."""
    skeleton, strings = _split_strings(text)
    assert skeleton.count("{") == skeleton.count("}") == 1
    lines = skeleton.splitlines()
    assert lines[0] == "digraph RefGraph {" and lines[-1] == "}"
    labels = iter(strings)
    declared: dict[int, set[str]] = {}
    edges: list[tuple[int, str, int]] = []
    for line in lines[1:-1]:
        line_strings = [next(labels) for _ in range(line.count('"S"'))]
        if re.match(r"^  n\d", line) and " -> " not in line:
            match = NODE_DECL.match(line)
            assert match, line
            declared[int(match[1])] = _record_ports(line_strings[0])
        elif " -> " in line:
            match = EDGE_DECL.match(line)
            assert match, line
            edges.append((int(match[1]), f"v{match[2]}", int(match[3])))
        else:
            assert re.match(r"^  (graph|node|edge) \[[^\[\]]*\];$", line), line
    assert set(declared) == {n.id for n in g.nodes}
    for node in g.nodes:
        assert declared[node.id] == {f"v{v.index}" for v in node.versions}
    for src, port, dst in edges:
        assert port in declared[src] and dst in declared


def _run_dot(text: str) -> None:
    exe = shutil.which("dot")
    if exe is None:
        return
    subprocess.run([exe, "-Tsvg", "-o", "/dev/null"], input=text.encode(), check=True)


def sample() -> RefGraph:
    g = RefGraph()
    model = g.new_node(NodeKind.MODULE, external=True, label="self")
    w = g.new_node(NodeKind.TENSOR, external=True, label="x")
    out = g.new_node(NodeKind.TENSOR, external=False, label="out")
    g.read(g.root, Local("self"), model)
    g.read(model, Attr("weight"), w)
    g.observe(w, GuardKind.TENSOR_META, "f32[3]")
    g.write(model, Attr("out"), out)
    g.delete(model, Attr("weight"))
    return g


class TestDump:
    def test_dump_format(self) -> None:
        """dump() shows node heads, observations, versions with reasons, and edges."""
        text = dump(sample())
        assert text.startswith("RefGraph: 4 nodes\n")
        assert "SN#2 TENSOR ext 'x'\n" in text
        assert "  observed TENSOR_META 'f32[3]'\n" in text
        assert "  v0 --.weight--> SN#2 [read]\n" in text
        assert "  v1 'write .out' changed: .out\n" in text
        assert "  v1 --.out--> SN#3 [created]\n" in text
        assert "  v2 -x- .weight (dropped)\n" in text
        assert "  v2 (1 edges inherited)\n" in text
        assert "SN#3 TENSOR 'out'\n  v0 'new'\n" in text

    def test_dump_marks_unknown_changes(self) -> None:
        """A version that dropped all edges shows 'changed: *'."""
        g = RefGraph()
        lst = g.new_node(NodeKind.LIST, external=True)
        g.update_in_place(lst, "list.sort", keep_edges=False)
        assert "  v1 'list.sort' changed: *\n" in dump(g)

    @pytest.mark.parametrize("name", WEIRD_NAMES)
    def test_dump_weird_labels_stay_on_one_line(self, name: str) -> None:
        """Labels, names and reasons with newlines never break the one-entry-per-line layout."""
        g = RefGraph()
        obj = g.new_node(NodeKind.OBJECT, external=True, label=name)
        val = g.new_node(NodeKind.OBJECT, external=False, label=name)
        g.read(g.root, Local(name), obj)
        g.write(obj, Attr(name), val, reason=name)
        g.observe(obj, GuardKind.VALUE, name)
        lines = dump(g).splitlines()
        assert len(lines) == 11
        assert all(line.isprintable() for line in lines)


class TestDot:
    def test_dot_structure(self) -> None:
        """to_dot() declares record nodes with version ports and labelled edges."""
        g = sample()
        text = to_dot(g)
        check_dot(text, g)
        assert 'n0 [label="{SN#0\\ EXTERNAL_STATE' in text
        assert 'fillcolor="gold"' in text.splitlines()[4]
        assert 'n1:v0 -> n2 [label="v0: .weight", style=solid];' in text
        assert 'n1:v1 -> n3 [label="v1: .out", style=bold];' in text
        _run_dot(text)

    @pytest.mark.parametrize(
        "name", [*WEIRD_NAMES, "{x}", "a|b", "<v0>", 'q"uote', "back\\slash\\"]
    )
    def test_dot_escapes_any_label(self, name: str) -> None:
        """Quotes, braces, bars, angle brackets, backslashes and newlines are escaped."""
        g = RefGraph()
        obj = g.new_node(NodeKind.OBJECT, external=True, label=name)
        g.read(g.root, Local(name), obj)
        g.read(obj, Item(name), g.new_node(NodeKind.OBJECT, external=True, label=name))
        g.write(obj, Attr(name), g.new_node(NodeKind.OBJECT, external=False), reason=name)
        g.observe(obj, GuardKind.CUSTOM, name)
        text = to_dot(g)
        check_dot(text, g)
        _run_dot(text)

    def test_each_edge_drawn_once(self) -> None:
        """Edges inherited by later versions are drawn once, from their first version."""
        g = sample()
        assert to_dot(g).count("-> n2 ") == 1


class TestProperties:
    @PROPERTY
    @given(graphs())
    def test_dump_mentions_every_node(self, g: RefGraph) -> None:
        """Every node of a random graph has a block in dump()."""
        text = dump(g)
        heads = re.findall(r"^SN#(\d+) ", text, flags=re.MULTILINE)
        assert [int(h) for h in heads] == [n.id for n in g.nodes]
        assert all(line.isprintable() for line in text.splitlines())

    @PROPERTY
    @given(graphs())
    def test_dot_well_formed_on_random_graphs(self, g: RefGraph) -> None:
        """DOT output of random graphs is balanced and declares every node and port used."""
        check_dot(to_dot(g), g)

    @PROPERTY
    @given(worlds(), st.randoms(use_true_random=False))
    def test_dot_and_dump_on_object_graphs(self, world: World, rnd: random.Random) -> None:
        """Graphs from object worlds with weird keys dump and render to well-formed DOT."""
        g = build_from_world(world, rnd).graph
        check_dot(to_dot(g), g)
        assert len(re.findall(r"^SN#\d+ ", dump(g), flags=re.MULTILINE)) == len(g.nodes)
