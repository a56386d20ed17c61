"""Fail if any module under packages/*/src is longer than MAX_LINES (run by ``nox -s sizes``).

STYLE.md aims for modules of ~600 lines; 900 is the hard limit. Split a module before it gets
there. Usage: ``python tools/check_sizes.py [--top N]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 900


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top", type=int, default=5, help="how many of the largest to print")
    args = parser.parse_args(argv)

    sizes = sorted(
        (
            (len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(ROOT))
            for p in ROOT.glob("packages/*/src/**/*.py")
        ),
        reverse=True,
    )
    total = sum(n for n, _ in sizes)
    print(f"{len(sizes)} modules, {total} lines; largest:")
    for n, path in sizes[: args.top]:
        print(f"  {n:5d}  {path}")
    too_big = [(n, path) for n, path in sizes if n > MAX_LINES]
    for n, path in too_big:
        print(f"error: {path} has {n} lines; the limit is {MAX_LINES}. Split it.")
    return 1 if too_big else 0


if __name__ == "__main__":
    sys.exit(main())
