"""DistributedDataParallel with MagPy (issue 21), on torch's own engine: 2 CPU processes, gloo,
loopback only (``integration/distributed_worker.py``, run as its command line runs it).

``magpy.compile(DDP(m))`` (DDP's forward runs as in eager; the module it wraps is compiled in
place, as ``m.compile()`` does) and ``DDP(magpy.compile(m))`` train 4 SGD steps on each rank's
own inputs: outputs and parameters equal eager DDP's after every step, and the compiled module
is served by its records. About 20 s on 2 cores.
"""

from __future__ import annotations

import _integration_helpers as H
import pytest

pytest.importorskip("torch.distributed")


def test_ddp_training_steps_equal_eager_ddp_on_two_processes() -> None:
    proc = H.run_module("integration.distributed_worker", "--steps", "4", timeout=240)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4, proc.stdout
    for rank in (0, 1):
        for wrap in ("magpy(DDP)", "DDP(magpy)"):
            assert f"rank {rank} {wrap}: ok (1 records, 3 hits)" in lines, proc.stdout
