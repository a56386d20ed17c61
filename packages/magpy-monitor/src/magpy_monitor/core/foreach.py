"""Scalar lists of ``torch._foreach_*`` operations computed by the graph.

An optimizer's ``foreach`` form passes one Python number per tensor (``step_size``, Adam's bias
corrections: ``torch._foreach_addcdiv_(params, exp_avgs, denoms, step_sizes)``), read from its
step counters with ``.item()`` and so changing on every step. As constants they would be
assumed (one record per value, then a graph break); here they stay graph values: the list
becomes the operation's tensor form, a list of 0-d tensors (``_foreach_mul_(ts, others)``)
or, where the operation takes its scalars as one tensor (``_foreach_addcdiv_(..., scalars)``),
their stack.
"""

from __future__ import annotations

from typing import Any

import torch

from .values import Val

__all__ = ["foreach_scalars"]

# foreach operations whose Scalar[] argument has a one-tensor form
_STACKED = frozenset(
    {"_foreach_addcdiv", "_foreach_addcdiv_", "_foreach_addcmul", "_foreach_addcmul_"}
)


def foreach_scalars(cap: Any, name: str, index: int, v: Val) -> Any:
    """The fx argument for list ``v`` at position ``index`` of ``torch.<name>`` where it is a
    list of numbers some of which the graph computes; None otherwise (as any argument)."""
    items = v.items
    if not name.startswith("_foreach_") or index == 0 or not isinstance(items, list) or not items:
        return None
    if not all(type(x.obj) in (int, float) for x in items):
        return None
    nodes = [cap.to_arg(x, promote=True) for x in items]
    if not any(isinstance(n, torch.fx.Node) for n in nodes):
        return None  # (numbers fixed for the record: passed as they are)
    rec = cap.rec
    tensors = [
        n if isinstance(n, torch.fx.Node)
        else rec.call("call_function", torch.scalar_tensor, (n,), {"dtype": torch.float64})
        for n in nodes
    ]  # fmt: skip
    if name in _STACKED:
        return rec.call("call_function", torch.stack, (tensors,), {})
    return tensors
