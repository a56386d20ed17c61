"""Smoke test of ``integration/bench_warm_start.py``, run as the command line runs it: its
``--quick`` mode on the LSTM, eager only (the harness: child processes, tables, JSON; about
15 s), and, marked ``slow``, MagPy cold and warm on ResNet-18 (a second process's compile
comes from Inductor's and AOTAutograd's caches)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import _integration_helpers as H
import pytest

RESULT_FIELDS = {"model", "mode", "round", "first_call_s", "second_call_ms", "process_s"}
RESULT_FIELDS |= {"mismatch", "fx", "aot", "magpy"}


def run_bench(tmp_path: Path, modes: str, model: str = "lstm") -> tuple[str, dict[str, Any]]:
    out_json = tmp_path / "bench.json"
    proc = H.run_module(
        "integration.bench_warm_start",
        "--quick",
        "--models",
        model,
        "--modes",
        modes,
        "--json",
        str(out_json),
        timeout=900,
    )
    return proc.stdout, json.loads(out_json.read_text())


def test_quick_eager(tmp_path: Path) -> None:
    """One round, one child process: its first call timed, equal to eager, no compile."""
    stdout, data = run_bench(tmp_path, "eager")
    assert "| model" in stdout and "First call" in stdout and "| lstm" in stdout
    assert data["settings"]["quick"] is True and data["settings"]["rounds"] == 1
    assert data["settings"]["modes"] == ["eager"] and list(data["modes"]) == ["eager"]
    [r] = data["results"]
    assert set(r) >= RESULT_FIELDS, r
    assert (r["model"], r["mode"], r["round"]) == ("lstm", "eager", 0)
    assert r["mismatch"] is None and r["magpy"] is None
    assert 0 < r["first_call_s"] < r["process_s"]
    assert r["fx"] == {} and r["aot"] == {}


@pytest.mark.slow
@pytest.mark.inductor
def test_quick_magpy_cold_then_warm(tmp_path: Path) -> None:
    """ResNet-18: MagPy's cold process misses both caches and fills them; the warm one hits
    them only, with the same records and graphs, and both equal eager. (Not the LSTM: its
    ``LSTMCell`` calls are opaque to AOTAutograd's cache check, which bypasses that cache.)"""
    _, data = run_bench(tmp_path, "magpy-cold,magpy-warm", model="resnet18")
    cold, warm = data["results"]
    assert (cold["mode"], warm["mode"]) == ("magpy-cold", "magpy-warm")
    for r in (cold, warm):
        assert "error" not in r, r
        assert r["mismatch"] is None, r
        assert r["magpy"]["records"] >= 1 and r["magpy"]["graphs"] >= 1, r
    assert cold["magpy"] == warm["magpy"]
    graphs = cold["magpy"]["graphs"]
    assert cold["fx"] == {"miss": graphs} and cold["aot"].get("bypass", 0) == 0, cold
    assert warm["fx"] == {"hit": graphs} and warm["aot"] == {"hit": graphs}, warm
