"""What a cache hit costs: MagPy's per-call work next to TorchDynamo's, model by model.

    python -m integration.bench_overhead [--suite big|hf|extra|all] [--models a,b] [--rounds 7]
        [--calls 50] [--out F]

Both compilers get the same **replay backend**: the compiled graph returns the outputs it
computed on its first call, so what is timed is only the compiler's own work per call (guard,
mock, wrappers; TorchDynamo's frame hook and C++ guards). Calls of the two are interleaved
round by round on one thread, after two untimed rounds; a round's figure is the median of its
calls' times (one call preempted on a shared machine costs milliseconds and would move a mean),
the table has the median of the rounds' figures, with their spread (max/min - 1) as the noise
figure. Also, per model: the ratio
MagPy/TorchDynamo (target <= 0.5), microseconds per 100 parameters and buffers, the Python
lines a hit executes (counted with a trace function in a separate pass: MagPy's guard and
mock are generated Python), and eager's own time per call, to show what share of a forward
the overhead is.

Suites (``--suite``): ``big`` (the default) is the bundled models (``integration.models``) and
Hugging Face models built from their default configs' *structure* (number of layers, blocks and
heads as the published config) with narrow widths, so that the module and parameter counts,
which decide a guard's cost, are the real ones while building and running them stays cheap;
its decoders run with ``use_cache=False`` (the cache is issue 19's subject). ``hf`` and
``extra`` are the model suites' tiny configs (``models.hf.HF_MODELS``, the 44+ architectures of
``test_hf_models.py``; ``models.extra.EXTRA_MODELS``: MONAI and diffusers), batch 1, their
decoders with ``use_cache=True`` as the suites run them; ``all`` is the three. The table ends
with the median and the largest ratio and the models above 0.5. ``nox -s bench_overhead`` runs
this.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import magpy

from .models import MODELS as BUNDLED
from .models import extra, hf

Build = Callable[[], tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]]


def _bundled(name: str, batch: int = 1) -> Build:
    def build() -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
        model, make = BUNDLED[name]("small")
        return model.eval(), tuple(make(batch, 0)), {}

    return build


def _t() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _ids(seq: int = 16, decoder: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = {
        "input_ids": torch.randint(1, 90, (1, seq), generator=g),
        "attention_mask": torch.ones(1, seq, dtype=torch.long),
    }
    if decoder:
        out["decoder_input_ids"] = torch.randint(1, 90, (1, decoder), generator=g)
    return out


def _pixels(size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"pixel_values": torch.randn(1, 3, size, size, generator=g)}


def _hf(model_cls: str, config_cls: str, inputs: dict[str, Any], **config: Any) -> Build:
    def build() -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
        t = _t()
        torch.manual_seed(0)
        cfg = getattr(t, config_cls)(**config)
        return getattr(t, model_cls)(cfg).eval(), (), inputs

    return build


def _library(
    builder: Callable[[], tuple[torch.nn.Module, Callable[[int, int], Any]]], batch: int = 1
) -> Build:
    """A builder of ``models.hf`` / ``models.extra``: keyword inputs for ``batch`` (seed 0)."""

    def build() -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
        model, make = builder()
        return model, (), make(batch, 0)

    return build


_NARROW = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128}

MODELS: dict[str, Build] = {
    "resnet18": _bundled("resnet18"),
    "resnet50": _bundled("resnet50"),
    "densenet121": _bundled("densenet121"),
    "transformer": _bundled("transformer"),
    "bert-base": _hf("BertModel", "BertConfig", _ids(), vocab_size=100, **_NARROW),
    "distilbert": _hf(
        "DistilBertModel", "DistilBertConfig", _ids(), vocab_size=100, dim=64, hidden_dim=128,
        n_heads=4,
    ),
    "mobilebert": _hf(
        "MobileBertModel", "MobileBertConfig", _ids(), vocab_size=100, hidden_size=64,
        embedding_size=32, true_hidden_size=32, intra_bottleneck_size=32, intermediate_size=64,
        num_attention_heads=4,
    ),
    "deberta-v2": _hf("DebertaV2Model", "DebertaV2Config", _ids(), vocab_size=100, **_NARROW),
    "vit-base": _hf(
        "ViTModel", "ViTConfig", _pixels(32), image_size=32, patch_size=8, **_NARROW
    ),
    "resnet50-hf": _hf("ResNetModel", "ResNetConfig", _pixels(64)),
    "swin-tiny": _hf("SwinModel", "SwinConfig", _pixels(224), embed_dim=24),
    "gpt2": _hf(
        "GPT2Model", "GPT2Config", _ids(), vocab_size=100, n_embd=64, n_head=4, use_cache=False
    ),
    "t5-small": _hf(
        "T5Model", "T5Config", _ids(decoder=8), vocab_size=100, d_model=64, d_ff=128, d_kv=16,
        num_heads=4, use_cache=False,
    ),
    "bloom": _hf(
        "BloomModel", "BloomConfig", _ids(), vocab_size=100, hidden_size=64, n_head=4,
        use_cache=False,
    ),
    "segformer": _library(hf.segformer),
    "unet2d": _library(extra.unet2d),
    "unet2d-condition": _library(extra.unet2d_condition),
    "autoencoder-kl": _library(extra.autoencoder_kl),
}  # fmt: skip

SUITES = ("big", "hf", "extra")


def suite(name: str, batch: int = 1) -> dict[str, Build]:
    """The builders of suite ``name`` (``SUITES``); the tiny suites' inputs have ``batch`` rows."""
    if name == "big":
        return MODELS
    tiny = hf.HF_MODELS if name == "hf" else extra.EXTRA_MODELS
    return {model: _library(builder, batch) for model, builder in tiny.items()}


def replay(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend whose graph returns the outputs of its first call on every call."""
    saved: list[Any] = []

    def run(*args: Any) -> Any:
        if not saved:
            saved.append(gm(*args))
        return saved[0]

    return run


def _per_call(fn: Callable[[], Any], calls: int) -> float:
    """The median of ``calls`` calls' times, in microseconds: on a shared machine a call the
    OS preempts costs a time slice (milliseconds), which would move a mean of fast calls
    tenfold and not their median."""
    clock = time.perf_counter
    times = []
    for _ in range(calls):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times) * 1e6


def _lines_per_call(fn: Callable[[], Any]) -> int:
    """Python lines executed by one call (a trace function counts them)."""
    count = [0]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count[0]


def _dynamo(model: torch.nn.Module, args: Any, kwargs: Any) -> tuple[Any, bool]:
    """TorchDynamo's compiled ``model``, compiled and hit; with ``dynamic=False`` (True
    returned) where its default fails on the model (MONAI's BasicUNet: a resumed frame's
    symbolic shapes fail in the fake-tensor run)."""
    for dynamic in (None, False):
        torch._dynamo.reset()
        dyn = torch.compile(model, backend=replay, dynamic=dynamic)
        try:
            for _ in range(3):  # compile, then hit
                dyn(*args, **kwargs)
        except Exception:
            if dynamic is False:
                raise
            continue
        return dyn, dynamic is False
    raise AssertionError("unreachable")


def measure(name: str, rounds: int, calls: int, suite_name: str = "big") -> dict[str, Any]:
    """One model: per-call microseconds of MagPy and TorchDynamo (replay backend) and eager."""
    model, args, kwargs = suite(suite_name)[name]()
    n_tensors = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    magpy.reset()
    torch._dynamo.reset()
    mp = magpy.compile(model, backend=replay)
    with torch.no_grad():
        for _ in range(3):  # record, then hit
            mp(*args, **kwargs)
        dyn, dynamo_static = _dynamo(model, args, kwargs)
        stats = magpy.stats(mp)
        one_graph = stats.records == 1 and stats.breaks == 0 and stats.hits >= 2
        samples: dict[str, list[float]] = {"magpy": [], "dynamo": [], "eager": []}
        for _ in range(2):  # (untimed: what the first hits still settle, caches, allocations)
            _per_call(lambda: mp(*args, **kwargs), calls)
            _per_call(lambda: dyn(*args, **kwargs), calls)
        gc.collect()
        for _ in range(rounds):
            samples["magpy"].append(_per_call(lambda: mp(*args, **kwargs), calls))
            samples["dynamo"].append(_per_call(lambda: dyn(*args, **kwargs), calls))
            samples["eager"].append(_per_call(lambda: model(*args, **kwargs), max(calls // 10, 2)))
        lines = {
            "magpy": _lines_per_call(lambda: mp(*args, **kwargs)),
            "dynamo": _lines_per_call(lambda: dyn(*args, **kwargs)),
        }
    med = {k: statistics.median(v) for k, v in samples.items()}
    noise = {k: max(v) / min(v) - 1 for k, v in samples.items()}
    return {
        "suite": suite_name,
        "model": name,
        "tensors": n_tensors,
        "one_graph": one_graph,
        "magpy_us": med["magpy"],
        "dynamo_us": med["dynamo"],
        "ratio": med["magpy"] / med["dynamo"],
        "us_per_100_tensors": med["magpy"] / n_tensors * 100,
        "eager_us": med["eager"],
        "share_of_eager": med["magpy"] / med["eager"],
        "lines_magpy": lines["magpy"],
        "lines_dynamo": lines["dynamo"],
        "noise": noise,
        "samples": samples,
        "dynamo_static": dynamo_static,
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| model | params+buffers | MagPy µs/call | TorchDynamo µs/call | ratio | µs per 100 "
        "tensors | Python lines per hit (MagPy / Dynamo) | overhead / eager | noise (MagPy, "
        "Dynamo) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        flag = "" if r["one_graph"] else " (not one graph)"
        flag += " (Dynamo dynamic=False)" if r.get("dynamo_static") else ""
        n = r["noise"]
        out.append(
            f"| {r['model']}{flag} | {r['tensors']} | {r['magpy_us']:.0f} | {r['dynamo_us']:.0f} "
            f"| {r['ratio']:.2f} | {r['us_per_100_tensors']:.1f} | {r['lines_magpy']} / "
            f"{r['lines_dynamo']} | {r['share_of_eager']:.1%} | {n['magpy']:.0%}, "
            f"{n['dynamo']:.0%} |"
        )
    return "\n".join(out)


def summary(rows: list[dict[str, Any]], target: float = 0.5) -> str:
    """Median and largest ratio, the models above ``target`` and the largest noise."""
    if not rows:
        return "no model measured"
    ratios = sorted(rows, key=lambda r: r["ratio"])
    above = [f"{r['model']} {r['ratio']:.2f}" for r in ratios if r["ratio"] > target]
    noise = max(max(r["noise"]["magpy"], r["noise"]["dynamo"]) for r in rows)
    split = [r["model"] for r in rows if not r["one_graph"]]
    return (
        f"{len(rows)} models: ratio MagPy/TorchDynamo median "
        f"{statistics.median(r['ratio'] for r in rows):.2f}, max {ratios[-1]['ratio']:.2f} "
        f"({ratios[-1]['model']}); above {target}: {', '.join(above) or 'none'}; "
        f"not one graph: {', '.join(split) or 'none'}; largest noise (max/min - 1 of the "
        f"rounds) {noise:.0%}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="big", choices=[*SUITES, "all"])
    ap.add_argument("--models", default="", help="comma-separated names (default: the suite's)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", help="also write the rows as JSON to this file")
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    wanted = [m for m in opts.models.split(",") if m]
    rows = []
    for suite_name in SUITES if opts.suite == "all" else (opts.suite,):
        for name in suite(suite_name):
            if wanted and name not in wanted:
                continue
            try:
                rows.append(measure(name, opts.rounds, opts.calls, suite_name))
            except Exception as exc:  # a model that fails is reported, the others still run
                print(f"{name}: not measured ({type(exc).__name__}: {exc})", flush=True)
                continue
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    print()
    print(summary(rows))
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
