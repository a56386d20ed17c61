"""Smoke test of ``integration/bench_dynamic.py``: its ``--quick`` mode with only the eager and
MagPy(backend="eager") modes (no Inductor compile; a few seconds), run as the command line runs
it, in a fresh process (torch.compile's and MagPy's state stay out of this one)."""

from __future__ import annotations

import json
from pathlib import Path

import _integration_helpers as H

RESULT_FIELDS = {
    "model",
    "mode",
    "calls",
    "total_s",
    "first_call_s",
    "compiling_calls",
    "stream_ms",
    "steady_median_ms",
    "steady_ms",
    "replay_compiling_calls",
    "magpy_stats",
    "magpy_eager_reason",
    "magpy_break_reasons",
    "torch_compile_graphs",
    "torch_compile_frames",
    "torch_compile_recompile_limit",
    "mismatches",
    "mismatch_details",
    "error",
    "error_traceback",
    "status",
}


def test_quick_eager_and_magpy_eager(tmp_path: Path) -> None:
    """Every model under both modes: 10 timed calls each, a replay, MagPy's counters, no
    mismatch with eager and no error; the table goes to stdout."""
    out_json = tmp_path / "bench.json"
    proc = H.run_module(
        "integration.bench_dynamic",
        "--quick",
        "--modes",
        "eager,magpy-eager",
        "--json",
        str(out_json),
    )
    assert "| model" in proc.stdout and "MagPy (eager backend)" in proc.stdout
    data = json.loads(out_json.read_text())
    assert data["settings"]["quick"] is True
    assert data["settings"]["calls"] == 10
    assert data["settings"]["modes"] == ["eager", "magpy-eager"]
    assert set(data["workloads"]) == {"bert", "lstm", "blockdrop", "blocks"}
    results = data["results"]
    assert [(r["model"], r["mode"]) for r in results] == [
        (m, mode)
        for m in ("bert", "lstm", "blockdrop", "blocks")
        for mode in ("eager", "magpy-eager")
    ]
    for r in results:
        where = f"{r['model']} / {r['mode']}"
        assert set(r) >= RESULT_FIELDS, where
        assert r["error"] is None, f"{where}: {r['error']}"
        assert r["mismatches"] == 0, f"{where}: {r['mismatch_details']}"
        assert r["status"] == "ok", where
        assert r["calls"] == 10 and len(r["stream_ms"]) == 10, where
        assert len(r["steady_ms"]) == 10 and r["steady_median_ms"] > 0, where
        assert r["total_s"] > 0, where
        if r["mode"] == "magpy-eager":
            stats = r["magpy_stats"]
            assert set(stats) == {"hits", "misses", "records", "graphs", "breaks", "fallbacks"}
            assert stats["records"] >= 1 and r["compiling_calls"] >= 1, where
            if r["model"] == "blocks":  # 4 blocks compiled one by one: one graph serves all
                assert stats["graphs"] == 1 and stats["records"] == 4, where
        else:
            assert r["magpy_stats"] is None and r["compiling_calls"] is None, where
