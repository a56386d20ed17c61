"""``magpy demo|bench|explain``: a thin CLI over ``magpy_runtime.cli``.

Each subcommand calls ``magpy_runtime.cli.<name>(argv)`` when that function exists. Until the
runtime provides them, ``demo`` runs the RefGraph example from a source checkout and the others
say that they are not available yet.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

COMMANDS = {
    "demo": "run a small end-to-end demo",
    "bench": "run the benchmarks",
    "explain": "explain what magpy captures for a function",
}

# Placeholder demo, written by the refgraph engineer; found relative to a source checkout.
_REFGRAPH_DEMO = Path("packages", "magpy-refgraph", "examples", "refgraph_demo.py")


def _runtime_command(name: str) -> Callable[[list[str]], int | None] | None:
    """Return ``magpy_runtime.cli.<name>`` if the runtime defines it, else None."""
    if importlib.util.find_spec("magpy_runtime.cli") is None:
        return None
    cli = importlib.import_module("magpy_runtime.cli")
    command: Callable[[list[str]], int | None] | None = getattr(cli, name, None)
    return command


def _placeholder_demo(argv: list[str]) -> int:
    candidates = [Path.cwd() / _REFGRAPH_DEMO, Path(__file__).resolve().parents[2] / _REFGRAPH_DEMO]
    script = next((path for path in candidates if path.is_file()), None)
    print("magpy demo: the end-to-end demo is not written yet (magpy_runtime.cli.demo is missing).")
    if script is None:
        print(f"magpy demo: {_REFGRAPH_DEMO} not found either; nothing to run.")
        return 0
    print(f"magpy demo: running the RefGraph demo instead: {script}", flush=True)
    return subprocess.run([sys.executable, str(script), *argv], check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="magpy", description="MagPy, a JIT compiler for PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,bench,explain}")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)

    command = _runtime_command(args.command)
    if command is not None:
        return command(rest) or 0
    if args.command == "demo":
        return _placeholder_demo(rest)
    print(f"magpy {args.command}: not available yet (magpy_runtime.cli.{args.command} is missing).")
    return 2


if __name__ == "__main__":
    sys.exit(main())
