"""Graph algorithms over a RefGraph (the paper's Alg. 1): entry paths, guards, aliases, mocks.

*Entry* facts come from version-0 read edges: a path of such edges from SN#0 reaches an object
as it was when the segment started. *Exit* facts come from last-version edges: what the world
outside the segment can see when it ends.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable

import attrs

from ._access import Access, Path
from ._graph import Edge, RefGraph, ShadowNode
from ._guards import GuardReq, GuardSet

__all__ = [
    "MockSet",
    "aliases",
    "entry_paths",
    "guard_requirements",
    "guard_set",
    "mock_set",
    "node_aliases",
    "primary_path",
]

_DEFAULT_PATH_LIMIT = 64
_MAX_EXPANSIONS = 50_000


def _entry_edges(node: ShadowNode) -> list[Edge]:
    """Version-0 read edges of ``node`` in creation order."""
    return sorted((e for e in node.versions[0].edges.values() if e.read), key=lambda e: e.seq)


def _entry_tree(g: RefGraph) -> dict[ShadowNode, Path]:
    """BFS from SN#0 over entry edges: the shortest, earliest-created path to every node."""
    paths: dict[ShadowNode, Path] = {}
    queue: deque[ShadowNode] = deque()
    for edge in _entry_edges(g.root):
        if edge.target not in paths:
            paths[edge.target] = Path(edge.access)
            queue.append(edge.target)
    while queue:
        node = queue.popleft()
        base = paths[node]
        for edge in _entry_edges(node):
            if edge.target not in paths and edge.target is not g.root:
                paths[edge.target] = base / edge.access
                queue.append(edge.target)
    return paths


def _distances_to(g: RefGraph, node: ShadowNode) -> dict[ShadowNode, int]:
    """Length of the shortest entry-edge route from each node to ``node`` (absent: no route)."""
    parents: dict[ShadowNode, list[ShadowNode]] = {}
    for src in g.nodes:
        for edge in _entry_edges(src):
            parents.setdefault(edge.target, []).append(src)
    dist = {node: 0}
    queue = deque([node])
    while queue:
        cur = queue.popleft()
        for parent in parents.get(cur, ()):
            if parent not in dist:
                dist[parent] = dist[cur] + 1
                queue.append(parent)
    return dist


_Partial = tuple[int, tuple[int, ...], int, ShadowNode, tuple[Access, ...], tuple[ShadowNode, ...]]


def entry_paths(g: RefGraph, node: ShadowNode, *, limit: int = _DEFAULT_PATH_LIMIT) -> list[Path]:
    """Every simple access path from SN#0 to ``node`` over version-0 read edges.

    Order: shortest first, then by edge creation order (lexicographically). Empty for nodes not
    reachable at entry (and for SN#0). At most ``limit`` paths are returned, and the search
    gives up after a fixed amount of work, so graphs with exponentially many paths stay cheap.
    """
    if node is g.root or limit <= 0:
        return []
    dist = _distances_to(g, node)
    if g.root not in dist:
        return []
    # Best-first search keyed by (length lower bound, creation-order sequence): a complete path
    # is popped only after every partial path that could still complete to a smaller key.
    heap: list[_Partial] = [(dist[g.root], (), 0, g.root, (), (g.root,))]
    out_edges: dict[ShadowNode, list[Edge]] = {}
    found: list[Path] = []
    work = counter = 0
    while heap and work < _MAX_EXPANSIONS:
        _, seqs, _, end, accesses, visited = heapq.heappop(heap)
        if end is node:
            found.append(Path(accesses[0], accesses[1:]))
            if len(found) >= limit:
                break
            continue
        edges = out_edges.get(end)
        if edges is None:
            edges = out_edges[end] = [e for e in _entry_edges(end) if e.target in dist]
        for edge in edges:
            work += 1
            target = edge.target
            if target in visited:
                continue
            steps = (*accesses, edge.access)
            counter += 1
            bound = len(steps) + dist[target]
            item = (bound, (*seqs, edge.seq), counter, target, steps, (*visited, target))
            heapq.heappush(heap, item)
    return found


def primary_path(g: RefGraph, node: ShadowNode) -> Path | None:
    """The first of :func:`entry_paths` (shortest, earliest created), or None."""
    return _entry_tree(g).get(node)


def _guarded(g: RefGraph, tree: dict[ShadowNode, Path]) -> list[ShadowNode]:
    nodes = [n for n in tree if n.external and n.observations]
    return sorted(nodes, key=lambda n: (len(tree[n]), n.id))


def guard_set(g: RefGraph) -> list[ShadowNode]:
    """External nodes reachable at entry that carry observations, ordered by (depth, id)."""
    return _guarded(g, _entry_tree(g))


def guard_requirements(g: RefGraph) -> GuardSet:
    """One ``GuardReq(primary_path(node), kind, payload)`` per observation of each guard-set node.

    Nothing else is added (callers record TYPE/ID observations themselves).
    """
    tree = _entry_tree(g)
    reqs = GuardSet()
    for node in _guarded(g, tree):
        for kind, payload in node.observations:
            reqs.add(GuardReq(tree[node], kind, payload))
    return reqs


def aliases(g: RefGraph) -> list[tuple[Path, Path]]:
    """``(primary, other)``: the pairs of :func:`node_aliases`, without their nodes."""
    return [(primary, other) for _, primary, other in node_aliases(g)]


def node_aliases(g: RefGraph) -> list[tuple[ShadowNode, Path, Path]]:
    """``(node, primary, other)``: one triple per entry edge into a node besides its primary
    one (both paths reach ``node``).

    A node read through several edges (``self.w`` and a local ``w``; ``m.l`` and
    ``m._modules['l']``; ``a[0][0]`` back to ``a``) is the same object only while each of those
    edges still leads to the object its primary path reaches, so ``other`` is the primary path
    of the edge's source followed by the edge's access. Paths that differ only before a shared
    last edge need no pair of their own: the pairs of the edge's source already make its
    object one, and reading the same edge of one object is one read (an attribute that makes
    a new object on every read, such as a bound method, is never compared with itself).
    Nodes come in (depth, id) order, their edges in creation order; cycles give a pair too
    (``a[0][0] is a``), since the run relied on them.
    """
    tree = _entry_tree(g)
    incoming: dict[ShadowNode, list[tuple[ShadowNode, Edge]]] = {}
    for src in (g.root, *tree):
        for edge in _entry_edges(src):
            if edge.target is not g.root:
                incoming.setdefault(edge.target, []).append((src, edge))
    triples: list[tuple[ShadowNode, Path, Path]] = []
    for node in sorted(incoming, key=lambda n: (len(tree[n]), n.id)):
        edges = incoming[node]
        if len(edges) < 2:
            continue
        primary = tree[node]
        for src, edge in sorted(edges, key=lambda se: se[1].seq):
            other = Path(edge.access) if src is g.root else tree[src] / edge.access
            if other != primary:
                triples.append((node, primary, other))
    return triples


@attrs.frozen
class MockSet:
    """What the mock (epilogue) must reproduce after a segment.

    ``created``: ``(src, access, target)`` for created edges still visible from SN#0, in
    creation order. ``updated``: external nodes (not SN#0) with more than one version, by id.
    ``new_reachable``: nodes created during the run and visible from SN#0 at exit, by id.
    ``deleted``: ``(node, access)`` for references of external nodes (SN#0 included) that a
    later version named as changed and the last version lacks, by (id, access order).
    """

    created: list[tuple[ShadowNode, Access, ShadowNode]] = attrs.Factory(list)
    updated: list[ShadowNode] = attrs.Factory(list)
    new_reachable: list[ShadowNode] = attrs.Factory(list)
    deleted: list[tuple[ShadowNode, Access]] = attrs.Factory(list)


def _exit_reachable(g: RefGraph) -> list[ShadowNode]:
    """Nodes reachable from SN#0 over last-version edges (SN#0 included), in id order."""
    seen = {g.root}
    stack = [g.root]
    while stack:
        for edge in stack.pop().versions[-1].edges.values():
            if edge.target not in seen:
                seen.add(edge.target)
                stack.append(edge.target)
    return sorted(seen, key=lambda n: n.id)


def _deleted(nodes: Iterable[ShadowNode]) -> list[tuple[ShadowNode, Access]]:
    out: list[tuple[ShadowNode, Access]] = []
    for node in nodes:
        last = node.versions[-1].edges
        named: dict[Access, None] = {}
        for version in node.versions[1:]:
            named.update(dict.fromkeys(version.changed or ()))
        out.extend((node, access) for access in named if access not in last)
    return out


def mock_set(g: RefGraph) -> MockSet:
    """Compute the :class:`MockSet` of ``g`` (see its docstring)."""
    reachable = _exit_reachable(g)
    created = [
        (edge.seq, node, edge)
        for node in reachable
        for edge in node.versions[-1].edges.values()
        if edge.created
    ]
    created.sort(key=lambda item: item[0])
    changed_external = [n for n in g.nodes if n.external and len(n.versions) > 1]
    return MockSet(
        created=[(node, edge.access, edge.target) for _, node, edge in created],
        updated=[n for n in changed_external if n is not g.root],
        new_reachable=[n for n in reachable if not n.external],
        deleted=_deleted(changed_external),
    )
