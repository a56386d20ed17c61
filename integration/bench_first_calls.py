"""The first two calls of a freshly compiled model: MagPy beside TorchDynamo, ``backend="eager"``.

    python -m integration.bench_first_calls [--suite big|hf|extra|all] [--models a,b] [--rounds 3]

A first call is what a user waits for before anything is fast: MagPy monitors it and builds its
record; TorchDynamo traces the frame and builds its guards. The second call is where MagPy arms
its guard memo (and TorchDynamo runs its guards for the first time), so the figure is the sum of
the two calls, backend compile excluded for both (``backend="eager"``; an Inductor compile costs
the same for both compilers and would hide the difference). Models: ``big`` is
``bench_overhead``'s set (default configs: BERT-base, T5-small, diffusers' UNets, …), ``hf`` and
``extra`` the tiny-config Hugging Face, MONAI and diffusers models of the model suites.

Each model runs in a process of its own, one thread. In it, both compilers first compile and
call a small unrelated function, so that neither pays its one-time imports inside the figure;
then each round builds the model anew (untimed), resets both compilers and times MagPy's and
TorchDynamo's first two calls, the two compilers' order alternating between rounds. The table
has the medians over the rounds and the spread (max/min - 1) of the sums as noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUITES = ("big", "hf", "extra")

__all__ = ["main", "measure"]


def _builders(suite: str) -> dict[str, Callable[[], tuple[Any, Callable[[], Any]]]]:
    """``name -> build() -> (model, call)``: ``call(compiled)`` runs one call on fixed inputs
    (``bench_overhead.suite``'s builders; the tiny suites at batch 2)."""
    from .bench_overhead import suite as builders

    def make(build: Any) -> Callable[[], tuple[Any, Callable[[Any], Any]]]:
        def made() -> tuple[Any, Callable[[Any], Any]]:
            model, args, kwargs = build()
            return model, lambda fn: fn(*args, **kwargs)

        return made

    return {name: make(build) for name, build in builders(suite, batch=2).items()}


def _two_calls(compiler: str, build: Callable[[], tuple[Any, Callable[[Any], Any]]]) -> list[float]:
    import torch

    import magpy

    model, call = build()
    magpy.reset()
    torch._dynamo.reset()
    if compiler == "magpy":
        compiled = magpy.compile(model, backend="eager")
    else:
        compiled = torch.compile(model, backend="eager")
    times = []
    with torch.no_grad():
        for _ in range(2):
            start = time.perf_counter()
            call(compiled)
            times.append(time.perf_counter() - start)
    return times


def _warm_up() -> None:
    """Both compilers' one-time imports and set-up, outside every figure."""
    import torch

    import magpy

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(x @ x.T) + 1

    x = torch.randn(4, 4)
    for compiled in (magpy.compile(f, backend="eager"), torch.compile(f, backend="eager")):
        for _ in range(3):
            compiled(x)
    magpy.reset()
    torch._dynamo.reset()


def measure(suite: str, name: str, rounds: int) -> dict[str, Any]:
    """One model, in this process: medians of each compiler's first and second call."""
    import torch

    torch.set_num_threads(1)
    _warm_up()
    build = _builders(suite)[name]
    samples: dict[str, list[list[float]]] = {"magpy": [], "dynamo": []}
    for r in range(rounds):
        order = ("magpy", "dynamo") if r % 2 == 0 else ("dynamo", "magpy")
        for compiler in order:
            samples[compiler].append(_two_calls(compiler, build))
    out: dict[str, Any] = {"suite": suite, "model": name}
    for compiler, runs in samples.items():
        sums = [a + b for a, b in runs]
        out[f"{compiler}_first_s"] = statistics.median(a for a, _ in runs)
        out[f"{compiler}_second_s"] = statistics.median(b for _, b in runs)
        out[f"{compiler}_two_s"] = statistics.median(sums)
        out[f"{compiler}_noise"] = max(sums) / min(sums) - 1
    out["ratio"] = out["magpy_two_s"] / out["dynamo_two_s"]
    return out


def _in_child(suite: str, name: str, rounds: int, timeout: float) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "integration.bench_first_calls", "--child", suite, name]
    command += ["--rounds", str(rounds)]
    try:
        run = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"suite": suite, "model": name, "error": f"timeout after {timeout:g}s"}
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode or not lines:
        return {"suite": suite, "model": name, "error": (run.stderr.strip() or "no output")[-300:]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| suite | model | MagPy 1st s | MagPy 2nd s | Dynamo 1st s | Dynamo 2nd s "
        "| MagPy/Dynamo (two calls) | noise MagPy/Dynamo |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['suite']} | {r['model']} | error: {r['error'][-80:]} |||||||")
            continue
        lines.append(
            f"| {r['suite']} | {r['model']} | {r['magpy_first_s']:.3f} | {r['magpy_second_s']:.3f}"
            f" | {r['dynamo_first_s']:.3f} | {r['dynamo_second_s']:.3f} | {r['ratio']:.2f}"
            f" | {r['magpy_noise']:.0%}/{r['dynamo_noise']:.0%} |"
        )
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    if ratios:
        above = [r["model"] for r in rows if r.get("ratio", 0) > 1]
        lines.append(
            f"\n{len(ratios)} models: median ratio {statistics.median(ratios):.2f}, "
            f"max {max(ratios):.2f}; above 1: {', '.join(above) or 'none'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m integration.bench_first_calls")
    p.add_argument("--suite", default="big", choices=[*SUITES, "all"])
    p.add_argument("--models", default="", help="comma-separated names (default: the suite's)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per model's process")
    p.add_argument("--out", default=None, help="also write the rows as JSON lines here")
    p.add_argument("--child", nargs=2, metavar=("SUITE", "MODEL"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.child[0], a.child[1], a.rounds)), flush=True)
        return 0
    suites = SUITES if a.suite == "all" else (a.suite,)
    wanted = [m for m in a.models.split(",") if m]
    rows = []
    for suite in suites:
        names = [n for n in _builders(suite) if not wanted or n in wanted]
        for name in names:
            row = _in_child(suite, name, a.rounds, a.timeout)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if a.out:
                with open(a.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
