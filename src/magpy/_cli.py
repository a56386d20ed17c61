"""``magpy demo`` and ``magpy bench``: compile the bundled models and compare against eager.

Both commands time eager PyTorch, ``torch.compile`` and MagPy on the models in
``integration/models`` (our own implementations with random weights; found next to a source
checkout, or wherever ``MAGPY_MODELS_DIR`` points), check every result against eager, and print a
Markdown table.

This module parses the command line. The work is in ``magpy._commands`` (the commands),
``magpy._measure`` (timing and checking one model) and ``magpy._report`` (tables and chart),
which are imported only when a command runs; ``magpy._paths`` finds the bundled models and
Inductor's cache folder.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._paths import find_models_dir, inductor_cache_dir, load_models

__all__ = ["bench", "demo", "find_models_dir", "load_models", "main"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _run_command(name: str, args: argparse.Namespace) -> int:
    """Run the command ``name`` with its parsed ``args``."""
    inductor_cache_dir()  # first: importing torch._dynamo sets torch's default cache folder
    # Imported on first use: the commands import torch._dynamo and Inductor (seconds), which
    # `magpy --help` and usage errors never need.
    from ._commands import RUNNERS

    return RUNNERS[name](args)


def demo(argv: Sequence[str]) -> int:
    """``magpy demo``: three small models through MagPy and torch.compile with Inductor."""
    parser = argparse.ArgumentParser(
        prog="magpy demo",
        description="Compile a CNN (ResNet-18), a transformer (BERT-like) and a model with "
        "dynamic Python behaviour with MagPy and torch.compile (Inductor), check "
        "them against eager and compare latencies. About 5 minutes on 2 cores with "
        "a cold cache.",
    )
    parser.add_argument(
        "--threads", type=_positive, default=1, help="torch.set_num_threads (default 1)"
    )
    parser.add_argument("--batch", type=_positive, default=4, help="batch size (default 4)")
    parser.add_argument(
        "--repeat", type=_positive, default=20, help="timed calls per variant (default 20)"
    )
    parser.add_argument("--backend", default="inductor", help="backend for both compilers")
    return _run_command("demo", parser.parse_args(argv))


def bench(argv: Sequence[str]) -> int:
    """``magpy bench``: latency, speedups, capture and compile costs per model and batch."""
    registry = load_models().MODELS
    parser = _bench_parser(registry)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {sorted(registry)}")
    try:
        batches = [_positive(b) for b in args.batch.split(",")]
    except (ValueError, argparse.ArgumentTypeError):
        parser.error(f"--batch must be comma-separated positive integers, got {args.batch!r}")
    args.names, args.batches = names, batches
    return _run_command("bench", args)


def _bench_parser(registry: dict[str, Any]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magpy bench",
        description="Benchmark eager, torch.compile and MagPy on the bundled models.",
    )
    parser.add_argument(
        "--models",
        default=",".join(registry),
        help=f"comma-separated, from: {', '.join(registry)} (default: all)",
    )
    parser.add_argument("--batch", default="1,8", help="comma-separated batch sizes (default 1,8)")
    parser.add_argument(
        "--threads", type=_positive, default=1, help="torch.set_num_threads (default 1)"
    )
    parser.add_argument(
        "--backend",
        default="inductor",
        help="backend of torch.compile and MagPy (default inductor)",
    )
    parser.add_argument(
        "--size", choices=["small", "bench"], default="bench", help="model size (default bench)"
    )
    parser.add_argument(
        "--repeat", type=_positive, default=20, help="timed calls per variant (default 20)"
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--plot", type=Path, help="write a PNG bar chart of speedups here")
    return parser


COMMANDS: dict[str, tuple[str, Callable[[Sequence[str]], int]]] = {
    "demo": ("compile three small models with MagPy and torch.compile and compare", demo),
    "bench": ("benchmark eager, torch.compile and MagPy on the bundled models", bench),
}


def main(argv: Sequence[str] | None = None) -> int:
    """``magpy {demo,bench,explain} ...``."""
    parser = argparse.ArgumentParser(prog="magpy", description="MagPy, a JIT compiler for PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,bench,explain}")
    for name, (help_text, _) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    sub.add_parser(
        "explain", help="explain what MagPy captures for a function (not yet)", add_help=False
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "explain":
        print("magpy explain: not available yet; use magpy.explain(fn)(*args) from Python.")
        return 2
    return COMMANDS[args.command][1](rest)
