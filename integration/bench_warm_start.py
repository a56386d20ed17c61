"""Benchmark warm starts: a new process's first call, with and without compile caches.

    python -m integration.bench_warm_start                   # 3 rounds of every model and mode
    python -m integration.bench_warm_start --quick --models lstm --modes eager,magpy-cold,magpy-warm
    python -m integration.bench_warm_start --models resnet18 --rounds 5 --json /tmp/warm.json

A program that restarts (a server, a notebook kernel, the next job of a sweep) pays its
compiles again unless they come from a cache. Issue 23: MagPy compiles its graphs the way
``torch.compile`` does, inside a ``TracingContext`` with a ``ShapeEnv``, so Inductor's FX graph
cache and AOTAutograd's cache (both under ``TORCHINDUCTOR_CACHE_DIR``) serve them to a second
process. This measures what that buys: the wall time of the **first call** of a model in a
fresh process (Python, torch and MagPy already imported, the model built), timed from the
``compile(...)`` call (``torch.compile(model)`` imports TorchDynamo there, seconds that its
first call would otherwise hide), per mode:

- ``eager``: the plain model;
- ``magpy-cold``: ``magpy.compile(model, backend="inductor")`` with an empty Inductor cache;
- ``magpy-warm``: the same in a second process, on the cache the cold process filled;
- ``torch.compile-cold`` / ``torch.compile-warm``: ``torch.compile(model)`` likewise (a cache
  folder of its own);
- ``magpy-records``: offered only when ``magpy.config`` has ``records_dir`` (persistent
  records, ``MAGPY_RECORDS_DIR``): a process on a warm cache *and* a records folder an earlier
  process of the round filled (and whose worker built each stored record's library: a child
  waits for it, untimed). The child is told through the environment alone (``Mode.dirs``), so
  the column needs nothing else here;
- ``magpy-records-nolib``: the same without libraries (``MAGPY_RECORDS_NATIVE=0``, folders of
  its own): a loaded record's graph is compiled by Inductor, from its warm caches;
- ``magpy-records-nolib-bg``: those folders with ``MAGPY_BACKGROUND_COMPILE=1``: the loaded
  record serves its first calls with its graph run as is while Inductor loads the compiled
  graph on MagPy's worker thread;
- ``magpy-bundle``: another machine of the same kind (issue 38): an untimed process compiles
  with a records folder and saves ``magpy.save_cache_artifacts()`` to a file; the timed one,
  on an empty Inductor cache and without records folder, is timed from
  ``magpy.load_cache_artifacts(bytes)`` (reading the file included) to its first call's end;
- ``torch.compile-bundle``: the same with ``torch.compiler.save_cache_artifacts()`` /
  ``load_cache_artifacts`` around ``torch.compile``.

Models (``integration/models``, ``"small"`` sizes, eval mode, under ``torch.no_grad()``):
``resnet18``, ``transformer`` (the BERT-like encoder with a padding mask) and ``lstm`` (the
stacked ``nn.LSTMCell`` s stepped in a Python loop). ``--quick``: batch 1 and 1 round.

Every measurement is its own process (``python -m integration.bench_warm_start --child``, one
thread unless ``--threads``), in a new temporary cache folder per round, model and compiler;
a warm mode whose folder no earlier process of the round filled gets an untimed priming
process first. The child also reports its whole wall time (imports included), Inductor's and
AOTAutograd's cache counters (``torch._dynamo.utils.counters``), ``magpy.stats`` and whether
its output equals eager's (``magpy._measure.mismatch``). Reported: the median over
``--rounds`` rounds and the noise, (max - min) / median of those rounds; the model order
rotates every round. With 2 shared cores the noise of a cold compile is often 10-30%: compare
columns of one run. Prints Markdown tables on stdout and writes a JSON file. Not a test:
figures go into issue notes (``integration/test_bench_warm_start.py`` smoke-tests ``--quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.utils import counters

import magpy
from integration.models import MODELS as ZOO
from magpy._measure import add_model_and_mode_lists, mismatch, positive_int
from magpy._report import markdown as _markdown
from magpy_runtime.store._entryfiles import list_entries

__all__ = ["MODELS", "MODES", "Mode", "main", "run_child"]

REPO = Path(__file__).resolve().parents[1]
MODELS = ("resnet18", "transformer", "lstm")
CHILD_MARK = "BENCH_WARM_START_RESULT "
# MagPy settings of the caller's environment that would change what a mode measures (a mode
# that wants one sets it, ``Mode.dirs``)
_OWN_ENV = ("MAGPY_RECORDS_DIR", "MAGPY_BACKGROUND_COMPILE", "MAGPY_RECORDS_NATIVE")


@dataclasses.dataclass(frozen=True)
class Mode:
    """One column: how the child compiles, in which Inductor cache folder of the round, whether
    a process must have filled that folder first, and folders of the round passed to the
    child as environment variables (``{"MAGPY_RECORDS_DIR": "records"}``)."""

    label: str
    compiler: str  # "eager", "magpy" or "torch.compile"
    cache: str | None = None
    warm: bool = False
    dirs: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # other environment variables of the child
    # a bundle (``save_cache_artifacts``) an untimed process makes in caches of its own, which
    # the timed child loads on its empty ``cache`` folder
    bundle: bool = False


MODES: dict[str, Mode] = {
    "eager": Mode("eager", "eager"),
    "magpy-cold": Mode("MagPy cold", "magpy", "magpy"),
    "magpy-warm": Mode("MagPy warm cache", "magpy", "magpy", warm=True),
    "torch.compile-cold": Mode("torch.compile cold", "torch.compile", "torch.compile"),
    "torch.compile-warm": Mode(
        "torch.compile warm cache", "torch.compile", "torch.compile", warm=True
    ),
    "torch.compile-bundle": Mode(
        "torch.compile bundle", "torch.compile", "torch.compile-bundle", bundle=True
    ),
    "magpy-bundle": Mode("MagPy bundle", "magpy", "magpy-bundle", bundle=True),
}
if hasattr(magpy.config, "records_dir"):  # (persistent records: a column of their own)
    MODES["magpy-records"] = Mode(
        "MagPy records", "magpy", "magpy-records", warm=True,
        dirs=(("MAGPY_RECORDS_DIR", "records"),),
    )  # fmt: skip
    _NOLIB = (("MAGPY_RECORDS_NATIVE", "0"),)
    MODES["magpy-records-nolib"] = Mode(
        "MagPy records without libraries", "magpy", "magpy-records-nolib", warm=True,
        dirs=(("MAGPY_RECORDS_DIR", "records-nolib"),), env=_NOLIB,
    )  # fmt: skip
    MODES["magpy-records-nolib-bg"] = Mode(
        "MagPy records without libraries, background compile", "magpy", "magpy-records-nolib",
        warm=True, dirs=(("MAGPY_RECORDS_DIR", "records-nolib"),),
        env=(*_NOLIB, ("MAGPY_BACKGROUND_COMPILE", "1")),
    )  # fmt: skip


def _build(model: str, batch: int, seed: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    built, make_inputs = ZOO[model]("small")
    return built.eval(), tuple(make_inputs(batch, seed))


# ------------------------------------------------------------------------------ the child
def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """What one child process measures (``spec``: model, compiler, batch, seed, threads)."""
    torch.set_num_threads(spec["threads"])
    model, inputs = _build(spec["model"], spec["batch"], spec["seed"])
    compiler = spec["compiler"]
    # timed from the compile call: ``torch.compile(model)`` imports TorchDynamo (seconds) there,
    # MagPy imports Inductor on the first compile; both are the first call's latency
    start = time.perf_counter()
    if spec.get("load"):  # (a bundle: reading and loading it are part of the first call's cost)
        _load_bundle(compiler, Path(spec["load"]).read_bytes())
    if compiler == "magpy":
        fn: Callable[..., Any] = magpy.compile(model, backend="inductor")
    elif compiler == "torch.compile":
        fn = torch.compile(model)
    else:
        fn = model
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="magpy: ", category=RuntimeWarning)
        out = fn(*inputs)
        first = time.perf_counter() - start
        start = time.perf_counter()
        fn(*inputs)
        second = time.perf_counter() - start
        want = model(*inputs)
    inductor = "torch._inductor.compile_fx" in sys.modules
    stats = magpy.stats(fn) if compiler == "magpy" else None
    libraries = None
    if spec.get("save"):
        Path(spec["save"]).write_bytes(_save_bundle(compiler))
    if stats is not None:
        magpy.wait_compiles()  # (untimed: a stored record's library, built on MagPy's worker)
        if magpy.config.records_dir:
            entries = list_entries(magpy.config.records_dir)
            libraries = sum(1 for e in entries if e.get("native"))
    return {
        "inductor_imported": inductor,
        "libraries": libraries,  # entries holding a library once the call's compiles ended
        "first_call_s": first,
        "second_call_ms": second * 1e3,
        "mismatch": mismatch(out, want),
        "fx": _counts(counters["inductor"], "fxgraph_cache_"),
        "aot": _counts(counters["aot_autograd"], "autograd_cache_"),
        "magpy": None
        if stats is None
        else {
            "records": stats.records,
            "graphs": stats.graphs,
            "from_disk": getattr(stats, "from_disk", 0),  # (persistent records served)
        },
    }


def _load_bundle(compiler: str, data: bytes) -> None:
    if compiler == "magpy":
        info = magpy.load_cache_artifacts(data)
        if info.refused:
            raise RuntimeError(f"the bundle was refused: {info.refused}")
    else:
        torch.compiler.load_cache_artifacts(data)


def _save_bundle(compiler: str) -> bytes:
    if compiler == "magpy":
        return magpy.save_cache_artifacts()  # (waits for the libraries being built)
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        raise RuntimeError("torch.compiler.save_cache_artifacts() saved nothing")
    return saved[0]


def _counts(table: Any, prefix: str) -> dict[str, int]:
    return {k[len(prefix) :]: int(v) for k, v in table.items() if k.startswith(prefix)}


def _child_main(spec_text: str) -> int:
    spec = json.loads(spec_text)
    try:
        result = run_child(spec)
    except Exception as exc:
        result = {
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "traceback": traceback.format_exc(),
        }
    print(CHILD_MARK + json.dumps(result), flush=True)
    return 0


# ------------------------------------------------------------------------------ the parent
def _spawn(spec: dict[str, Any], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One child process; its result with ``process_s``, its wall time (imports included)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "integration.bench_warm_start", "--child", json.dumps(spec)],
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if k not in _OWN_ENV} | env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(CHILD_MARK)]
    if not lines:
        tail = (proc.stderr or proc.stdout)[-800:]
        return {"error": f"child exited {proc.returncode} without a result: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1][len(CHILD_MARK) :])
    result["process_s"] = wall
    if result.get("libraries") == 0:  # (what the child said about it, for the log)
        said = [ln for ln in (proc.stderr or "").splitlines() if "librar" in ln]
        result["library_lines"] = said[-3:]
    return result


def run_round(
    args: argparse.Namespace, order: Sequence[str], folder: Path, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every model of ``order`` under every mode, each a fresh process; the results."""
    out = []
    for model in order:
        base = folder / model
        filled: set[str] = set()
        for name in args.modes:
            mode = MODES[name]
            env = {"OMP_NUM_THREADS": str(args.threads), "PYTHONWARNINGS": "ignore"}
            env["TORCHINDUCTOR_CACHE_DIR"] = str(base / (mode.cache or f"{name}-unused"))
            env |= {var: str(base / sub) for var, sub in mode.dirs} | dict(mode.env)
            spec = {"model": model, "compiler": mode.compiler, "batch": args.batch}
            spec |= {"seed": args.seed, "threads": args.threads}
            if mode.bundle:
                spec = _make_bundle(args, spec, env, base / name, log)
                if "load" not in spec:
                    out.append({"model": model, "mode": name, "error": spec["error"]})
                    continue
            if mode.warm and mode.cache not in filled:
                log(f"{model} / {name}: priming its cache (untimed)")
                primed = _spawn(spec, env, args.timeout)
                if "error" in primed or primed.get("libraries") == 0:
                    made = primed.get("libraries")
                    log(f"{model} / {name}: priming: {_summary(primed)}, {made} libraries")
                    for line in primed.get("library_lines", []):
                        log(f"  {line[:300]}")
            result = _spawn(spec, env, args.timeout)
            if mode.cache is not None and "error" not in result:
                filled.add(mode.cache)
            log(f"{model} / {name}: {_summary(result)}")
            out.append({"model": model, "mode": name} | result)
    return out


def _make_bundle(
    args: argparse.Namespace,
    spec: dict[str, Any],
    env: dict[str, str],
    where: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """``spec`` told to load the bundle an untimed process made in ``where`` (caches and a
    records folder of its own: another machine's); with ``error`` instead where it failed."""
    made = env | {"TORCHINDUCTOR_CACHE_DIR": str(where / "inductor")}
    if spec["compiler"] == "magpy":
        made["MAGPY_RECORDS_DIR"] = str(where / "records")
    bundle = where / "bundle.bin"
    log(f"{spec['model']} / {where.name}: making the bundle (untimed)")
    result = _spawn(spec | {"save": str(bundle)}, made, args.timeout)
    if "error" in result or not bundle.exists():
        return {"error": f"the bundle was not made: {_summary(result)}"}
    log(f"{spec['model']} / {where.name}: bundle of {bundle.stat().st_size / 1e6:.1f} MB")
    return spec | {"load": str(bundle)}


def _summary(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error'][:200]}"
    return f"first call {r['first_call_s']:.2f} s, process {r['process_s']:.1f} s, fx {r['fx']}"


# ------------------------------------------------------------------------------ the report
def _median(results: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    """(median, noise: (max - min) / median) of ``key`` over the rounds without an error."""
    values = [r[key] for r in results if "error" not in r]
    if not values:
        return None, None
    mid = statistics.median(values)
    return mid, (max(values) - min(values)) / mid if mid else None


def _cell(mid: float | None, noise: float | None) -> str:
    if mid is None:
        return "ERROR"
    text = f"{mid:.3g}"  # (eager's first call: milliseconds; a compile: tens of seconds)
    return f"{text} (±{noise * 100:.0f}%)" if noise is not None else text


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}x" if num is not None and den else "-"


def _of(results: list[dict[str, Any]], model: str, mode: str) -> list[dict[str, Any]]:
    return [r for r in results if r["model"] == model and r["mode"] == mode]


def tables(results: list[dict[str, Any]], models: Sequence[str], modes: Sequence[str]) -> str:
    """First call (s), whole process (s) and the caches' counters, one row per model."""
    ratios = [("magpy-warm", "magpy-cold"), ("torch.compile-warm", "torch.compile-cold")]
    ratios += [("magpy-bundle", "torch.compile-warm"), ("magpy-bundle", "torch.compile-bundle")]
    ratios = [(w, c) for w, c in ratios if w in modes and c in modes]
    header = ["model", *[MODES[m].label for m in modes]]
    header += [f"{MODES[w].label} / {_short(MODES[w], MODES[c])}" for w, c in ratios]
    first, process, caches = [], [], []
    for model in models:
        mids = {m: _median(_of(results, model, m), "first_call_s") for m in modes}
        first.append(
            [model, *[_cell(*mids[m]) for m in modes]]
            + [_ratio(mids[w][0], mids[c][0]) for w, c in ratios]
        )
        process.append(
            [model, *[_cell(*_median(_of(results, model, m), "process_s")) for m in modes]]
        )
        caches.append([model, *[_cache_cell(_of(results, model, m)) for m in modes]])
    return "\n\n".join(
        [
            "First call (s, median over rounds, ±noise):\n\n" + _markdown(header, first),
            "Whole process (s: interpreter start, imports, model, two calls, eager check):\n\n"
            + _markdown(header[: 1 + len(modes)], process),
            "Caches of the last round (FX graph cache hit/miss/bypass; AOTAutograd "
            "hit/miss/bypass; MagPy records/graphs):\n\n"
            + _markdown(header[: 1 + len(modes)], caches),
        ]
    )


def _short(num: Mode, den: Mode) -> str:
    return "cold" if den.label == num.label.replace("warm cache", "cold") else den.label


def _cache_cell(results: list[dict[str, Any]]) -> str:
    if not results or "error" in results[-1]:
        return "ERROR" if results else "-"
    r = results[-1]
    fx, aot = r["fx"], r["aot"]
    text = f"{fx.get('hit', 0)}/{fx.get('miss', 0)}/{fx.get('bypass', 0)}"
    text += f"; {aot.get('hit', 0)}/{aot.get('miss', 0)}/{aot.get('bypass', 0)}"
    if r["magpy"]:
        text += f"; {r['magpy']['records']}/{r['magpy']['graphs']}"
        if r["magpy"].get("from_disk"):
            text += f" ({r['magpy']['from_disk']} from disk)"
    if r.get("inductor_imported") is False and r["magpy"]:
        text += ", Inductor not imported"
    return text


def notes(results: list[dict[str, Any]]) -> list[str]:
    """Errors and mismatches with eager, one line each."""
    out = []
    for r in results:
        tag = f"{r['model']} / {r['mode']}"
        if "error" in r:
            out.append(f"{tag}: FAILED: {r['error'][:300]}")
        elif r["mismatch"]:
            out.append(f"{tag}: DIFFERS FROM EAGER: {r['mismatch']}")
    return out


# ------------------------------------------------------------------------------ command line
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m integration.bench_warm_start",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--rounds", type=positive_int, help="default 3; 1 with --quick")
    parser.add_argument("--quick", action="store_true", help="batch 1, 1 round (a smoke run)")
    add_model_and_mode_lists(
        parser, MODELS, MODES, "magpy-records only where magpy has persistent records"
    )
    parser.add_argument("--batch", type=positive_int, help="default 4; 1 with --quick")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads of each child (default 1)"
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds allowed per child process"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("bench_warm_start.json"),
        help="write the results here (default: bench_warm_start.json)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.batch = args.batch or (1 if args.quick else 4)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return _child_main(args.child)

    def log(message: str) -> None:
        print(f"[bench_warm_start] {message}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    log(f"modes {args.modes}, models {args.models}, {args.rounds} rounds, batch {args.batch}")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_warm_start_") as tmp:
        for i in range(args.rounds):
            shift = i % len(args.models)
            order = args.models[shift:] + args.models[:shift]
            log(f"round {i + 1}/{args.rounds}")
            for r in run_round(args, order, Path(tmp) / f"round{i}", log):
                results.append(r | {"round": i})
    elapsed = time.perf_counter() - start

    print(f"\n### Warm start: first call in a new process ({args.rounds} rounds)\n")
    print(
        f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()} "
        f"({os.cpu_count()} CPUs), {args.threads} thread(s), batch {args.batch}, no_grad; "
        "each figure is its own process; cold = empty TORCHINDUCTOR_CACHE_DIR, warm = the one "
        "a process before it filled.\n"
    )
    print(tables(results, args.models, args.modes))
    print()
    for line in notes(results):
        print(f"- {line}")
    noises = [
        n
        for model in args.models
        for m in args.modes
        if (n := _median(_of(results, model, m), "first_call_s")[1]) is not None
    ]
    if args.rounds > 1 and noises:
        print(f"- noise of the first-call medians: up to {max(noises) * 100:.0f}%")
    print(f"\n(benchmark ran {elapsed:.0f} s)")
    payload = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "child")},
        "modes": {name: dataclasses.asdict(MODES[name]) for name in args.modes},
        "results": results,
        "elapsed_s": elapsed,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    log(f"wrote {args.json}")
    failed = any("error" in r or r.get("mismatch") for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
