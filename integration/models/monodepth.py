"""A Monodepth2-style depth network: a ResNet encoder and an upsampling decoder with skips.

The decoder walks the encoder's features from coarse to fine, upsamples by 2 (nearest), concatenates
the skip connection of the same resolution and predicts a disparity map (sigmoid) at four scales.
Like Monodepth2 it returns a dict keyed by ``("disp", scale)`` tuples.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .resnet import BasicBlock, randomize_bn

__all__ = ["DepthDecoder", "DepthNet", "Encoder", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (encoder width, image height, image width)
_SIZES = {"small": (8, 64, 96), "bench": (32, 128, 192)}


class ConvBlock(nn.Module):
    """3x3 conv (reflection padding) + ELU, as in Monodepth2."""

    def __init__(self, in_ch: int, out_ch: int, act: bool = True) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.conv = nn.Conv2d(in_ch, out_ch, 3)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(self.pad(x))
        return F.elu(x) if self.act else x


class Encoder(nn.Module):
    """ResNet-18 encoder; returns the five feature maps (1/2 ... 1/32 resolution)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.num_ch = [width, width, width * 2, width * 4, width * 8]
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        chans = [width, width, width * 2, width * 4, width * 8]
        self.layers = nn.ModuleList(
            nn.Sequential(
                BasicBlock(chans[i], chans[i + 1], 1 if i == 0 else 2),
                BasicBlock(chans[i + 1], chans[i + 1]),
            )
            for i in range(4)
        )

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = (x - 0.45) / 0.225
        features = [F.relu(self.bn1(self.conv1(x)))]
        x = self.maxpool(features[-1])
        for layer in self.layers:
            x = layer(x)
            features.append(x)
        return features


class DepthDecoder(nn.Module):
    def __init__(self, enc_ch: list[int], scales: tuple[int, ...] = (0, 1, 2, 3)) -> None:
        super().__init__()
        self.scales = scales
        dec_ch = [max(c // 2, 4) for c in enc_ch]
        self.upconv0 = nn.ModuleList()
        self.upconv1 = nn.ModuleList()
        for i in range(4, -1, -1):
            in_ch = enc_ch[-1] if i == 4 else dec_ch[i + 1]
            self.upconv0.append(ConvBlock(in_ch, dec_ch[i]))
            skip = enc_ch[i - 1] if i > 0 else 0
            self.upconv1.append(ConvBlock(dec_ch[i] + skip, dec_ch[i]))
        self.dispconv = nn.ModuleDict({str(s): ConvBlock(dec_ch[s], 1, act=False) for s in scales})

    def forward(self, features: list[torch.Tensor]) -> dict[tuple[str, int], torch.Tensor]:
        outputs: dict[tuple[str, int], torch.Tensor] = {}
        x = features[-1]
        for j, i in enumerate(range(4, -1, -1)):
            x = self.upconv0[j](x)
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            if i > 0:
                x = torch.cat([x, features[i - 1]], 1)
            x = self.upconv1[j](x)
            if i in self.scales:
                outputs[("disp", i)] = torch.sigmoid(self.dispconv[str(i)](x))
        return outputs


class DepthNet(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.encoder = Encoder(width)
        self.decoder = DepthDecoder(self.encoder.num_ch)

    def forward(self, image: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        return self.decoder(self.encoder(image))


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    width, h, w = _SIZES[size]
    torch.manual_seed(0)
    model = DepthNet(width)
    randomize_bn(model, 1)

    def make_inputs(batch: int, seed: int) -> tuple[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return (torch.rand(batch, 3, h, w, generator=g),)

    return model.eval(), make_inputs
