"""MagPy beside TorchDynamo on the running CPython: first-call capture time and a hit's cost.

    python -m integration.bench_versions [--models a,b] [--rounds 5] [--calls 50] [--out F]

``nox -s "bench_versions-3.12"`` (and ``-3.11``, ``-3.13``) runs it under each supported
interpreter, so the per-version tables sit side by side (docs/cpython.md).

- **Capture**: the first call of a freshly compiled model, ``backend="eager"`` for both (no
  backend compile in the figure): MagPy monitors the call and builds its record; TorchDynamo
  traces the frame and builds its guards. Each round resets both compilers and builds each
  model anew, MagPy and TorchDynamo alternating; the median of the rounds is reported.
- **Hit**: ``bench_overhead.measure`` (the replay backend: only the compilers' own per-call work).

One thread; the noise column is the spread of the rounds (max/min - 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

import magpy

from .bench_overhead import MODELS, measure

DEFAULT_MODELS = "resnet18,transformer,bert-base,gpt2,t5-small"


def _first_call(compiler: str, name: str) -> float:
    model, args, kwargs = MODELS[name]()
    magpy.reset()
    torch._dynamo.reset()
    compiled = (
        magpy.compile(model, backend="eager")
        if compiler == "magpy"
        else torch.compile(model, backend="eager")
    )
    with torch.no_grad():
        start = time.perf_counter()
        compiled(*args, **kwargs)
        return time.perf_counter() - start


def capture(name: str, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"magpy": [], "dynamo": []}
    for _ in range(rounds):
        for compiler in ("magpy", "dynamo"):
            samples[compiler].append(_first_call(compiler, name))
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "model": name,
        "capture_magpy_s": med["magpy"],
        "capture_dynamo_s": med["dynamo"],
        "capture_ratio": med["magpy"] / med["dynamo"],
        "capture_noise": {k: max(v) / min(v) - 1 for k, v in samples.items()},
    }


def table(rows: list[dict[str, Any]]) -> str:
    version = ".".join(map(str, sys.version_info[:3]))
    out = [
        f"CPython {version}, torch {torch.__version__}, one thread",
        "",
        "| model | capture MagPy s | capture TorchDynamo s | ratio | hit MagPy µs | hit "
        "TorchDynamo µs | ratio | noise (capture; hit) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cn, hn = r["capture_noise"], r["noise"]
        flag = "" if r["one_graph"] else " (not one graph)"
        out.append(
            f"| {r['model']}{flag} | {r['capture_magpy_s']:.2f} | {r['capture_dynamo_s']:.2f} "
            f"| {r['capture_ratio']:.2f} | {r['magpy_us']:.0f} | {r['dynamo_us']:.0f} "
            f"| {r['ratio']:.2f} | {cn['magpy']:.0%}/{cn['dynamo']:.0%}; "
            f"{hn['magpy']:.0%}/{hn['dynamo']:.0%} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated names")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", help="also write the rows as JSON to this file")
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for name in opts.models.split(","):
        try:
            row = capture(name, opts.rounds) | measure(name, opts.rounds, opts.calls)
        except Exception as exc:  # a model that fails is reported, the others still run
            print(f"{name}: not measured ({type(exc).__name__}: {exc})", flush=True)
            continue
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
