"""Training steps under DistributedDataParallel, MagPy against eager, on 2 CPU processes.

    python -m integration.distributed_worker [--backend eager] [--steps 4]

Spawns two processes (``torch.multiprocessing``, gloo, loopback only). Each builds the same
model, wraps it two ways: ``magpy.compile(DDP(m))`` (DDP's forward runs as in eager, the module
it wraps is compiled in place) and ``DDP(magpy.compile(m))``, and eager ``DDP(m)`` as the
reference; every rank trains on its own inputs for ``--steps`` SGD steps (gradients all-reduced
by DDP). Each rank checks outputs and parameters against the reference after every step and
that the compiled module's records served the calls; prints one line per rank and wrapping,
and exits non-zero if any differs. Used by ``integration/test_distributed.py``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import magpy


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.LayerNorm(4)
    )


def _train(rank: int, wrap: str, backend: str, steps: int) -> str:
    reference = DDP(_model())
    model = _model()
    if wrap == "magpy(DDP)":
        trained = magpy.compile(DDP(model), backend=backend)
        stats_of = trained
    else:
        stats_of = magpy.compile(model, backend=backend)
        trained = DDP(stats_of)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (trained, reference)]
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(steps):
        x = torch.randn(6, 8, generator=gen)
        outs = [m(x) for m in (trained, reference)]
        if not torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6):
            return f"rank {rank} {wrap}: output differs at step {step}"
        for out, opt in zip(outs, opts, strict=True):
            out.square().mean().backward()
            opt.step()
            opt.zero_grad()
        for a, b in zip(model.parameters(), reference.module.parameters(), strict=True):
            if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
                return f"rank {rank} {wrap}: parameters differ after step {step}"
    st = magpy.stats(stats_of)
    if st.records < 1 or st.hits < steps - st.records or st.fallbacks:
        return f"rank {rank} {wrap}: the compiled module was not served by records: {st}"
    return f"rank {rank} {wrap}: ok ({st.records} records, {st.hits} hits)"


def _worker(rank: int, port: int, backend: str, steps: int, results: Any) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        for wrap in ("magpy(DDP)", "DDP(magpy)"):
            results.put(_train(rank, wrap, backend, steps))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="eager", help="MagPy backend (default: eager)")
    parser.add_argument("--steps", type=int, default=4, help="training steps (default: 4)")
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.start_processes(
        _worker,
        args=(_free_port(), args.backend, args.steps, results),
        nprocs=2,
        start_method="spawn",
    )
    lines = sorted(results.get(timeout=60) for _ in range(4))
    print("\n".join(lines))
    return 0 if all(line.endswith(")") and ": ok (" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
