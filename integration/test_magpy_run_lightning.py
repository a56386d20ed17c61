"""Lightning's ``Trainer.fit`` under ``magpy run``.

A tiny ``LightningModule`` (a two-layer MLP, synthetic data, CPU) trains for six steps eagerly
(``python script.py eager``) and under ``magpy run`` in the two ways a Lightning program
compiles: ``model.compile()`` in place, which MagPy serves (the same losses, MagPy's records
serving the steps), and ``trainer.fit(torch.compile(model))``, which Lightning accepts only as
TorchDynamo's ``OptimizedModule`` (it reads its ``dynamo_ctx``): that call warns once and goes to
the real ``torch.compile``, and trains as eager. Needs ``lightning`` (``magpy[lightning]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

PROGRAM = """
import json, sys, tempfile, warnings
import torch
import lightning as L
import magpy

form = sys.argv[1]
L.seed_everything(0, verbose=False)


class MLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )
        self.losses = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


g = torch.Generator().manual_seed(1)
inputs, targets = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)
data = torch.utils.data.TensorDataset(inputs, targets)
model = MLP()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", magpy.MagPyWarning)
    fit = model
    if form == "torch.compile":
        fit = torch.compile(model, backend="eager")
    elif form == "module.compile":
        model.compile(backend="eager")
with tempfile.TemporaryDirectory() as out:
    trainer = L.Trainer(
        max_steps=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
    )
    trainer.fit(fit, torch.utils.data.DataLoader(data, batch_size=4))
report = {
    "losses": model.losses,
    "warnings": [str(w.message) for w in caught if issubclass(w.category, magpy.MagPyWarning)],
}
if form == "module.compile":
    stats = magpy.stats(model)
    report["stats"] = {"hits": stats.hits, "records": stats.records}
print("REPORT " + json.dumps(report))
"""


def _run(*command: str, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, done.stdout[-4000:]
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    return report


@pytest.mark.slow
def test_lightning_fit_under_magpy_run_trains_as_eager(tmp_path: Path) -> None:
    """``model.compile()`` of a LightningModule is MagPy's (same losses as eager, records
    served the steps); ``torch.compile(model)`` of one falls back to TorchDynamo with one
    warning naming the remedy, and trains as eager too."""
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent(PROGRAM))
    eager = _run(str(script), "eager", cwd=tmp_path)
    in_place = _run("-m", "magpy", "run", str(script), "module.compile", cwd=tmp_path)
    wrapped = _run("-m", "magpy", "run", str(script), "torch.compile", cwd=tmp_path)
    assert len(eager["losses"]) == 6
    assert in_place["losses"] == eager["losses"]
    assert in_place["warnings"] == []
    assert in_place["stats"]["records"] >= 1 and in_place["stats"]["hits"] >= 1
    assert wrapped["losses"] == eager["losses"]
    assert len(wrapped["warnings"]) == 1
    assert "LightningModule" in wrapped["warnings"][0]
    assert "model.compile()" in wrapped["warnings"][0]
