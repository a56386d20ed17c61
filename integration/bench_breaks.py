"""Benchmark graph breaks: a model with one break per block, eager vs torch.compile vs MagPy.

    python integration/bench_breaks.py --backend inductor --threads 1
    python integration/bench_breaks.py --backend eager --blocks 4 --calls 200

Each block computes ``h = relu(l1(x))``, reads ``s = h.abs().mean().item()`` into Python (a
graph break for both compilers) and continues with ``l2(h) * s``. MagPy runs each block's tensor
work as compiled segments between the breaks (the ``.item()`` value becomes a graph input of the
next segment after two calls); torch.compile splits the same way. Prints one Markdown table with
median latencies (interleaved round-robin), speedups over eager, first-call times and MagPy's
record/graph/break counts. Not a test: figures go into issue notes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

import magpy


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.l1(x))
        s = h.abs().mean().item()
        return x + self.l2(h) * s


class BreakNet(nn.Module):
    def __init__(self, blocks: int, d: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


def _time(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = BreakNet(args.blocks, args.dim).eval()
    x = torch.randn(args.batch, args.dim)
    variants: dict[str, Callable[..., Any]] = {"eager": model}
    first: dict[str, float] = {}
    with torch.no_grad():
        tc = torch.compile(model)
        first["torch.compile"] = _time(lambda: tc(x))
        variants["torch.compile"] = tc
        mp = magpy.compile(model, backend=args.backend)
        first["magpy"] = _time(lambda: mp(x))
        for _ in range(3):  # segments are learned over the first calls (scalar promotion)
            mp(torch.randn_like(x))
        variants["magpy"] = mp
        ref = model(x)
        for name, fn in variants.items():
            out = fn(x)
            if not torch.allclose(out, ref, rtol=1e-4, atol=1e-4):
                raise SystemExit(f"{name} differs from eager")
        times: dict[str, list[float]] = {k: [] for k in variants}
        names = list(variants)
        for i in range(args.calls):
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                times[name].append(_time(lambda n=name: variants[n](x)))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    st = magpy.stats(mp)
    print(
        f"threads={args.threads} blocks={args.blocks} dim={args.dim} batch={args.batch} "
        f"calls={args.calls} magpy backend={args.backend}\n"
    )
    print("| variant | median ms | speedup vs eager | first call s |")
    print("|---|---|---|---|")
    for name in names:
        f = f"{first[name]:.2f}" if name in first else "-"
        print(f"| {name} | {med[name]:.3f} | {med['eager'] / med[name]:.2f}x | {f} |")
    print(
        f"\nMagPy: records={st.records} graphs={st.graphs} breaks={st.breaks} hits={st.hits} "
        f"misses={st.misses} fallbacks={st.fallbacks}"
    )


if __name__ == "__main__":
    main()
