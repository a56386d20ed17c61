"""Models from libraries beyond ``transformers``: MONAI and ``diffusers``, tiny and offline.

Nothing is downloaded: every model is built from constructor arguments with random weights, and
the inputs are random tensors. ``monai`` and ``diffusers`` are optional dependencies (``pip install
magpy[extra-models]``); each is imported only when its builder runs, so this module imports
without them.

``EXTRA_MODELS`` maps a name to a builder ``build() -> (model, make_inputs)`` with the same shape
as ``hf.HF_MODELS``: ``model`` is in ``eval()`` mode and ``make_inputs(batch, seed)`` returns fresh
keyword arguments for it (a dict of tensors). ``EXTRA_OUTPUTS`` names the output fields worth
comparing (an empty tuple: the model returns a plain tensor). ``EXTRA_PACKAGES`` names the package
each model needs, so tests and reports can skip what is not installed. The configs are tiny (4-32
channels, 16x16 or 32x32 images) so that one forward takes a few milliseconds on 2 CPU cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["EXTRA_MODELS", "EXTRA_OUTPUTS", "EXTRA_PACKAGES", "ExtraBuilder", "MakeKwargs"]

MakeKwargs = Callable[[int, int], dict[str, torch.Tensor]]
ExtraBuilder = Callable[[], tuple[torch.nn.Module, MakeKwargs]]

LATENT = 16  # side of the diffusers UNets' latent images


def _diffusers() -> Any:
    """Import ``diffusers`` offline and quietly (no hub access, no info-level logging)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import diffusers

    diffusers.utils.logging.set_verbosity_error()
    return diffusers


def _diffusion_inputs(channels: int, context: int = 0) -> MakeKwargs:
    """A noisy latent, one integer timestep per sample and (``context`` > 0) a text context."""

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        out = {
            "sample": torch.randn(batch, channels, LATENT, LATENT, generator=g),
            "timestep": torch.randint(0, 1000, (batch,), generator=g),
        }
        if context:
            out["encoder_hidden_states"] = torch.randn(batch, 7, context, generator=g)
        return out

    return make


# ------------------------------------------------------------------------------ MONAI
def monai_basic_unet() -> tuple[torch.nn.Module, MakeKwargs]:
    """MONAI's 2-D BasicUNet (conv + instance norm + LeakyReLU, four down and four up steps).

    Its ``UpCat`` checks ``torch.jit.isinstance(x_e, torch.Tensor)`` in every up step;
    TorchDynamo 2.13 refuses to trace ``torch.jit`` and breaks the graph on each call.
    """
    from monai.networks.nets.basic_unet import BasicUNet

    torch.manual_seed(0)
    model = BasicUNet(spatial_dims=2, in_channels=1, out_channels=2, features=(4, 4, 8, 8, 16, 4))

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(batch, 1, 32, 32, generator=g)}

    return model.eval(), make


# ------------------------------------------------------------------------------ diffusers
def unet2d() -> tuple[torch.nn.Module, MakeKwargs]:
    """An unconditional DDPM-style UNet2DModel: one plain and one self-attention level."""
    d = _diffusers()
    torch.manual_seed(0)
    model = d.UNet2DModel(
        sample_size=LATENT,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(16, 32),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
        attention_head_dim=8,
    )
    return model.eval(), _diffusion_inputs(3)


def unet2d_condition() -> tuple[torch.nn.Module, MakeKwargs]:
    """A Stable-Diffusion-style UNet2DConditionModel: cross-attention to a text context."""
    d = _diffusers()
    torch.manual_seed(0)
    model = d.UNet2DConditionModel(
        sample_size=LATENT,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        norm_num_groups=8,
        attention_head_dim=4,
    )
    return model.eval(), _diffusion_inputs(4, context=16)


def autoencoder_kl() -> tuple[torch.nn.Module, MakeKwargs]:
    """A Stable-Diffusion-style VAE (AutoencoderKL): encode to the posterior's mode, decode."""
    d = _diffusers()
    torch.manual_seed(0)
    model = d.AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 16),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=2 * LATENT,
    )

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"sample": torch.randn(batch, 3, 2 * LATENT, 2 * LATENT, generator=g)}

    return model.eval(), make


EXTRA_MODELS: dict[str, ExtraBuilder] = {
    "monai_basic_unet": monai_basic_unet,
    "unet2d": unet2d,
    "unet2d_condition": unet2d_condition,
    "autoencoder_kl": autoencoder_kl,
}

EXTRA_OUTPUTS: dict[str, tuple[str, ...]] = {
    "monai_basic_unet": (),
    "unet2d": ("sample",),
    "unet2d_condition": ("sample",),
    "autoencoder_kl": ("sample",),
}

EXTRA_PACKAGES: dict[str, str] = {
    "monai_basic_unet": "monai",
    "unet2d": "diffusers",
    "unet2d_condition": "diffusers",
    "autoencoder_kl": "diffusers",
}
