"""Benchmark the static path: eager vs ``torch.compile`` vs MagPy, side by side.

    python integration/bench_static.py --backend eager
    python integration/bench_static.py --backend inductor --threads 1 --calls 300

For each model (the conformance models c_convnet, c_attention_with_mask, c_tiny_gpt from
``../shared/conformance/programs.py``, and an MLP) it prints one Markdown table row:

- steady-state latency (median of ``--calls`` timed calls after ``--warmup`` calls) of eager,
  ``torch.compile`` (``--torch-backend``, Inductor by default) and ``magpy.compile``
  (``--backend``), with the speedup over eager;
- MagPy's own per-call cost: the median of calling its compiled graph directly
  (``__magpy_graph(*inputs)``), of its guard alone, and ``overhead`` = full call - graph alone;
- first-call times (MagPy: monitor + codegen + backend compile, with the backend's share in
  parentheses; ``torch.compile``: Dynamo + backend compile) and graph counts.

The variants are timed round-robin (one call of each in turn, the order rotated every round), so
machine drift hits all of them alike. Everything runs under ``torch.no_grad()`` unless ``--grad``
is given. The packages must be importable (installed, or PYTHONPATH set to the packages' ``src``
folders).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import magpy
from magpy_codegen import resolve_backend

CONFORMANCE_DIR = Path(
    os.environ.get(
        "MAGPY_CONFORMANCE_DIR",
        Path(__file__).resolve().parents[1].parent / "shared" / "conformance",
    )
)
CONFORMANCE_MODELS = ["c_convnet", "c_attention_with_mask", "c_tiny_gpt"]

Inputs = tuple[list[Any], dict[str, Any]]


class MLP(nn.Module):
    def __init__(self, d_in: int = 64, d_hidden: int = 256, d_out: int = 10) -> None:
        super().__init__()
        self.l1 = nn.Linear(d_in, d_hidden)
        self.l2 = nn.Linear(d_hidden, d_hidden)
        self.l3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.l1(x))
        x = F.relu(self.l2(x))
        return self.l3(x)


def _load_programs() -> types.ModuleType | None:
    path = CONFORMANCE_DIR / "programs.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_magpy_conformance_programs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build(name: str, programs: types.ModuleType | None) -> tuple[Any, Inputs]:
    """A fresh model and its inputs (seeded, so every variant sees the same weights)."""
    torch.manual_seed(0)
    if name == "mlp":
        return MLP().eval(), ([torch.randn(32, 64)], {})
    if programs is None:
        raise SystemExit(
            f"conformance programs not found in {CONFORMANCE_DIR}; "
            "set MAGPY_CONFORMANCE_DIR or use --models mlp"
        )
    fn, make = programs.CASES[name]["build"]()
    args, kwargs = make(0)
    return fn, (list(args), dict(kwargs))


def leaves(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in leaves(v)]
    return []


def same(a: Any, b: Any) -> bool:
    la, lb = leaves(a), leaves(b)
    return len(la) == len(lb) and all(
        x.shape == y.shape and torch.allclose(x, y, rtol=1e-3, atol=1e-4)
        for x, y in zip(la, lb, strict=True)
    )


def timed_first_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def round_robin(
    variants: dict[str, Callable[[], Any]], warmup: int, calls: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds per call of each variant, timed one call of each in turn, and each
    variant's spread (interquartile range / median)."""
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    clock = time.perf_counter_ns
    order = list(variants.items())
    for r in range(calls):
        # Rotate the order every round: a variant that leaves worker threads spinning (OpenMP
        # after an Inductor kernel) must not always slow down the same successor.
        k0 = r % len(order)
        for k, fn in order[k0:] + order[:k0]:
            t0 = clock()
            fn()
            times[k].append(clock() - t0)
    med = {k: statistics.median(v) * 1e-9 for k, v in times.items()}
    spread = {}
    for k, v in times.items():
        q1, _, q3 = statistics.quantiles(v, n=4)
        spread[k] = (q3 - q1) * 1e-9 / med[k]
    return med, spread


def bench_model(
    name: str, programs: types.ModuleType | None, args: argparse.Namespace
) -> dict[str, Any]:
    model, (pos, kw) = build(name, programs)
    eager_model = model
    tc_model = copy.deepcopy(model)
    mp_model = copy.deepcopy(model)

    # ---- first calls (compile cost) -----------------------------------------------------
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    tc = torch.compile(tc_model, backend=args.torch_backend)
    want = eager_model(*pos, **kw)
    tc_out, tc_first = timed_first_call(lambda: tc(*pos, **kw))
    tc_graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    magpy.reset()
    inner_backend = resolve_backend(args.backend)
    backend_seconds = [0.0]

    def timed_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return inner_backend(gm, example_inputs)
        finally:
            backend_seconds[0] += time.perf_counter() - t0

    mp = magpy.compile(mp_model, backend=timed_backend)
    mp_out, mp_first = timed_first_call(lambda: mp(*pos, **kw))
    mp(*pos, **kw)  # the first hit
    st = magpy.stats(mp)
    if st.hits != 1 or st.records != 1:
        raise SystemExit(f"{name}: MagPy did not capture one record that hits: {st}")

    # ---- MagPy internals: the compiled graph alone, the guard alone -----------------------
    state = mp._magpy_state
    rec = state.records[0]
    original = mp._magpy_original
    graph = rec.mock_code.globals.get("__magpy_graph")
    if graph is None:
        raise SystemExit(f"{name}: MagPy's record has no graph")
    graph_inputs = rec.guard.check(original, tuple(pos), kw)
    if graph_inputs is None:
        raise SystemExit(f"{name}: the guard rejects the inputs it was recorded with")
    guard = rec.guard.check
    pos_t = tuple(pos)  # what CacheState.call passes the guard

    variants: dict[str, Callable[[], Any]] = {
        "eager": lambda: eager_model(*pos, **kw),
        "torch.compile": lambda: tc(*pos, **kw),
        "magpy": lambda: mp(*pos, **kw),
        "magpy graph": lambda: graph(*graph_inputs),
        "magpy guard": lambda: guard(original, pos_t, kw),
    }
    hits_before = magpy.stats(mp).hits
    med, spread = round_robin(variants, args.warmup, args.calls)
    hits = magpy.stats(mp).hits - hits_before
    expected_hits = args.warmup + args.calls
    ok = same(tc_out, want) and same(mp_out, want) and same(mp(*pos, **kw), want)
    st = magpy.stats(mp)
    tc_graphs_after = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    return {
        "name": name,
        "med": med,
        "spread": max(spread[k] for k in ("eager", "torch.compile", "magpy")),
        "tc_first": tc_first,
        "mp_first": mp_first,
        "mp_backend": backend_seconds[0],
        "mp_records": st.records,
        "mp_graphs": st.graphs,
        "mp_ops": rec.op_count,
        "tc_graphs": tc_graphs,
        "tc_recompiled": tc_graphs_after != tc_graphs,
        "all_hits": hits == expected_hits and st.misses == 1,
        "ok": ok,
    }


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def ratio(base: float, x: float) -> str:
    return f"{base / x:.2f}x"


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n### MagPy static path: backend={args.backend!r}, torch.compile "
        f"backend={args.torch_backend!r}"
    )
    print(
        f"\ntorch {torch.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()} ({os.cpu_count()} CPUs), torch.set_num_threads("
        f"{torch.get_num_threads()}), grad {'enabled' if args.grad else 'disabled'}, "
        f"median of {args.calls} round-robin calls after {args.warmup} warm-up calls.\n"
    )
    print(
        "| model | eager µs | torch.compile µs | MagPy µs | MagPy graph only µs "
        "| MagPy guard µs | MagPy overhead µs | 1st call torch.compile s "
        "| 1st call MagPy s (backend) | MagPy records / graphs / ops | Dynamo graphs "
        "| correct, all hits | IQR |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|")
    for r in rows:
        m = r["med"]
        e = m["eager"]
        tc_graphs = f"{r['tc_graphs']}" + (" (recompiled)" if r["tc_recompiled"] else "")
        print(
            f"| {r['name']} | {us(e)} | {us(m['torch.compile'])} ({ratio(e, m['torch.compile'])})"
            f" | {us(m['magpy'])} ({ratio(e, m['magpy'])}) | {us(m['magpy graph'])} "
            f"| {us(m['magpy guard'])} | {us(m['magpy'] - m['magpy graph'])} "
            f"| {r['tc_first']:.2f} | {r['mp_first']:.2f} ({r['mp_backend']:.2f}) "
            f"| {r['mp_records']} / {r['mp_graphs']} / {r['mp_ops']} | {tc_graphs} "
            f"| {'yes' if r['ok'] else 'NO'}, {'yes' if r['all_hits'] else 'NO'} "
            f"| {r['spread']:.0%} |"
        )
    print(
        "\n(x) = speedup over eager. MagPy overhead = MagPy call - its graph called directly "
        "(guard + mock + wrapper). IQR = the largest interquartile range / median of the three "
        "latencies (noise: above ~20% the machine was busy; rerun)."
    )


def main(argv: list[str] | None = None) -> int:
    all_models = [*CONFORMANCE_MODELS, "mlp"]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=all_models, choices=all_models)
    ap.add_argument(
        "--backend",
        default="inductor",
        help="MagPy backend: inductor, eager or aot_eager (default inductor)",
    )
    ap.add_argument(
        "--torch-backend", default="inductor", help="torch.compile backend (default inductor)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads (default 1: small models on a shared machine give stable "
        "medians with one thread; OpenMP workers spin and stall when cores are oversubscribed)",
    )
    ap.add_argument("--calls", type=int, default=200, help="timed calls per variant")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls per variant first")
    ap.add_argument("--grad", action="store_true", help="run with autograd enabled")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    programs = _load_programs()
    rows = []
    t0 = time.perf_counter()
    for name in args.models:
        print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
        if args.grad:
            rows.append(bench_model(name, programs, args))
        else:
            with torch.no_grad():
                rows.append(bench_model(name, programs, args))
    print_table(rows, args)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    return 0 if all(r["ok"] and r["all_hits"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
