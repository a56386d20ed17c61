"""Human-readable views of a RefGraph: a text dump and Graphviz DOT.

Every label is first made one-line and printable (names, keys, reasons may be arbitrary
strings), then escaped for its target syntax.
"""

from __future__ import annotations

from ._access import short_repr
from ._graph import Edge, RefGraph, ShadowNode, ShadowVersion

__all__ = ["dump", "to_dot"]


def _flags(edge: Edge) -> str:
    names = [name for name, on in (("read", edge.read), ("created", edge.created)) if on]
    return ",".join(names) or "-"


def _node_head(node: ShadowNode) -> str:
    ext = " ext" if node.external else ""
    label = f" {short_repr(node.label)}" if node.label else ""
    return f"SN#{node.id} {node.kind.name}{ext}{label}"


def _changed_text(version: ShadowVersion) -> str:
    if version.index == 0:
        return ""
    if version.changed is None:
        return " changed: *"
    if not version.changed:
        return ""
    return " changed: " + ", ".join(sorted(str(a) for a in version.changed))


def _new_edges(node: ShadowNode, index: int) -> list[Edge]:
    """Edges of version ``index`` that are not the very same edge in the previous version."""
    edges = node.versions[index].edges
    if index == 0:
        return sorted(edges.values(), key=lambda e: e.seq)
    prev = node.versions[index - 1].edges
    return sorted((e for a, e in edges.items() if prev.get(a) is not e), key=lambda e: e.seq)


def _dump_version(node: ShadowNode, index: int) -> list[str]:
    version = node.versions[index]
    lines = [f"  v{index} {short_repr(version.reason)}{_changed_text(version)}"]
    fresh = _new_edges(node, index)
    for edge in fresh:
        lines.append(f"  v{index} --{edge.access}--> SN#{edge.target.id} [{_flags(edge)}]")
    if index:
        prev = node.versions[index - 1].edges
        inherited = len(version.edges) - len(fresh)
        dropped = [a for a in prev if a not in version.edges]
        if inherited:
            lines.append(f"  v{index} ({inherited} edges inherited)")
        for access in dropped:
            lines.append(f"  v{index} -x- {access} (dropped)")
    return lines


def dump(g: RefGraph) -> str:
    """Return a readable text view: one block per node with observations, versions and edges.

    A block starts with ``SN#3 TENSOR ext 'x'``; edges read ``v0 --.weight--> SN#7 [read]``.
    Later versions list only their new edges, plus inherited counts and dropped accesses.
    """
    lines = [f"RefGraph: {len(g.nodes)} nodes"]
    for node in g.nodes:
        lines.append(_node_head(node))
        for kind, payload in node.observations:
            lines.append(f"  observed {kind.name} {short_repr(payload)}")
        for index in range(len(node.versions)):
            lines.extend(_dump_version(node, index))
    return "\n".join(lines) + "\n"


_RECORD_SPECIAL = str.maketrans(
    {c: "\\" + c for c in '\\"{}|<> '} | {"\n": "\\n", "\r": "\\n", "\t": "\\ "}
)
_QUOTED_SPECIAL = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\n"})


def _printable(text: str, limit: int = 80) -> str:
    """One printable line, cut to ``limit`` characters (never splits an escape)."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _record(text: str) -> str:
    """Escape ``text`` as one field of a record label (inside a double-quoted DOT string)."""
    return _printable(text).translate(_RECORD_SPECIAL)


def _quoted(text: str) -> str:
    """Escape ``text`` for the inside of a double-quoted DOT string."""
    return _printable(text).translate(_QUOTED_SPECIAL)


def _dot_node(node: ShadowNode, root: ShadowNode) -> str:
    fields = [_record(_node_head(node))]
    if node.observations:
        kinds = ", ".join(dict.fromkeys(kind.name for kind, _ in node.observations))
        fields.append(_record(f"observed: {kinds}"))
    for version in node.versions:
        fields.append(f"<v{version.index}> " + _record(f"v{version.index}: {version.reason}"))
    if node is root:
        style = 'style="filled,bold", fillcolor="gold"'
    elif node.external:
        style = 'style=filled, fillcolor="lightblue"'
    else:
        style = 'style=filled, fillcolor="white"'
    return f'  n{node.id} [label="{{{"|".join(fields)}}}", {style}];'


def _dot_edges(node: ShadowNode) -> list[str]:
    lines = []
    for index in range(len(node.versions)):
        for edge in _new_edges(node, index):
            style = "bold" if edge.created else "solid" if edge.read else "dashed"
            label = _quoted(f"v{index}: {edge.access}")
            lines.append(
                f'  n{node.id}:v{index} -> n{edge.target.id} [label="{label}", style={style}];'
            )
    return lines


def to_dot(g: RefGraph) -> str:
    """Return Graphviz DOT text for ``g``.

    Nodes are records listing their versions (ports ``v0``, ``v1``...), edges go from the
    version that first holds them and are labelled ``v1: .weight``; created edges are bold,
    read edges solid; SN#0 is highlighted. Labels are escaped, so any name or key is safe.
    """
    lines = [
        "digraph RefGraph {",
        "  graph [rankdir=LR];",
        '  node [shape=record, fontname="monospace", fontsize=10];',
        '  edge [fontname="monospace", fontsize=9];',
    ]
    lines.extend(_dot_node(node, g.root) for node in g.nodes)
    for node in g.nodes:
        lines.extend(_dot_edges(node))
    lines.append("}")
    return "\n".join(lines) + "\n"
