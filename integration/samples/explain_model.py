"""A program for ``magpy explain`` (``integration/test_explain_cli.py``) without a graph break.

``model`` is a module-level ``nn.Module`` instance (``magpy explain -m explain_model:model``);
its forward is captured whole, as one graph.
"""

from __future__ import annotations

import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


torch.manual_seed(0)
model = TinyNet()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 8),)
