"""Tensor parallelism with DTensor under ``magpy.compile`` (issue 39): 2 CPU processes, gloo,
loopback only (``integration/tp_worker.py``, run as its command line runs it).

``parallelize_module`` with ``ColwiseParallel`` + ``RowwiseParallel`` on a Linear-ReLU-Linear
MLP: the compiled forward equals the unsharded model's on every rank over 4 calls, is one
graph (``from_local``, the sharded matmuls and ``redistribute``'s all-reduce inside it, no
break) and the last 3 calls hit its record. ``F.linear`` of DTensors compiled as a function:
a weight of the same layout hits, the same weight on another ``DeviceMesh`` (same ranks and
shape) and one with another placement miss; ``w.full_tensor()`` is one graph. The
Llama-style block (q/k/v and gate/up colwise, o and down rowwise), with and without
SequenceParallel, and AOTAutograd
(``aot_eager``) run under ``slow`` (``nox -s integration_slow``, or ``nox -s distributed``).

A program's own collectives (``integration/collectives_worker.py``): the functional
collectives (``all_reduce``, ``all_gather_single``, ``reduce_scatter_single``, their deprecated
aliases, ``wait_tensor``; a group given as a ``ProcessGroup`` or a ``DeviceMesh``) are nodes of
one graph, hit on every later call, and another group misses; ``dist.all_reduce`` on a plain
tensor and ``DTensor.from_local(..., run_check=True)`` are breaks with their reasons.

Training (``integration/tp_train_worker.py``): a whole TP training step compiled (forward,
``loss.backward()``, the optimizer's step, ``zero_grad()``) equals eager's losses and
parameters over 5 steps and, warm, each step is one hit of one record (one graph, no break,
nothing run uncompiled). The MLP with SGD through AOTAutograd runs by default; Inductor, the
Llama-style block with AdamW, and 2-D parallelism (FSDP2 on one mesh dimension, TP on the
other, each block's forward compiled: 1x2 and 2x1 meshes on 2 processes with the eager,
aot_eager and Inductor backends, and a 2x2 mesh on 4 processes with the eager backend) are
``slow``.
"""

from __future__ import annotations

import _integration_helpers as H
import pytest

pytest.importorskip("torch.distributed")

# integration/collectives_worker.py's cases
COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "deprecated", "wait_on_mesh", "dropped",
    "by_group", "c10d_in_place", "checked_from_local",
)  # fmt: skip


def _check(proc: object, cases: tuple[str, ...]) -> None:
    out = proc.stdout  # type: ignore[attr-defined]
    lines = out.strip().splitlines()
    assert len(lines) == 2 * len(cases), out
    for rank in (0, 1):
        for case in cases:
            # one record serving every call after the first: a cache that never hits fails here
            want = {
                "mlp": f"rank {rank} mlp: ok (1 records, 3 hits, 1 graphs, 0 breaks)",
                "nograd": f"rank {rank} mlp-no-grad: ok (1 records, 3 hits, 1 graphs, 0 breaks)",
                "llama": f"rank {rank} llama: ok (1 records, 3 hits, 1 graphs, 0 breaks)",
                "guards": f"rank {rank} guards: ok (3 records, 2 hits, 3 graphs, 0 breaks)",
                "sp": f"rank {rank} sequence-parallel: ok (1 records, 3 hits, 1 graphs, 0 breaks)",
            }[case]
            assert want in lines, out


def test_tp_mlp_is_one_graph_and_layouts_are_guarded_on_two_processes() -> None:
    proc = H.run_module("integration.tp_worker", "--calls", "4", timeout=300)
    _check(proc, ("mlp", "guards", "nograd"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tp_llama_block_on_two_processes(backend: str) -> None:
    args = ("--calls", "4", "--llama", "--backend", backend)
    proc = H.run_module("integration.tp_worker", *args, timeout=480)
    _check(proc, ("mlp", "guards", "nograd", "llama", "sp"))


def test_own_collectives_are_graph_nodes_on_two_processes() -> None:
    proc = H.run_module("integration.collectives_worker", "--backend", "aot_eager", timeout=300)
    _check_lines(proc, COLLECTIVES)


@pytest.mark.slow
def test_own_collectives_under_inductor_on_two_processes() -> None:
    proc = H.run_module("integration.collectives_worker", "--backend", "inductor", timeout=600)
    _check_lines(proc, COLLECTIVES)


def _check_lines(proc: object, cases: tuple[str, ...], world: int = 2) -> None:
    out = proc.stdout  # type: ignore[attr-defined]
    lines = out.strip().splitlines()
    assert len(lines) == world * len(cases), out
    for rank in range(world):
        for case in cases:
            # (the worker checked values, records and hits; a line says "ok" only then)
            assert any(line.startswith(f"rank {rank} {case}: ok (") for line in lines), out


def test_tp_training_step_is_one_record_on_two_processes() -> None:
    args = ("--cases", "mlp-step", "--backend", "aot_eager", "--steps", "5")
    proc = H.run_module("integration.tp_train_worker", *args, timeout=300)
    _check_lines(proc, ("mlp-step",))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cases", "backend"),
    [
        ("mlp-step,llama-step", "inductor"),
        ("llama-step", "aot_eager"),
        ("fsdp-tp-1x2,fsdp-tp-2x1", "eager"),
        ("fsdp-tp-1x2,fsdp-tp-2x1", "aot_eager"),
        ("fsdp-tp-1x2,fsdp-tp-2x1", "inductor"),
    ],
)
def test_tp_training_steps_and_2d_fsdp_tp_on_two_processes(cases: str, backend: str) -> None:
    args = ("--cases", cases, "--backend", backend, "--steps", "5")
    proc = H.run_module("integration.tp_train_worker", *args, timeout=600)
    _check_lines(proc, tuple(cases.split(",")))


@pytest.mark.slow
def test_2d_fsdp_tp_on_a_2x2_mesh_of_four_processes() -> None:
    # (four processes on two cores: about 80 s with the eager backend)
    args = ("--cases", "fsdp-tp-2x2", "--backend", "eager", "--steps", "5", "--world", "4")
    proc = H.run_module("integration.tp_train_worker", *args, timeout=600)
    _check_lines(proc, ("fsdp-tp-2x2",), world=4)
