"""Compile time of a 12-block transformer, with and without ``nested_compile_region`` on the
block's forward: MagPy (Inductor) beside ``torch.compile`` (Inductor).

    python -m integration.bench_regions [--rounds 1] [--blocks 12] [--width 64] [--grad]

Each (compiler, marked) pair runs in a fresh process of its own, one thread, with fresh
``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` (so no on-disk cache of an earlier run hides
a compile). In it, the compiler first compiles and calls a small unrelated function (its
one-time imports and Inductor's C++ toolchain checks stay out of the figure); then the model is
built, and the figure is its first call (capture, or TorchDynamo's trace, plus the Inductor
compile; wall time, and CPU time of the process and the C++ compiler's runs, which a busy
machine inflates less), followed by a check that three calls on fresh inputs equal eager, and
the median time of 20 later calls (a marked model must not run slower). The table has the
medians over rounds.
``--grad`` runs the calls with autograd on (the compile then includes the backward's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIGS = (("magpy", False), ("magpy", True), ("torch", False), ("torch", True))

__all__ = ["main", "measure"]


def _model(blocks: int, width: int, marked: bool) -> Any:
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = 4
            self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.qkv = torch.nn.Linear(width, 3 * width)
            self.proj = torch.nn.Linear(width, width)
            self.fc1 = torch.nn.Linear(width, 4 * width)
            self.fc2 = torch.nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    if marked:
        Block.forward = torch.compiler.nested_compile_region(Block.forward)  # type: ignore[method-assign]

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(blocks))
            self.head = torch.nn.LayerNorm(width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    torch.manual_seed(0)
    return Model()


def measure(compiler: str, marked: bool, blocks: int, width: int, grad: bool) -> dict[str, Any]:
    """One process's figures (seconds): first call, later call; the invoke_subgraph count."""
    import torch

    import magpy

    torch.set_num_threads(1)

    def compile_(fn: Any) -> Any:
        if compiler == "magpy":
            return magpy.compile(fn, backend="inductor")
        return torch.compile(fn, backend="inductor")

    def warm(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin().sum(0)

    compile_(warm)(torch.randn(4, 4))  # (imports, toolchain checks: outside the figure)
    model = _model(blocks, width, marked)
    compiled = compile_(model)
    inputs = [torch.randn(2, 16, width) for _ in range(4)]
    with torch.set_grad_enabled(grad):
        start, cpu = time.perf_counter(), _cpu_seconds()
        compiled(inputs[0])
        first, first_cpu = time.perf_counter() - start, _cpu_seconds() - cpu
        for x in inputs[1:]:
            if not torch.allclose(compiled(x), model(x), atol=1e-4, rtol=1e-4):
                raise AssertionError(f"{compiler} marked={marked}: differs from eager")
        later, later_cpu = [], []
        for _ in range(20):
            start, cpu = time.perf_counter(), time.process_time()
            compiled(inputs[1])
            later.append(time.perf_counter() - start)
            later_cpu.append(time.process_time() - cpu)
    invokes = -1
    if compiler == "magpy":
        gm = compiled._magpy_state.records[0].graph_module
        hop = torch.ops.higher_order.invoke_subgraph
        invokes = sum(1 for n in gm.graph.nodes if n.target is hop)
    later_s, later_cpu_s = statistics.median(later), statistics.median(later_cpu)
    return {
        "first": first,
        "first_cpu": first_cpu,
        "later": later_s,
        "later_cpu": later_cpu_s,
        "invokes": invokes,
    }


def _cpu_seconds() -> float:
    """CPU time of this process and of its children waited for (the C++ compiler's runs)."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _run(compiler: str, marked: bool, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_regions_") as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # (compiles in this process: CPU time seen)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp, "inductor"))
        env["TRITON_CACHE_DIR"] = str(Path(tmp, "triton"))
        cmd = [sys.executable, "-m", "integration.bench_regions", "--one", compiler]
        cmd += ["--marked" if marked else "--unmarked", "--blocks", str(args.blocks)]
        cmd += ["--width", str(args.width)] + (["--grad"] if args.grad else [])
        out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{compiler} marked={marked} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--grad", action="store_true")
    p.add_argument("--one", choices=("magpy", "torch"))
    p.add_argument("--marked", action="store_true")
    p.add_argument("--unmarked", dest="marked", action="store_false")
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.marked, args.blocks, args.width, args.grad)))
        return
    results: dict[tuple[str, bool], list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    for _ in range(args.rounds):
        for compiler, marked in CONFIGS:
            results[compiler, marked].append(_run(compiler, marked, args))
            print(f"  {compiler} marked={marked}: {results[compiler, marked][-1]}", flush=True)
    mode = "training (autograd on)" if args.grad else "inference"
    print(f"\n{args.blocks} blocks, width {args.width}, {mode}, one thread, {args.rounds} round(s)")
    print("| compiler | nested_compile_region | first call: wall (s) | CPU (s) | later call (ms) |")
    print("|---|---|---|---|---|")
    for compiler, marked in CONFIGS:
        rows = results[compiler, marked]
        first = statistics.median(r["first"] for r in rows)
        later = statistics.median(r["later"] for r in rows) * 1e3
        cpu = statistics.median(r["first_cpu"] for r in rows)
        invokes = rows[0]["invokes"]
        mark = "yes" if marked else "no"
        mark += f" ({invokes} invoke_subgraph)" if invokes > 0 else ""
        print(f"| {compiler} | {mark} | {first:.1f} | {cpu:.1f} | {later:.2f} |")


if __name__ == "__main__":
    main()
