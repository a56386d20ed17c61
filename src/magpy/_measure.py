"""Timing one model: eager PyTorch, ``torch.compile`` and MagPy, each checked against eager.

Latencies are medians of calls interleaved round-robin over the variants after warm-up. MagPy's
first call is split into monitoring (running the program under the monitor), code generation
(guard and mock) and the backend compile by timing those three functions of the runtime while
the first call runs. Also here: Inductor's once-per-process start, its cache folders, and the
environment the timings are reported with.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import logging
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir, temporary_cache_dir

import magpy
from magpy_codegen import _record
from magpy_monitor.driver.tracer import Monitor
from magpy_runtime.cache import _cache

__all__ = [
    "CaseResult",
    "Log",
    "add_run_options",
    "bench_start",
    "environment",
    "ignore_magpy_warnings",
    "inductor_cache",
    "mismatch",
    "name_list",
    "non_negative_int",
    "own_cache",
    "positive_int",
    "quiet_dynamo",
    "run_case",
    "start_backend",
]

# Relative and absolute tolerance of the comparison against eager (Inductor reorders float math).
RTOL, ATOL = 1e-3, 1e-4

Log = Callable[[str], None]


# ------------------------------------------------------------------------------ the process
def environment(threads: int) -> dict[str, Any]:
    return {
        "magpy": magpy.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    }


def start_backend(backend: str, log: Log) -> float:
    """Pay Inductor's once-per-process start (imports, C++ compiler checks, compile workers)
    with a one-kernel compile, so it is not charged to the first model. Returns seconds."""
    if backend != "inductor":
        return 0.0
    log("starting Inductor (imports, C++ toolchain check, compile workers; once per process)...")
    start = time.perf_counter()
    with quiet_dynamo():
        torch.compile(lambda x: (x * 2.0).sin())(torch.ones(8))
    torch._dynamo.reset()
    return time.perf_counter() - start


@contextlib.contextmanager
def quiet_dynamo() -> Iterator[None]:
    """Hide TorchDynamo's warnings (e.g. "hit config.recompile_limit") during the block."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def own_cache(variant: str) -> Iterator[None]:
    """Compile into a cache folder of ``variant`` alone, with Inductor's in-memory caches
    cleared before and after, so that neither compiler reuses kernels the other one built (the
    one compiling second would look several times faster). Reruns find their own caches warm."""
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if base is None:
        yield
        return
    with temporary_cache_dir(str(Path(base) / variant)):
        yield


def ignore_magpy_warnings() -> None:
    """Within a ``catch_warnings`` block: MagPy's own warnings ("magpy: ... runs eagerly"),
    which the results report instead."""
    warnings.filterwarnings("ignore", message="magpy: ", category=RuntimeWarning)


# ------------------------------------------------------------------------------ comparison
def mismatch(got: Any, want: Any, path: str = "out") -> str | None:
    """None when ``got`` equals ``want`` (tensors within RTOL/ATOL), else where they differ."""
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
        return next((m for k in want if (m := mismatch(got[k], want[k], f"{path}[{k!r}]"))), None)
    if isinstance(want, list | tuple):
        if type(got) is not type(want) or len(got) != len(want):
            return f"{path}: {_describe(got)} != {_describe(want)}"
        return next(
            (
                m
                for i, (g, w) in enumerate(zip(got, want, strict=True))
                if (m := mismatch(g, w, f"{path}[{i}]"))
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
    patched: list[tuple[Any, str, Any]] = _monitor_clock(phases)
    for module, attr, phase in (
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


def _monitor_clock(phases: dict[str, float]) -> list[tuple[Any, str, Any]]:
    """Patch ``Monitor.trace_on``/``trace_off`` (a whole call is monitored between them) to add
    that time to ``phases["monitor"]``; returns what to put back."""
    on, off = Monitor.trace_on, Monitor.trace_off
    started: list[float] = []
    phases.setdefault("monitor", 0.0)

    def timed_on(self: Monitor) -> None:
        started.append(time.perf_counter())
        on(self)

    def timed_off(self: Monitor) -> None:
        off(self)
        if started:
            phases["monitor"] += time.perf_counter() - started.pop()

    setattr(Monitor, "trace_on", timed_on)  # noqa: B010
    setattr(Monitor, "trace_off", timed_off)  # noqa: B010
    return [(Monitor, "trace_on", on), (Monitor, "trace_off", off)]


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
    torch._dynamo.reset()
    magpy.reset()
    counters.clear()
    model, make_inputs = build(size)
    args = make_inputs(batch, 0)
    phases: dict[str, float] = {}
    with torch.no_grad(), warnings.catch_warnings(), quiet_dynamo():
        # A MagPy fallback is reported through magpy_eager_reason instead, and torch.compile's
        # recompilations through torch_compile_graphs.
        ignore_magpy_warnings()
        variants = _first_calls(name, model, args, batch, backend, magpy_eager, phases, log)
        log(
            f"timing {name} (batch {batch}): {', '.join(v.name for v in variants)}, "
            f"{repeat} rounds..."
        )
        _time_round_robin(variants, args, repeat=repeat, warmup=warmup)
        overhead = _magpy_overhead_us(variants[1].fn, model, args)
        mismatches = _check(variants, make_inputs, batch, checks)
    return _case_result(name, batch, size, backend, variants, phases, overhead, mismatches)


def _first_calls(
    name: str,
    model: Any,
    args: tuple[Any, ...],
    batch: int,
    backend: str,
    magpy_eager: bool,
    phases: dict[str, float],
    log: Log,
) -> list[_Variant]:
    """Eager, MagPy, torch.compile and (``magpy_eager``) MagPy with the eager backend, each
    with its first call timed; MagPy's first call split into ``phases``."""
    variants = [_Variant("eager", model, _seconds(model, args))]
    log(f"compiling {name} (batch {batch}) with MagPy ({backend})...")
    compiled = magpy.compile(model, backend=backend)
    with _phase_clock(phases), own_cache("magpy"):
        first = _seconds(compiled, args)
    variants.append(_Variant("MagPy", compiled, first))

    log(f"compiling {name} (batch {batch}) with torch.compile ({backend})...")
    tc: Callable[..., Any] = torch.compile(model, backend=backend)
    with own_cache("torch.compile"):
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
    return variants


def _time_round_robin(
    variants: list[_Variant], args: tuple[Any, ...], *, repeat: int, warmup: int
) -> None:
    """``warmup`` calls of each variant, then ``repeat`` rounds of one timed call of each."""
    for variant in variants:
        for _ in range(warmup):
            variant.fn(*args)
    for _ in range(repeat):
        for variant in variants:
            variant.times.append(_seconds(variant.fn, args))


def _case_result(
    name: str,
    batch: int,
    size: str,
    backend: str,
    variants: list[_Variant],
    phases: dict[str, float],
    overhead: float | None,
    mismatches: list[str],
) -> CaseResult:
    compiled: Any = variants[1].fn  # MagPy's CompiledModule or CompiledFunction
    st = magpy.stats(compiled)
    eager_ms = variants[0].median_ms
    return CaseResult(
        model=name,
        batch=batch,
        size=size,
        backend=backend,
        latency_ms={v.name: v.median_ms for v in variants},
        speedup={v.name: eager_ms / v.median_ms for v in variants[1:]},
        first_call_s={v.name: v.first_call_s for v in variants},
        magpy_phases_s=_split_phases(phases),
        magpy_records=st.records,
        magpy_graphs=st.graphs,
        magpy_breaks=st.breaks,
        magpy_fallbacks=st.fallbacks,
        magpy_eager_reason=compiled._magpy_state.eager_reason,
        torch_compile_graphs=int(counters["stats"]["unique_graphs"]),
        magpy_overhead_us=overhead,
        mismatches=mismatches,
    )


def _split_phases(phases: dict[str, float]) -> dict[str, float]:
    """MagPy's first call as monitor, codegen and backend seconds; empty when the runtime's
    functions could not all be timed (then only the total is reported)."""
    if phases.keys() != {"monitor", "record", "backend"}:
        return {}
    return {
        "monitor": phases["monitor"],
        "codegen": max(phases["record"] - phases["backend"], 0.0),
        "backend": phases["backend"],
    }


def _magpy_overhead_us(
    compiled: Any, model: Any, args: tuple[Any, ...], calls: int = 200
) -> float | None:
    """MagPy's own cost per call in microseconds: cache lookup, guard and mock, with the
    compiled graph replaced by a stub that returns its precomputed outputs. None unless the
    program is one graph, in a record that accepts ``args``."""
    state = compiled._magpy_state
    split = state.stats.breaks or getattr(state, "site_records", None)  # several graphs per call
    if state.eager_reason is not None or not state.records or split:
        return None
    record = state.records[0]
    inputs = record.guard.check(model, args, {})
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
            where = mismatch(variant.fn(*args), want)
            if where is not None:
                problems.append(f"{variant.name}, check {i}: {where}")
    return problems


# ------------------------------------------------------------------ the benchmarks' command lines
def inductor_cache() -> str:
    """Inductor's cache folder (``TORCHINDUCTOR_CACHE_DIR``; importing torch._dynamo sets it
    to ``/tmp/torchinductor_$USER`` unless it was set before)."""
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir()


def name_list(text: str, known: Sequence[str], what: str) -> list[str]:
    """``--models a,b``: the names, each one of ``known``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {unknown or text!r}; choose from {', '.join(known)}"
        )
    return names


def add_model_and_mode_lists(
    parser: argparse.ArgumentParser,
    models: Sequence[str],
    modes: Sequence[str],
    modes_note: str,
) -> None:
    """A benchmark's ``--models`` and ``--modes`` (comma-separated, each checked against the
    names it knows; default: all); ``modes_note`` ends the help of ``--modes``."""
    for flag, known, what, note in (
        ("--models", list(models), "model", ""),
        ("--modes", list(modes), "mode", f"; {modes_note}" if modes_note else ""),
    ):
        parser.add_argument(
            flag,
            type=functools.partial(name_list, known=known, what=what),
            default=known,
            help=f"comma-separated, from {', '.join(known)} (default: all{note})",
        )


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def add_run_options(parser: argparse.ArgumentParser, name: str, fresh_cache: str) -> None:
    """The options every side-by-side benchmark takes: ``--seed``, ``--threads``, ``--json``
    (default ``<name>.json``) and ``--fresh-cache`` (``fresh_cache``: what it makes cold)."""
    parser.add_argument("--seed", type=int, default=0, help="seed of inputs and weights")
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch.set_num_threads (default 1)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path(f"{name}.json"),
        help=f"write the results here (default: {name}.json)",
    )
    parser.add_argument(
        "--fresh-cache",
        action="store_true",
        help=f"compile into a new temporary Inductor cache ({fresh_cache})",
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def bench_start(
    name: str, threads: int, fresh_cache: bool, modes: Sequence[str], log: Log
) -> tuple[Any, dict[str, Any], float]:
    """What a benchmark does first: Inductor's cache (a new temporary folder with
    ``fresh_cache``, kept alive by the returned object), one thread count, the environment
    logged, and Inductor's once-per-process start timed when a mode compiles with it.
    Returns (the temporary folder or None, the environment, the start-up seconds)."""
    tmp: Any = None
    if fresh_cache:
        tmp = tempfile.TemporaryDirectory(prefix=f"{name}_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp.name
    cache = inductor_cache()
    torch.set_num_threads(threads)
    env = environment(threads)
    log(
        f"MagPy {env['magpy']}, torch {env['torch']}, Python {env['python']}, {env['cpus']} "
        f"CPUs, torch.set_num_threads({threads}); Inductor cache {cache}"
    )
    startup = 0.0
    if {"torch.compile", "magpy"} & set(modes):
        startup = start_backend("inductor", log)
    return tmp, env, startup
