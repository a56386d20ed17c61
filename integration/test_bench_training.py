"""Smoke test of ``integration/bench_training.py``: its ``--quick`` mode with only the eager and
MagPy(backend="eager") modes (no Inductor compile; a few seconds), run as the command line runs
it, in a fresh process (torch.compile's and MagPy's state stay out of this one)."""

from __future__ import annotations

import json
from pathlib import Path

import _integration_helpers as H

MODELS = ("resnet18", "transformer", "lstm")
MODES = ("eager", "magpy-eager")

RESULT_FIELDS = {
    "model",
    "mode",
    "first_steps_s",
    "warmup_round_ms",
    "round_ms",
    "step_median_ms",
    "noise",
    "vs_eager",
    "vs_torch_compile",
    "steps_run",
    "magpy_stats_warm",
    "magpy_stats",
    "magpy_break_reasons",
    "magpy_eager_reason",
    "magpy_uncompiled_reasons",
    "torch_compile_graphs",
    "torch_compile_frames",
    "compiled_during_timing",
    "losses",
    "loss_max_abs_diff",
    "param_max_abs_diff",
    "param_max_abs_diff_at",
    "mismatches",
    "mismatch_details",
    "error",
    "error_traceback",
    "status",
}


def test_quick_eager_and_magpy_eager(tmp_path: Path) -> None:
    """Every model under both modes: the first steps, 2 timed rounds of 3 steps, MagPy's
    counters (the step one record after the first step's break), no mismatch with eager and no
    error; the table goes to stdout."""
    out_json = tmp_path / "bench.json"
    proc = H.run_module(
        "integration.bench_training",
        "--quick",
        "--modes",
        ",".join(MODES),
        "--json",
        str(out_json),
    )
    assert "| model" in proc.stdout and "MagPy (eager backend)" in proc.stdout
    data = json.loads(out_json.read_text())
    settings = data["settings"]
    assert settings["quick"] is True and settings["modes"] == list(MODES)
    assert settings["rounds"] == 2 and settings["steps"] == 3 and settings["warmup_steps"] == 2
    assert set(data["workloads"]) == set(MODELS)
    results = data["results"]
    assert [(r["model"], r["mode"]) for r in results] == [(m, d) for m in MODELS for d in MODES]
    steps = settings["warmup_steps"] + (settings["warmup_rounds"] + settings["rounds"]) * 3
    for r in results:
        where = f"{r['model']} / {r['mode']}"
        assert set(r) >= RESULT_FIELDS, where
        assert r["error"] is None, f"{where}: {r['error']}"
        assert r["mismatches"] == 0, f"{where}: {r['mismatch_details']}"
        assert r["status"] == "ok", where
        assert r["steps_run"] == steps and len(r["round_ms"]) == 2, where
        assert r["step_median_ms"] > 0 and r["noise"] >= 0 and r["first_steps_s"] > 0, where
        assert len(r["losses"]) == 5 and r["vs_eager"] > 0, where
        assert r["loss_max_abs_diff"] is not None and r["param_max_abs_diff"] is not None, where
        if r["mode"] == "magpy-eager":
            stats = r["magpy_stats"]
            assert set(stats) == {"hits", "misses", "records", "graphs", "breaks", "fallbacks"}
            assert stats["records"] >= 1 and stats["breaks"] <= 1, f"{where}: {stats}"
            assert stats["fallbacks"] == 0 and r["compiled_during_timing"] == 0, where
            assert not r["magpy_uncompiled_reasons"] and r["magpy_eager_reason"] is None, where
        else:
            assert r["magpy_stats"] is None and r["vs_eager"] == 1.0, where
