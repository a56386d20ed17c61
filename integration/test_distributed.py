"""DistributedDataParallel with MagPy (issue 21), on torch's own engine: 2 CPU processes, gloo,
loopback only (``integration/distributed_worker.py``, run as its command line runs it).

``magpy.compile(DDP(m))`` (DDP's forward runs as in eager; the module it wraps is compiled in
place, as ``m.compile()`` does) and ``DDP(magpy.compile(m))`` train 4 SGD steps on each rank's
own inputs: outputs and parameters equal eager DDP's after every step, and the compiled module
is served by its records. FSDP2 (``fully_shard`` per block, each block's forward compiled)
likewise against the eager sharded model. With the eager backend and with Inductor (about
25 s and 60 s on 2 cores).
"""

from __future__ import annotations

import _integration_helpers as H
import pytest

pytest.importorskip("torch.distributed")


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.inductor)])
def test_training_steps_equal_eager_ddp_and_fsdp_on_two_processes(backend: str) -> None:
    args = ("--steps", "4", "--backend", backend)
    proc = H.run_module("integration.distributed_worker", *args, timeout=480)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 6, proc.stdout
    for rank in (0, 1):
        for wrap in ("magpy(DDP)", "DDP(magpy)", "fully_shard(magpy)"):
            assert f"rank {rank} {wrap}: ok (1 records, 3 hits)" in lines, proc.stdout
