"""``magpy demo``, ``magpy bench``, ``magpy explain`` and ``magpy cache``.

``demo`` and ``bench`` time eager PyTorch, ``torch.compile`` and MagPy on the models in
``integration/models`` (our own implementations with random weights; found next to a source
checkout, or wherever ``MAGPY_MODELS_DIR`` points), check every result against eager, and print a
Markdown table.

This module parses the command line. The work is in ``magpy._commands`` (the commands),
``magpy._measure`` (timing and checking one model) and ``magpy._report`` (tables and chart),
which are imported only when a command runs; ``magpy._paths`` finds the bundled models and
Inductor's cache folder. ``magpy explain`` (``magpy._explain_cli``) explains what MagPy
captures of a function or a script (see ``explain`` below and the README). ``magpy cache
list|clear`` (``magpy._cache_cli``) shows or deletes the records stored on disk
(``MAGPY_RECORDS_DIR``, docs/persistent.md). ``magpy run`` (``magpy._run_cli``) runs a program as
``python`` would, with ``torch.compile`` served by MagPy (``magpy.use_for_torch_compile``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from magpy_runtime._config import environ

from ._paths import find_models_dir, inductor_cache_dir, load_models

__all__ = [
    "bench",
    "cache",
    "demo",
    "explain",
    "find_models_dir",
    "load_models",
    "main",
    "run",
]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _run_command(
    name: str, args: argparse.Namespace, parser: argparse.ArgumentParser | None = None
) -> int:
    """Run the command ``name`` with its parsed ``args`` (``parser`` reports usage errors)."""
    # Imported on first use: the commands import torch, torch._dynamo and Inductor (seconds),
    # which `magpy --help` and usage errors never need.
    if name == "explain" and parser is not None:
        # (the program's own Inductor cache folder, whatever it is, stays as it is)
        from ._explain_cli import run

        return run(args, parser.error)
    if name == "run":  # (the program's own Inductor cache folder stays as it is)
        from ._run_cli import run_program

        return run_program(args.target, args.args, module=args.module, explain=args.explain)
    if name == "cache":  # (imports the runtime, hence torch; not Inductor)
        from ._cache_cli import run as run_cache

        return run_cache(args)
    inductor_cache_dir()  # first: importing torch._dynamo sets torch's default cache folder
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


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive integer, got {text}")
    return value


def split_target(text: str) -> tuple[str, str | None]:
    """``"path/x.py:fn"`` -> ``("path/x.py", "fn")``, ``"x.py"`` -> ``("x.py", None)``; the
    part after the last colon names a callable only where it is a dotted name (so a path
    ``C:\\x.py`` stays a path)."""
    where, colon, name = text.rpartition(":")
    if colon and where and all(part.isidentifier() for part in name.split(".")):
        return where, name
    return text, None


def explain(argv: Sequence[str]) -> int:
    """``magpy explain``: what MagPy captures of a callable or a script (docs in the README).

    Mistakes found without running the program (a missing script, arguments given to a
    callable, a report path that is a file) are reported here, before torch is imported."""
    parser = _explain_parser()
    args = parser.parse_intermixed_args(argv)  # (ARGS may follow the options, after a --)
    args.where, args.callable = split_target(args.target)
    script = Path(args.where)
    if not args.module and not script.is_file():
        problem = "is not a file" if script.exists() else "no such file"
        parser.error(f"{script}: {problem} (a Python script, or -m package.module)")
    if args.args and args.callable is not None:
        parser.error(
            f"arguments after {args.target} are the script's sys.argv when it runs as "
            "__main__ (no :CALLABLE); a callable takes its arguments from example_inputs()"
        )
    if args.report is not None and args.report.exists() and not args.report.is_dir():
        parser.error(f"--report {args.report}: is a file, not a directory")
    return _run_command("explain", args, parser)


def _explain_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magpy explain",
        description="Explain what MagPy captures: graphs, graph breaks (file:line), records "
        "and their guards, assumed values, and the time outside compiled graphs. "
        "TARGET:CALLABLE explains one call of CALLABLE (a function, an nn.Module instance or "
        "a dotted path like model.encoder) with the arguments TARGET's example_inputs() "
        "returns: a tuple of positional arguments, or a pair (args_tuple, kwargs_dict). "
        "TARGET alone runs the script (or -m module) as __main__ and explains every callable "
        "it compiles with magpy.compile, from the calls it makes.",
    )
    parser.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="TARGET is a module name (package.module[:CALLABLE]), imported as python -m does",
    )
    parser.add_argument("target", metavar="TARGET", help="path/to/script.py[:CALLABLE]")
    parser.add_argument(
        "args",
        metavar="ARGS",
        nargs="*",
        help="the script's arguments when it runs as __main__ (put -- before them)",
    )
    parser.add_argument(
        "--report", type=Path, metavar="DIR", help="also write an HTML report, DIR/index.html"
    )
    parser.add_argument(
        "--calls",
        type=_non_negative,
        default=5,
        help="TARGET:CALLABLE: more calls, compiled with magpy.compile, that measure the time "
        "outside compiled graphs (default 5; 0: none)",
    )
    parser.add_argument(
        "--backend",
        choices=["eager", "aot_eager", "inductor"],
        default="eager",
        help="backend of those calls (default eager: no compile time)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print each graph's code, guard and mock"
    )
    return parser


_RUN_USAGE = "magpy run [-h] [--explain] (SCRIPT | -m MODULE) [ARGS ...]"


def run(argv: Sequence[str]) -> int:
    """``magpy run``: a program run as ``python`` runs it, ``torch.compile`` being MagPy's.

    Options come before the program; everything after ``SCRIPT`` or ``-m MODULE`` is the
    program's ``sys.argv[1:]``, untouched (as for ``python``)."""
    parser = _run_parser()
    explain_at_exit, module, rest = False, False, list(argv)
    while rest and rest[0].startswith("-") and not module:
        option = rest.pop(0)
        if option == "--explain":
            explain_at_exit = True
        elif option == "-m":
            module = True
        elif option in ("-h", "--help"):
            parser.print_help()
            return 0
        elif option != "--":
            parser.error(f"unknown option {option} (options go before the program)")
        else:
            break
    if not rest:
        parser.error("name the program: a script, or -m MODULE")
    target, args = rest[0], rest[1:]
    if not module and not Path(target).is_file():
        problem = "is not a file" if Path(target).exists() else "no such file"
        parser.error(f"{target}: {problem} (a Python script, or -m package.module)")
    namespace = argparse.Namespace(target=target, args=args, module=module, explain=explain_at_exit)
    return _run_command("run", namespace)


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magpy run",
        usage=_RUN_USAGE,
        description="Run a Python program as `python` would (sys.argv, __main__, exit status, "
        "tracebacks), with torch.compile and nn.Module.compile served by MagPy (magpy.compile). "
        "A call MagPy cannot honour (a backend or option only TorchDynamo knows) warns once "
        "and goes to the real torch.compile. Options go before the program; what follows it "
        "is its own argv.",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="at exit, print to stderr what each compiled callable captured and where it "
        "broke, and the calls that went to TorchDynamo",
    )
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    parser.add_argument("script", metavar="SCRIPT", nargs="?", help="the script to run")
    parser.add_argument("args", metavar="ARGS", nargs="*", help="the program's arguments")
    return parser


def cache(argv: Sequence[str]) -> int:
    """``magpy cache list`` / ``magpy cache clear``: the records stored on disk."""
    parser = argparse.ArgumentParser(
        prog="magpy cache",
        description="List or delete the records MagPy stored on disk (persistent records, "
        "docs/persistent.md): the directory --dir, else MAGPY_RECORDS_DIR.",
    )
    parser.add_argument("action", choices=["list", "clear"], help="list or delete the entries")
    parser.add_argument("--dir", type=Path, help="the directory (default: $MAGPY_RECORDS_DIR)")
    args = parser.parse_args(argv)
    if args.dir is None:
        where = environ("MAGPY_RECORDS_DIR").strip()
        if not where:
            parser.error("no directory: pass --dir DIR or set MAGPY_RECORDS_DIR")
        args.dir = Path(where)
    return _run_command("cache", args)


COMMANDS: dict[str, tuple[str, Callable[[Sequence[str]], int]]] = {
    "demo": ("compile three small models with MagPy and torch.compile and compare", demo),
    "bench": ("benchmark eager, torch.compile and MagPy on the bundled models", bench),
    "explain": ("explain what MagPy captures of a callable or a script", explain),
    "cache": ("list or delete the records stored on disk (MAGPY_RECORDS_DIR)", cache),
    "run": ("run a program with torch.compile served by MagPy", run),
}


def main(argv: Sequence[str] | None = None) -> int:
    """``magpy {demo,bench,explain,cache,run} ...``."""
    parser = argparse.ArgumentParser(prog="magpy", description="MagPy, a JIT compiler for PyTorch.")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}"
    )
    for name, (help_text, _) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:  # (the program's arguments reach it exactly as given)
        return run(argv[1:])
    args, rest = parser.parse_known_args(argv)
    return COMMANDS[args.command][1](rest)
