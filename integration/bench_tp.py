"""Benchmark tensor parallelism on 2 gloo ranks: eager vs torch.compile vs MagPy.

    python -m integration.bench_tp                         # 7 rounds of 10 calls per mode
    python -m integration.bench_tp --quick                 # 3 rounds of 3, small block

Two processes (``torch.multiprocessing``, gloo, loopback only, one thread each) build the
Llama-style block of ``integration/tp_worker.py`` (dim 128, 4 heads, hidden 256; ``--quick``:
dim 32, hidden 64) parallelized with torch's TP plan (q/k/v and gate/up colwise, o and down
rowwise), input batch 4 x 32 tokens, the same on both ranks. Two workloads:

- ``forward``: the block's forward (``torch.no_grad()``);
- ``train step``: forward, ``out.square().mean().backward()``, ``SGD(lr=1e-3).step()``,
  ``zero_grad()``.

Modes, each with its own copy of one seeded block: ``eager``; ``torch.compile``
(``torch.compile(block)``: the forward and, through AOTAutograd, its backward compiled; the
optimizer step eager); ``magpy``: ``magpy.compile(block, backend="inductor")`` for the forward,
``magpy.compile(step, backend="inductor")`` of the whole training step (one joint graph).
First each mode's first ``WARM`` calls (the compile, untimed here), then ``--rounds`` rounds,
each running ``--calls`` calls of every mode in turn (order rotated every round; both ranks
meet at a barrier before each mode's calls). Rank 0 reports per workload and mode: **ms**, the
median over rounds of a round's mean call time; **noise**, max/min - 1 of those round means;
the ratios to eager and to torch.compile; **graphs** (MagPy: records/graphs/breaks from
``magpy.stats``; torch.compile: Dynamo's unique graphs). Times on a shared two-core machine
are noisy: read them with the noise column.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

import magpy
from integration.tp_worker import _BLOCK_PLAN, _Block, _free_port

MODES = ("eager", "torch.compile", "magpy")
WARM = 3


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _callables(block: torch.nn.Module, mode: str, train: bool) -> tuple[Callable[..., Any], Any]:
    """The call to time for ``mode`` and what its graphs are read from."""
    if mode == "torch.compile":
        block = torch.compile(block)  # type: ignore[assignment]
    elif mode == "magpy" and not train:
        block = magpy.compile(block, backend="inductor")
    if not train:

        def forward(x: torch.Tensor) -> Any:
            with torch.no_grad():
                return block(x)

        return forward, block
    opt = torch.optim.SGD(block.parameters(), lr=1e-3)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = block(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    if mode == "magpy":
        compiled = magpy.compile(step, backend="inductor")
        return compiled, compiled
    return step, block


def _graphs(mode: str, holder: Any, dynamo_before: int) -> str:
    """MagPy's records of ``holder``, or the Dynamo graphs made since ``dynamo_before``."""
    if mode == "magpy":
        st = magpy.stats(holder)
        return f"{st.records} records, {st.graphs} graphs, {st.breaks} breaks"
    if mode == "torch.compile":
        return f"{_dynamo_graphs() - dynamo_before} graphs"
    return "-"


def _bench(rank: int, args: Any, train: bool) -> list[tuple[str, float, float, str]]:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    dim, hidden = (32, 64) if args.quick else (128, 256)
    torch.manual_seed(0)
    base = _Block(dim, 4, hidden)
    x = torch.randn(4, 32, dim, generator=torch.Generator().manual_seed(7))
    runs: dict[str, Callable[..., Any]] = {}
    holders: dict[str, Any] = {}
    before = _dynamo_graphs()
    for mode in MODES:
        block = copy.deepcopy(base)
        parallelize_module(block, mesh, _BLOCK_PLAN)
        runs[mode], holders[mode] = _callables(block, mode, train)
        for _ in range(WARM):
            runs[mode](x)
    means: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
        for mode in order:
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.calls):
                runs[mode](x)
            means[mode].append((time.perf_counter() - start) / args.calls)
    return [  # (graphs counted after the rounds: one compiled while timed shows here)
        (
            mode,
            statistics.median(ts) * 1e3,
            max(ts) / min(ts) - 1,
            _graphs(mode, holders[mode], before),
        )
        for mode, ts in means.items()
    ]


def _worker(rank: int, port: int, args: Any, results: Any) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        rows = {"forward": _bench(rank, args, False), "train step": _bench(rank, args, True)}
        if rank == 0:
            results.put(rows)
    finally:
        dist.destroy_process_group()


def _table(rows: dict[str, list[tuple[str, float, float, str]]]) -> str:
    out = [
        "| workload | mode | ms/call | noise | vs eager | vs torch.compile | graphs |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload, entries in rows.items():
        ms = {mode: t for mode, t, _, _ in entries}
        for mode, t, noise, graphs in entries:
            out.append(
                f"| {workload} | {mode} | {t:.2f} | {noise:.0%} | {t / ms['eager']:.2f}x "
                f"| {t / ms['torch.compile']:.2f}x | {graphs} |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (default: 7)")
    parser.add_argument("--calls", type=int, default=10, help="calls per round (default: 10)")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 3, a small block")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls = 3, 3
    results = mp.get_context("spawn").Queue()
    mp.start_processes(_worker, args=(_free_port(), args, results), nprocs=2, start_method="spawn")
    print(_table(results.get(timeout=60)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
