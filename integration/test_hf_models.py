"""Hugging Face ``transformers`` models (``integration/models/hf.py``) through MagPy (eager).

Built from tiny configs with random weights, fully offline (``HF_HUB_OFFLINE=1``; no weights or
tokenizers are fetched). Skipped when ``transformers`` is not installed (``pip install
magpy[hf]``). For every model: ``magpy.explain`` reports the expected graphs and breaks, and over
3 calls on fresh inputs the compiled model gives the same ``ModelOutput`` (type and the compared
fields) as eager, with the expected records, hits, breaks and fallbacks (so a cache that never
hits fails). The models MagPy captures as one graph also go through
``helpers.assert_compiles_like_eager`` (no user code runs on a hit, module state matches).

44 models: 16 tuned configs and 28 architectures built from their default configs with only
the sizes shrunk (decoders keep ``use_cache=True`` and return the cache they build; it is
compared too). All are one graph.

What keeps the text models whole: MagPy answers ``torch.compiler.is_compiling()`` with True while it
records (as TorchDynamo does), so transformers' mask helpers take their compile path and BERT,
GPT-2, T5 and ALIGN are one graph; the encoder-decoders' ``config.get_text_config`` (a deep
copy of the config, renamed through its own ``__setattr__``) is followed; Mamba's scan, written
for TorchDynamo, is torch's ``associative_scan`` as one graph node; Reformer's reversible layers,
an autograd Function under ``no_grad``, are its forward; Longformer's global tokens
(``nonzero()`` and sizes counted from the mask) stay in the graph, what Python reads of them
assumed and checked (see EXPECT).

The models in SLOW are marked ``slow`` (``nox -s integration_slow``); the default run keeps at
least one model of every kind. On 2 cores shared with another CI run: about 90 s without
them, 150 s with them (the first 16 models took about 40 s on idle cores, 80 s there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy
from magpy._cli import load_models

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
pytest.importorskip("transformers")

load_models(Path(__file__).with_name("models"))
HF: Any = importlib.import_module("_magpy_bench_models.hf")
BATCH = 2
CALLS = 3


@dataclasses.dataclass(frozen=True)
class Expect(H.ModelCounts):
    """The counts, and ``warns``: a regex of a warning MagPy gives (None: none)."""

    warns: str | None = None


STATIC = Expect()
EXPECT: dict[str, Expect] = {
    "vit": STATIC,
    "swin": STATIC,
    "resnet": STATIC,
    "mobilenet_v2": STATIC,
    "deberta": STATIC,
    # transformers' mask helpers take their compile path (torch.compiler.is_compiling() is
    # True while MagPy records), so these are one graph as under TorchDynamo
    "bert": STATIC,
    "gpt2": STATIC,
    # the default config: a DynamicCache built in the forward (its layers made by a zip over
    # the config's per-layer Sequence view) and returned filled
    "gpt2_cache": STATIC,
    "llama_cache": STATIC,
    "t5": STATIC,
    "align": STATIC,
    # ACT2FN (a dict subclass whose __getitem__ builds the layer through
    # super().__getitem__): the stored class is read as stored and guarded by identity
    "deberta_v2": STATIC,
    "llama": STATIC,  # (os.environ.get of a missing variable: a KeyError handled in os.py)
    # its reversible layers: a torch.autograd.Function applied to the ModuleList of layers,
    # under no_grad its forward followed (libs/torch/functions.py); hasattr of a namedtuple
    # made in the run; x.new(size) filled by scatter_ of an argsort (numpy.lcm of config
    # values is a constant)
    "reformer": STATIC,
    # sliding-window attention with global tokens: `nonzero()` of the global-attention mask,
    # buffers sized by its largest count (a 0-d tensor: their shapes depend on values, and
    # the shapes Python reads are assumed), `assert list(t.size()) == [b, count, s]` (each
    # `int == tensor` assumed, pyobj/compare.py) and the `.item()` of "is there global
    # attention" assumed: one graph, checked after it runs (test_global_tokens.py)
    "longformer": STATIC,
    # the `.item()` of "is there global attention" is assumed (checked after the graph)
    "led": STATIC,
    # ---- default configs (only sizes shrunk; the decoders with use_cache=True)
    "roberta": STATIC,
    "albert": STATIC,
    "electra": STATIC,
    "distilbert": STATIC,
    "opt": STATIC,
    "gpt_neo": STATIC,
    "qwen2": STATIC,
    "phi": STATIC,
    "falcon": STATIC,
    "bloom": STATIC,
    "gptj": STATIC,
    "gpt_neox": STATIC,
    "convnext": STATIC,
    "beit": STATIC,
    "deit": STATIC,
    "mobilevit": STATIC,
    "segformer": STATIC,
    "detr": STATIC,
    # (the sliding-window mask's hasattr(cache, "is_sliding"), a property of the cache made
    # in the forward, is followed)
    "mistral": STATIC,
    # torch.compiler.is_compiling() is True while MagPy records, so its scan takes the
    # path written for TorchDynamo: torch's associative_scan, one graph node that calls it
    # with the same combine_fn (libs/torch/hops.py; eager runs the sequential loop, equal
    # within rounding). (ACT2FN and the lru_cache'd version checks are no breaks)
    "mamba": STATIC,
    # the EncoderDecoderCache made in the forward: config.get_text_config(decoder=True)
    # deep-copies the config (the copy's shadow is walked beside the source, every read
    # guarded), renames its decoder_* attributes through the config's own __setattr__ and
    # __getattribute__ (followed on the copy), and its strict-dataclass validators are read
    # through the copy's class
    "bart": STATIC,
    "marian": STATIC,
    "mbart": STATIC,
    "pegasus": STATIC,
    # as BART, plus `if cache and is_updated:` (the cache's Python __len__, followed)
    "whisper": STATIC,
    # weight_norm's parametrization of the positional conv: `self[0](*originals)`, a module
    # called over a generator (the generator's frame, then the module, followed)
    "wav2vec2": STATIC,
    "hubert": STATIC,
    # each tower sets pooler_output on the ModelOutput it built (the mock sets it again)
    "clip": STATIC,
}


# left to `nox -s integration_slow`; the default run keeps RoBERTa and DistilBERT; Qwen2,
# Mistral, Phi, Falcon, GPT-NeoX and Mamba; BART and Whisper; wav2vec2; CLIP and BEiT
SLOW = {
    "albert",
    "electra",
    "opt",
    "gpt_neo",
    "gptj",
    "bloom",
    "marian",
    "mbart",
    "pegasus",
    "hubert",
    "convnext",
    "deit",
    "mobilevit",
    "segformer",
    "detr",
}


def _names(names: Iterable[str]) -> list[Any]:
    """``names`` sorted, those in SLOW marked ``slow``."""
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(names)]


def test_every_model_has_an_expectation() -> None:
    """EXPECT covers exactly the registry; SLOW names only models in it."""
    assert sorted(EXPECT) == sorted(HF.HF_MODELS)
    assert EXPECT.keys() >= SLOW


def _tensors(x: Any) -> Any:
    """A cache as the tensors of its layers (an encoder-decoder cache: of both its caches),
    anything else as it is."""
    if hasattr(x, "cross_attention_cache"):
        return [_tensors(x.self_attention_cache), _tensors(x.cross_attention_cache)]
    if hasattr(x, "layers"):
        return [t for layer in x.layers for t in _layer_tensors(layer)]
    return x


def _layer_tensors(layer: Any) -> list[Any]:
    """Keys and values; a state-space layer's (Mamba) convolution and recurrent states."""
    if hasattr(layer, "recurrent_states"):
        return [*layer.conv_states.values(), *layer.recurrent_states.values()]
    return [layer.keys, layer.values]


def _compare(got: Any, want: Any, name: str, where: str) -> None:
    assert type(got) is type(want), f"{name}, {where}: {type(got).__name__}"
    for field in HF.HF_OUTPUTS[name]:
        a, b = getattr(got, field), getattr(want, field)
        assert type(a) is type(b), f"{name}, {where}: {field} is a {type(a).__name__}"
        torch.testing.assert_close(_tensors(a), _tensors(b), rtol=1e-4, atol=1e-5, msg=field)


def _warns(expect: Expect) -> Any:
    if expect.warns is None:
        return contextlib.nullcontext()
    # RuntimeWarning: MagPyWarning is one
    return pytest.warns(RuntimeWarning, match=expect.warns)


@pytest.mark.parametrize("name", _names(HF.HF_MODELS))
def test_hf_model_compiles_like_eager(name: str) -> None:
    """explain's counts, then 3 fresh calls equal eager with the expected stats."""
    expect = EXPECT.get(name, STATIC)
    model, make_inputs = HF.HF_MODELS[name]()
    with _warns(expect):
        H.assert_model_counts(
            name,
            model,
            make_inputs,
            expect,
            lambda got, want, where: _compare(got, want, name, where),
            batch=BATCH,
            calls=CALLS,
        )


@pytest.mark.parametrize("name", _names(n for n, e in EXPECT.items() if e == STATIC))
def test_static_hf_model_hits_run_no_user_code(name: str) -> None:
    """The one-graph models pass the full check: the whole output, inputs and module state, and
    a hit runs none of the model's code. (The mock builds the ``ModelOutput`` from its final
    state, without calling its class: ``libs/transformers/outputs.py``.)"""
    model, make_inputs = HF.HF_MODELS[name]()
    with torch.no_grad():
        H.assert_compiles_like_eager(
            model,
            lambda i: ([], make_inputs(BATCH, 1 + i)),
            calls=CALLS,
            backend="eager",
            check_hits_run_no_user_code=name not in _GRAPH_RUNS_MODEL_CODE,
        )


# Models whose graph itself calls back into the model's code on every run: Mamba's selective
# scan is an ``associative_scan`` whose combine function, the model's own, the eager backend's
# graph calls (a compiling backend traces it into the kernel).
_GRAPH_RUNS_MODEL_CODE = {"mamba"}


def test_segformer_default_config_after_its_hooks_are_installed() -> None:
    """SegformerForSemanticSegmentation of its default config: its first call installs
    transformers' output-capturing hooks (``capture_outputs``, one-time state); from then on
    each call is one graph: ``hasattr`` of the ``BaseModelOutput`` the model built, then its
    collected hidden states stored as an item, which the mock stores again on the output it
    rebuilds (issue 36)."""
    t = importlib.import_module("transformers")
    torch.manual_seed(0)
    model = t.SegformerForSemanticSegmentation(t.SegformerConfig()).eval()
    make = HF.segformer_default_inputs
    with torch.no_grad():
        model(**make(1, 0))  # (the hooks, installed by the model's own first call)
        assert magpy.explain(model)(**make(1, 1)).graph_break_count == 0
        H.assert_compiles_like_eager(
            model,
            lambda i: ([], make(1, 2 + i)),
            calls=CALLS,
            backend="eager",
            check_hits_run_no_user_code=False,
        )


def test_hf_builders_are_offline_and_deterministic() -> None:
    """Same seed, same inputs; every model is in eval mode and returns a ModelOutput."""
    for name, build in HF.HF_MODELS.items():
        model, make_inputs = build()
        assert isinstance(model, torch.nn.Module) and not model.training, name
        a, b = make_inputs(BATCH, 0), make_inputs(BATCH, 0)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_the_report_puts_dynamo_beside_magpy() -> None:
    """``python -m integration.hf_report distilbert``: one row with MagPy's counts (one
    graph, equal to eager, no eager site) and TorchDynamo's, measured in the same run."""
    proc = H.run_module("integration.hf_report", "distilbert")
    header, _, row = proc.stdout.strip().splitlines()
    assert "Dynamo graphs" in header and "eager sites" in header
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["distilbert", "1", "0", "yes"], row  # MagPy: graphs, breaks, = eager
    assert cells[6] == "0" and cells[7:] == ["1", "0", "yes"], row  # eager sites; Dynamo
