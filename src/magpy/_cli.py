"""``magpy demo`` and ``magpy bench``: compile the bundled models and compare against eager.

Both commands time eager PyTorch, ``torch.compile`` and MagPy on the models in
``integration/models`` (our own implementations with random weights; found next to a source
checkout, or wherever ``MAGPY_MODELS_DIR`` points), check every result against eager, and print a
Markdown table. Latencies are medians of calls interleaved round-robin over the variants after
warm-up. MagPy's first call is split into monitoring (running the program under the monitor),
code generation (guard and mock) and the backend compile by timing those three functions of the
runtime while the first call runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import json
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CaseResult", "bench", "demo", "find_models_dir", "load_models", "main", "run_case"]

MODELS_ENV = "MAGPY_MODELS_DIR"
_MODELS_PACKAGE = "_magpy_bench_models"
_MODELS_SUBDIR = Path("integration", "models")
DEMO_MODELS = ("resnet18", "transformer", "dynamic")
# Relative and absolute tolerance of the comparison against eager (Inductor reorders float math).
RTOL, ATOL = 1e-3, 1e-4

Log = Callable[[str], None]


# ------------------------------------------------------------------------------ models
def find_models_dir() -> Path | None:
    """``$MAGPY_MODELS_DIR``, else ``integration/models`` of the current directory or of the
    source checkout this file lives in; None when none exists."""
    env = os.environ.get(MODELS_ENV)
    candidates = [Path(env)] if env else []
    candidates += [
        Path.cwd() / _MODELS_SUBDIR,
        Path(__file__).resolve().parents[2] / _MODELS_SUBDIR,
    ]
    return next((p for p in candidates if (p / "__init__.py").is_file()), None)


def load_models(path: Path | None = None) -> Any:
    """Import the models package (``MODELS``: name -> ``build(size)``) from ``path``."""
    if _MODELS_PACKAGE in sys.modules:
        return sys.modules[_MODELS_PACKAGE]
    path = path or find_models_dir()
    if path is None:
        raise FileNotFoundError(
            f"the bundled models ({_MODELS_SUBDIR}) were not found; run from a "
            f"MagPy source checkout or set {MODELS_ENV}"
        )
    spec = importlib.util.spec_from_file_location(
        _MODELS_PACKAGE, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODELS_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODELS_PACKAGE]
        raise
    return module


def _inductor_cache_dir() -> Path:
    """Point Inductor's cache at ``<user cache>/magpy/inductor`` unless the user chose one."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(base / "magpy" / "inductor"))
    return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])


# ------------------------------------------------------------------------------ comparison
def _mismatch(got: Any, want: Any, path: str = "out") -> str | None:
    """None when ``got`` equals ``want`` (tensors within RTOL/ATOL), else where they differ."""
    import torch

    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            return f"{path}: {_describe(got)} != {_describe(want)}"
        if want.is_floating_point() or want.is_complex():
            if torch.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
                return None
            return f"{path}: max abs difference {float((got - want).abs().max()):.3g}"
        return None if torch.equal(got, want) else f"{path}: values differ"
    if isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            return f"{path}: keys differ"
        return next((m for k in want if (m := _mismatch(got[k], want[k], f"{path}[{k!r}]"))), None)
    if isinstance(want, list | tuple):
        if type(got) is not type(want) or len(got) != len(want):
            return f"{path}: {_describe(got)} != {_describe(want)}"
        return next(
            (
                m
                for i, (g, w) in enumerate(zip(got, want, strict=True))
                if (m := _mismatch(g, w, f"{path}[{i}]"))
            ),
            None,
        )
    return None if got == want else f"{path}: {got!r} != {want!r}"


def _describe(x: Any) -> str:
    shape = getattr(x, "shape", None)
    return f"{type(x).__name__}{tuple(shape) if shape is not None else ''}"


# ------------------------------------------------------------------------------ timing
@contextlib.contextmanager
def _phase_clock(phases: dict[str, float]) -> Iterator[None]:
    """Accumulate into ``phases`` the seconds MagPy spends in ``monitor`` (capture, which runs
    the program), ``record`` (guard + mock generation + backend) and ``backend`` (compile)."""
    from magpy_codegen import _record
    from magpy_runtime import _cache

    patched: list[tuple[Any, str, Any]] = []
    for module, attr, phase in (
        (_cache, "capture", "monitor"),
        (_cache, "build_record", "record"),
        (_record, "compile_graph", "backend"),
    ):
        original = getattr(module, attr, None)
        if original is None:
            continue
        phases.setdefault(phase, 0.0)

        def timed(*args: Any, _fn: Any = original, _phase: str = phase, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                phases[_phase] = phases.get(_phase, 0.0) + time.perf_counter() - start

        setattr(module, attr, timed)
        patched.append((module, attr, original))
    try:
        yield
    finally:
        for module, attr, original in patched:
            setattr(module, attr, original)


def _ignore_magpy_warnings() -> None:
    """Within a ``catch_warnings`` block: MagPy's own warnings ("magpy: ... runs eagerly"),
    which the results report instead."""
    warnings.filterwarnings("ignore", message="magpy: ", category=RuntimeWarning)


@contextlib.contextmanager
def _quiet_dynamo() -> Iterator[None]:
    """Hide TorchDynamo's warnings (e.g. "hit config.recompile_limit") during the block."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _own_cache(variant: str) -> Iterator[None]:
    """Compile into a cache folder of ``variant`` alone, with Inductor's in-memory caches
    cleared before and after, so that neither compiler reuses kernels the other one built (the
    one compiling second would look several times faster). Reruns find their own caches warm."""
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    except ImportError:  # a torch without it: shared caches, the order then matters
        base = None
    if base is None:
        yield
        return
    with temporary_cache_dir(str(Path(base) / variant)):
        yield


def _start_backend(backend: str, log: Log) -> float:
    """Pay Inductor's once-per-process start (imports, C++ compiler checks, compile workers)
    with a one-kernel compile, so it is not charged to the first model. Returns seconds."""
    if backend != "inductor":
        return 0.0
    import torch
    import torch._dynamo

    log("starting Inductor (imports, C++ toolchain check, compile workers; once per process)...")
    start = time.perf_counter()
    with _quiet_dynamo():
        torch.compile(lambda x: (x * 2.0).sin())(torch.ones(8))
    torch._dynamo.reset()
    return time.perf_counter() - start


def _seconds(fn: Callable[..., Any], args: tuple[Any, ...]) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


@dataclasses.dataclass
class _Variant:
    name: str
    fn: Callable[..., Any]
    first_call_s: float = 0.0
    times: list[float] = dataclasses.field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3


@dataclasses.dataclass
class CaseResult:
    """One model at one batch size."""

    model: str
    batch: int
    size: str
    backend: str
    latency_ms: dict[str, float]
    speedup: dict[str, float]
    first_call_s: dict[str, float]
    # monitor (capture, which runs the program), codegen (guard + mock), backend (compile);
    # empty when the runtime's functions could not be timed.
    magpy_phases_s: dict[str, float]
    magpy_records: int
    magpy_graphs: int
    magpy_breaks: int
    magpy_fallbacks: int
    magpy_eager_reason: str | None
    torch_compile_graphs: int
    magpy_overhead_us: float | None
    mismatches: list[str]

    @property
    def ok(self) -> bool:
        return not self.mismatches


def run_case(
    name: str,
    build: Callable[..., Any],
    *,
    size: str,
    batch: int,
    backend: str,
    repeat: int,
    magpy_eager: bool,
    checks: int = 3,
    warmup: int = 2,
    log: Log = print,
) -> CaseResult:
    """Time eager, ``torch.compile`` and MagPy on ``name`` and check them against eager."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    import magpy

    torch._dynamo.reset()
    magpy.reset()
    counters.clear()
    model, make_inputs = build(size)
    args = make_inputs(batch, 0)
    variants = [_Variant("eager", model)]
    phases: dict[str, float] = {}
    with torch.no_grad(), warnings.catch_warnings(), _quiet_dynamo():
        # A MagPy fallback is reported through magpy_eager_reason instead, and torch.compile's
        # recompilations through torch_compile_graphs.
        _ignore_magpy_warnings()
        variants[0].first_call_s = _seconds(model, args)

        log(f"compiling {name} (batch {batch}) with MagPy ({backend})...")
        compiled = magpy.compile(model, backend=backend)
        with _phase_clock(phases), _own_cache("magpy"):
            first = _seconds(compiled, args)
        variants.append(_Variant("MagPy", compiled, first))

        log(f"compiling {name} (batch {batch}) with torch.compile ({backend})...")
        tc: Callable[..., Any] = torch.compile(model, backend=backend)
        with _own_cache("torch.compile"):
            variants.append(_Variant("torch.compile", tc, _seconds(tc, args)))
        # Warm up until torch.compile stops recompiling (a model can make it recompile per call).
        for _ in range(12):
            before = counters["stats"]["unique_graphs"]
            tc(*args)
            if counters["stats"]["unique_graphs"] == before:
                break

        if magpy_eager:
            capture_only = magpy.compile(model, backend="eager")
            variants.append(_Variant("MagPy[eager]", capture_only, _seconds(capture_only, args)))

        log(
            f"timing {name} (batch {batch}): {', '.join(v.name for v in variants)}, "
            f"{repeat} rounds..."
        )
        for variant in variants:
            for _ in range(warmup):
                variant.fn(*args)
        for _ in range(repeat):
            for variant in variants:
                variant.times.append(_seconds(variant.fn, args))
        overhead = _magpy_overhead_us(compiled, model, args)

        mismatches = _check(variants, make_inputs, batch, checks)

    st = magpy.stats(compiled)
    eager_ms = variants[0].median_ms
    split: dict[str, float] = {}
    if phases.keys() == {"monitor", "record", "backend"}:  # else the runtime changed: total only
        split = {
            "monitor": phases["monitor"],
            "codegen": max(phases["record"] - phases["backend"], 0.0),
            "backend": phases["backend"],
        }
    return CaseResult(
        model=name,
        batch=batch,
        size=size,
        backend=backend,
        latency_ms={v.name: v.median_ms for v in variants},
        speedup={v.name: eager_ms / v.median_ms for v in variants[1:]},
        first_call_s={v.name: v.first_call_s for v in variants},
        magpy_phases_s=split,
        magpy_records=st.records,
        magpy_graphs=st.graphs,
        magpy_breaks=st.breaks,
        magpy_fallbacks=st.fallbacks,
        magpy_eager_reason=compiled._magpy_state.eager_reason,
        torch_compile_graphs=int(counters["stats"]["unique_graphs"]),
        magpy_overhead_us=overhead,
        mismatches=mismatches,
    )


def _magpy_overhead_us(
    compiled: Any, model: Any, args: tuple[Any, ...], calls: int = 200
) -> float | None:
    """MagPy's own cost per call in microseconds: cache lookup, guard and mock, with the
    compiled graph replaced by a stub that returns its precomputed outputs. None unless the
    program is one graph, in a record that accepts ``args``."""
    state = compiled._magpy_state
    split = state.breaks or getattr(state, "site_records", None)  # several graphs per call
    if state.eager_reason is not None or not state.records or split:
        return None
    record = state.records[0]
    inputs = record.guard(model, args, {})
    namespace = getattr(record.mock, "__globals__", {})
    graph = namespace.get("__magpy_graph")
    if inputs is None or graph is None:
        return None
    outputs = graph(*inputs)
    namespace["__magpy_graph"] = lambda *_: outputs
    try:
        per_batch = max(calls // 5, 1)
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(per_batch):
                compiled(*args)
            samples.append((time.perf_counter() - start) / per_batch)
    finally:
        namespace["__magpy_graph"] = graph
    return min(samples) * 1e6  # the least disturbed batch of calls


def _check(
    variants: list[_Variant],
    make_inputs: Callable[[int, int], tuple[Any, ...]],
    batch: int,
    checks: int,
) -> list[str]:
    """Every variant against eager on ``checks`` fresh inputs."""
    problems = []
    for i in range(checks):
        args = make_inputs(batch, 1000 + i)
        want = variants[0].fn(*args)
        for variant in variants[1:]:
            where = _mismatch(variant.fn(*args), want)
            if where is not None:
                problems.append(f"{variant.name}, check {i}: {where}")
    return problems


# ------------------------------------------------------------------------------ tables
def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
        for r in [header, *rows]
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _first_call(r: CaseResult) -> str:
    total = f"{r.first_call_s['MagPy']:.1f}"
    p = r.magpy_phases_s
    if not p:
        return total
    return f"{total} ({p['monitor']:.1f}+{p['codegen']:.2f}+{p['backend']:.1f})"


def demo_table(results: list[CaseResult]) -> str:
    header = [
        "model",
        "batch",
        "eager ms",
        "torch.compile ms",
        "MagPy ms",
        "torch.compile x",
        "MagPy x",
        "MagPy records/graphs/breaks",
        "torch.compile graphs",
        "MagPy 1st call s (monitor+codegen+compile)",
        "torch.compile 1st call s",
        "ok",
    ]
    rows = [
        [
            r.model,
            str(r.batch),
            _ms(r.latency_ms["eager"]),
            _ms(r.latency_ms["torch.compile"]),
            _ms(r.latency_ms["MagPy"]),
            _x(r.speedup["torch.compile"]),
            _x(r.speedup["MagPy"]),
            f"{r.magpy_records}/{r.magpy_graphs}/{r.magpy_breaks}",
            str(r.torch_compile_graphs),
            _first_call(r),
            f"{r.first_call_s['torch.compile']:.1f}",
            "yes" if r.ok else "NO",
        ]
        for r in results
    ]
    return _markdown(header, rows)


def bench_table(results: list[CaseResult]) -> str:
    with_eager = any("MagPy[eager]" in r.latency_ms for r in results)
    header = ["model", "batch", "eager ms", "torch.compile ms", "MagPy ms"]
    header += ["MagPy[eager] ms"] if with_eager else []
    header += ["torch.compile x", "MagPy x"] + (["MagPy[eager] x"] if with_eager else [])
    header += [
        "MagPy rec/graphs/breaks",
        "torch.compile graphs",
        "torch.compile 1st s",
        "MagPy 1st s (monitor+codegen+compile)",
        "MagPy overhead us",
        "ok",
    ]
    rows = []
    for r in results:
        row = [
            r.model,
            str(r.batch),
            _ms(r.latency_ms["eager"]),
            _ms(r.latency_ms["torch.compile"]),
            _ms(r.latency_ms["MagPy"]),
        ]
        row += [_ms(r.latency_ms.get("MagPy[eager]"))] if with_eager else []
        row += [_x(r.speedup["torch.compile"]), _x(r.speedup["MagPy"])]
        row += [_x(r.speedup.get("MagPy[eager]"))] if with_eager else []
        row += [
            f"{r.magpy_records}/{r.magpy_graphs}/{r.magpy_breaks}",
            str(r.torch_compile_graphs),
            f"{r.first_call_s['torch.compile']:.1f}",
            _first_call(r),
            "-" if r.magpy_overhead_us is None else f"{r.magpy_overhead_us:.0f}",
            "yes" if r.ok else "NO",
        ]
        rows.append(row)
    return _markdown(header, rows)


def _notes(results: list[CaseResult]) -> list[str]:
    import torch._dynamo

    limit = getattr(torch._dynamo.config, "recompile_limit", None)
    notes = []
    for r in results:
        if r.torch_compile_graphs > 1:
            notes.append(
                f"{r.model} (batch {r.batch}): torch.compile compiled {r.torch_compile_graphs} "
                "graphs (it recompiled on later calls"
                + (
                    f"; at recompile_limit={limit} it runs the frame eagerly)"
                    if limit is not None and r.torch_compile_graphs >= limit
                    else ")"
                )
            )
        if r.magpy_eager_reason is not None:
            notes.append(
                f"{r.model} (batch {r.batch}): MagPy ran it eagerly: {r.magpy_eager_reason}"
            )
        notes += [f"{r.model} (batch {r.batch}): DIFFERS FROM EAGER: {m}" for m in r.mismatches]
    return notes


def _environment(threads: int) -> dict[str, Any]:
    import torch

    import magpy

    return {
        "magpy": magpy.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    }


# ------------------------------------------------------------------------------ commands
def _progress(prog: str) -> Log:
    def log(message: str) -> None:
        print(f"[{prog}] {message}", flush=True)

    return log


def _setup(prog: str, threads: int, backend: str) -> tuple[Log, str]:
    """Threads, Inductor's cache and process start; returns the logger and a note for the end."""
    import torch

    log = _progress(prog)
    cache = _inductor_cache_dir()
    torch.set_num_threads(threads)
    env = _environment(threads)
    log(
        f"MagPy {env['magpy']}, torch {env['torch']}, Python {env['python']}, "
        f"{env['cpus']} CPUs, torch.set_num_threads({threads})"
    )
    log(f"Inductor cache: {cache} (a cold cache costs 30-90 s per compile)")
    started = _start_backend(backend, log)
    note = (
        f"Inductor's once-per-process start took {started:.1f} s, before any model and in "
        "neither first-call column; each compiler compiles into its own cache folder."
        if backend == "inductor"
        else ""
    )
    return log, note


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


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
    args = parser.parse_args(argv)

    start = time.perf_counter()
    log, start_note = _setup("demo", args.threads, args.backend)
    registry = load_models().MODELS
    results = []
    for name in DEMO_MODELS:
        result = run_case(
            name,
            registry[name],
            size="small",
            batch=args.batch,
            backend=args.backend,
            repeat=args.repeat,
            magpy_eager=False,
            log=log,
        )
        log(
            f"{name}: {'matches eager' if result.ok else 'DIFFERS FROM EAGER'}; "
            f"MagPy {_x(result.speedup['MagPy'])}, torch.compile "
            f"{_x(result.speedup['torch.compile'])} over eager"
        )
        results.append(result)
    flip = _flip_dynamic(registry["dynamic"], args.backend, args.batch, log)
    print()
    print(demo_table(results))
    print()
    for note in [*_notes(results), *flip, start_note]:
        if note:
            print(f"- {note}")
    ok = all(r.ok for r in results) and not any("DIFFERS" in n for n in flip)
    log(
        f"done in {time.perf_counter() - start:.0f} s; "
        f"{'all results match eager' if ok else 'SOME RESULTS DIFFER FROM EAGER'}"
    )
    return 0 if ok else 1


def _flip_dynamic(build: Callable[..., Any], backend: str, batch: int, log: Log) -> list[str]:
    """The dynamic model with its ``return_features`` flag flipped between calls: MagPy keeps
    one record per path, and the list the hooks fill matches eager after every call."""
    import torch

    import magpy

    magpy.reset()
    model, make_inputs = build("small")
    compiled = magpy.compile(model, backend=backend)
    log(f"dynamic: flipping return_features between calls with MagPy ({backend})...")
    notes = []
    with torch.no_grad(), warnings.catch_warnings(), _own_cache("magpy"):
        _ignore_magpy_warnings()
        for i, flag in enumerate([False, True, False, True, True]):
            model.return_features = flag
            args = make_inputs(batch, 2000 + i)
            want = model(*args)
            want_features = list(model.features)
            got = compiled(*args)
            where = _mismatch(got, want) or _mismatch(
                list(model.features), want_features, "features"
            )
            if where is not None:
                notes.append(f"dynamic (flag flips), call {i}: DIFFERS FROM EAGER: {where}")
    st = magpy.stats(compiled)
    notes.append(
        f"dynamic with return_features flipped over 5 calls: MagPy records={st.records} "
        f"hits={st.hits} misses={st.misses} breaks={st.breaks}; hooks' feature list "
        f"{'matches' if not notes else 'does NOT match'} eager; steps={model.steps}"
    )
    return notes


def bench(argv: Sequence[str]) -> int:
    """``magpy bench``: latency, speedups, capture and compile costs per model and batch."""
    registry = load_models().MODELS
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
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {sorted(registry)}")
    try:
        batches = [_positive(b) for b in args.batch.split(",")]
    except (ValueError, argparse.ArgumentTypeError):
        parser.error(f"--batch must be comma-separated positive integers, got {args.batch!r}")

    log, start_note = _setup("bench", args.threads, args.backend)
    results = []
    for name in names:
        for batch in batches:
            log(f"{name} batch {batch}: compiling and timing...")
            r = run_case(
                name,
                registry[name],
                size=args.size,
                batch=batch,
                backend=args.backend,
                repeat=args.repeat,
                magpy_eager=args.backend != "eager",
                log=lambda _msg: None,
            )
            log(
                f"{name} batch {batch}: eager {_ms(r.latency_ms['eager'])} ms, torch.compile "
                f"{_ms(r.latency_ms['torch.compile'])} ms ({_x(r.speedup['torch.compile'])}), "
                f"MagPy {_ms(r.latency_ms['MagPy'])} ms ({_x(r.speedup['MagPy'])}); first call "
                f"MagPy {r.first_call_s['MagPy']:.1f} s, torch.compile "
                f"{r.first_call_s['torch.compile']:.1f} s"
                f"{'' if r.ok else '; DIFFERS FROM EAGER'}"
            )
            results.append(r)
    print()
    print(bench_table(results))
    print()
    for note in [*_notes(results), start_note]:
        if note:
            print(f"- {note}")
    if args.json:
        payload = {
            "environment": _environment(args.threads),
            "settings": {
                "size": args.size,
                "backend": args.backend,
                "repeat": args.repeat,
                "batches": batches,
            },
            "results": [dataclasses.asdict(r) | {"ok": r.ok} for r in results],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    if args.plot:
        _plot(results, args.plot, log)
    return 0 if all(r.ok for r in results) else 1


def _plot(results: list[CaseResult], path: Path, log: Log) -> None:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        log(
            f"plot skipped: matplotlib is not installed (pip install 'magpy[bench]'); "
            f"{path} not written"
        )
        return
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    series = [
        s
        for s in ("torch.compile", "MagPy", "MagPy[eager]")
        if any(s in r.speedup for r in results)
    ]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(results)), 4.0))
    for i, name in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(results))]
        ax.bar(xs, [r.speedup.get(name, 0.0) for r in results], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)), [f"{r.model}\nb={r.batch}" for r in results])
    ax.set_ylabel("speedup over eager")
    ax.set_title(f"backend {results[0].backend}, size {results[0].size}" if results else "")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"wrote {path}")


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
