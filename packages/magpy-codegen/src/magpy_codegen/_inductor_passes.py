"""Graph passes MagPy runs in each of its Inductor compiles, before Inductor's own rewrites
(Inductor's ``post_grad_custom_pre_pass``), where one of those would change a result.

``add(x, y, alpha=a)`` (and ``sub``, in place or not) becomes ``add(x, mul(y, a))``: Inductor
rewrites ``add(x, mm(p, q))`` into ``addmm(x, p, q)`` without looking at ``alpha``, so that an
update ``w.add_(grad, alpha=-lr)`` whose gradient is a matrix product came out as
``w + grad`` (seen in a training step of an ``nn.LSTM``: its input weights' gradient is one
``mm``). Inductor computes ``alpha`` as that same product, so the values do not change.

The pass is a ``CustomGraphPass`` with a ``uuid`` (this file's hash): Inductor's FX graph
cache still serves graphs compiled with it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

__all__ = ["pre_pass", "with_passes", "with_pre_pass"]

_aten = torch.ops.aten
_SCALED = frozenset({_aten.add.Tensor, _aten.add_.Tensor, _aten.sub.Tensor, _aten.sub_.Tensor})


def _scale_operands_first(graph: fx.Graph) -> None:
    """``alpha`` of each add or sub applied to its operand as a product of its own."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SCALED:
            continue
        alpha = node.kwargs.get("alpha")
        if alpha is None or alpha == 1 or len(node.args) != 2:
            continue
        operand = node.args[1]
        if not isinstance(operand, fx.Node):
            continue
        with graph.inserting_before(node):
            scaled = graph.call_function(_aten.mul.Tensor, (operand, alpha))
        value = operand.meta.get("val")
        if isinstance(value, torch.Tensor):
            scaled.meta["val"] = _aten.mul.Tensor(value, alpha)  # (a fake tensor's)
        node.args = (node.args[0], scaled)
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "alpha"}


@functools.cache
def pre_pass() -> Any:
    """The pass as Inductor takes it, made on first use: its base class is in
    ``torch._inductor``, which takes seconds to import, and which the backend (and so every
    caller of this) has imported (``_backend._torch_compiler``); its config imports it."""
    passes = torch._inductor.custom_graph_pass

    class ScaledOperandFirst(passes.CustomGraphPass):
        def __call__(self, graph: fx.Graph) -> None:
            _scale_operands_first(graph)

        def uuid(self) -> Any:
            return passes.get_hash_for_files((__file__,))

    return ScaledOperandFirst()


def with_pre_pass(patch: dict[str, Any]) -> dict[str, Any]:
    """An Inductor config ``patch`` with MagPy's pass first among its post-grad pre passes
    (those the patch or the global config set run after it)."""
    key, mine = "post_grad_custom_pre_pass", pre_pass()
    theirs = patch[key] if key in patch else getattr(torch._inductor.config, key)
    if theirs is None:
        passes: tuple[Any, ...] = (mine,)
    elif isinstance(theirs, list | tuple):
        passes = (mine, *(p for p in theirs if p is not mine))
    else:
        passes = (mine,) if theirs is mine else (mine, theirs)
    return {**patch, key: passes[0] if len(passes) == 1 else list(passes)}


def with_passes(compiler: Callable[..., Any], patch: dict[str, Any]) -> Callable[..., Any]:
    """Inductor's ``compiler`` run under config ``patch`` and MagPy's pass."""

    def compile_with_passes(gm: fx.GraphModule, inputs: list[Any]) -> Any:
        with torch._inductor.config.patch(with_pre_pass(patch)):
            return compiler(gm, inputs)

    return compile_with_passes
