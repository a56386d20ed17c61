"""Training steps under DDP and FSDP2, MagPy against eager, on 2 CPU processes.

    python -m integration.distributed_worker [--backend eager] [--steps 4]

Spawns two processes (``torch.multiprocessing``, gloo, loopback only). Each builds the same
model, wraps it two ways: ``magpy.compile(DDP(m))`` (DDP's forward runs as in eager, the module
it wraps is compiled in place) and ``DDP(magpy.compile(m))``, and eager ``DDP(m)`` as the
reference; every rank trains on its own inputs for ``--steps`` SGD steps (gradients all-reduced
by DDP). Then FSDP2: each block's forward compiled (``blk.forward = magpy.compile(blk.forward)``),
every block and the root ``fully_shard``-ed, against the same model sharded and eager. Each
rank checks outputs and parameters against the reference after every step and that the
compiled module's records served the calls; prints one line per rank and wrapping, and exits
non-zero if any differs. Used by ``integration/test_distributed.py``.
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
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

    def params() -> Any:
        return zip(model.parameters(), reference.module.parameters(), strict=True)

    wrong = _side_by_side(rank, (trained, reference), params, steps)
    if wrong is not None:
        return f"rank {rank} {wrap}: {wrong}"
    st = magpy.stats(stats_of)
    if st.records < 1 or st.hits < steps - st.records or st.fallbacks:
        return f"rank {rank} {wrap}: the compiled module was not served by records: {st}"
    return f"rank {rank} {wrap}: ok ({st.records} records, {st.hits} hits)"


def _side_by_side(
    rank: int, models: tuple[Any, Any], params: Callable[[], Any], steps: int
) -> str | None:
    """``steps`` SGD steps of the compiled and the reference model on the rank's own inputs;
    what differed first (outputs, or ``params()`` pairs after a step), or None."""
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(steps):
        x = torch.randn(6, 8, generator=gen)
        outs = [m(x) for m in models]
        if not torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6):
            return f"output differs at step {step}"
        for out, opt in zip(outs, opts, strict=True):
            out.square().mean().backward()
            opt.step()
            opt.zero_grad()
        if not all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in params()):
            return f"parameters differ after step {step}"
    return None


def _blocks() -> torch.nn.Module:
    torch.manual_seed(0)
    block = [torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.ReLU()]
    return torch.nn.Sequential(
        torch.nn.Sequential(*block), copy.deepcopy(torch.nn.Sequential(*block)),
        torch.nn.Linear(8, 4),
    )  # fmt: skip


def _train_fsdp(rank: int, backend: str, steps: int) -> str:
    """FSDP2 with compiled blocks: its hooks gather each block's parameters before the
    compiled forward runs and free them after, as in eager."""
    wrap = "fully_shard(magpy)"
    model, reference = _blocks(), _blocks()
    compiled = []
    for mod in (model, reference):
        for block in list(mod)[:2]:
            if mod is model:
                block.forward = magpy.compile(block.forward, backend=backend)
                compiled.append(block.forward)
            fully_shard(block)
        fully_shard(mod)

    def params() -> Any:  # (the whole parameters, gathered from the shards)
        pairs = zip(model.parameters(), reference.parameters(), strict=True)
        return ((a.full_tensor(), b.full_tensor()) for a, b in pairs)

    wrong = _side_by_side(rank, (model, reference), params, steps)
    if wrong is not None:
        return f"rank {rank} {wrap}: {wrong}"
    stats = [magpy.stats(fn) for fn in compiled]
    if any(st.records != 1 or st.hits != steps - 1 or st.fallbacks for st in stats):
        return f"rank {rank} {wrap}: the blocks were not served by records: {stats}"
    return f"rank {rank} {wrap}: ok ({stats[0].records} records, {stats[0].hits} hits)"


def _worker(rank: int, port: int, backend: str, steps: int, results: Any) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        for wrap in ("magpy(DDP)", "DDP(magpy)"):
            results.put(_train(rank, wrap, backend, steps))
        results.put(_train_fsdp(rank, backend, steps))
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
    lines = sorted(results.get(timeout=60) for _ in range(6))
    print("\n".join(lines))
    return 0 if all(line.endswith(")") and ": ok (" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
