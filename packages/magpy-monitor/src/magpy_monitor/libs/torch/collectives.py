"""The program's own functional collectives (``torch.distributed._functional_collectives``) as
graph nodes, with their waits (issue 39).

``funcol.all_reduce(x, "sum", group)`` and its kin start a collective and return its result
as an ``AsyncCollectiveTensor`` that waits on first use; ``funcol.wait_tensor(t)`` waits
explicitly. Followed as Python, they resolve the group in native helpers and read the
dispatch mode (a break); as one node each they are what TorchDynamo makes of them: the graph
calls the same function, so run as it is (the ``eager`` backend) it starts the same
collective and hands back the same waiting tensor, and traced (AOTAutograd, Inductor) it
becomes ``_c10d_functional``'s op followed by its ``wait_tensor``. The group is a constant of
the graph: a ``ProcessGroup`` or ``DeviceMesh`` guarded by identity (``libs/torch/dtensor``),
a group name or a list of ranks by value.

Each such node is an effect (``Annotation.effect``): it stays in the graph even where the
program never reads its result, since every other rank of the group takes part in it.

The deprecated spellings (``all_gather_tensor``, ``reduce_scatter_tensor``) are followed: they
warn as eager does and reach the nodes above. Not graphed: the coalesced and in-place
variants, and c10d's own collectives (``dist.all_reduce(t)``, ``dist.broadcast`` ...), which
write their tensors in place through the process group and may hand back a ``Work`` handle.
Mapping them onto the functional form (``t.copy_(funcol.all_reduce(t, ...))``) is what
TorchDynamo does; it is not done here yet, so each is a graph break with that reason (the
code around it stays compiled) instead of a break deep inside c10d's Python code.
"""

from __future__ import annotations

from ...core.annotations import TABLE, Annotation, Kind

__all__ = ["FUNCTIONAL_COLLECTIVES"]

_NAMES = (
    "wait_tensor",
    "broadcast",
    "all_reduce",
    "all_gather_single",
    "all_gather_single_autograd",
    "reduce_scatter_single",
    "reduce_scatter_single_autograd",
    "all_to_all_single",
    "all_to_all_single_autograd",
)

try:  # (a build of torch without torch.distributed has none)
    from torch.distributed import _functional_collectives as _funcol
except ImportError:  # pragma: no cover
    _funcol = None  # type: ignore[assignment]

FUNCTIONAL_COLLECTIVES: tuple[object, ...] = tuple(
    getattr(_funcol, name) for name in _NAMES if _funcol is not None and hasattr(_funcol, name)
)

for _fn in FUNCTIONAL_COLLECTIVES:
    TABLE.register(_fn, Annotation(Kind.AS_OP, effect=True))

_IN_PLACE = (
    "all_reduce broadcast reduce all_gather all_gather_into_tensor reduce_scatter "
    "reduce_scatter_tensor all_to_all all_to_all_single scatter gather barrier send recv "
    "isend irecv all_gather_object broadcast_object_list".split()
)

try:
    from torch.distributed import distributed_c10d as _c10d
except ImportError:  # pragma: no cover
    _c10d = None  # type: ignore[assignment]

for _name in _IN_PLACE:
    _fn = getattr(_c10d, _name, None) if _c10d is not None else None
    if _fn is not None:
        TABLE.register(
            _fn,
            Annotation(
                Kind.EFFECT,
                reason=f"torch.distributed.{_name}: a c10d collective that works in place "
                "through the process group (not graphed; the functional collectives of "
                "torch.distributed._functional_collectives are graph nodes)",
            ),
        )
