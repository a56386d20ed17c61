"""Benchmark dynamic workloads: eager vs torch.compile vs MagPy, compiles included.

    python -m integration.bench_dynamic                      # 100 calls per model and mode
    python -m integration.bench_dynamic --quick --modes eager,magpy-eager
    python -m integration.bench_dynamic --models lstm --calls 30 --json /tmp/lstm.json

The MagPy paper's Figures 17 and 18 in spirit, on a CPU: programs whose inputs change from call to
call, so a compiler must recompile, generalize or fall back. Four workloads (built from
``integration/models``; each call's inputs are drawn up front from a seeded generator):

- ``bert``: a BERT-like encoder (``transformer.BertLike``) with a new batch size *and* sequence
  length on every call;
- ``lstm``: a stacked LSTM built from ``nn.LSTMCell`` s (``lstm_cells.CellLSTM``), stepped over a
  sequence in a Python loop, with a new sequence length on every call;
- ``blockdrop``: BlockDrop (``blockdrop.BlockDrop``), whose policy network keeps different
  residual blocks for different inputs (a data-dependent ``if not keep.any()`` per block).
- ``blocks``: the BERT-like encoder with 12 identical layers compiled one by one (each
  instance's ``forward`` replaced by its compiled version, as FSDP users compile), same shapes
  on every call: one compile should serve all twelve (MagPy: a block adopts the record another
  block made, ``magpy_runtime.cache._pool``; its "graphs" are the graphs compiled, not adopted).

Modes: ``eager``; ``torch.compile`` (default settings: Inductor, ``dynamic=None``); ``magpy``
(``magpy.compile(backend="inductor")``, ``dynamic=None``); ``magpy-eager``
(``backend="eager"``: MagPy's capture and guard cost apart from kernel quality).

For every model and mode the benchmark reports:

- **total**: the summed wall time of the stream of ``--calls`` calls with a fresh compiler,
  every (re)compile included;
- **steady**: the median per-call time of a replay of the same inputs right after the stream,
  when everything is compiled (calls that still compile are counted);
- how many calls compiled something, MagPy's records / graphs / breaks / fallbacks
  (``magpy.stats``) and torch.compile's graphs and Dynamo frame compiles
  (``torch._dynamo.utils.counters``);
- **mismatches**: every call of every mode, in the stream and in the replay, is compared with
  eager through ``torch.testing.assert_close`` (looser tolerances for Inductor). Mismatches are
  counted and reported, never hidden; a mode that raises is recorded as failed and the benchmark
  goes on.

The modes run one after the other, each isolated (``torch._dynamo.reset()`` and
``magpy.reset()`` before and after), not interleaved round-robin as in ``bench_static.py``:
MagPy's frame hook gives the functions around a graph break an instrumented ``__code__``, and
torch.compile, whose caches are keyed by code object, then recompiles those frames. With 2
shared cores the medians are noisy (spikes of a few ms); compare modes within one run.

Inductor's compiles are cached across runs (``TORCHINDUCTOR_CACHE_DIR``, by default
``/tmp/torchinductor_$USER``; one subfolder per compiler as in ``magpy bench``), so a rerun's totals
are lower than a cold run's; ``--fresh-cache`` compiles into a new temporary folder instead,
with a subfolder per round (``--rounds``): every round's totals are cold.
Prints one progress line per (model, mode), a Markdown table on stdout, and writes a JSON file.
Not a test: figures go into issue notes (``integration/test_bench_dynamic.py`` smoke-tests
``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import random
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch._dynamo
import torch.nn as nn
from torch._dynamo.utils import counters

import magpy
from integration.models import blockdrop, lstm_cells, transformer
from integration.models.resnet import randomize_bn
from magpy._measure import (
    add_model_and_mode_lists,
    add_run_options,
    bench_start,
    positive_int,
)
from magpy._measure import own_cache as _own_cache
from magpy._measure import quiet_dynamo as _quiet_dynamo
from magpy._report import markdown as _markdown

__all__ = ["MODELS", "MODES", "ModeResult", "Workload", "main", "run_model"]

Args = tuple[torch.Tensor, ...]
Log = Callable[[str], None]

MODES: dict[str, str] = {
    "eager": "eager",
    "torch.compile": "torch.compile",
    "magpy": "MagPy (inductor)",
    "magpy-eager": "MagPy (eager backend)",
}
# (rtol, atol) of the comparison with eager: Inductor fuses and reorders float math; the eager
# backends run the same ATen kernels as eager, so their tolerance stays close to float32's.
TOLERANCE: dict[str, tuple[float, float]] = {
    "eager": (0.0, 0.0),
    "torch.compile": (1e-3, 1e-4),
    "magpy": (1e-3, 1e-4),
    "magpy-eager": (1e-5, 1e-5),
}
MAX_DETAILS = 5  # mismatch / error details kept per mode


# ------------------------------------------------------------------------------ workloads
@dataclasses.dataclass
class Workload:
    """One model and the inputs of each call (drawn up front, so every mode sees the same)."""

    name: str
    model: nn.Module
    calls: list[Args]
    shapes: list[str]  # a short description of each call's inputs
    settings: dict[str, Any]
    # blocks compiled one by one (each instance's ``forward``, as FSDP users do) instead of
    # the whole model; none: the model is compiled
    blocks: list[nn.Module] = dataclasses.field(default_factory=list)


def bert_workload(calls: int, quick: bool, seed: int) -> Workload:
    """A BERT-like encoder; batch size and sequence length change on every call."""
    vocab, hidden, layers, heads = (500, 32, 2, 2) if quick else (1000, 128, 4, 4)
    batch_range, seq_range = ((1, 4), (4, 16)) if quick else ((1, 16), (8, 64))
    torch.manual_seed(seed)
    model = transformer.BertLike(vocab, hidden, layers, heads).eval()
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    args: list[Args] = []
    shapes = []
    for _ in range(calls):
        batch, seq = rng.randint(*batch_range), rng.randint(*seq_range)
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        lengths = torch.randint(max(seq // 2, 1), seq + 1, (batch,), generator=gen)
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        args.append((ids, mask))
        shapes.append(f"{batch}x{seq}")
    settings = {
        "vocab": vocab,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "batch_range": list(batch_range),
        "seq_range": list(seq_range),
    }
    return Workload("bert", model, args, shapes, settings)


def lstm_workload(calls: int, quick: bool, seed: int) -> Workload:
    """A stacked LSTM from ``nn.LSTMCell``s, stepped in Python over a sequence whose length
    changes on every call (torch.compile unrolls the loop into one graph per length; MagPy
    into chunks of iterations that serve every length)."""
    input_size, hidden, layers, batch = (8, 16, 2, 2) if quick else (32, 64, 2, 8)
    seq_range = (2, 5) if quick else (4, 16)
    torch.manual_seed(seed)
    model = lstm_cells.CellLSTM(input_size, hidden, layers).eval()
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    args: list[Args] = []
    shapes = []
    for _ in range(calls):
        seq = rng.randint(*seq_range)
        args.append((torch.randn(seq, batch, input_size, generator=gen),))
        shapes.append(f"seq {seq}")
    settings = {
        "input_size": input_size,
        "hidden": hidden,
        "layers": layers,
        "batch": batch,
        "seq_range": list(seq_range),
    }
    return Workload("lstm", model, args, shapes, settings)


def blockdrop_workload(calls: int, quick: bool, seed: int) -> Workload:
    """BlockDrop whose policy keeps different blocks for different inputs.

    The zoo's policy (biases spread over [-3, 3]) keeps the same blocks for almost every input;
    here its biases lie in [-1, 1] and its weights are scaled up, and each call's images get a
    random contrast and per-channel offset, so the set of blocks that run changes between calls.
    """
    width, per_stage, side = (8, 1, 16) if quick else (16, 3, 32)
    batch = 2
    torch.manual_seed(seed)
    model = blockdrop.BlockDrop(width, per_stage).eval()
    randomize_bn(model, seed + 1)
    with torch.no_grad():
        model.policy.fc.weight.mul_(8.0)
        model.policy.fc.bias.copy_(torch.linspace(-1.0, 1.0, len(model.gates)))
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    args: list[Args] = []
    shapes = []
    with torch.no_grad():
        for _ in range(calls):
            x = torch.randn(batch, 3, side, side, generator=gen) * rng.uniform(0.5, 3.0)
            x = x + torch.randn(1, 3, 1, 1, generator=gen)
            args.append((x,))
            keep = (model.policy(x) > 0.5).any(0)
            shapes.append("blocks " + "".join("1" if k else "0" for k in keep.tolist()))
    settings = {
        "width": width,
        "blocks_per_stage": per_stage,
        "image_side": side,
        "batch": batch,
        "distinct_block_patterns": len(set(shapes)),
    }
    return Workload("blockdrop", model, args, shapes, settings)


def blocks_workload(calls: int, quick: bool, seed: int) -> Workload:
    """A 12-layer BERT-like encoder whose identical blocks are compiled one by one
    (``block.forward = compile(block.forward)``); the shapes stay the same."""
    vocab, hidden, layers, heads, batch, seq = (
        (500, 32, 4, 2, 2, 8) if quick else (1000, 128, 12, 4, 8, 64)
    )
    torch.manual_seed(seed)
    model = transformer.BertLike(vocab, hidden, layers, heads).eval()
    gen = torch.Generator().manual_seed(seed)
    args: list[Args] = []
    for _ in range(calls):
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        args.append((ids, torch.ones(batch, seq, dtype=torch.long)))
    settings = {"vocab": vocab, "hidden": hidden, "layers": layers, "heads": heads}
    settings |= {"batch": batch, "seq": seq, "compiled": "each block's forward"}
    shapes = [f"{batch}x{seq}"] * calls
    return Workload("blocks", model, args, shapes, settings, blocks=list(model.layers))


MODELS: dict[str, Callable[[int, bool, int], Workload]] = {
    "bert": bert_workload,
    "lstm": lstm_workload,
    "blockdrop": blockdrop_workload,
    "blocks": blocks_workload,
}


# ------------------------------------------------------------------------------ results
@dataclasses.dataclass
class ModeResult:
    """One model under one mode."""

    model: str
    mode: str
    calls: int  # calls completed in the stream
    total_s: float | None  # the stream's wall time, every compile included
    first_call_s: float | None
    compiling_calls: int | None  # stream calls that compiled something new
    stream_ms: list[float]  # each stream call
    steady_median_ms: float | None
    steady_ms: list[float]  # each replay call
    replay_compiling_calls: int | None  # replay calls that still compiled something
    magpy_stats: dict[str, int] | None  # hits, misses, records, graphs, breaks, fallbacks
    magpy_eager_reason: str | None
    magpy_break_reasons: list[str]
    torch_compile_graphs: int | None
    torch_compile_frames: int | None  # Dynamo frame compiles (recompiles included)
    torch_compile_recompile_limit: bool
    mismatches: int
    mismatch_details: list[str]
    error: str | None
    error_traceback: str | None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "ERROR"
        return "MISMATCH" if self.mismatches else "ok"


def _mismatch(got: Any, want: Any, mode: str) -> str | None:
    """None when ``got`` matches eager's ``want`` within the mode's tolerance, else why not."""
    rtol, atol = TOLERANCE[mode]
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        return " ".join(str(exc).split())[:300]
    return None


STAT_FIELDS = ("hits", "misses", "records", "graphs", "breaks", "fallbacks")


def _stats(compiled: Any) -> dict[str, int]:
    st = magpy.stats(compiled)
    return {name: int(getattr(st, name)) for name in STAT_FIELDS}


def _records(compiled: Any) -> int:
    return magpy.stats(compiled).records


class _PerBlock:
    """The blocks of a workload compiled one by one: the model runs them."""

    def __init__(self, model: nn.Module, blocks: list[nn.Module], mode: str) -> None:
        self.model, self.blocks, self.mode = model, blocks, mode
        for block in blocks:
            if mode == "torch.compile":
                block.forward = torch.compile(block.forward)
            else:
                backend = "inductor" if mode == "magpy" else "eager"
                block.forward = magpy.compile(block.forward, backend=backend)

    def __call__(self, *args: Any) -> Any:
        return self.model(*args)

    def stats(self) -> dict[str, int]:
        """MagPy's counters summed over the blocks; ``graphs``: the graphs compiled (a
        block that adopted another block's record compiled none)."""
        forwards = [b.forward for b in self.blocks]
        out = {name: sum(_stats(f)[name] for f in forwards) for name in STAT_FIELDS}
        records = [r for f in forwards for r in f._magpy_state.records]
        out["graphs"] = len({id(r.origin or r) for r in records if r.graph_module is not None})
        return out

    def undo(self) -> None:
        for block in self.blocks:
            block.__dict__.pop("forward", None)


def _tc_graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


@contextlib.contextmanager
def _no_magpy_warnings() -> Iterator[None]:
    """MagPy's "runs eagerly from now on" warnings become result fields, not noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="magpy: ", category=RuntimeWarning)
        yield


def _compiler(mode: str, work: Workload) -> tuple[Callable[..., Any], Callable[[], int] | None]:
    """The callable of ``mode`` and a counter of what it compiled so far (None for eager)."""
    model = work.model
    if mode == "eager":
        return model, None
    if work.blocks:
        per_block = _PerBlock(model, work.blocks, mode)
        if mode == "torch.compile":
            return per_block, _tc_graphs
        return per_block, lambda: per_block.stats()["graphs"]
    if mode == "torch.compile":
        return torch.compile(model), _tc_graphs
    backend = "inductor" if mode == "magpy" else "eager"
    compiled = magpy.compile(model, backend=backend)
    return compiled, lambda: _records(compiled)


def _new_result(mode: str, work: Workload) -> ModeResult:
    return ModeResult(
        model=work.name,
        mode=mode,
        calls=0,
        total_s=None,
        first_call_s=None,
        compiling_calls=None,
        stream_ms=[],
        steady_median_ms=None,
        steady_ms=[],
        replay_compiling_calls=None,
        magpy_stats=None,
        magpy_eager_reason=None,
        magpy_break_reasons=[],
        torch_compile_graphs=None,
        torch_compile_frames=None,
        torch_compile_recompile_limit=False,
        mismatches=0,
        mismatch_details=[],
        error=None,
        error_traceback=None,
    )


def _timed_calls(
    fn: Callable[..., Any],
    compiled_so_far: Callable[[], int] | None,
    work: Workload,
    want: list[Any],
    result: ModeResult,
    phase: str,
) -> tuple[list[float], int]:
    """Call ``fn`` on every input of ``work`` in turn; (milliseconds per call, calls that
    compiled something). Each output is checked against eager's, outside the timing."""
    times: list[float] = []
    compiling = 0
    for i, args in enumerate(work.calls):
        before = compiled_so_far() if compiled_so_far else 0
        where = f"{phase} call {i} ({work.shapes[i]})"
        try:
            start = time.perf_counter()
            out = fn(*args)
            times.append((time.perf_counter() - start) * 1e3)
        except Exception as exc:
            result.error = f"{where}: {type(exc).__name__}: " + " ".join(str(exc).split())[:500]
            result.error_traceback = traceback.format_exc()
            break
        if compiled_so_far and compiled_so_far() != before:
            compiling += 1
        _check(result, out, want[i], where)
    return times, compiling


def run_mode(mode: str, work: Workload, want: list[Any], cache_round: str = "") -> ModeResult:
    """A fresh compiler of ``mode``: the stream over every input of ``work`` (compiles
    included), then a replay of the same inputs (steady state); counters collected."""
    result = _new_result(mode, work)
    counters.clear()
    gc.collect()
    cache = _own_cache((mode if mode == "torch.compile" else "magpy") + cache_round)
    with cache if mode != "eager" else contextlib.nullcontext():
        try:
            fn, compiled_so_far = _compiler(mode, work)
        except Exception as exc:
            result.error = f"compile: {type(exc).__name__}: {exc}"
            result.error_traceback = traceback.format_exc()
            return result
        result.stream_ms, compiling = _timed_calls(
            fn, compiled_so_far, work, want, result, "stream"
        )
        result.calls = len(result.stream_ms)
        if result.stream_ms:
            result.total_s = sum(result.stream_ms) / 1e3
            result.first_call_s = result.stream_ms[0] / 1e3
        if compiled_so_far is not None:
            result.compiling_calls = compiling
        if result.error is None:
            result.steady_ms, compiling = _timed_calls(
                fn, compiled_so_far, work, want, result, "replay"
            )
            if result.error is None:
                result.steady_median_ms = statistics.median(result.steady_ms)
            if compiled_so_far is not None:
                result.replay_compiling_calls = compiling
    _collect_compiler_state(result, mode, fn)
    if isinstance(fn, _PerBlock):
        fn.undo()
    return result


def _check(result: ModeResult, got: Any, want: Any, where: str) -> None:
    problem = _mismatch(got, want, result.mode)
    if problem is not None:
        result.mismatches += 1
        if len(result.mismatch_details) < MAX_DETAILS:
            result.mismatch_details.append(f"{where}: {problem}")


def _collect_compiler_state(result: ModeResult, mode: str, compiled: Any) -> None:
    if mode == "torch.compile":
        result.torch_compile_graphs = _tc_graphs()
        result.torch_compile_frames = int(counters["frames"]["ok"])
        result.torch_compile_recompile_limit = any(
            "recompile limit" in key.lower() or "recompile_limit" in key
            for key in counters["unimplemented"]
        )
    elif isinstance(compiled, _PerBlock):
        result.magpy_stats = compiled.stats()
    elif mode.startswith("magpy"):
        result.magpy_stats = _stats(compiled)
        state = getattr(compiled, "_magpy_state", None)
        result.magpy_eager_reason = getattr(state, "eager_reason", None)
        reasons = [str(r) for r in getattr(state, "break_reasons", [])]
        result.magpy_break_reasons = list(dict.fromkeys(reasons))[:MAX_DETAILS]


def run_model(
    work: Workload, modes: Sequence[str], log: Log, cache_round: str = ""
) -> list[ModeResult]:
    """Every mode in turn, each isolated: torch.compile's and MagPy's state is reset before
    and after it.

    Not interleaved across modes: MagPy's frame hook gives the functions around a graph break
    an instrumented ``__code__``, and Dynamo, whose caches are keyed by code object, would then
    recompile those frames (and trace MagPy's sites) in an interleaved replay. ``cache_round``:
    a suffix of each compiler's cache folder (a cold cache per round with ``--fresh-cache``).
    """
    with torch.no_grad():
        want = [work.model(*args) for args in work.calls]
    results = []
    with torch.no_grad(), _no_magpy_warnings(), _quiet_dynamo():
        for mode in modes:
            torch._dynamo.reset()
            magpy.reset()
            result = run_mode(mode, work, want, cache_round)
            torch._dynamo.reset()
            magpy.reset()
            results.append(result)
            log(_progress_line(result))
    return results


# ------------------------------------------------------------------------------ reporting
def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def _x(base: float | None, x: float | None) -> str:
    return "-" if base is None or x is None or x <= 0 else f"{base / x:.2f}x"


def _compiler_cells(r: ModeResult) -> tuple[str, str]:
    """(graphs, MagPy records/breaks/fallbacks or torch.compile frame compiles)."""
    if r.magpy_stats is not None:
        st = r.magpy_stats
        return str(st["graphs"]), f"{st['records']} / {st['breaks']} / {st['fallbacks']}"
    if r.torch_compile_graphs is not None:
        limit = ", recompile limit hit" if r.torch_compile_recompile_limit else ""
        return str(r.torch_compile_graphs), f"{r.torch_compile_frames} frame compiles{limit}"
    return "-", "-"


def _progress_line(r: ModeResult) -> str:
    graphs, detail = _compiler_cells(r)
    line = (
        f"{r.model} / {r.mode}: {r.calls} calls in {_s(r.total_s)} s (first call "
        f"{_s(r.first_call_s)} s, {r.compiling_calls if r.compiling_calls is not None else 0} "
        f"compiling calls), graphs {graphs}"
    )
    if r.magpy_stats is not None:
        line += f", records/breaks/fallbacks {detail}"
    elif r.torch_compile_graphs is not None:
        line += f", {detail}"
    line += f"; steady median {_ms(r.steady_median_ms)} ms"
    if r.replay_compiling_calls:
        line += f" ({r.replay_compiling_calls} replay calls compiled)"
    line += f", mismatches {r.mismatches}"
    if r.error is not None:
        line += f"; ERROR: {r.error}"
    return line


def markdown_table(results: list[ModeResult], calls: int) -> str:
    """One row per (model, mode); speedups are over eager on the same model."""
    eager = {r.model: r for r in results if r.mode == "eager"}
    header = [
        "model",
        "mode",
        f"total s ({calls} calls)",
        "total vs eager",
        "1st call s",
        "compiling calls",
        "steady median ms",
        "steady vs eager",
        "graphs",
        "MagPy records / breaks / fallbacks; torch.compile frames",
        "mismatches",
        "status",
    ]
    rows = []
    for r in results:
        base = eager.get(r.model)
        graphs, detail = _compiler_cells(r)
        rows.append(
            [
                r.model,
                MODES[r.mode],
                _s(r.total_s),
                _x(base.total_s if base else None, r.total_s),
                _s(r.first_call_s),
                "-" if r.compiling_calls is None else str(r.compiling_calls),
                _ms(r.steady_median_ms),
                _x(base.steady_median_ms if base else None, r.steady_median_ms),
                graphs,
                detail,
                str(r.mismatches),
                r.status,
            ]
        )
    return _markdown(header, rows)


def _round_ratio(base: list[ModeResult], mine: list[ModeResult], key: str, over: bool) -> str:
    """The median over rounds of ``base / mine`` (``over``) or ``mine / base`` of ``key``."""
    pairs = [(getattr(b, key), getattr(r, key)) for b, r in zip(base, mine, strict=False)]
    values = [(x / y if over else y / x) for x, y in pairs if x and y]
    return f"{statistics.median(values):.2f}x" if values else "-"


def rounds_table(results: list[ModeResult], models: Sequence[str], modes: Sequence[str]) -> str:
    """Medians over the rounds (a model's modes ran once per round, eager first): steady and
    total, each also as a ratio to the same round's eager and torch.compile figure (the machine's
    speed drifts between rounds; a ratio within one round is steadier), and the noise of the
    steady median, (max - min) / median over the rounds."""
    header = ["model", "mode", "steady ms", "noise", "steady: eager / mode", "steady: tc / mode"]
    header += ["total s", "total: mode / tc"]
    rows = []
    rounds = 0
    for model in models:
        by_mode = {m: [r for r in results if r.model == model and r.mode == m] for m in modes}
        rounds = min(len(v) for v in by_mode.values())
        eager, tc = by_mode["eager"], by_mode.get("torch.compile", [])
        for mode in modes:
            mine = by_mode[mode][:rounds]
            steady = [r.steady_median_ms for r in mine if r.steady_median_ms]
            totals = [r.total_s for r in mine if r.total_s]
            mid = statistics.median(steady) if steady else None
            noise = f"{(max(steady) - min(steady)) / mid * 100:.0f}%" if mid else "-"
            rows.append([
                model, MODES[mode], _ms(mid), noise,
                _round_ratio(eager, mine, "steady_median_ms", True),
                _round_ratio(tc, mine, "steady_median_ms", True),
                _s(statistics.median(totals) if totals else None),
                _round_ratio(tc, mine, "total_s", False),
            ])  # fmt: skip
    return f"Medians over {rounds} rounds:\n\n" + _markdown(header, rows)


def notes(results: list[ModeResult]) -> list[str]:
    """Fallbacks, graph breaks, recompile limits, mismatches and errors, one line each."""
    out = []
    for r in results:
        tag = f"{r.model} / {MODES[r.mode]}"
        if r.magpy_eager_reason:
            out.append(f"{tag}: MagPy runs eagerly: {r.magpy_eager_reason}")
        if r.magpy_break_reasons:
            out.append(f"{tag}: graph breaks at: {'; '.join(r.magpy_break_reasons)}")
        if r.torch_compile_recompile_limit:
            out.append(f"{tag}: hit torch._dynamo.config.recompile_limit (runs frames eagerly)")
        if r.replay_compiling_calls:
            out.append(
                f"{tag}: {r.replay_compiling_calls} calls of the replay still compiled (inputs "
                "it had seen in the stream)"
            )
        out += [f"{tag}: DIFFERS FROM EAGER: {d}" for d in r.mismatch_details]
        if r.mismatches > len(r.mismatch_details):
            out.append(f"{tag}: ... {r.mismatches - len(r.mismatch_details)} more mismatches")
        if r.error:
            out.append(f"{tag}: FAILED: {r.error}")
    return out


# ------------------------------------------------------------------------------ command line
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m integration.bench_dynamic",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument(
        "--calls", type=positive_int, help="calls per model and mode (default 100; 10 with --quick)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller models and shapes, 10 calls (a smoke run)"
    )
    add_model_and_mode_lists(parser, MODELS, MODES, "eager is always run first, as the baseline")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="run every model's modes this many times (the compiled modes' order rotating) and "
        "add a table of medians over the rounds (default 1)",
    )
    add_run_options(parser, "bench_dynamic", "cold-cache totals")
    args = parser.parse_args(argv)
    if args.calls is None:
        args.calls = 10 if args.quick else 100
    args.modes = ["eager", *[m for m in args.modes if m != "eager"]]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(message: str) -> None:
        print(f"[bench_dynamic] {message}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    tmp, env, startup = bench_start(
        "bench_dynamic", args.threads, args.fresh_cache, args.modes, log
    )
    results: list[ModeResult] = []
    workloads: dict[str, dict[str, Any]] = {}
    try:
        for name in args.models:
            work = MODELS[name](args.calls, args.quick, args.seed)
            workloads[name] = {"settings": work.settings, "calls": work.shapes}
            log(f"{name}: {args.calls} calls, {work.settings}")
            for r in range(args.rounds):
                turn = r % max(len(args.modes) - 1, 1)
                order = ["eager", *args.modes[1 + turn :], *args.modes[1 : 1 + turn]]
                if args.rounds > 1:
                    log(f"{name}: round {r + 1}/{args.rounds}, {order}")
                cold = f"-{name}-round{r}" if args.fresh_cache else ""
                results += run_model(work, order, log, cold)
    finally:
        if tmp is not None:
            tmp.cleanup()
    elapsed = time.perf_counter() - start

    print(
        f"\n### Dynamic workloads: {args.calls} calls per model and mode"
        f"{' (--quick)' if args.quick else ''}\n"
    )
    print(
        f"torch {env['torch']}, Python {env['python']}, {env['machine']} ({env['cpus']} CPUs), "
        f"torch.set_num_threads({args.threads}), no_grad. total = the stream of {args.calls} "
        "calls with a fresh compiler, every (re)compile included; steady = median per call of "
        "a replay of the same inputs right after; modes run one after the other.\n"
    )
    print(markdown_table(results, args.calls))
    print()
    if args.rounds > 1:
        print(rounds_table(results, args.models, args.modes))
        print()
    for line in notes(results):
        print(f"- {line}")
    if startup:
        print(
            f"- Inductor's once-per-process start took {startup:.1f} s before any model (in no "
            "total); each compiler compiles into its own cache folder."
        )
    print(f"\n(benchmark ran {elapsed:.0f} s)")

    payload = {
        "environment": env,
        "settings": {
            "calls": args.calls,
            "quick": args.quick,
            "models": args.models,
            "modes": args.modes,
            "seed": args.seed,
            "fresh_cache": args.fresh_cache,
            "tolerance": {m: TOLERANCE[m] for m in args.modes},
            "inductor_startup_s": startup,
        },
        "workloads": workloads,
        "results": [dataclasses.asdict(r) | {"status": r.status} for r in results],
        "elapsed_s": elapsed,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    log(f"wrote {args.json}")
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
