"""Hugging Face ``transformers`` models built from small configs with random weights.

Nothing is downloaded: every model is built from a config object (``Model(config)``), and the
inputs are random token ids or images, never a tokenizer's output. ``transformers`` is an
optional dependency (``pip install magpy[hf]``); it is imported only when a builder runs, so this
module imports without it.

``HF_MODELS`` maps a name to a builder ``build() -> (model, make_inputs)``: ``model`` is in
``eval()`` mode and ``make_inputs(batch, seed)`` returns fresh keyword arguments for it (a dict of
tensors). ``HF_OUTPUTS`` names the output fields worth comparing for each model. The configs are
tiny (hidden sizes of 16-64, two layers, short sequences, 32x32 images) so that one forward takes
a few milliseconds on 2 CPU cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["HF_MODELS", "HF_OUTPUTS", "HFBuilder", "MakeKwargs"]

MakeKwargs = Callable[[int, int], dict[str, torch.Tensor]]
HFBuilder = Callable[[], tuple[torch.nn.Module, MakeKwargs]]

VOCAB = 99
SEQ = 16
IMAGE = 32


def _transformers() -> Any:
    """Import ``transformers`` offline and quietly (no hub access, no info-level logging)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _finish(model: torch.nn.Module) -> torch.nn.Module:
    return model.eval()


def _text(
    seq: int = SEQ, *, token_types: bool = False, decoder: int = 0, mask: bool = True
) -> MakeKwargs:
    """Random ids with a padded attention mask (every row keeps at least half of ``seq``)."""

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        out = {"input_ids": torch.randint(1, VOCAB, (batch, seq), generator=g)}
        if mask:
            lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
            out["attention_mask"] = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        if token_types:
            out["token_type_ids"] = (torch.arange(seq)[None, :] >= seq // 2).long().repeat(batch, 1)
        if decoder:
            out["decoder_input_ids"] = torch.randint(1, VOCAB, (batch, decoder), generator=g)
        return out

    return make


def _images(channels: int = 3, size: int = IMAGE) -> MakeKwargs:
    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=g)}

    return make


_ENCODER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}


# ------------------------------------------------------------------------------ text encoders
def bert() -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    return _finish(t.BertModel(t.BertConfig(**_ENCODER))), _text(token_types=True)


def deberta() -> tuple[torch.nn.Module, MakeKwargs]:
    """DeBERTa v1 with disentangled relative attention (content-to-position both ways)."""
    t = _transformers()
    torch.manual_seed(0)
    config = t.DebertaConfig(
        **_ENCODER, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=8
    )
    return _finish(t.DebertaModel(config)), _text(token_types=True)


def deberta_v2() -> tuple[torch.nn.Module, MakeKwargs]:
    """DeBERTa v2 with log-bucketed relative positions and the convolution layer."""
    t = _transformers()
    torch.manual_seed(0)
    config = t.DebertaV2Config(
        **_ENCODER,
        relative_attention=True,
        pos_att_type=["c2p", "p2c"],
        position_buckets=8,
        max_relative_positions=32,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        conv_kernel_size=3,
        position_biased_input=False,
    )
    return _finish(t.DebertaV2Model(config)), _text(token_types=True)


def longformer() -> tuple[torch.nn.Module, MakeKwargs]:
    """Longformer with a sliding window of 4 tokens; token 0 attends globally."""
    t = _transformers()
    torch.manual_seed(0)
    config = t.LongformerConfig(
        **{**_ENCODER, "max_position_embeddings": 64}, attention_window=4, pad_token_id=0
    )
    base = _text()

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        out = base(batch, seed)
        glob = torch.zeros_like(out["input_ids"])
        glob[:, 0] = 1
        out["global_attention_mask"] = glob
        return out

    return _finish(t.LongformerModel(config, add_pooling_layer=False)), make


def reformer() -> tuple[torch.nn.Module, MakeKwargs]:
    """Reformer: one local-attention and one LSH-attention layer, axial position embeddings."""
    t = _transformers()
    torch.manual_seed(0)
    config = t.ReformerConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        attention_head_size=8,
        num_attention_heads=2,
        attn_layers=["local", "lsh"],
        feed_forward_size=64,
        axial_pos_embds=True,
        axial_pos_shape=[4, 4],
        axial_pos_embds_dim=[16, 16],
        max_position_embeddings=SEQ,
        local_attn_chunk_length=4,
        lsh_attn_chunk_length=4,
        num_buckets=2,
        num_hashes=1,
        is_decoder=False,
        pad_token_id=0,
        eos_token_id=2,
        seed=0,
    )
    return _finish(t.ReformerModel(config)), _text(mask=False)


# ------------------------------------------------------------------------------ decoders, seq2seq
def _gpt2(**config: Any) -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    config = t.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, **config
    )
    return _finish(t.GPT2LMHeadModel(config)), _text()


def gpt2() -> tuple[torch.nn.Module, MakeKwargs]:
    return _gpt2(use_cache=False)


def gpt2_cache() -> tuple[torch.nn.Module, MakeKwargs]:
    """GPT-2 as users run it: the default config (``use_cache=True``, a ``DynamicCache``)."""
    return _gpt2()


def _llama(**config: Any) -> tuple[torch.nn.Module, MakeKwargs]:
    """A Llama-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU."""
    t = _transformers()
    torch.manual_seed(0)
    llama = t.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **config,
    )
    return _finish(t.LlamaForCausalLM(llama)), _text()


def llama() -> tuple[torch.nn.Module, MakeKwargs]:
    return _llama(use_cache=False)


def llama_cache() -> tuple[torch.nn.Module, MakeKwargs]:
    """Llama with its default ``use_cache=True``."""
    return _llama()


def t5() -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    config = t.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        use_cache=False,
    )
    return _finish(t.T5Model(config)), _text(decoder=8)


def led() -> tuple[torch.nn.Module, MakeKwargs]:
    """LED (Longformer encoder, BART decoder) with a sliding window of 4 tokens."""
    t = _transformers()
    torch.manual_seed(0)
    config = t.LEDConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_encoder_position_embeddings=64,
        max_decoder_position_embeddings=64,
        attention_window=4,
        use_cache=False,
    )
    return _finish(t.LEDModel(config)), _text(decoder=8)


# ------------------------------------------------------------------------------ vision
def vit() -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    config = t.ViTConfig(
        image_size=IMAGE,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
    )
    return _finish(t.ViTModel(config)), _images()


def swin() -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    config = t.SwinConfig(
        image_size=IMAGE,
        patch_size=4,
        embed_dim=16,
        depths=[2, 1],
        num_heads=[2, 4],
        window_size=4,
    )
    return _finish(t.SwinModel(config)), _images()


def resnet() -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    config = t.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"
    )
    return _finish(t.ResNetModel(config)), _images()


def mobilenet_v2() -> tuple[torch.nn.Module, MakeKwargs]:
    t = _transformers()
    torch.manual_seed(0)
    config = t.MobileNetV2Config(image_size=IMAGE, depth_multiplier=0.35)
    return _finish(t.MobileNetV2Model(config)), _images()


def align() -> tuple[torch.nn.Module, MakeKwargs]:
    """ALIGN: a BERT text tower and an EfficientNet image tower, contrastive logits."""
    t = _transformers()
    torch.manual_seed(0)
    text = t.AlignTextConfig(**_ENCODER)
    vision = t.AlignVisionConfig(
        image_size=IMAGE,
        width_coefficient=0.25,
        depth_coefficient=0.25,
        hidden_dim=64,
        num_hidden_layers=4,
    )
    # ALIGN compares the projected text embedding with the pooled image features directly, so
    # the projection must have the width of the image tower's last block
    width = t.AlignVisionModel(vision).encoder.blocks[-1].projection.project_conv.out_channels
    config = t.AlignConfig(
        text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=width
    )
    text_inputs, image_inputs = _text(token_types=True), _images()

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        return {**text_inputs(batch, seed), **image_inputs(batch, seed + 1)}

    model = t.AlignModel(config)
    # the small-std init of the EfficientNet tower makes its pooled features vanish (their norm
    # underflows and the logits become NaN); torch's default conv init keeps them well scaled
    for module in model.vision_model.modules():
        if isinstance(module, torch.nn.Conv2d):
            module.reset_parameters()
    return _finish(model), make


HF_MODELS: dict[str, HFBuilder] = {
    "bert": bert,
    "deberta": deberta,
    "deberta_v2": deberta_v2,
    "gpt2": gpt2,
    "gpt2_cache": gpt2_cache,
    "llama_cache": llama_cache,
    "t5": t5,
    "llama": llama,
    "vit": vit,
    "swin": swin,
    "resnet": resnet,
    "mobilenet_v2": mobilenet_v2,
    "align": align,
    "longformer": longformer,
    "led": led,
    "reformer": reformer,
}

HF_OUTPUTS: dict[str, tuple[str, ...]] = {
    "bert": ("last_hidden_state", "pooler_output"),
    "deberta": ("last_hidden_state",),
    "deberta_v2": ("last_hidden_state",),
    "gpt2": ("logits",),
    "gpt2_cache": ("logits", "past_key_values"),
    "llama_cache": ("logits", "past_key_values"),
    "t5": ("last_hidden_state", "encoder_last_hidden_state"),
    "llama": ("logits",),
    "vit": ("last_hidden_state", "pooler_output"),
    "swin": ("last_hidden_state", "pooler_output"),
    "resnet": ("last_hidden_state", "pooler_output"),
    "mobilenet_v2": ("last_hidden_state", "pooler_output"),
    "align": ("logits_per_image", "text_embeds", "image_embeds"),
    "longformer": ("last_hidden_state",),
    "led": ("last_hidden_state", "encoder_last_hidden_state"),
    "reformer": ("last_hidden_state",),
}
