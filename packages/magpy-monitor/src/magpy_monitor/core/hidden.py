"""Tensors an operation updates that neither its name nor its schema says it does.

``F.batch_norm(x, running_mean, running_var, training=True)`` updates the running statistics in
place; ``F.embedding(..., max_norm=m)`` renormalizes rows of the weight in place. Such an update
is an effect of the graph like ``x.add_(1)``: the record's mock puts the tensor back when a check
misses (else the statistics would be updated twice, once by the graph and once by the program
run again), and the RefGraph knows the tensor changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .values import Val

# function -> (its parameters in order, the parameters it may update, when it does)
_Rule = tuple[tuple[str, ...], tuple[str, ...], Callable[[dict[str, Any]], bool]]
_BN = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
_TORCH_BN = ("input", "weight", "bias", "running_mean", "running_var", "training")
_IN = ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats")
_TORCH_IN = ("input", "weight", "bias", "running_mean", "running_var", "use_input_stats")
_STATS = ("running_mean", "running_var")
_RULES: dict[Any, _Rule] = {
    F.batch_norm: (_BN, _STATS, lambda a: bool(a.get("training", False))),
    torch.batch_norm: (_TORCH_BN, _STATS, lambda a: bool(a.get("training", False))),
    F.instance_norm: (_IN, _STATS, lambda a: bool(a.get("use_input_stats", True))),
    torch.instance_norm: (_TORCH_IN, _STATS, lambda a: bool(a.get("use_input_stats", True))),
    F.embedding: (
        ("input", "weight", "padding_idx", "max_norm"),
        ("weight",),
        lambda a: a.get("max_norm") is not None,
    ),
}


def hidden_updates(fn: Any, pos: list[Val], kwargs: dict[str, Val]) -> list[Val]:
    """The tensors among the arguments of ``fn(*pos, **kwargs)`` it updates in place without
    saying so (none for most operations)."""
    rule = _RULES.get(fn)
    if rule is None:
        return []
    names, updated, when = rule
    given = dict(zip(names, pos, strict=False)) | kwargs
    if not when({k: v.obj for k, v in given.items()}):
        return []
    return [given[k] for k in updated if k in given and isinstance(given[k].obj, torch.Tensor)]
