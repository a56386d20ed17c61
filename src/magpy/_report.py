"""What ``magpy demo`` and ``magpy bench`` print: Markdown tables, notes, and the speedup chart."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch._dynamo

from ._measure import CaseResult, Log

__all__ = ["bench_table", "demo_table", "fmt_ms", "fmt_x", "markdown", "notes", "plot"]

try:  # optional: pip install 'magpy[bench]'
    _pyplot: Any = importlib.import_module("matplotlib.pyplot")
except ImportError:
    _pyplot = None


def fmt_ms(value: float | None) -> str:
    """Milliseconds: two decimals below 100, none from there on; "-" for none."""
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt_x(value: float | None) -> str:
    """A speedup, ``1.23x``; "-" for none."""
    return "-" if value is None else f"{value:.2f}x"


def markdown(header: list[str], rows: list[list[str]]) -> str:
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
            fmt_ms(r.latency_ms["eager"]),
            fmt_ms(r.latency_ms["torch.compile"]),
            fmt_ms(r.latency_ms["MagPy"]),
            fmt_x(r.speedup["torch.compile"]),
            fmt_x(r.speedup["MagPy"]),
            f"{r.magpy_records}/{r.magpy_graphs}/{r.magpy_breaks}",
            str(r.torch_compile_graphs),
            _first_call(r),
            f"{r.first_call_s['torch.compile']:.1f}",
            "yes" if r.ok else "NO",
        ]
        for r in results
    ]
    return markdown(header, rows)


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
    return markdown(header, [_bench_row(r, with_eager) for r in results])


def _bench_row(r: CaseResult, with_eager: bool) -> list[str]:
    row = [
        r.model,
        str(r.batch),
        fmt_ms(r.latency_ms["eager"]),
        fmt_ms(r.latency_ms["torch.compile"]),
        fmt_ms(r.latency_ms["MagPy"]),
    ]
    row += [fmt_ms(r.latency_ms.get("MagPy[eager]"))] if with_eager else []
    row += [fmt_x(r.speedup["torch.compile"]), fmt_x(r.speedup["MagPy"])]
    row += [fmt_x(r.speedup.get("MagPy[eager]"))] if with_eager else []
    row += [
        f"{r.magpy_records}/{r.magpy_graphs}/{r.magpy_breaks}",
        str(r.torch_compile_graphs),
        f"{r.first_call_s['torch.compile']:.1f}",
        _first_call(r),
        "-" if r.magpy_overhead_us is None else f"{r.magpy_overhead_us:.0f}",
        "yes" if r.ok else "NO",
    ]
    return row


def notes(results: list[CaseResult]) -> list[str]:
    limit = getattr(torch._dynamo.config, "recompile_limit", None)
    lines = []
    for r in results:
        if r.torch_compile_graphs > 1:
            lines.append(
                f"{r.model} (batch {r.batch}): torch.compile compiled {r.torch_compile_graphs} "
                "graphs (it recompiled on later calls"
                + (
                    f"; at recompile_limit={limit} it runs the frame eagerly)"
                    if limit is not None and r.torch_compile_graphs >= limit
                    else ")"
                )
            )
        if r.magpy_eager_reason is not None:
            lines.append(
                f"{r.model} (batch {r.batch}): MagPy ran it eagerly: {r.magpy_eager_reason}"
            )
        lines += [f"{r.model} (batch {r.batch}): DIFFERS FROM EAGER: {m}" for m in r.mismatches]
    return lines


def plot(results: list[CaseResult], path: Path, log: Log) -> None:
    """A PNG bar chart of every variant's speedup over eager, per model and batch."""
    if _pyplot is None:
        log(
            f"plot skipped: matplotlib is not installed (pip install 'magpy[bench]'); "
            f"{path} not written"
        )
        return
    plt = _pyplot
    plt.switch_backend("Agg")
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
