"""DTensor's layout objects as constants of the graph (tensor parallelism, issue 39).

A DTensor's ``DeviceMesh`` and its ``Placement``\\ s (``Shard(0)``, ``Replicate()``,
``Partial()``) reach tensor operations as arguments: ``DTensor.from_local(x, mesh, placements)``
(``_FromTorchTensor.apply``), ``redistribute``, the functional collectives. They decide what
the operation computes and which collectives it runs, yet no graph code can spell them: the
graph holds them as they are (``core.recorder.GraphConstant``), bound into the node's target.

- A mesh is guarded by identity: another mesh, even of the same shape and ranks, misses (its
  process groups differ). One read off a DTensor (``dt.device_mesh``) is that DTensor's,
  guarded with its metadata (an entry DTensor) or following from its inputs' (one the graph
  made). One made during the run is a break.
- A placement is an immutable value: guarded by value (``Shard(0)`` built anew each call still
  hits), through its entry path, or by what made it when the run built it.
- A list or tuple of them (``placements``) item by item, its length guarded.
- A dict of options with string keys that the run built (``redistribute``'s), item by item.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from magpy_refgraph import Attr, GuardKind, Item, Unsupported

from ...core import registry
from ...core.capture import Capture
from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.recorder import GraphConstant, held_whole
from ...core.values import BoundMethod, Val

__all__ = [
    "checked_from_local",
    "dtensor_function",
    "graph_constant",
    "guard_layout",
    "layout_attribute",
    "layout_object",
    "local_tensor_attribute",
    "observe_placement",
]

try:  # (a build of torch without torch.distributed has neither)
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    # (a process group: the group argument of a functional collective, ``libs/torch/collectives``)
    _LAYOUT: tuple[type, ...] = (DeviceMesh, Placement, ProcessGroup)
except ImportError:  # pragma: no cover
    DeviceMesh = Placement = ProcessGroup = None  # type: ignore[assignment,misc]
    _LAYOUT = ()


if Placement is not None:
    registry.IMMUTABLE_CLASSES.append(Placement)


def layout_object(obj: Any) -> bool:
    """``obj`` is a ``DeviceMesh`` or a DTensor ``Placement``."""
    return bool(_LAYOUT) and isinstance(obj, _LAYOUT)


@registry.GRAPH_CONSTANT.provide
def graph_constant(cap: Capture, val: Val) -> Any:
    """``val`` as a graph constant, guarded; None where it is no layout object."""
    obj = val.obj
    if type(obj) is dict and isinstance(val.items, dict) and all(type(k) is str for k in obj):
        # options the run built (``Redistribute.apply``'s ``{"op_dtype": dtype, ...}``): item
        # by item, held whole where no graph value is among them
        for key, _ in val.items.values():
            cap.observe(key)
        return held_whole({k.obj: cap.to_arg(v) for k, v in val.items.values()})
    if type(obj) in (list, tuple) and obj and all(layout_object(x) for x in obj):
        if isinstance(val.items, list):
            items = val.items
        elif val.external and val.node is not None:
            cap.observe_len(val)
            items = [cap.child(val, Item(i), x) for i, x in enumerate(obj)]
        else:
            return None
        return type(obj)(graph_constant(cap, item) for item in items)
    if not layout_object(obj):
        return None
    if isinstance(obj, torch.Tensor):  # pragma: no cover  (no layout object is a tensor)
        return None
    if DeviceMesh is not None and isinstance(obj, DeviceMesh | ProcessGroup):
        if val.external and val.node is not None:
            cap.observe_identity(val)
        elif not val.const:  # (a constant: read off a DTensor whose layout is guarded)
            kind = type(obj).__name__
            raise Unsupported(f"a {kind} made during the run passed to a tensor operation")
        return GraphConstant(obj)
    observe_placement(cap, val)
    return GraphConstant(obj)


# the attributes of a DTensor that read its layout: metadata, as a tensor's shape is (what the
# graph makes has the layout its inputs' guarded layouts give it)
_LAYOUT_ATTRS = frozenset(("placements", "device_mesh", "_spec"))


def layout_attribute(obj: Any, name: str) -> bool:
    """``obj.name`` reads the layout of DTensor ``obj``."""
    return name in _LAYOUT_ATTRS and _is_dtensor(obj)


def local_tensor_attribute(obj: Any, name: str) -> bool:
    """``obj._local_tensor`` of DTensor ``obj``: the shard it holds, a node of the graph (torch's
    own code reads it for its dtype or to compute on it without autograd)."""
    return name == "_local_tensor" and _is_dtensor(obj)


def dtensor_function(cls: type) -> bool:
    """``cls`` is one of DTensor's autograd Functions (``_FromTorchTensor``, ``Redistribute``):
    a graph node whatever the grad mode (``libs/torch/functions``)."""
    return cls.__module__.startswith("torch.distributed.tensor.")


def checked_from_local(cls: type, args: list[Val]) -> bool:
    """``_FromTorchTensor.apply(x, mesh, placements, run_check, ...)`` with ``run_check``
    true (``DTensor.from_local(..., run_check=True)``): its forward gathers every rank's shard
    metadata as Python objects (``all_gather_object``) and broadcasts a replicated shard from
    the mesh's first rank into ``x`` in place (c10d's ``broadcast``). Run as a node it would do
    both, but a compiler traces it on fake tensors, where neither can happen: a break there
    (``from_local``'s default is ``run_check=False``, a graph node)."""
    return (
        cls.__name__ == "_FromTorchTensor"
        and dtensor_function(cls)
        and len(args) > 3
        and bool(args[3].obj)
    )


def _is_dtensor(obj: Any) -> bool:
    return _DTENSOR is not None and isinstance(obj, _DTENSOR)


try:
    from torch.distributed.tensor import DTensor as _DTENSOR
except ImportError:  # pragma: no cover
    _DTENSOR = None  # type: ignore[assignment,misc]


@registry.GUARD_LAYOUT.provide
def guard_layout(cap: Capture, val: Val) -> None:
    """An entry DTensor: its mesh by identity, its placements by value (through
    ``dt.device_mesh`` and ``dt.placements``), its local shard's metadata. Other subclasses:
    nothing beyond their metadata (issue 39 covers DTensor only)."""
    obj = val.obj
    if not _is_dtensor(obj):
        return
    mesh = cap.child(val, Attr("device_mesh"), obj.device_mesh)
    cap.observe_identity(mesh)
    placements = cap.child(val, Attr("placements"), obj.placements)
    cap.observe_len(placements)
    for i, p in enumerate(obj.placements):
        item = cap.child(placements, Item(i), p)
        cap.observe_type(item)
        assert item.node is not None
        cap.graph.observe(item.node, GuardKind.VALUE, p)
    # the shard this rank holds: its sizes follow from the above for a DTensor torch laid out,
    # not for one from ``from_local(..., shape=...)`` with uneven shards of the program's own
    cap.guard_meta(cap.child(val, Attr("_local_tensor"), obj._local_tensor))


# the native methods of a placement that only read its value
_QUERIES = frozenset(("is_shard", "is_replicate", "is_partial"))


def _placement_query(c: Call) -> bool:
    fn = c.fn
    if type(fn) is types.MethodType:  # p.is_shard, bound
        return fn.__name__ in _QUERIES and layout_object(fn.__self__)
    return (
        isinstance(fn, types.BuiltinFunctionType)
        and getattr(fn, "__name__", None) in _QUERIES
        and bool(c.pos)
        and layout_object(c.pos[0].obj)
    )


@call_rule("DTensor placement query", _placement_query)
def _query(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """``p.is_shard(dim)`` and the like: a constant, the placement guarded by value."""
    cap, pos = m.cap, c.pos
    if type(c.fn) is types.MethodType:
        pos = [_bound_self(m, c.fn_val), *pos]
    observe_placement(cap, pos[0])
    for v in (*pos[1:], *c.kwargs.values()):
        cap.observe(v)
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


def _bound_self(m: FrameMonitor, fn_val: Val) -> Val:
    """The placement a bound query method reads: as the run knows it, or a constant where the
    method was read off a constant (``Replicate()`` built in the run)."""
    bound = fn_val.payload(BoundMethod)
    if bound is not None:
        return bound.self_val
    owner = fn_val.obj.__self__
    if fn_val.external:
        return m.cap.child(fn_val, Attr("__self__"), owner)
    known = m.cap.known(owner)
    if known is not None:
        return known
    if fn_val.const:
        return m.cap.const(owner)
    raise m.unsupported(f"a method of a {type(owner).__name__} of unknown origin")


def observe_placement(cap: Capture, val: Val) -> None:
    """The program depends on placement ``val``'s value."""
    if val.external and val.node is not None:
        cap.observe_type(val)
        cap.graph.observe(val.node, GuardKind.VALUE, val.obj)
    else:
        cap.observe(val)  # (built by the run: what it was built from)


def _placement_class(c: Call) -> bool:
    return Placement is not None and isinstance(c.fn, type) and issubclass(c.fn, Placement)


@call_rule("DTensor placement class", _placement_class)
def _make_placement(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """``Shard(d)``, ``Replicate()``: an immutable value, constant given its (observed)
    arguments."""
    cap = m.cap
    cap.observe_identity(c.fn_val)
    for v in (*c.pos, *c.kwargs.values()):
        cap.observe(v)
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


def _placement_classes() -> list[type]:
    found: list[type] = []
    todo = [Placement] if Placement is not None else []
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _compare_placements(m: FrameMonitor, inst: Inst, a: Val, b: Val, symbol: str) -> None:
    """``p == q`` / ``p != q`` of two placements (``input_layout != desired_layout``): a
    constant, both guarded by value."""
    if symbol not in ("==", "!="):
        raise m.unsupported(f"{symbol} between placements")
    observe_placement(m.cap, a)
    observe_placement(m.cap, b)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


registry.register_types(registry.COMPARE_MODELS, *_placement_classes())(_compare_placements)
for _cls in _placement_classes():  # (tuples of placements compared: ``pyobj.compare``)
    registry.VALUE_OBSERVERS[_cls] = observe_placement
