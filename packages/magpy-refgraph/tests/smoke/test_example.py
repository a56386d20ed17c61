"""Smoke test: the example script runs with only magpy-refgraph importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import magpy_refgraph

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refgraph_demo.py"


def _env() -> dict[str, str]:
    """The current environment, with the imported magpy_refgraph findable from any cwd."""
    src = str(Path(magpy_refgraph.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_demo_script_runs_and_writes_dot(tmp_path: Path) -> None:
    """refgraph_demo.py prints dump, guards, aliases and mock set, and writes a DOT file."""
    out = tmp_path / "graph.dot"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), str(out)],
        check=True,
        capture_output=True,
        text=True,
        env=_env(),
    )
    text = proc.stdout
    assert "RefGraph: 8 nodes" in text
    assert "G['CFG']['act']" in text and "L['self'].layers" in text
    assert "L.w  ==  L.self.layers[2].weight   (same object: True)" in text
    assert "created  SN#1.last = SN#7" in text
    assert out.read_text(encoding="utf-8").startswith("digraph RefGraph {")
    assert "torch" not in proc.stderr


def test_demo_script_without_argument_writes_nothing(tmp_path: Path) -> None:
    """Without an output argument the script only prints."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    assert "DOT written" not in proc.stdout
    assert list(tmp_path.iterdir()) == []
