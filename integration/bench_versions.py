"""MagPy beside TorchDynamo on the running CPython: first-call capture time and a hit's cost.

    python -m integration.bench_versions [--models a,b] [--rounds 5] [--calls 50] [--out F]

``nox -s "bench_versions-3.12"`` (and ``-3.11``, ``-3.13``) runs it under each supported
interpreter, so the per-version tables sit side by side (docs/cpython.md).

- **Capture**: the first call of a freshly compiled model, ``backend="eager"`` for both (no
  backend compile in the figure): MagPy monitors the call and builds its record; TorchDynamo
  traces the frame and builds its guards. Each round resets both compilers and builds each
  model anew, MagPy and TorchDynamo alternating; the median of the rounds is reported.
- **Hit**: ``bench_overhead.measure`` (the replay backend: only the compilers' own per-call work).
- **Per instruction** (``--events``): what watching one instruction costs on this interpreter.
  The raw event mechanisms with a callback that does nothing (``sys.settrace`` opcode events;
  ``sys.monitoring`` INSTRUCTION events from 3.12), and MagPy's own monitored run: the first
  call of a function whose Python loop runs *n* times, at two sizes, so the fixed cost of
  building the record cancels: (T(n2) - T(n1)) / (I(n2) - I(n1)), I counted by opcode events.

One thread; the noise column is the spread of the rounds (max/min - 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

import magpy

from .bench_overhead import MODELS, measure

DEFAULT_MODELS = "resnet18,transformer,bert-base,gpt2,t5-small"


def _first_call(compiler: str, name: str) -> float:
    model, args, kwargs = MODELS[name]()
    magpy.reset()
    torch._dynamo.reset()
    compiled = (
        magpy.compile(model, backend="eager")
        if compiler == "magpy"
        else torch.compile(model, backend="eager")
    )
    with torch.no_grad():
        start = time.perf_counter()
        compiled(*args, **kwargs)
        return time.perf_counter() - start


def capture(name: str, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"magpy": [], "dynamo": []}
    for _ in range(rounds):
        for compiler in ("magpy", "dynamo"):
            samples[compiler].append(_first_call(compiler, name))
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "model": name,
        "capture_magpy_s": med["magpy"],
        "capture_dynamo_s": med["dynamo"],
        "capture_ratio": med["magpy"] / med["dynamo"],
        "capture_noise": {k: max(v) / min(v) - 1 for k, v in samples.items()},
    }


def _loop(x: torch.Tensor, n: int) -> torch.Tensor:
    s = 0
    for i in range(n):
        s += i * 2 % 7
    return x + s


def _instructions(x: torch.Tensor, n: int) -> int:
    """Instructions executed by ``_loop(x, n)`` (opcode events of a trace function; 3.12+:
    ``sys.monitoring`` INSTRUCTION events)."""
    count = [0]
    if hasattr(sys, "monitoring"):
        _monitoring_instructions(x, n, lambda code, offset: count.__setitem__(0, count[0] + 1))
        return count[0]

    _settrace_opcodes(x, n, count)
    return count[0]


def _ns_per_instruction(run: Any, n1: int, n2: int, rounds: int) -> float:
    """The median over ``rounds`` of (T(n2) - T(n1)) / (I(n2) - I(n1)), in nanoseconds."""
    x = torch.ones(2)
    extra = _instructions(x, n2) - _instructions(x, n1)
    samples = []
    for _ in range(rounds):
        times = []
        for n in (n1, n2):
            start = time.perf_counter()
            run(x, n)
            times.append(time.perf_counter() - start)
        samples.append((times[1] - times[0]) / extra * 1e9)
    return statistics.median(samples)


def _settrace_opcodes(x: torch.Tensor, n: int, count: list[int] | None = None) -> None:
    """``_loop(x, n)`` under a trace function taking opcode events (counted into ``count``)."""

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if count is not None and event == "opcode":
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        _loop(x, n)
    finally:
        sys.settrace(None)


def _monitoring_instructions(x: torch.Tensor, n: int, callback: Any = None) -> None:
    mon = sys.monitoring  # type: ignore[attr-defined]
    tool = mon.PROFILER_ID
    mon.use_tool_id(tool, "bench_versions")
    try:
        callback = callback or (lambda code, offset: None)
        mon.register_callback(tool, mon.events.INSTRUCTION, callback)
        mon.set_local_events(tool, _loop.__code__, mon.events.INSTRUCTION)
        _loop(x, n)
    finally:
        mon.set_local_events(tool, _loop.__code__, 0)
        mon.register_callback(tool, mon.events.INSTRUCTION, None)
        mon.free_tool_id(tool)


def _magpy_first_call(x: torch.Tensor, n: int) -> None:
    magpy.reset()
    magpy.compile(_loop, backend="eager")(x, n)


def events(rounds: int, n1: int = 2000, n2: int = 12000) -> dict[str, float | None]:
    """Nanoseconds per instruction: plain, the raw event mechanisms, MagPy's monitored run."""
    runs: dict[str, Any] = {
        "plain": _loop,
        "settrace": _settrace_opcodes,
        "monitoring": _monitoring_instructions if hasattr(sys, "monitoring") else None,
        "magpy": _magpy_first_call,
    }
    return {
        name: None if run is None else _ns_per_instruction(run, n1, n2, rounds)
        for name, run in runs.items()
    }


def table(rows: list[dict[str, Any]]) -> str:
    version = ".".join(map(str, sys.version_info[:3]))
    out = [
        f"CPython {version}, torch {torch.__version__}, one thread",
        "",
        "| model | capture MagPy s | capture TorchDynamo s | ratio | hit MagPy µs | hit "
        "TorchDynamo µs | ratio | noise (capture; hit) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cn, hn = r["capture_noise"], r["noise"]
        flag = "" if r["one_graph"] else " (not one graph)"
        out.append(
            f"| {r['model']}{flag} | {r['capture_magpy_s']:.2f} | {r['capture_dynamo_s']:.2f} "
            f"| {r['capture_ratio']:.2f} | {r['magpy_us']:.0f} | {r['dynamo_us']:.0f} "
            f"| {r['ratio']:.2f} | {cn['magpy']:.0%}/{cn['dynamo']:.0%}; "
            f"{hn['magpy']:.0%}/{hn['dynamo']:.0%} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated names")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", help="also write the rows as JSON to this file")
    ap.add_argument("--events", action="store_true", help="only the per-instruction costs")
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    if opts.events:
        got = events(opts.rounds)
        version = ".".join(map(str, sys.version_info[:3]))
        cells = " | ".join("-" if v is None else f"{v:.0f}" for v in got.values())
        print(f"| {version} | {cells} |")
        return 0
    rows = []
    for name in opts.models.split(","):
        try:
            row = capture(name, opts.rounds) | measure(name, opts.rounds, opts.calls)
        except Exception as exc:  # a model that fails is reported, the others still run
            print(f"{name}: not measured ({type(exc).__name__}: {exc})", flush=True)
            continue
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
