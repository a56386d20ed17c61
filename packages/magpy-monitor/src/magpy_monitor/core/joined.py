"""A list from outside joined into one tensor: ``torch.stack(outputs)``, ``torch.cat(parts)``.

A loop that appends a tensor per step and a segment after it that stacks the list (an RNN's
outputs, split into one segment per step by a loop whose trip count changes) would read the
list's items one by one: its guard would check the length and every item, and each length
would need a record of its own. When nothing in the segment has read or changed the list or
its tensors before the call, the joined tensor is an entry value instead: its path is
``outputs→stack(dim=0)`` (``magpy_refgraph.Joined``), the guard computes it with the same
function (``torch.stack(L['outputs'], 0)``, as eager does at that point) and checks its
metadata like any input's, so the list's length is the size of one dim, which becomes
dynamic like any other size (``docs/dynamic.md``). An item that is not a plain tensor, or
items the function refuses, make the guard's call fail: a miss, and the program runs again.
"""

from __future__ import annotations

from typing import Any

import torch

from magpy_refgraph import AccessKind, Joined, Path, Unsupported

from .values import AppendLog, Val

__all__ = ["JOINING", "joined_entry", "refuse_joined_update", "storage_key"]

# functions ``f(tensors, dim=0)`` that make one new tensor of a sequence of tensors
JOINING = frozenset({torch.stack, torch.cat, torch.concat, torch.concatenate})


def storage_key(t: torch.Tensor) -> Any:
    """An identity of ``t``'s memory (None for tensors without one: sparse, nested...)."""
    try:
        return (t.device, t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


def joined_entry(cap: Any, fn: Any, pos: list[Val], kwargs: dict[str, Val], out: Any) -> Val | None:
    """The ``Val`` of ``fn(*pos, **kwargs)`` (result ``out``) as an entry value of the list
    it joins, where that is exact; else None (the items are read one by one). A list the
    segment only appended to (a split loop's tail, then ``torch.stack(outputs)``) joins what it
    held at entry and the appended tensors: ``cat([fn(entry items), fn(appended)])``."""
    if (
        fn not in JOINING
        or not 1 <= len(pos) <= 2
        or set(kwargs) - {"dim"}
        or len(pos) + len(kwargs) > 2
    ):
        return None
    seq = pos[0]
    dim_val = pos[1] if len(pos) == 2 else kwargs.get("dim")
    dim = 0 if dim_val is None else dim_val.obj
    obj = seq.obj
    log = seq._items
    appended: list[Val] = log.values if type(log) is AppendLog else []
    if type(log) is AppendLog and any(p is not None for p in log.positions):
        return None  # (inserted into: where is known once the items are read)
    n0 = len(obj) - len(appended) if type(obj) in (list, tuple) else 0
    if not (
        type(dim) is int
        and seq.external
        and seq.node is not None
        and (log is None or appended)  # (nothing read in this segment, at most appended)
        and len(seq.node.versions) == 1  # (nothing written)
        and n0 >= 1
        and all(type(t) is torch.Tensor for t in obj)
        and type(out) is torch.Tensor
    ):
        return None
    # an item updated in place earlier in the segment (through another reference) would be
    # joined by the guard as it was at entry: read the items instead
    if cap.updated_unknown or any(storage_key(t) in cap.updated for t in obj[:n0]):
        return None
    if dim_val is not None:
        cap.observe(dim_val)
    cap.observe_type(seq)
    head = fn(list(obj[:n0]), dim) if appended else out
    val: Val = cap.child(seq, Joined(fn, dim), head)
    node = cap.tensor_node(val)  # (a graph input: computed by the guard, where failing is a miss)
    if not appended:
        return val
    tail = [cap.tensor_node(v) for v in appended]
    if fn is torch.stack:
        tail = [cap.rec.call("call_function", torch.stack, (tail, dim), {})]
    node = cap.rec.call("call_function", torch.cat, ([node, *tail], dim), {})
    return cap.op_result(out, node)


def refuse_joined_update(path: Path | None) -> None:
    """An in-place update of a joined entry value: it is no object of the program's state the
    mock could write back to (a graph break)."""
    if path is not None and path.steps and path.steps[-1].kind is AccessKind.JOINED:
        raise Unsupported(f"in-place update of {path} (a tensor joined from a list)")
