"""DenseNet-121 style network (Huang et al., 2017): dense blocks that concatenate every feature.

Each dense block keeps a Python list of feature maps, appends every layer's output to it and
feeds ``torch.cat`` of the whole list to the next layer, so the program mutates a list while it
runs. ``growth_rate`` (32 in the paper) and ``block_config`` are configurable.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .resnet import image_inputs, randomize_bn

__all__ = ["DenseNet", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (growth rate, block config, initial features, image side)
_SIZES = {
    "small": (8, (3, 6, 12, 8), 16, 32),
    "bench": (16, (6, 12, 24, 16), 32, 64),  # DenseNet-121's depth
}


class DenseLayer(nn.Module):
    def __init__(self, in_features: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_features)
        self.conv1 = nn.Conv2d(in_features, bn_size * growth_rate, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, 3, 1, 1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        x = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, in_features: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        for i in range(num_layers):
            self[f"denselayer{i + 1}"] = DenseLayer(
                in_features + i * growth_rate, growth_rate, bn_size
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(
            nn.BatchNorm2d(in_features),
            nn.ReLU(inplace=True),
            nn.Conv2d(in_features, out_features, 1, bias=False),
            nn.AvgPool2d(2, 2),
        )


class DenseNet(nn.Module):
    def __init__(
        self,
        growth_rate: int = 32,
        block_config: tuple[int, ...] = (6, 12, 24, 16),
        num_init_features: int = 64,
        bn_size: int = 4,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False),
            nn.BatchNorm2d(num_init_features),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages: list[nn.Module] = []
        n = num_init_features
        for i, num_layers in enumerate(block_config):
            stages.append(DenseBlock(num_layers, n, growth_rate, bn_size))
            n += num_layers * growth_rate
            if i != len(block_config) - 1:
                stages.append(Transition(n, n // 2))
                n //= 2
        self.stages = nn.Sequential(*stages)
        self.norm = nn.BatchNorm2d(n)
        self.classifier = nn.Linear(n, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.stages(self.stem(x))))
        x = F.adaptive_avg_pool2d(x, 1)
        return self.classifier(torch.flatten(x, 1))


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    growth, config, init, side = _SIZES[size]
    torch.manual_seed(0)
    model = DenseNet(growth, config, init, num_classes=100)
    randomize_bn(model, 1)
    return model.eval(), image_inputs(side)
