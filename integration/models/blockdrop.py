"""BlockDrop (Wu et al., 2018): a policy network decides which residual blocks to run per input.

A small policy CNN looks at a downsampled image and outputs one keep-probability per block; the
residual net then runs block ``t`` only where the policy keeps it (masked per sample) and skips it
altogether when no sample in the batch keeps it. That skip is a data-dependent branch
(``if not keep.any():``): a graph break in every block, so the model is not one graph; MagPy
splits it at the breaks and compiles the regions in between.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .resnet import BasicBlock, image_inputs, randomize_bn

__all__ = ["BlockDrop", "GatedBlock", "PolicyNet", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (width, blocks per stage, image side)
_SIZES = {"small": (16, 3, 32), "bench": (32, 6, 64)}


class PolicyNet(nn.Module):
    def __init__(self, num_blocks: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, 2, 1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(16, num_blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)
        return torch.sigmoid(self.fc(self.features(x)))


class GatedBlock(nn.Module):
    """Residual block ``index``: run where ``policy[:, index]`` keeps it, else the shortcut."""

    def __init__(self, index: int, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.index = index
        self.block = BasicBlock(in_ch, out_ch, stride)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.AvgPool2d(stride), _PadChannels(out_ch))

    def forward(self, x: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
        residual = self.shortcut(x)
        keep = policy[:, self.index]
        if not keep.any():  # data-dependent: skip the block when no sample needs it
            return residual
        mask = keep.view(-1, 1, 1, 1)
        return self.block(x) * mask + residual * (1 - mask)


class BlockDrop(nn.Module):
    def __init__(self, width: int, blocks_per_stage: int, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        gates: list[nn.Module] = []
        in_ch = width
        for stage in range(3):
            out_ch = width * 2**stage
            for i in range(blocks_per_stage):
                stride = 2 if stage > 0 and i == 0 else 1
                gates.append(GatedBlock(len(gates), in_ch, out_ch, stride))
                in_ch = out_ch
        self.gates = nn.ModuleList(gates)
        self.policy = PolicyNet(len(gates))
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (logits, policy) with policy[b, t] = 1.0 where block t ran for sample b."""
        policy = (self.policy(x) > 0.5).float()
        x = self.stem(x)
        for gate in self.gates:
            x = gate(x, policy)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x), policy


class _PadChannels(nn.Module):
    """Zero-pad the channel dimension up to ``channels`` (BlockDrop's parameter-free shortcut)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, 0, 0, 0, 0, self.channels - x.size(1)))


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    width, per_stage, side = _SIZES[size]
    torch.manual_seed(0)
    model = BlockDrop(width, per_stage)
    with torch.no_grad():  # spread the keep-probabilities so some blocks are dropped
        model.policy.fc.bias.copy_(torch.linspace(-3.0, 3.0, len(model.gates)))
    randomize_bn(model, 1)
    return model.eval(), image_inputs(side)
