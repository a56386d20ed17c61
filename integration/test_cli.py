"""The ``magpy`` command line, lightly: help texts, and ``magpy bench`` on one tiny model with
the eager backend (no Inductor compile, a few seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from magpy import _cli


@pytest.fixture(autouse=True)
def _dynamo_reset() -> Iterator[None]:
    """torch.compile's caches and the thread count are process-wide: leave them as found."""
    threads = torch.get_num_threads()
    yield
    torch._dynamo.reset()
    torch.set_num_threads(threads)


def test_python_dash_m_magpy_help() -> None:
    """``python -m magpy --help`` exits 0 and names both commands."""
    out = subprocess.run(
        [sys.executable, "-m", "magpy", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
    )
    assert out.returncode == 0, out.stderr
    assert "demo" in out.stdout and "bench" in out.stdout


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_subcommand_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``magpy demo --help`` and ``magpy bench --help`` print usage and exit 0."""
    with pytest.raises(SystemExit) as exit_info:
        _cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: magpy {command}" in capsys.readouterr().out


def test_bench_rejects_an_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown model name is a usage error that lists the known ones."""
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(["bench", "--models", "nope"])
    assert exit_info.value.code == 2
    assert "resnet18" in capsys.readouterr().err


def test_bench_one_tiny_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench on qat_cnn (small, eager backend, 3 rounds): progress, a Markdown table with one
    row per batch that matches eager, the JSON file, and the plot or a line saying it was
    skipped."""
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    code = _cli.main(
        [
            "bench",
            "--models", "qat_cnn",
            "--size", "small",
            "--batch", "1,2",
            "--backend", "eager",
            "--repeat", "3",
            "--json", str(out_json),
            "--plot", str(out_png),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[bench] qat_cnn batch 1:" in out and "[bench] qat_cnn batch 2:" in out
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].startswith("| model") and "MagPy ms" in table[0]
    assert [row.split("|")[1].strip() for row in table[2:]] == ["qat_cnn", "qat_cnn"]
    assert all(row.rstrip(" |").endswith("yes") for row in table[2:])

    data = json.loads(out_json.read_text())
    assert data["environment"]["threads"] == 1
    (r1, r2) = data["results"]
    assert (r1["batch"], r2["batch"], r1["ok"]) == (1, 2, True)
    assert (r1["magpy_records"], r1["magpy_graphs"], r1["magpy_breaks"]) == (1, 1, 0)
    assert set(r1["latency_ms"]) == {"eager", "MagPy", "torch.compile"}
    assert r1["magpy_phases_s"]["monitor"] > 0  # the runtime functions it times still exist
    assert r1["magpy_overhead_us"] is not None
    if out_png.exists():
        assert out_png.read_bytes().startswith(b"\x89PNG")
    else:
        assert "plot skipped" in out
