"""A quantization-aware-training CNN: weights and activations pass through fake quantization.

Every conv/linear layer fake-quantizes its weight per tensor (8-bit symmetric, scale from the
weight's absolute maximum) and its output activation (8-bit affine, scale and zero point kept as
Python numbers on the module, as an observer would have frozen them) with
``torch.fake_quantize_per_tensor_affine``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .resnet import image_inputs

__all__ = ["QATCNN", "QBlock", "QConv2d", "QLinear", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (width, image side)
_SIZES = {"small": (16, 32), "bench": (48, 64)}


def fake_quant_weight(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric per-tensor fake quantization; the scale is a 0-d tensor (no Python read)."""
    qmax = 2 ** (bits - 1) - 1
    scale = w.detach().abs().amax().clamp(min=1e-8) / qmax
    zero_point = torch.zeros((), dtype=torch.int32)
    return torch.fake_quantize_per_tensor_affine(w, scale, zero_point, -qmax - 1, qmax)


class ActQuant(nn.Module):
    """Fake-quantize an activation with a frozen (Python float) scale and zero point."""

    def __init__(self, lo: float, hi: float, bits: int = 8) -> None:
        super().__init__()
        self.quant_min, self.quant_max = 0, 2**bits - 1
        self.scale = (hi - lo) / (self.quant_max - self.quant_min)
        self.zero_point = round(-lo / self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(
            x, self.scale, self.zero_point, self.quant_min, self.quant_max
        )


class QConv2d(nn.Conv2d):
    def __init__(self, *args: int, bits: int = 8, **kwargs: int) -> None:
        super().__init__(*args, **kwargs)
        self.bits = bits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, fake_quant_weight(self.weight, self.bits), self.bias)


class QLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int, bits: int = 8) -> None:
        super().__init__(in_features, out_features)
        self.bits = bits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, fake_quant_weight(self.weight, self.bits), self.bias)


class QBlock(nn.Module):
    """Fake-quantized conv, BatchNorm, ReLU6, fake-quantized activation, 2x2 max pool."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.conv = QConv2d(in_ch, out_ch, 3, padding=1)
        self.bn = nn.BatchNorm2d(out_ch)
        self.act_quant = ActQuant(0.0, 6.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act_quant(F.relu6(self.bn(self.conv(x))))
        return F.max_pool2d(x, 2)


class QATCNN(nn.Module):
    def __init__(self, width: int, num_classes: int = 10) -> None:
        super().__init__()
        self.input_quant = ActQuant(-4.0, 4.0)
        chans = [3, width, width * 2, width * 4]
        self.blocks = nn.Sequential(*(QBlock(chans[i], chans[i + 1]) for i in range(3)))
        self.fc = QLinear(chans[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.input_quant(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    width, side = _SIZES[size]
    torch.manual_seed(0)
    return QATCNN(width).eval(), image_inputs(side)
