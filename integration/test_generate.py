"""``model.generate()`` with the forward compiled, as Hugging Face users write it (issue 19):
``model.forward = magpy.compile(model.forward)``; three decoder families and two
encoder-decoders (T5, BART); greedy and sampling; the default
``DynamicCache`` and ``cache_implementation="static"``. Token ids equal eager's, and the number
of records is bounded whatever ``max_new_tokens`` is: prefill, the first decode step, and the
decode steps after it (a growing cache is a dynamic length; comparisons of lengths guard their
outcome, not the length).

Tiny random-weight configs, offline. About 30 s on 2 cores.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import magpy
from magpy._cli import load_models

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
transformers: Any = pytest.importorskip("transformers")
load_models(Path(__file__).with_name("models"))
HF: Any = importlib.import_module("_magpy_bench_models.hf")

VOCAB = 100
_TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def gpt2() -> Any:
    return HF.gpt2_cache()[0]  # (the suite's GPT-2 with its default config)


def llama() -> Any:
    return HF.llama_cache()[0]


def opt() -> Any:
    config = transformers.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        ffn_dim=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        max_position_embeddings=128,
        word_embed_proj_dim=32,
        **_TOKENS,
    )
    return transformers.OPTForCausalLM(config)


def t5() -> Any:
    """An encoder-decoder: the encoder runs once, its output (a ``ModelOutput`` from outside,
    iterated key by key) goes to every decoder step with an ``EncoderDecoderCache``."""
    config = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_ff=64,
        d_kv=8,
        num_heads=4,
        num_layers=2,
        decoder_start_token_id=0,
        **_TOKENS,
    )
    return transformers.T5ForConditionalGeneration(config)


def bart() -> Any:
    """An encoder-decoder whose cache is built from ``config.get_text_config(decoder=True)``
    (a deep copy of the config, renamed through its own ``__setattr__``) in every forward."""
    config = transformers.BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        **_TOKENS,
    )
    return transformers.BartForConditionalGeneration(config)


DECODERS: dict[str, Callable[[], Any]] = {
    "gpt2": gpt2,
    "llama": llama,
    "opt": opt,
    "t5": t5,
    "bart": bart,
}


def _generate(model: Any, ids: torch.Tensor, n: int, cache: str, sample: bool) -> torch.Tensor:
    kwargs: dict[str, Any] = {"max_new_tokens": n, "eos_token_id": None, "pad_token_id": 0}
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    if sample:
        kwargs.update(do_sample=True, top_k=20, temperature=0.9)
        torch.manual_seed(1234)
    else:
        kwargs["do_sample"] = False
    out: torch.Tensor = model.generate(ids, **kwargs)
    return out


def _compiled_like_eager(build: Callable[[], Any], cache: str, sample: bool) -> Any:
    """Generate 6 then 12 tokens from two prompts, eager and compiled; the compiled forward."""
    torch.manual_seed(0)
    model = build().eval()
    prompts = [
        torch.randint(3, VOCAB, (1, 6), generator=torch.Generator().manual_seed(s)) for s in (1, 2)
    ]
    with torch.no_grad():
        want = [
            _generate(model, p, n, cache, sample) for p, n in zip(prompts, (6, 12), strict=True)
        ]
        model.forward = magpy.compile(model.forward, backend="eager")
        got = [_generate(model, p, n, cache, sample) for p, n in zip(prompts, (6, 12), strict=True)]
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w), (g, w)
    return model.forward


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_greedy_generate_is_eager_with_a_bounded_number_of_records(name: str, cache: str) -> None:
    compiled = _compiled_like_eager(DECODERS[name], cache, sample=False)
    st = magpy.stats(compiled)
    # 18 forward calls; prefill, first decode step, later decode steps (static: one shape)
    assert st.records <= 3 and st.breaks == 0 and st.fallbacks == 0, st
    assert st.hits >= 18 - st.records, st


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sampling_generate_draws_the_same_tokens(name: str) -> None:
    compiled = _compiled_like_eager(DECODERS[name], "dynamic", sample=True)
    st = magpy.stats(compiled)
    assert st.records <= 3 and st.breaks == 0, st
