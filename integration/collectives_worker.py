"""A program's own collectives under ``magpy.compile``, against eager, on 2 CPU processes (gloo,
loopback only; issue 39).

    python -m integration.collectives_worker [--backend aot_eager] [--calls 4]

Each rank compiles small functions that call ``torch.distributed._functional_collectives``
themselves (``all_reduce``, ``all_gather_single``, ``reduce_scatter_single``, the deprecated
``all_gather_tensor`` / ``reduce_scatter_tensor``, ``wait_tensor``, a group given as the
default ``ProcessGroup``, a ``DeviceMesh`` or another ``ProcessGroup``), ``dist.all_reduce``
on a plain tensor, and ``DTensor.from_local(..., run_check=True)``, and runs each ``--calls``
times on inputs that differ per rank, next to the same function eager. Every result must
equal eager's (the entry tensor too, where eager changes it in place; exactly, or within a
few ulps under Inductor), and the counters must be the case's exactly:

- a functional collective is a node of one graph: 1 record, a hit on every later call, no
  break; a collective whose result the program drops is still run (rank 1 runs that case
  eagerly only, rank 0 compiled: a dropped collective would leave rank 1 waiting);
- the same function called with another process group misses and records once more;
- ``dist.all_reduce(t)`` (c10d, in place) and ``from_local(..., run_check=True)`` are graph
  breaks with their reasons, the code after them compiled (split mode: 1 record of the rest,
  hit from the third call on).

Prints one line per rank and case (``rank R case: ok (...)`` or what differed) and exits
non-zero if any differs. Used by ``integration/test_tensor_parallel.py``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.multiprocessing as mp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate

import magpy
from integration.tp_worker import _free_port, put_results

MESH: DeviceMesh | None = None
OTHER: Any = None  # a second process group of the same two ranks


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    return funcol.all_reduce(x * 2, "sum", dist.group.WORLD) + 1


def all_gather(x: torch.Tensor) -> torch.Tensor:
    return funcol.all_gather_single(x.sin(), 0, dist.group.WORLD) * 3


def reduce_scatter(x: torch.Tensor) -> torch.Tensor:
    return funcol.reduce_scatter_single(x.cos(), "sum", 0, dist.group.WORLD) - 1


def deprecated(x: torch.Tensor) -> torch.Tensor:  # (each warns where not compiling)
    a = funcol.all_gather_tensor(x, 0, dist.group.WORLD)
    return funcol.reduce_scatter_tensor(a * 2, "sum", 0, dist.group.WORLD) + 1


def wait_on_mesh(x: torch.Tensor) -> torch.Tensor:
    y = funcol.all_reduce(x, "avg", MESH)
    return funcol.wait_tensor(y) * 2 + funcol.all_reduce(x, "max", MESH)


def dropped(x: torch.Tensor) -> torch.Tensor:
    funcol.all_reduce(x * 5, "sum", dist.group.WORLD)  # (its result unused)
    return x + 1


def by_group(x: torch.Tensor, group: Any) -> torch.Tensor:
    return funcol.all_reduce(x, "sum", group) * 2


def c10d_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    dist.all_reduce(y)
    return y + 1


def checked_from_local(x: torch.Tensor) -> torch.Tensor:  # (broadcasts into x itself)
    return DTensor.from_local(x, MESH, [Replicate()], run_check=True).to_local() + 1


_FUNCOL = "1 records, {h} hits, 1 graphs, 0 breaks"
_BROKEN = "1 records, {b} hits, 1 graphs, 2 breaks"
# case -> (function, the counters after ``calls`` calls; ``{h}``: calls - 1, ``{b}``: calls - 2;
# the first call breaks, the second is tried whole once more and breaks again, then the code
# after the break (and, where there is some, the code before it) is served by a record of its
# own)
CASES: dict[str, tuple[Callable[..., Any], str]] = {
    "all_reduce": (all_reduce, _FUNCOL),
    "all_gather": (all_gather, _FUNCOL),
    "reduce_scatter": (reduce_scatter, _FUNCOL),
    "deprecated": (deprecated, _FUNCOL),
    "wait_on_mesh": (wait_on_mesh, _FUNCOL),
    "dropped": (dropped, _FUNCOL),
    "by_group": (by_group, "2 records, {g} hits, 2 graphs, 0 breaks"),
    "c10d_in_place": (c10d_in_place, "2 records, {b2} hits, 2 graphs, 2 breaks"),
    "checked_from_local": (checked_from_local, _BROKEN),
}
REASONS = {
    "c10d_in_place": "torch.distributed.all_reduce: a c10d collective that works in place",
    "checked_from_local": "DTensor.from_local(..., run_check=True)",
}


def _same(backend: str) -> Callable[[torch.Tensor, torch.Tensor], bool]:
    """Equal: exactly, but for Inductor, whose kernels (``sin``) round a few ulps apart from
    eager's (as under ``torch.compile``)."""
    if backend == "inductor":
        return lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    return torch.equal


def _plain(t: Any) -> torch.Tensor:
    # (eager hands back an AsyncCollectiveTensor, a traced graph a plain tensor: waited here)
    waited = funcol.wait_tensor(t) if isinstance(t, funcol.AsyncCollectiveTensor) else t
    return torch.as_tensor(waited)


def _case(name: str, rank: int, backend: str, calls: int) -> str:
    fn, want_stats = CASES[name]
    compiled = magpy.compile(fn, backend=backend)
    eager_only = name == "dropped" and rank == 1
    wrong: str | None = None
    same = _same(backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(calls):
            gen = torch.Generator().manual_seed(10 * i + rank)  # (each rank its own input)
            x = torch.randn(4, 3, generator=gen)
            x2 = x.clone()
            args: tuple[Any, ...] = (x,)
            args2: tuple[Any, ...] = (x2,)
            if name == "by_group":  # (the default group, then another one from the third call)
                group = dist.group.WORLD if i < 2 else OTHER
                args, args2 = (x, group), (x2, group)
            got = (fn if eager_only else compiled)(*args)
            want = fn(*args2)
            # (every call is made whatever an earlier one gave: a rank that stopped early
            # would leave the other waiting in its collectives)
            if wrong is None and not same(_plain(got), _plain(want)):
                wrong = f"rank {rank} {name}: differs from eager at call {i}"
            if wrong is None and not same(x, x2):
                wrong = f"rank {rank} {name}: the entry tensor differs from eager's at call {i}"
    if wrong is not None:
        return wrong
    if eager_only:
        return f"rank {rank} {name}: ok (eager only, rank 0 compiled)"
    st = magpy.stats(compiled)
    got_stats = f"{st.records} records, {st.hits} hits, {st.graphs} graphs, {st.breaks} breaks"
    want_stats = want_stats.format(h=calls - 1, b=calls - 2, b2=2 * (calls - 2), g=calls - 2)
    if got_stats != want_stats or st.fallbacks:
        return f"rank {rank} {name}: {got_stats} ({st.fallbacks} fallbacks), not {want_stats}"
    notes = [str(w.message) for w in caught if issubclass(w.category, magpy.MagPyWarning)]
    if name in REASONS and not any(REASONS[name] in n for n in _break_reasons(compiled)):
        return f"rank {rank} {name}: not the break expected: {_break_reasons(compiled)}"
    if name not in REASONS and notes:
        return f"rank {rank} {name}: warned {notes[0]}"
    # (the deprecated aliases warn only where ``torch.compiler.is_compiling()`` is false, as it
    # is not in code MagPy compiles: two a call, of the eager calls)
    future = sum(issubclass(w.category, FutureWarning) for w in caught)
    if future != (2 * calls if name == "deprecated" else 0):
        return f"rank {rank} {name}: {future} FutureWarnings in {calls} calls of each"
    return f"rank {rank} {name}: ok ({got_stats})"


def _break_reasons(compiled: Any) -> list[str]:
    from magpy_runtime._api import state_of  # (the reasons the cache noted, in order)

    return [str(r.reason) for r in state_of(compiled).break_reasons]


def _worker(rank: int, port: int, backend: str, calls: int, cases: list[str], results: Any) -> None:
    global MESH, OTHER
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    # (a collective that one rank skipped fails the case after a minute instead of hanging)
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timeout)
    try:
        MESH = init_device_mesh("cpu", (2,))
        OTHER = dist.new_group([0, 1])
        runs = [(name, functools.partial(_case, name, rank, backend, calls)) for name in cases]
        put_results(rank, runs, results)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="aot_eager", help="MagPy backend (aot_eager)")
    parser.add_argument("--calls", type=int, default=4, help="calls per case (default: 4)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    if unknown := set(cases) - set(CASES):
        parser.error(f"unknown cases {sorted(unknown)}")
    results = mp.get_context("spawn").Queue()
    mp.start_processes(
        _worker,
        args=(_free_port(), args.backend, args.calls, cases, results),
        nprocs=2,
        start_method="spawn",
    )
    lines = sorted(results.get(timeout=60) for _ in range(2 * len(cases)))
    print("\n".join(lines))
    return 0 if all(": ok (" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
