"""Tensor parallelism (DTensor) under ``magpy.compile``, against eager, on 2 CPU processes.

    python -m integration.tp_worker [--backend eager] [--calls 4] [--world 2] [--llama]

Spawns ``--world`` processes (``torch.multiprocessing``, gloo, loopback only). Each builds a
1-d ``DeviceMesh`` and:

- ``mlp``: ``nn.Sequential(Linear, ReLU, Linear)`` with ``ColwiseParallel`` on the first
  Linear and ``RowwiseParallel`` on the second (``parallelize_module``), compiled whole; every
  rank feeds the same inputs, ``--calls`` times. The output equals the unsharded model's, the
  forward is one graph (``from_local``, the sharded matmuls, the all-reduce of
  ``redistribute`` inside it) and the later calls hit its record; ``mlp-no-grad``: the same
  under ``torch.no_grad()`` (DTensor's autograd Functions stay graph nodes there too).
- ``guards``: ``F.linear(x, w)`` of DTensors compiled as a function: a weight of the same
  layout on the same mesh hits; the same weight on another mesh (same ranks, same shape) and
  one with another placement each miss and get a record of their own; each result equals
  eager. ``w.full_tensor()`` (an all-gather) compiled: one graph, its record hit.
- ``llama`` (``--llama``): a Llama-style block (RMSNorm, attention with q/k/v colwise and o
  rowwise, SwiGLU MLP with gate/up colwise and down rowwise, residuals) with the plan torch's
  TP tutorial uses, compiled whole; ``sequence-parallel``: the same block with the tutorial's
  sequence parallelism (norms on sequence shards, ``PrepareModuleInput`` all-gathers,
  rowwise outputs reduce-scattered), fed this rank's sequence shard.

Prints one line per rank and case (``rank R case: ok (...)`` or what differed) and exits
non-zero if any differs. Used by ``integration/test_tensor_parallel.py``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

import magpy


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def _stats_line(st: Any) -> str:
    return f"{st.records} records, {st.hits} hits, {st.graphs} graphs, {st.breaks} breaks"


def _served(st: Any, calls: int) -> bool:
    return (
        st.records == 1
        and st.hits == calls - 1
        and st.graphs == 1
        and not st.breaks
        and (not st.fallbacks)
    )


def _inputs(calls: int, *shape: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(7)  # (the same on every rank, as TP needs)
    return [torch.randn(*shape, generator=gen) for _ in range(calls)]


def _mlp_case(rank: int, mesh: DeviceMesh, backend: str, calls: int, grad: bool = True) -> str:
    reference, model = _mlp(), _mlp()
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    compiled = magpy.compile(model, backend=backend)
    name = "mlp" if grad else "mlp-no-grad"
    for i, x in enumerate(_inputs(calls, 6, 8)):
        with torch.set_grad_enabled(grad):  # (no grad: DTensor's Functions are still nodes)
            out, want = compiled(x), reference(x)
        # (eager hands back an AsyncCollectiveTensor, a graph of aot_eager a plain tensor:
        # either is the replicated output, as under torch.compile)
        if isinstance(out, DTensor) or not torch.allclose(out, want, atol=1e-5):
            return f"rank {rank} {name}: output differs at call {i}"
    st = magpy.stats(compiled)
    if not _served(st, calls):
        return f"rank {rank} {name}: not one graph served by its record: {st}"
    return f"rank {rank} {name}: ok ({_stats_line(st)})"


class _RMSNorm(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.wq, self.wk, self.wv, self.wo = (
            torch.nn.Linear(dim, dim, bias=False) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # (-1: the heads this rank holds once wq/wk/wv are colwise-sharded)
        q, k, v = (
            w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class _FeedForward(torch.nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class _Block(torch.nn.Module):
    """A Llama-style transformer block (pre-norm attention and SwiGLU MLP, residuals)."""

    def __init__(self, dim: int = 16, heads: int = 4, hidden: int = 32) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = _RMSNorm(dim), _RMSNorm(dim)
        self.attention = _Attention(dim, heads)
        self.feed_forward = _FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


_BLOCK_PLAN = {  # (the plan of torch's TP tutorial, without sequence parallelism)
    "attention.wq": ColwiseParallel(),
    "attention.wk": ColwiseParallel(),
    "attention.wv": ColwiseParallel(),
    "attention.wo": RowwiseParallel(),
    "feed_forward.w1": ColwiseParallel(),
    "feed_forward.w2": RowwiseParallel(),
    "feed_forward.w3": ColwiseParallel(),
}


def _llama_case(rank: int, mesh: DeviceMesh, backend: str, calls: int) -> str:
    torch.manual_seed(0)
    reference = _Block()
    model = _Block()
    model.load_state_dict(reference.state_dict())
    parallelize_module(model, mesh, _BLOCK_PLAN)
    compiled = magpy.compile(model, backend=backend)
    for i, x in enumerate(_inputs(calls, 2, 5, 16)):
        out, want = compiled(x), reference(x)
        if isinstance(out, DTensor) or not torch.allclose(out, want, atol=1e-5):
            return f"rank {rank} llama: output differs at call {i}"
    st = magpy.stats(compiled)
    if not _served(st, calls):
        return f"rank {rank} llama: not one graph served by its record: {st}"
    return f"rank {rank} llama: ok ({_stats_line(st)})"


def _sp_plan() -> dict[str, Any]:
    """The block's plan with sequence parallelism (torch's TP tutorial): the norms run on
    sequence shards, each sublayer gathers its input and reduce-scatters its output."""
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan: dict[str, Any] = dict(_BLOCK_PLAN)
    plan.update({
        "attention_norm": SequenceParallel(),
        "attention": gather,
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": gather,
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    })  # fmt: skip
    return plan


def _sp_case(rank: int, mesh: DeviceMesh, backend: str, calls: int) -> str:
    torch.manual_seed(0)
    reference = _Block()
    model = _Block()
    model.load_state_dict(reference.state_dict())
    parallelize_module(model, mesh, _sp_plan())
    compiled = magpy.compile(model, backend=backend)
    world = mesh.size()
    for i, x in enumerate(_inputs(calls, 2, 3 * world, 16)):
        local = x.chunk(world, dim=1)[rank].contiguous()  # (this rank's sequence shard)
        out, want = compiled(local), reference(x).chunk(world, dim=1)[rank]
        if isinstance(out, DTensor) or not torch.allclose(out, want, atol=1e-5):
            return f"rank {rank} sequence-parallel: output differs at call {i}"
    st = magpy.stats(compiled)
    if not _served(st, calls):
        return f"rank {rank} sequence-parallel: not one graph served by its record: {st}"
    return f"rank {rank} sequence-parallel: ok ({_stats_line(st)})"


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w).relu()


def _gathered(w: torch.Tensor) -> torch.Tensor:
    return w.full_tensor() * 2


def _guards_case(rank: int, mesh: DeviceMesh, backend: str) -> str:
    world = mesh.size()
    other = DeviceMesh("cpu", list(range(world)))  # same ranks and shape, another object
    torch.manual_seed(1)
    full_w, full_x = torch.randn(4 * world, 8), torch.randn(3, 8)
    x = distribute_tensor(full_x, mesh, [Replicate()])
    calls = [  # (weight, its input, expected records after the call)
        (distribute_tensor(full_w, mesh, [Shard(0)]), x, 1),
        (distribute_tensor(full_w * 2, mesh, [Shard(0)]), x, 1),  # same layout: a hit
        (distribute_tensor(full_w, other, [Shard(0)]), distribute_tensor(full_x, other), 2),
        (distribute_tensor(full_w, mesh, [Replicate()]), x, 3),  # another placement
        (distribute_tensor(full_w * 3, mesh, [Replicate()]), x, 3),
    ]
    compiled = magpy.compile(_linear, backend=backend)
    for i, (w, xin, records) in enumerate(calls):
        out, want = compiled(xin, w), _linear(xin, w)
        if not isinstance(out, DTensor) or out.placements != want.placements:
            return f"rank {rank} guards: call {i} gave {type(out).__name__} {out.placements}"
        if out.device_mesh is not want.device_mesh:
            return f"rank {rank} guards: call {i} gave a DTensor on another mesh"
        if not torch.allclose(out.full_tensor(), want.full_tensor(), atol=1e-5):
            return f"rank {rank} guards: output differs at call {i}"
        st = magpy.stats(compiled)
        if st.records != records or st.breaks or st.fallbacks:
            return f"rank {rank} guards: after call {i} expected {records} records: {st}"
    st = magpy.stats(compiled)
    if st.hits != 2:
        return f"rank {rank} guards: expected 2 hits: {st}"
    gathered = magpy.compile(_gathered, backend=backend)  # (an all-gather in the graph)
    for i, (w, _, _) in enumerate(calls[:2] * 2):
        if not torch.allclose(gathered(w), _gathered(w)):
            return f"rank {rank} guards: full_tensor() differs at call {i}"
    if not _served(magpy.stats(gathered), 4):
        return f"rank {rank} guards: full_tensor() not one graph: {magpy.stats(gathered)}"
    return f"rank {rank} guards: ok ({_stats_line(st)})"


def _worker(
    rank: int, world: int, port: int, backend: str, calls: int, llama: bool, results: Any
) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        cases = [
            lambda: _mlp_case(rank, mesh, backend, calls),
            lambda: _guards_case(rank, mesh, backend),
            lambda: _mlp_case(rank, mesh, backend, calls, grad=False),
        ]
        if llama:
            cases.append(lambda: _llama_case(rank, mesh, backend, calls))
            cases.append(lambda: _sp_case(rank, mesh, backend, calls))
        put_results(rank, [(f"case {i}", case) for i, case in enumerate(cases)], results)
    finally:
        dist.destroy_process_group()


def put_results(rank: int, cases: list[tuple[str, Callable[[], str]]], results: Any) -> None:
    """Run each ``(name, case)``, putting the line it returns on ``results``; a case that
    raises is reported as its line, and the other cases go on."""
    for name, case in cases:
        try:
            results.put(case())
        except Exception as exc:
            results.put(f"rank {rank} {name}: raised {exc!r}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="eager", help="MagPy backend (default: eager)")
    parser.add_argument("--calls", type=int, default=4, help="calls per case (default: 4)")
    parser.add_argument("--world", type=int, default=2, help="processes (default: 2)")
    parser.add_argument("--llama", action="store_true", help="also the Llama-style block")
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.start_processes(
        _worker,
        args=(args.world, _free_port(), args.backend, args.calls, args.llama, results),
        nprocs=args.world,
        start_method="spawn",
    )
    per_rank = 5 if args.llama else 3
    lines = sorted(results.get(timeout=60) for _ in range(per_rank * args.world))
    print("\n".join(lines))
    return 0 if all(": ok (" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
