"""Hugging Face ``transformers`` models built from small configs with random weights.

Nothing is downloaded: every model is built from a config object (``Model(config)``), and the
inputs are random token ids, images, waveforms or mel features, never a tokenizer's or feature
extractor's output. ``transformers`` is an
optional dependency (``pip install magpy[hf]``); it is imported only when a builder runs, so this
module imports without it.

``HF_MODELS`` maps a name to a builder ``build() -> (model, make_inputs)``: ``model`` is in
``eval()`` mode and ``make_inputs(batch, seed)`` returns fresh keyword arguments for it (a dict of
tensors). ``HF_OUTPUTS`` names the output fields worth comparing for each model (a cache field
such as ``past_key_values`` too). The configs are tiny (hidden sizes of 16-64, two layers, short
sequences, 32x32 images) so that one forward takes a few milliseconds on 2 CPU cores. The models
from ``roberta`` on are each architecture's default config with only its sizes shrunk (see
"default configs" below): what users run, ``use_cache=True`` included.
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


# ------------------------------------------------------------------------------ default configs
# The models below are built from their default configs with only sizes shrunk (widths, layers,
# heads, vocabulary and the token ids that must fit in it, windows); every other default stays,
# ``use_cache=True`` included: the decoders build and return a cache in the forward.
_SEQ2SEQ = {
    "vocab_size": VOCAB,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
}
_VIT = {k: v for k, v in _ENCODER.items() if k not in ("vocab_size", "max_position_embeddings")}
_DECODER = {**_VIT, "vocab_size": VOCAB}
_AUDIO = {**_VIT, "conv_dim": (32,) * 7, "num_conv_pos_embeddings": 16}


def _build(
    model: str, config: str, make: MakeKwargs, **kwargs: Any
) -> tuple[torch.nn.Module, MakeKwargs]:
    """``transformers.<model>(transformers.<config>(**kwargs))`` with seed 0, in eval mode."""
    t = _transformers()
    torch.manual_seed(0)
    return _finish(getattr(t, model)(getattr(t, config)(**kwargs))), make


def _both(*makes: MakeKwargs) -> MakeKwargs:
    """The inputs of several makers together (the i-th on ``seed + i``)."""

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        return {k: v for i, m in enumerate(makes) for k, v in m(batch, seed + i).items()}

    return make


def _audio(samples: int = 1600) -> MakeKwargs:
    """Raw waveforms (the wav2vec2 feature encoder downsamples by 320: 5 frames)."""

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"input_values": torch.randn(batch, samples, generator=g)}

    return make


def roberta() -> tuple[torch.nn.Module, MakeKwargs]:
    """RoBERTa: position ids made from the input ids (padding token 1)."""
    return _build("RobertaModel", "RobertaConfig", _text(), **_ENCODER)


def albert() -> tuple[torch.nn.Module, MakeKwargs]:
    """ALBERT: factorized embeddings, one layer's weights shared by every layer."""
    make = _text(token_types=True)
    return _build("AlbertModel", "AlbertConfig", make, **_ENCODER, embedding_size=16)


def electra() -> tuple[torch.nn.Module, MakeKwargs]:
    make = _text(token_types=True)
    return _build("ElectraModel", "ElectraConfig", make, **_ENCODER, embedding_size=16)


def distilbert() -> tuple[torch.nn.Module, MakeKwargs]:
    sizes = {"vocab_size": VOCAB, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64}
    return _build("DistilBertModel", "DistilBertConfig", _text(), **sizes)


def opt() -> tuple[torch.nn.Module, MakeKwargs]:
    sizes = {**_DECODER, "ffn_dim": 64, "word_embed_proj_dim": 32}
    del sizes["intermediate_size"]
    return _build("OPTForCausalLM", "OPTConfig", _text(), **sizes)


def gpt_neo() -> tuple[torch.nn.Module, MakeKwargs]:
    """GPT-Neo: a global and a local (sliding window of 8 tokens) attention layer."""
    sizes = {"vocab_size": VOCAB, "hidden_size": 32, "num_layers": 2, "num_heads": 4}
    layers = [[["global", "local"], 1]]
    return _build(
        "GPTNeoForCausalLM", "GPTNeoConfig", _text(), **sizes, attention_types=layers, window_size=8
    )


def qwen2() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("Qwen2ForCausalLM", "Qwen2Config", _text(), **_DECODER, num_key_value_heads=2)


def mistral() -> tuple[torch.nn.Module, MakeKwargs]:
    """Mistral: grouped-query attention with a sliding window (of 8 tokens)."""
    sizes = {**_DECODER, "num_key_value_heads": 2, "sliding_window": 8}
    return _build("MistralForCausalLM", "MistralConfig", _text(), **sizes)


def phi() -> tuple[torch.nn.Module, MakeKwargs]:
    """Phi: partial rotary embeddings, attention and MLP in parallel."""
    return _build("PhiForCausalLM", "PhiConfig", _text(), **_DECODER)


def falcon() -> tuple[torch.nn.Module, MakeKwargs]:
    """Falcon: multi-query attention, attention and MLP in parallel."""
    sizes = {k: v for k, v in _DECODER.items() if k != "intermediate_size"}
    return _build("FalconForCausalLM", "FalconConfig", _text(), **sizes)


def bloom() -> tuple[torch.nn.Module, MakeKwargs]:
    """BLOOM: ALiBi position biases."""
    sizes = {"vocab_size": VOCAB, "hidden_size": 32, "n_layer": 2, "n_head": 4}
    return _build("BloomForCausalLM", "BloomConfig", _text(), **sizes)


def gptj() -> tuple[torch.nn.Module, MakeKwargs]:
    sizes = {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4}
    return _build("GPTJForCausalLM", "GPTJConfig", _text(), **sizes)


def gpt_neox() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("GPTNeoXForCausalLM", "GPTNeoXConfig", _text(), **_DECODER)


def mamba() -> tuple[torch.nn.Module, MakeKwargs]:
    """Mamba: selective state-space layers (the sequential scan; no CUDA kernels)."""
    sizes = {"vocab_size": VOCAB, "hidden_size": 32, "state_size": 8, "num_hidden_layers": 2}
    return _build("MambaModel", "MambaConfig", _text(mask=False), **sizes)


def bart() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("BartModel", "BartConfig", _text(decoder=8), **_SEQ2SEQ)


def marian() -> tuple[torch.nn.Module, MakeKwargs]:
    """Marian: sinusoidal positions (padding and decoder start are the last token id)."""
    ids = {"pad_token_id": VOCAB - 1, "decoder_start_token_id": VOCAB - 1}
    return _build("MarianModel", "MarianConfig", _text(decoder=8), **_SEQ2SEQ, **ids)


def mbart() -> tuple[torch.nn.Module, MakeKwargs]:
    """mBART: BART with pre-norm layers."""
    return _build("MBartModel", "MBartConfig", _text(decoder=8), **_SEQ2SEQ)


def pegasus() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("PegasusModel", "PegasusConfig", _text(decoder=8), **_SEQ2SEQ)


def whisper() -> tuple[torch.nn.Module, MakeKwargs]:
    """Whisper: 16 mel bins over 32 frames (the conv stem halves them), a text decoder."""
    ids = {"pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "decoder_start_token_id": 1}
    sizes = {"num_mel_bins": 16, "max_source_positions": 16, "max_target_positions": 64}
    decoder = _text(8, mask=False)

    def make(batch: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        features = torch.randn(batch, 16, 32, generator=g)
        return {"input_features": features, "decoder_input_ids": decoder(batch, seed)["input_ids"]}

    # begin_suppress_tokens (for generate) holds ids of the full vocabulary
    kwargs = {**_SEQ2SEQ, **ids, **sizes, "begin_suppress_tokens": None}
    return _build("WhisperModel", "WhisperConfig", make, **kwargs)


def wav2vec2() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("Wav2Vec2Model", "Wav2Vec2Config", _audio(), **_AUDIO)


def hubert() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("HubertModel", "HubertConfig", _audio(), **_AUDIO)


def clip() -> tuple[torch.nn.Module, MakeKwargs]:
    """CLIP: a text and a ViT tower, contrastive logits (end of text is the last token id)."""
    text = {**_ENCODER, "bos_token_id": VOCAB - 2, "eos_token_id": VOCAB - 1}
    towers = {"text_config": text, "vision_config": {**_VIT, "image_size": IMAGE, "patch_size": 8}}
    return _build("CLIPModel", "CLIPConfig", _both(_text(), _images()), **towers, projection_dim=16)


def convnext() -> tuple[torch.nn.Module, MakeKwargs]:
    sizes = {"hidden_sizes": [8, 16, 24, 32], "depths": [1, 1, 1, 1]}
    return _build("ConvNextModel", "ConvNextConfig", _images(), **sizes)


def beit() -> tuple[torch.nn.Module, MakeKwargs]:
    return _build("BeitModel", "BeitConfig", _images(), **_VIT, image_size=IMAGE, patch_size=8)


def deit() -> tuple[torch.nn.Module, MakeKwargs]:
    """DeiT: ViT with a distillation token."""
    return _build("DeiTModel", "DeiTConfig", _images(), **_VIT, image_size=IMAGE, patch_size=8)


def mobilevit() -> tuple[torch.nn.Module, MakeKwargs]:
    """MobileViT: MobileNet blocks and transformer blocks over unfolded 2x2 patches."""
    sizes = {"hidden_sizes": [16, 24, 32], "neck_hidden_sizes": [8, 8, 16, 16, 24, 32, 64]}
    return _build("MobileViTModel", "MobileViTConfig", _images(), **sizes, image_size=IMAGE)


def segformer() -> tuple[torch.nn.Module, MakeKwargs]:
    sizes = {
        "depths": [1] * 4,
        "hidden_sizes": [8, 16, 24, 32],
        "num_attention_heads": [1, 1, 2, 2],
    }
    return _build("SegformerModel", "SegformerConfig", _images(), **sizes)


#: SegformerForSemanticSegmentation's default config (``test_hf_models``): 64x64 images
segformer_default_inputs = _images(size=64)


def detr() -> tuple[torch.nn.Module, MakeKwargs]:
    """DETR with a transformers ResNet backbone (not timm's), untrained, 8 object queries."""
    t = _transformers()
    stages = {"hidden_sizes": [16, 32, 48, 64], "depths": [1] * 4}
    backbone = t.ResNetConfig(
        embedding_size=16, **stages, out_features=[f"stage{i}" for i in (1, 2, 3, 4)]
    )
    sizes = {k: v for k, v in _SEQ2SEQ.items() if k != "vocab_size"}
    kwargs = {**sizes, "backbone_config": backbone, "use_pretrained_backbone": False}
    return _build("DetrModel", "DetrConfig", _images(size=64), **kwargs, num_queries=8)


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
    "roberta": roberta,
    "albert": albert,
    "electra": electra,
    "distilbert": distilbert,
    "opt": opt,
    "gpt_neo": gpt_neo,
    "qwen2": qwen2,
    "mistral": mistral,
    "phi": phi,
    "falcon": falcon,
    "bloom": bloom,
    "gptj": gptj,
    "gpt_neox": gpt_neox,
    "mamba": mamba,
    "bart": bart,
    "marian": marian,
    "mbart": mbart,
    "pegasus": pegasus,
    "whisper": whisper,
    "wav2vec2": wav2vec2,
    "hubert": hubert,
    "clip": clip,
    "convnext": convnext,
    "beit": beit,
    "deit": deit,
    "mobilevit": mobilevit,
    "segformer": segformer,
    "detr": detr,
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
    "roberta": ("last_hidden_state", "pooler_output"),
    "albert": ("last_hidden_state", "pooler_output"),
    "electra": ("last_hidden_state",),
    "distilbert": ("last_hidden_state",),
    "opt": ("logits", "past_key_values"),
    "gpt_neo": ("logits", "past_key_values"),
    "qwen2": ("logits", "past_key_values"),
    "mistral": ("logits", "past_key_values"),
    "phi": ("logits", "past_key_values"),
    "falcon": ("logits", "past_key_values"),
    "bloom": ("logits", "past_key_values"),
    "gptj": ("logits", "past_key_values"),
    "gpt_neox": ("logits", "past_key_values"),
    "mamba": ("last_hidden_state", "cache_params"),
    "bart": ("last_hidden_state", "encoder_last_hidden_state", "past_key_values"),
    "marian": ("last_hidden_state", "encoder_last_hidden_state", "past_key_values"),
    "mbart": ("last_hidden_state", "encoder_last_hidden_state", "past_key_values"),
    "pegasus": ("last_hidden_state", "encoder_last_hidden_state", "past_key_values"),
    "whisper": ("last_hidden_state", "encoder_last_hidden_state", "past_key_values"),
    "wav2vec2": ("last_hidden_state", "extract_features"),
    "hubert": ("last_hidden_state",),
    "clip": ("logits_per_image", "text_embeds", "image_embeds"),
    "convnext": ("last_hidden_state", "pooler_output"),
    "beit": ("last_hidden_state", "pooler_output"),
    "deit": ("last_hidden_state", "pooler_output"),
    "mobilevit": ("last_hidden_state", "pooler_output"),
    "segformer": ("last_hidden_state",),
    "detr": ("last_hidden_state", "encoder_last_hidden_state"),
}
