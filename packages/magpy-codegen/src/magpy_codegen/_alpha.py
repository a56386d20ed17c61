"""``add``/``sub`` with an ``alpha`` spelled as a product before Inductor sees them.

Inductor's post-grad pass fuses ``aten.add(inp, aten.mm(a, b))`` into ``aten.addmm(inp, a, b)``
without looking at the add's ``alpha``: ``p.add_(a @ b, alpha=-lr)`` (plain SGD's update of a
Linear weight, whose gradient is an ``mm`` in the joint graph) would add the gradient unscaled,
a silently wrong step. ``x.add(y, alpha=s)`` is ``x + y * s`` (Inductor's own lowering of
``alpha`` computes exactly that product, then the sum), so the graph given to Inductor carries
it as ``mul`` then ``add``: the pattern no longer matches, and the values are Inductor's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

__all__ = ["alpha_as_product"]

_aten = torch.ops.aten
# functions whose second argument is scaled by ``alpha``
_SCALED = frozenset({torch.add, torch.sub, _aten.add.Tensor, _aten.add_.Tensor,
                     _aten.sub.Tensor, _aten.sub_.Tensor})  # fmt: skip
_METHODS = frozenset({"add", "add_", "sub", "sub_"})


def alpha_as_product(
    compiler: Callable[[fx.GraphModule, list[Any]], Callable[..., Any]],
) -> Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]:
    """``compiler`` (Inductor) given ``gm`` with each ``alpha`` of a tensor add/sub as a
    product (``_rewrite``)."""

    def compile_products(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        _rewrite(gm)
        return compiler(gm, example_inputs)

    return compile_products


def _scaled(node: fx.Node) -> bool:
    function = node.op == "call_function" and node.target in _SCALED
    if not function and not (node.op == "call_method" and node.target in _METHODS):
        return False
    alpha = node.kwargs.get("alpha", 1)
    return len(node.args) == 2 and isinstance(node.args[1], fx.Node) and bool(alpha != 1)


def _rewrite(gm: fx.GraphModule) -> None:
    graph, changed = gm.graph, False
    for node in list(graph.nodes):
        if not _scaled(node):
            continue
        alpha = node.kwargs["alpha"]
        aten = isinstance(node.target, torch._ops.OpOverload)
        with graph.inserting_before(node):
            if aten:
                term = graph.call_function(_aten.mul.Tensor, (node.args[1], alpha))
            else:
                term = graph.call_function(operator.mul, (node.args[1], alpha))
        kwargs = {k: v for k, v in node.kwargs.items() if k != "alpha"}
        node.args, node.kwargs = (node.args[0], term), kwargs
        changed = True
    if changed:
        gm.recompile()
