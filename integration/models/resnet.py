"""ResNet-18 and ResNet-50 (He et al., 2016) built from ``BasicBlock`` / ``Bottleneck``.

Our own implementation with random weights. ``width`` scales every stage (64 is the paper's) and
the input size is configurable, so a forward stays fast on a CPU. Inference mode: ``eval()``.

ReLUs are in place, as in torchvision (``inplace_relu=False`` for out-of-place ones).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "build",
    "build_resnet18",
    "build_resnet50",
    "image_inputs",
    "randomize_bn",
]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (width, image side)
_SIZES = {"small": (16, 64), "bench": (32, 128)}


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, in_planes: int, planes: int, stride: int = 1, inplace_relu: bool = True
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=inplace_relu)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, in_planes: int, planes: int, stride: int = 1, inplace_relu: bool = True
    ) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.relu = nn.ReLU(inplace=inplace_relu)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != out_planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, out_planes, 1, stride, bias=False), nn.BatchNorm2d(out_planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        layers: list[int],
        width: int = 64,
        num_classes: int = 1000,
        inplace_relu: bool = True,
    ) -> None:
        super().__init__()
        self.in_planes = width
        self.inplace_relu = inplace_relu
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=inplace_relu)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, width, layers[0], 1)
        self.layer2 = self._make_layer(block, width * 2, layers[1], 2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], 2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int, stride: int
    ) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i in range(blocks):
            layers.append(block(self.in_planes, planes, stride if i == 0 else 1, self.inplace_relu))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def randomize_bn(model: nn.Module, seed: int) -> None:
    """Non-trivial BatchNorm statistics, so eval-mode BN is not the identity."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)


def image_inputs(side: int) -> MakeInputs:
    """``make_inputs(batch, seed)``: one random NCHW image batch."""

    def make_inputs(batch: int, seed: int) -> tuple[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, 3, side, side, generator=g),)

    return make_inputs


def _build(
    block: type[BasicBlock | Bottleneck], layers: list[int], size: str, inplace_relu: bool
) -> tuple[nn.Module, MakeInputs]:
    width, side = _SIZES[size]
    torch.manual_seed(0)
    model = ResNet(block, layers, width=width, num_classes=100, inplace_relu=inplace_relu)
    randomize_bn(model, 1)
    return model.eval(), image_inputs(side)


def build_resnet18(
    size: str = "small", *, inplace_relu: bool = True
) -> tuple[nn.Module, MakeInputs]:
    return _build(BasicBlock, [2, 2, 2, 2], size, inplace_relu)


def build_resnet50(
    size: str = "small", *, inplace_relu: bool = True
) -> tuple[nn.Module, MakeInputs]:
    return _build(Bottleneck, [3, 4, 6, 3], size, inplace_relu)


build = build_resnet18
