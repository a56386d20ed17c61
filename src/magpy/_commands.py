"""What ``magpy demo`` and ``magpy bench`` do once ``magpy._cli`` has parsed their arguments.

``magpy._cli`` imports this module only when a command runs, after pointing Inductor's cache at
MagPy's folder: it imports torch._dynamo and Inductor (through ``magpy._measure``), which
``magpy --help`` does not need, and importing them fixes the cache folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import magpy

from ._measure import (
    CaseResult,
    Log,
    environment,
    ignore_magpy_warnings,
    mismatch,
    own_cache,
    run_case,
    start_backend,
)
from ._paths import inductor_cache_dir, load_models
from ._report import bench_table, demo_table, fmt_ms, fmt_x, notes, plot

__all__ = ["DEMO_MODELS", "RUNNERS", "bench", "demo"]

DEMO_MODELS = ("resnet18", "transformer", "dynamic")


def _progress(prog: str) -> Log:
    def log(message: str) -> None:
        print(f"[{prog}] {message}", flush=True)

    return log


def _setup(prog: str, threads: int, backend: str) -> tuple[Log, str]:
    """Threads, Inductor's cache and process start; returns the logger and a note for the end."""
    log = _progress(prog)
    cache = inductor_cache_dir()
    torch.set_num_threads(threads)
    env = environment(threads)
    log(
        f"MagPy {env['magpy']}, torch {env['torch']}, Python {env['python']}, "
        f"{env['cpus']} CPUs, torch.set_num_threads({threads})"
    )
    log(f"Inductor cache: {cache} (a cold cache costs 30-90 s per compile)")
    started = start_backend(backend, log)
    note = (
        f"Inductor's once-per-process start took {started:.1f} s, before any model and in "
        "neither first-call column; each compiler compiles into its own cache folder."
        if backend == "inductor"
        else ""
    )
    return log, note


# ------------------------------------------------------------------------------ demo
def demo(args: argparse.Namespace) -> int:
    """``magpy demo``: three small models through MagPy and torch.compile with Inductor."""
    start = time.perf_counter()
    log, start_note = _setup("demo", args.threads, args.backend)
    registry = load_models().MODELS
    results = [_demo_case(name, registry[name], args, log) for name in DEMO_MODELS]
    flip = _flip_dynamic(registry["dynamic"], args.backend, args.batch, log)
    print()
    print(demo_table(results))
    print()
    for note in [*notes(results), *flip, start_note]:
        if note:
            print(f"- {note}")
    ok = all(r.ok for r in results) and not any("DIFFERS" in n for n in flip)
    log(
        f"done in {time.perf_counter() - start:.0f} s; "
        f"{'all results match eager' if ok else 'SOME RESULTS DIFFER FROM EAGER'}"
    )
    return 0 if ok else 1


def _demo_case(
    name: str, build: Callable[..., Any], args: argparse.Namespace, log: Log
) -> CaseResult:
    result = run_case(
        name,
        build,
        size="small",
        batch=args.batch,
        backend=args.backend,
        repeat=args.repeat,
        magpy_eager=False,
        log=log,
    )
    log(
        f"{name}: {'matches eager' if result.ok else 'DIFFERS FROM EAGER'}; "
        f"MagPy {fmt_x(result.speedup['MagPy'])}, torch.compile "
        f"{fmt_x(result.speedup['torch.compile'])} over eager"
    )
    return result


def _flip_dynamic(build: Callable[..., Any], backend: str, batch: int, log: Log) -> list[str]:
    """The dynamic model with its ``return_features`` flag flipped between calls: MagPy keeps
    one record per path, and the list the hooks fill matches eager after every call."""
    magpy.reset()
    model, make_inputs = build("small")
    compiled = magpy.compile(model, backend=backend)
    log(f"dynamic: flipping return_features between calls with MagPy ({backend})...")
    lines = []
    with torch.no_grad(), warnings.catch_warnings(), own_cache("magpy"):
        ignore_magpy_warnings()
        for i, flag in enumerate([False, True, False, True, True]):
            model.return_features = flag
            args = make_inputs(batch, 2000 + i)
            want = model(*args)
            want_features = list(model.features)
            got = compiled(*args)
            where = mismatch(got, want) or mismatch(list(model.features), want_features, "features")
            if where is not None:
                lines.append(f"dynamic (flag flips), call {i}: DIFFERS FROM EAGER: {where}")
    st = magpy.stats(compiled)
    lines.append(
        f"dynamic with return_features flipped over 5 calls: MagPy records={st.records} "
        f"hits={st.hits} misses={st.misses} breaks={st.breaks}; hooks' feature list "
        f"{'matches' if not lines else 'does NOT match'} eager; steps={model.steps}"
    )
    return lines


# ------------------------------------------------------------------------------ bench
def bench(args: argparse.Namespace) -> int:
    """``magpy bench``: latency, speedups, capture and compile costs per model and batch.

    ``args.names`` and ``args.batches`` are the models and batch sizes, already checked."""
    log, start_note = _setup("bench", args.threads, args.backend)
    registry = load_models().MODELS
    results = [
        _bench_case(name, registry[name], batch, args, log)
        for name in args.names
        for batch in args.batches
    ]
    print()
    print(bench_table(results))
    print()
    for note in [*notes(results), start_note]:
        if note:
            print(f"- {note}")
    if args.json:
        _write_json(args.json, results, args)
        log(f"wrote {args.json}")
    if args.plot:
        plot(results, args.plot, log)
    return 0 if all(r.ok for r in results) else 1


def _bench_case(
    name: str, build: Callable[..., Any], batch: int, args: argparse.Namespace, log: Log
) -> CaseResult:
    log(f"{name} batch {batch}: compiling and timing...")
    r = run_case(
        name,
        build,
        size=args.size,
        batch=batch,
        backend=args.backend,
        repeat=args.repeat,
        magpy_eager=args.backend != "eager",
        log=lambda _msg: None,
    )
    log(
        f"{name} batch {batch}: eager {fmt_ms(r.latency_ms['eager'])} ms, torch.compile "
        f"{fmt_ms(r.latency_ms['torch.compile'])} ms ({fmt_x(r.speedup['torch.compile'])}), "
        f"MagPy {fmt_ms(r.latency_ms['MagPy'])} ms ({fmt_x(r.speedup['MagPy'])}); first call "
        f"MagPy {r.first_call_s['MagPy']:.1f} s, torch.compile "
        f"{r.first_call_s['torch.compile']:.1f} s"
        f"{'' if r.ok else '; DIFFERS FROM EAGER'}"
    )
    return r


def _write_json(path: Path, results: list[CaseResult], args: argparse.Namespace) -> None:
    payload = {
        "environment": environment(args.threads),
        "settings": {
            "size": args.size,
            "backend": args.backend,
            "repeat": args.repeat,
            "batches": args.batches,
        },
        "results": [dataclasses.asdict(r) | {"ok": r.ok} for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


RUNNERS: dict[str, Callable[[argparse.Namespace], int]] = {"demo": demo, "bench": bench}
