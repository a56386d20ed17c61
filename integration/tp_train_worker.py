"""Training steps with tensor parallelism (DTensor) under ``magpy.compile``, against eager, on
2 CPU processes (gloo, loopback only).

    python -m integration.tp_train_worker [--backend inductor] [--steps 5] [--cases mlp-step]

Each rank builds its meshes and runs the named cases (comma-separated):

- ``mlp-step``: the ``ColwiseParallel``/``RowwiseParallel`` MLP of ``tp_worker``, a whole
  training step compiled (forward, ``loss.backward()``, ``SGD.step()``, ``zero_grad()``);
- ``llama-step``: the Llama-style block of ``tp_worker`` (q/k/v and gate/up colwise, o and
  down rowwise), the same step with ``AdamW``;
- ``fsdp-tp-1x2`` and ``fsdp-tp-2x1``: 2-D parallelism, two Llama-style blocks, each
  ``parallelize_module``-d on the ``tp`` dimension of a 2-D mesh and ``fully_shard``-ed
  (FSDP2) on its ``dp`` dimension, the root too; each block's forward compiled
  (``block.forward = magpy.compile(block.forward)``), the training step (forward, backward,
  ``AdamW``) run as is around them. Two processes make a 2-D mesh of 1x2 (FSDP over one rank,
  TP over two) or 2x1 (FSDP over two, TP over one); each shape puts both kinds of DTensor on
  its parameters (FSDP's ``Shard(0)`` on ``dp``, TP's on ``tp``);
- ``fsdp-tp-2x2``: the same on a 2x2 mesh, 4 processes (``--world 4``, this case alone).

The eager reference is the same model, parallelized the same way, run uncompiled. After every
step the losses and every parameter (gathered whole) must equal eager's; a whole step
compiled must make one record, by its first step (SGD) or, when the first makes the
optimizer's state (AdamW), by its second (see ``WARM_UP``), each later step a hit of that
record with one graph (a cache that never hits fails), with no other break, no fallback or
"runs uncompiled" warning, and the optimizer must have changed the parameters; a
compiled block's forward one record hit by every later step. Prints one line per rank and
case (``rank R case: ok (...)`` or what differed) and exits non-zero if any differs. Used by
``integration/test_tensor_parallel.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import magpy
from integration.tp_worker import _BLOCK_PLAN, _Block, _free_port, _mlp, put_results

TOL = {"rtol": 1e-5, "atol": 1e-6}  # (Inductor rounds a few ulps apart from eager)
Step = Callable[[torch.Tensor], torch.Tensor]


def _whole(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _make_step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Step:
    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _side_by_side(
    models: tuple[torch.nn.Module, torch.nn.Module],
    steps: tuple[Step, Step],
    inputs: list[torch.Tensor],
    after: Callable[[int], None] = lambda i: None,
) -> str | None:
    """The compiled and the eager step on each input; what differed first, or None."""
    for i, x in enumerate(inputs):
        got, want = steps[0](x), steps[1](x)
        if not torch.allclose(_whole(got).detach(), _whole(want).detach(), **TOL):
            return f"loss differs at step {i}: {float(_whole(got))} != {float(_whole(want))}"
        pairs = zip(models[0].parameters(), models[1].parameters(), strict=True)
        if not all(torch.allclose(_whole(a), _whole(b), **TOL) for a, b in pairs):
            return f"parameters differ after step {i}"
        after(i)
    return None


def _inputs(seed: int, steps: int, *shape: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen) for _ in range(steps)]


def _step_case(name: str, rank: int, backend: str, steps: int) -> str:
    """A whole TP training step compiled, against the same step eager."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    if name == "mlp-step":
        models = (_mlp(), _mlp())
        plan: dict[str, Any] = {"0": ColwiseParallel(), "2": RowwiseParallel()}
        inputs = _inputs(7, steps, 6, 8)
    else:
        torch.manual_seed(0)
        models = (_Block(), _Block())
        models[1].load_state_dict(models[0].state_dict())
        plan = _BLOCK_PLAN
        inputs = _inputs(7, steps, 2, 5, 16)
    for m in models:
        parallelize_module(m, mesh, plan)
    # (after parallelize_module, which replaces each parameter by a DTensor one: an optimizer
    # made before it holds the old parameters, steps nothing and zeroes no gradient)
    kind = torch.optim.SGD if name == "mlp-step" else torch.optim.AdamW
    opts = [kind(m.parameters(), lr=0.1 if name == "mlp-step" else 0.01) for m in models]
    compiled = magpy.compile(_make_step(models[0], opts[0]), backend=backend)
    seen: list[Any] = []  # (the compiled step's counters after each step)
    before = [_whole(p).detach().clone() for p in models[0].parameters()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", magpy.MagPyWarning)
        wrong = _side_by_side(
            models,
            (compiled, _make_step(models[1], opts[1])),
            inputs,
            lambda i: seen.append(magpy.stats(compiled)),
        )
    if wrong is not None:
        return f"rank {rank} {name}: {wrong}"
    notes = [str(w.message) for w in caught if issubclass(w.category, magpy.MagPyWarning)]
    if notes:
        return f"rank {rank} {name}: warned {notes[0]}"
    after = [_whole(p).detach() for p in models[0].parameters()]
    if all(torch.equal(a, b) for a, b in zip(before, after, strict=True)):
        return f"rank {rank} {name}: the optimizer changed no parameter"
    records = [st.records for st in seen]
    st = seen[-1]
    warm, breaks = WARM_UP[name]
    # one record, made by the last warm-up step, serving every later step (a cache that
    # never hits fails here)
    want = [0] * (warm - 1) + [1] * (steps - warm + 1)
    if records != want or st.hits != steps - warm or st.graphs != 1:
        return f"rank {rank} {name}: not one record per step after {warm}: {records} / {st}"
    if st.breaks != breaks or st.fallbacks or st.misses != warm:
        return f"rank {rank} {name}: breaks, fallbacks or misses: {st}"
    return f"rank {rank} {name}: ok (records after each step {records}, {st.hits} hits)"


# Monitored steps before the step's one record, and their breaks. SGD keeps no state: the
# first step makes the record that serves every later one. AdamW makes its state (step
# count, moments) in its first step, through ``self.state[p]`` of a defaultdict that has no
# such key yet: a break (the factory's call from outside is not replayed), so that step runs
# as the program runs and makes no record; the second finds the state and makes the record.
WARM_UP = {"mlp-step": (1, 0), "llama-step": (2, 1)}


def _two_d_case(name: str, rank: int, backend: str, steps: int) -> str:
    """FSDP2 on ``dp`` and TP on ``tp`` of a 2-D mesh, each block's forward compiled."""
    dp, tp = (int(n) for n in name.removeprefix("fsdp-tp-").split("x"))
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    models = (torch.nn.Sequential(_Block(), _Block()), torch.nn.Sequential(_Block(), _Block()))
    models[1].load_state_dict(models[0].state_dict())
    compiled = []
    for model in models:
        for block in model:
            parallelize_module(block, mesh["tp"], _BLOCK_PLAN)
            if model is models[0]:
                block.forward = magpy.compile(block.forward, backend=backend)
                compiled.append(block.forward)
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    opts = [torch.optim.AdamW(m.parameters(), lr=0.01) for m in models]
    # (each data-parallel rank its own batch, the same on the ranks of one TP group)
    inputs = _inputs(100 + mesh["dp"].get_local_rank(), steps, 2, 5, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", magpy.MagPyWarning)
        steps_ = (_make_step(models[0], opts[0]), _make_step(models[1], opts[1]))
        wrong = _side_by_side(models, steps_, inputs)
    if wrong is not None:
        return f"rank {rank} {name}: {wrong}"
    notes = [str(w.message) for w in caught if issubclass(w.category, magpy.MagPyWarning)]
    if notes:
        return f"rank {rank} {name}: warned {notes[0]}"
    stats = [magpy.stats(fn) for fn in compiled]
    if any(st.records != 1 or st.hits != steps - 1 or st.breaks or st.fallbacks for st in stats):
        return f"rank {rank} {name}: the blocks were not served by their records: {stats}"
    return f"rank {rank} {name}: ok ({stats[0].records} records, {stats[0].hits} hits per block)"


CASES = {
    "mlp-step": _step_case,
    "llama-step": _step_case,
    "fsdp-tp-1x2": _two_d_case,
    "fsdp-tp-2x1": _two_d_case,
    "fsdp-tp-2x2": _two_d_case,  # (4 processes: ``--world 4``)
}


def _worker(
    rank: int, world: int, port: int, backend: str, steps: int, cases: list[str], results: Any
) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        runs = [
            (name, functools.partial(CASES[name], name, rank, backend, steps)) for name in cases
        ]
        put_results(rank, runs, results)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor", help="MagPy backend (default: inductor)")
    parser.add_argument("--steps", type=int, default=5, help="training steps (default: 5)")
    parser.add_argument("--cases", default="mlp-step", help=f"comma-separated, of {list(CASES)}")
    parser.add_argument("--world", type=int, default=2, help="processes (4 for fsdp-tp-2x2)")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    if unknown := set(cases) - set(CASES):
        parser.error(f"unknown cases {sorted(unknown)}")
    if any((name == "fsdp-tp-2x2") != (args.world == 4) for name in cases):
        parser.error("fsdp-tp-2x2 runs alone, with --world 4; the other cases with 2")
    results = mp.get_context("spawn").Queue()
    mp.start_processes(
        _worker,
        args=(args.world, _free_port(), args.backend, args.steps, cases, results),
        nprocs=args.world,
        start_method="spawn",
    )
    lines = sorted(results.get(timeout=120) for _ in range(args.world * len(cases)))
    print("\n".join(lines))
    return 0 if all(": ok (" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
