"""A program for ``magpy explain`` (``integration/test_explain_cli.py``) with one graph break.

``scale_and_report`` prints halfway (I/O runs natively: a graph break), so MagPy captures two
graphs, one on each side of the ``print``. Run as a script (``python explain_break.py [N]``), it
compiles the function with ``magpy.compile`` and calls it N times (default 3).
"""

from __future__ import annotations

import sys

import torch

import magpy


def scale_and_report(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    y = torch.sin(x) * scale
    print("scale_and_report: halfway")
    return torch.relu(y) + 1


def example_inputs() -> tuple[tuple[torch.Tensor], dict[str, float]]:
    return (torch.randn(4, 4),), {"scale": 3.0}


if __name__ == "__main__":
    fast = magpy.compile(scale_and_report, backend="eager")
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        fast(torch.randn(4, 4))
