"""The RefGraph: shadow nodes with versioned reference edges, rooted at SN#0.

SN#0 stands for the frame's entry state; its edges are root accesses (locals, globals, ...).
Every other node shadows one object. A node's versions record its reference edges over time:
version 0 is the state when the node was created (for external nodes: the entry state), and
every write, delete or in-place update appends a version. Reads never create versions.

Version-0 edges of external nodes describe the entry state, and are what guards are built
from. A read of an access that no later version touched is also an entry fact, so it is
recorded in version 0 and copied into every later version.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable

import attrs

from ._access import Access, short_repr
from ._errors import InternalError
from ._guards import GuardKind, payload_key

__all__ = ["Edge", "NodeKind", "RefGraph", "ShadowNode", "ShadowVersion"]


class NodeKind(enum.Enum):
    """What kind of object a :class:`ShadowNode` shadows."""

    EXTERNAL_STATE = "external_state"
    TENSOR = "tensor"
    SCALAR = "scalar"
    STRING = "string"
    NONE = "none"
    TUPLE = "tuple"
    LIST = "list"
    DICT = "dict"
    SET = "set"
    MODULE = "module"
    FUNCTION = "function"
    CLASS = "class"
    CELL = "cell"
    OBJECT = "object"
    ITERATOR = "iterator"
    OPAQUE = "opaque"


def _flags(read: bool, created: bool) -> str:
    names = [name for name, on in (("read", read), ("created", created)) if on]
    return ",".join(names) or "-"


@attrs.frozen(repr=False)
class Edge:
    """A reference ``access`` to ``target`` held by one or more versions of a node.

    ``read``: the program read this reference; ``created``: the program wrote it during the run.
    ``seq`` is the graph-wide creation order (inherited copies keep it).
    """

    access: Access
    target: ShadowNode
    read: bool = False
    created: bool = False
    seq: int = 0

    def __repr__(self) -> str:
        return f"Edge({self.access} -> SN#{self.target.id} [{_flags(self.read, self.created)}])"


@attrs.define(eq=False, repr=False)
class ShadowVersion:
    """One state of a node's references.

    ``edges`` maps each known access to its :class:`Edge`; ``reason`` says why the version was
    made. ``changed`` lists the accesses this version changed relative to the previous one
    (empty for version 0 and plain in-place updates; None when any reference may have changed).
    """

    node: ShadowNode
    index: int
    edges: dict[Access, Edge] = attrs.field(factory=dict)
    reason: str = ""
    changed: frozenset[Access] | None = frozenset()

    def __repr__(self) -> str:
        return (
            f"<SN#{self.node.id} v{self.index} {short_repr(self.reason)} {len(self.edges)} edges>"
        )


@attrs.define(eq=False, repr=False)
class ShadowNode:
    """The shadow of one object (or of the entry state, for SN#0). Hashes by identity.

    ``external``: the object existed at entry. ``observations``: what the program observed of
    the entry state, as ``(GuardKind, payload)`` pairs. ``meta`` is free for upper layers.
    """

    id: int
    kind: NodeKind
    external: bool
    label: str = ""
    versions: list[ShadowVersion] = attrs.field(factory=list)
    observations: list[tuple[GuardKind, object]] = attrs.field(factory=list)
    meta: dict[str, object] = attrs.field(factory=dict)
    _observed: set[Hashable] = attrs.field(factory=set)

    def __str__(self) -> str:
        return f"SN#{self.id}"

    def __repr__(self) -> str:
        ext = " ext" if self.external else ""
        label = f" {short_repr(self.label)}" if self.label else ""
        return f"<SN#{self.id} {self.kind.name}{ext}{label} v{len(self.versions) - 1}>"


class RefGraph:
    """Shadow nodes and versioned edges of one segment; ``root`` is SN#0 (the entry state).

    With ``verify=True`` every mutating call ends with :meth:`verify` (the runtime passes
    ``magpy.config.verify``, ``MAGPY_VERIFY=1``; this package reads no environment).
    """

    __slots__ = ("_seq", "_verify_each", "nodes", "root")

    def __init__(self, *, verify: bool = False) -> None:
        self.nodes: list[ShadowNode] = []
        self._seq = 0
        self._verify_each = verify
        self.root = self._make(NodeKind.EXTERNAL_STATE, external=True, label="entry state")

    def __repr__(self) -> str:
        return f"<RefGraph {len(self.nodes)} nodes>"

    # -- nodes and versions ------------------------------------------------------------------

    def _make(self, kind: NodeKind, *, external: bool, label: str) -> ShadowNode:
        node = ShadowNode(len(self.nodes), kind, external, label)
        node.versions.append(ShadowVersion(node, 0, reason="entry" if external else "new"))
        self.nodes.append(node)
        return node

    def new_node(self, kind: NodeKind, *, external: bool, label: str = "") -> ShadowNode:
        """Create a node (ids 1, 2, ... in creation order) with its version 0."""
        if not isinstance(kind, NodeKind) or kind is NodeKind.EXTERNAL_STATE:
            raise InternalError(f"new_node kind must be a NodeKind other than SN#0's, got {kind!r}")
        node = self._make(kind, external=bool(external), label=str(label))
        self._maybe_verify()
        return node

    def _own(self, node: ShadowNode) -> ShadowNode:
        if not isinstance(node, ShadowNode):
            raise InternalError(f"expected a ShadowNode, got {type(node).__name__}")
        if node.id >= len(self.nodes) or self.nodes[node.id] is not node:
            raise InternalError(f"{node!r} does not belong to this RefGraph")
        return node

    def current(self, node: ShadowNode) -> ShadowVersion:
        """The latest version of ``node``."""
        return self._own(node).versions[-1]

    def first(self, node: ShadowNode) -> ShadowVersion:
        """Version 0 of ``node``."""
        return self._own(node).versions[0]

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _check_edge(self, src: ShadowNode, access: Access, dst: ShadowNode | None) -> None:
        self._own(src)
        if not isinstance(access, Access):
            raise InternalError(f"expected an Access, got {type(access).__name__}")
        if (src is self.root) != access.is_root:
            where = "SN#0 takes only root accesses" if src is self.root else "root access"
            raise InternalError(f"{where}: {src!r} {access!r}")
        if dst is not None and self._own(dst) is self.root:
            raise InternalError(f"SN#0 cannot be the target of {src!r} {access}")

    def _new_version(
        self,
        node: ShadowNode,
        edges: dict[Access, Edge],
        reason: str,
        changed: frozenset[Access] | None,
    ) -> ShadowVersion:
        version = ShadowVersion(node, len(node.versions), edges, reason, changed)
        node.versions.append(version)
        return version

    # -- edges -------------------------------------------------------------------------------

    def lookup(self, src: ShadowNode, access: Access) -> ShadowNode | None:
        """Target of ``access`` on ``src``'s current version, or None when unknown."""
        edge = self.current(src).edges.get(access)
        return None if edge is None else edge.target

    def _untouched(self, src: ShadowNode, access: Access) -> bool:
        return all(v.changed is not None and access not in v.changed for v in src.versions[1:])

    def read(self, src: ShadowNode, access: Access, dst: ShadowNode) -> Edge:
        """Record that the program read ``access`` of ``src`` (current version) and got ``dst``.

        Idempotent. If the current edge points elsewhere, raises :class:`InternalError`. When
        ``src`` is external (SN#0 included) and no later version touched ``access``, the edge
        is an entry fact: it goes into version 0 and every later version, and ``dst`` must be
        external too.
        """
        self._check_edge(src, access, dst)
        old = src.versions[-1].edges.get(access)
        if old is not None:
            return self._reread(src, old, dst)
        edge = Edge(access, dst, read=True, created=False, seq=self._next_seq())
        if src.external and self._untouched(src, access):
            if not dst.external:
                raise InternalError(
                    f"{src!r} {access} read from the entry state gave {dst!r}, which was created "
                    "during the run; create it with external=True or model the read as a call"
                )
            for version in src.versions:
                version.edges[access] = edge
        else:
            src.versions[-1].edges[access] = edge
        self._maybe_verify()
        return edge

    def _reread(self, src: ShadowNode, old: Edge, dst: ShadowNode) -> Edge:
        if old.target is not dst:
            raise InternalError(
                f"{src!r} {old.access} already points to {old.target!r}, not {dst!r}; "
                "record the write that changed it first"
            )
        if old.read:
            return old
        edge = attrs.evolve(old, read=True)
        for version in src.versions:
            if version.edges.get(old.access) is old:
                version.edges[old.access] = edge
        self._maybe_verify()
        return edge

    def write(
        self, src: ShadowNode, access: Access, dst: ShadowNode, reason: str | None = None
    ) -> ShadowVersion:
        """Make a new version of ``src`` whose ``access`` points to ``dst`` (a created edge)."""
        self._check_edge(src, access, dst)
        edges = dict(src.versions[-1].edges)
        edges[access] = Edge(access, dst, read=False, created=True, seq=self._next_seq())
        why = reason if reason is not None else f"write {access}"
        version = self._new_version(src, edges, why, frozenset({access}))
        self._maybe_verify()
        return version

    def delete(self, src: ShadowNode, access: Access, reason: str | None = None) -> ShadowVersion:
        """Make a new version of ``src`` without ``access`` (``del x.a``, ``del d[k]``...)."""
        self._check_edge(src, access, None)
        edges = dict(src.versions[-1].edges)
        edges.pop(access, None)
        why = reason if reason is not None else f"delete {access}"
        version = self._new_version(src, edges, why, frozenset({access}))
        self._maybe_verify()
        return version

    def update_in_place(
        self, node: ShadowNode, reason: str, *, keep_edges: bool = True
    ) -> ShadowVersion:
        """Make a new version of ``node`` for an in-place change of its contents.

        With ``keep_edges`` (default) the version has the same edges and no reference counts as
        changed (an in-place tensor op). With ``keep_edges=False`` it starts with no edges and
        every reference counts as changed (``list.sort``: old item edges would be stale).
        """
        self._own(node)
        if keep_edges:
            version = self._new_version(node, dict(node.versions[-1].edges), reason, frozenset())
        else:
            version = self._new_version(node, {}, reason, None)
        self._maybe_verify()
        return version

    def observe(self, node: ShadowNode, kind: GuardKind, payload: object = None) -> bool:
        """Record that the program observed ``kind`` (with ``payload``) of ``node``'s entry state.

        Deduplicated like guard requirements; returns False when already recorded.
        """
        self._own(node)
        if not isinstance(kind, GuardKind):
            raise InternalError(f"observe expects a GuardKind, got {kind!r}")
        key = payload_key(kind, payload)
        if key in node._observed:
            return False
        node._observed.add(key)
        node.observations.append((kind, payload))
        return True

    # -- invariants ----------------------------------------------------------------------------

    def _maybe_verify(self) -> None:
        if self._verify_each:
            self.verify()

    def verify(self) -> None:
        """Check the graph invariants; raise :class:`InternalError` naming the first violation.

        Checked: SN#0 is node 0 (external, EXTERNAL_STATE); ids and version indices are dense
        and back-linked; SN#0 edges use root accesses only and other nodes derived ones only;
        every edge is stored under its own access and targets a node of this graph other than
        SN#0; version-0 edges are read and not created; every edge is read or created;
        version-0 edges of external nodes target external nodes; a version keeps every edge of
        the previous version that its ``changed`` set does not name; observation keys match.
        """
        if not self.nodes or self.nodes[0] is not self.root:
            raise InternalError("SN#0 must be nodes[0]")
        root = self.root
        if root.kind is not NodeKind.EXTERNAL_STATE or not root.external:
            raise InternalError(f"SN#0 must be an external EXTERNAL_STATE node, got {root!r}")
        for index, node in enumerate(self.nodes):
            if node.id != index:
                raise InternalError(f"nodes[{index}] has id {node.id}; ids must be dense")
            if index and node.kind is NodeKind.EXTERNAL_STATE:
                raise InternalError(f"{node!r}: only SN#0 may be EXTERNAL_STATE")
            self._verify_node(node)

    def _verify_node(self, node: ShadowNode) -> None:
        if not node.versions:
            raise InternalError(f"{node!r} has no version 0")
        for index, version in enumerate(node.versions):
            where = f"SN#{node.id} v{index}"
            if version.index != index or version.node is not node:
                raise InternalError(
                    f"{where}: version index/back-link is {version.index}/{version.node!r}"
                )
            for access, edge in version.edges.items():
                self._verify_edge(node, index, access, edge)
            if index:
                self._verify_kept(node, index)
        if len(node._observed) != len(node.observations):
            raise InternalError(f"SN#{node.id}: observations were changed without observe()")

    def _verify_edge(self, node: ShadowNode, index: int, access: Access, edge: Edge) -> None:
        where = f"SN#{node.id} v{index} {access}"
        if not isinstance(edge, Edge) or edge.access != access:
            raise InternalError(f"{where}: stored edge {edge!r} is not keyed by its own access")
        if access.is_root != (node is self.root):
            raise InternalError(f"{where}: root accesses belong to SN#0 and only there")
        target = edge.target
        if not isinstance(target, ShadowNode) or target.id >= len(self.nodes):
            raise InternalError(f"{where}: target {target!r} is not in this graph")
        if self.nodes[target.id] is not target or target is self.root:
            raise InternalError(f"{where}: target {target!r} is not a valid edge target")
        if not (edge.read or edge.created):
            raise InternalError(f"{where}: edge is neither read nor created")
        if not 0 <= edge.seq < self._seq:
            raise InternalError(f"{where}: edge seq {edge.seq} out of range")
        if index == 0:
            if edge.created or not edge.read:
                raise InternalError(f"{where}: version-0 edges must be read, not created")
            if node.external and not target.external:
                raise InternalError(f"{where}: entry edge targets non-external {target!r}")

    def _verify_kept(self, node: ShadowNode, index: int) -> None:
        version, prev = node.versions[index], node.versions[index - 1]
        if version.changed is None:
            return
        for access, edge in prev.edges.items():
            if access not in version.changed and version.edges.get(access) is not edge:
                raise InternalError(
                    f"SN#{node.id} v{index} ({version.reason!r}) lost or retargeted {access} "
                    "without naming it in `changed`"
                )
