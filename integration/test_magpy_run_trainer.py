"""Hugging Face ``Trainer`` with ``TrainingArguments(torch_compile=True)`` under ``magpy run``.

The Trainer compiles the model itself (through Accelerate's ``torch.compile(model, ...)``);
under ``magpy run`` that call is MagPy's. A tiny GPT-2 (two layers, random weights, built from a
config: nothing is downloaded) trains for a few steps on synthetic tokens, on the CPU, once
eagerly (``python script.py``) and once under ``magpy run`` with ``torch_compile=True``; the
losses must be the same floats and ``magpy.stats`` of the Trainer's model must show MagPy's
records serving the steps. Needs ``transformers`` and ``accelerate`` (``magpy[hf]``).

GPT-2 was chosen while BertForSequenceClassification met two capture bugs: its first call sets
``config.problem_type`` through the config's Python ``__setattr__`` and reads it back through
``object.__getattribute__`` (an internal error then), and the ``CrossEntropyLoss`` its forward
builds had its None ``weight`` guarded on the class (a record per step). Both are fixed, with
their own tests (``test_config_objects.py``, ``test_pyobjects_round3.py``).
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

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

PROGRAM = """
import json, sys, tempfile
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

compiled = sys.argv[1:] == ["--compile"]
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32))


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        self.ids = torch.randint(0, 64, (16, 12), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=4, max_steps=4, logging_steps=1,
        report_to=[], use_cpu=True, seed=0, save_strategy="no", disable_tqdm=True,
        torch_compile=compiled, torch_compile_backend="eager" if compiled else None,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
report = {"losses": [h["loss"] for h in trainer.state.log_history if "loss" in h]}
if compiled:
    import magpy

    stats = magpy.stats(trainer.model_wrapped)
    report["stats"] = {"hits": stats.hits, "records": stats.records, "misses": stats.misses}
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
        env=os.environ | {"PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, done.stdout[-4000:]
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    return report


@pytest.mark.slow
def test_trainer_with_torch_compile_trains_under_magpy_run_as_eager(tmp_path: Path) -> None:
    """``Trainer(args=TrainingArguments(torch_compile=True))`` under ``magpy run``: the same
    four losses as the eager run (same seeds), and MagPy's records served the steps (a record
    per distinct call, then hits)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(PROGRAM))
    eager = _run(str(script), cwd=tmp_path)
    under_magpy = _run("-m", "magpy", "run", str(script), "--compile", cwd=tmp_path)
    assert len(eager["losses"]) == 4
    assert under_magpy["losses"] == eager["losses"]
    stats = under_magpy["stats"]
    assert stats["records"] >= 1 and stats["hits"] >= 1, stats
