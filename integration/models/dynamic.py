"""A model whose Python-level behaviour is dynamic in ways MagPy captures, one graph per case.

* A config dict picks each block's activation (``getattr(F, name)``) and scales the input.
* Forward hooks on every block append the block's output to ``self.features``, a Python list
  the caller reads after the call (on a cache hit MagPy replays the appends).
* ``self.steps += 1`` counts calls. TorchDynamo guards on the int's value, so it recompiles on
  every call until its recompile limit and then runs the frame eagerly; MagPy writes the new
  value back without guarding on it, so one record serves every call.
* ``return_features`` is a flag the caller may flip between calls; MagPy then adds a second
  record for the other path (and keeps both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["DynamicNet", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

_ACTIVATIONS = ("gelu", "silu", "relu", "tanh")
# size -> (dim, blocks, tokens)
_SIZES = {"small": (64, 4, 16), "bench": (256, 8, 64)}


class Block(nn.Module):
    """Pre-LayerNorm residual MLP block; ``act`` names a function of ``torch.nn.functional``."""

    def __init__(self, dim: int, act: str) -> None:
        super().__init__()
        self.act = act
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(getattr(F, self.act)(self.fc1(self.norm(x))))


class DynamicNet(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        dim = config["dim"]
        self.blocks = nn.Sequential(*(Block(dim, act) for act in config["activations"]))
        self.head = nn.Linear(dim, config["classes"])
        self.features: list[torch.Tensor] = []
        self.steps = 0
        self.return_features = False
        for block in self.blocks:
            block.register_forward_hook(self._collect)

    def _collect(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        self.features.append(output)

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        self.steps += 1
        self.features = []  # a new list (MagPy guards the old length after a .clear())
        h = self.blocks(x * self.config["input_scale"])
        logits = self.head(h.mean(1))
        if self.return_features:
            return logits, torch.stack(self.features, 1)
        return logits


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    dim, blocks, tokens = _SIZES[size]
    config = {
        "dim": dim,
        "activations": [_ACTIVATIONS[i % len(_ACTIVATIONS)] for i in range(blocks)],
        "classes": 10,
        "input_scale": 0.5,
    }
    torch.manual_seed(0)
    model = DynamicNet(config)

    def make_inputs(batch: int, seed: int) -> tuple[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, tokens, dim, generator=g),)

    return model.eval(), make_inputs
