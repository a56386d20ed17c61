"""Memory: many cache misses and many cache hits do not make MagPy's memory grow.

Live objects are counted with ``len(gc.get_objects())`` after ``gc.collect()``, and the resident
set size is read from ``/proc/self/statm``. The bounds are generous (they catch a leak per call,
not noise); the measured figures are printed for the issue notes (run with ``-s`` or read the
"measured" lines in the output).

Misses use a ``str`` argument that changes every call: a string is guarded by value and never
promoted to a graph input, so every call misses whether or not dynamic scalar promotion exists.
``max_records=8`` keeps the records bounded: the records are made during the 20 warm-up calls
(also measured), and past 8 the callable (whole-call mode) or each site (split mode) runs
eagerly with one warning, so the 1,000 measured calls exercise the miss/fallback path.
"""

from __future__ import annotations

import gc
import linecache
import os
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import magpy

MISS_CALLS = 1_000
HIT_CALLS = 10_000
WARMUP = 20
CYCLES = 20


def live_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def whole(x: torch.Tensor, tag: str) -> torch.Tensor:
    if tag.endswith("7"):
        return (x + 1).relu()
    return (x * 2).relu()


def split(x: torch.Tensor, tag: str) -> torch.Tensor:
    y = x * 2
    if tag.endswith("3"):
        y = y + 3
    print(tag, file=_Null)  # the break: a print, to nowhere
    if tag.endswith("7"):
        return (y + 1).relu()
    return (y - 1).relu()


class _NullWriter:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


_Null = _NullWriter()


PROGRAMS: dict[str, Callable[[torch.Tensor, str], torch.Tensor]] = {
    "whole": whole,
    "split": split,
}


def measure(
    compiled: Any, program: Any, tags: Callable[[int], str], calls: int
) -> dict[str, float]:
    x = torch.randn(16)
    compiled(x, "first")  # one-time initialisation (torch, fx, the monitor's tables)
    objects_start = live_objects()
    for i in range(WARMUP):  # records, fallbacks and one-time initialisation happen here
        compiled(x, tags(i))
    objects0, rss0 = live_objects(), rss_bytes()
    half_objects = 0
    for i in range(calls):
        tag = tags(WARMUP + i)
        got = compiled(x, tag)
        if i % 97 == 0:  # spot-check correctness without doubling the run time
            assert torch.equal(got, program(x, tag)), (i, tag)
        if i == calls // 2:
            half_objects = live_objects()
    objects1, rss1 = live_objects(), rss_bytes()
    return {
        "objects_with_warmup": objects1 - objects_start,
        "objects": objects1 - objects0,
        "objects_second_half": objects1 - half_objects,
        "rss_mib": (rss1 - rss0) / 2**20,
    }


def report(
    capsys: pytest.CaptureFixture[str], what: str, figures: dict[str, float], st: Any
) -> None:
    with capsys.disabled():
        print(
            f"\nmeasured {what}: live objects {figures['objects']:+d} "
            f"(second half {figures['objects_second_half']:+d}; "
            f"with the {WARMUP} warm-up calls {figures['objects_with_warmup']:+d}), "
            f"RSS {figures['rss_mib']:+.2f} MiB; {st}"
        )


def _prime_torch_symbolic_shapes() -> None:
    """The first capture with dynamic sizes makes torch build its fake-tensor and symbolic
    shape machinery (about 110k objects, process-wide and once: a second such capture after
    ``magpy.reset()`` adds under 100). Built before measuring, so the figures show MagPy's own
    growth (the last record under ``max_records`` is such a capture)."""
    primed = magpy.compile(lambda x: (x * 2).relu(), backend="eager", dynamic=True)
    primed(torch.randn(3, 4))
    magpy.reset()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_thousand_misses_do_not_grow_memory(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _prime_torch_symbolic_shapes()
    program = PROGRAMS[name]
    compiled = magpy.compile(program, backend="eager", options={"max_records": 8})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figures = measure(compiled, program, lambda i: f"tag{i}", MISS_CALLS)
    st = magpy.stats(compiled)
    report(capsys, f"{MISS_CALLS} misses ({name})", figures, st)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) <= 1
    assert st.records <= 8 * 4, st  # per callable (whole) or per site (split: <= 4 sites)
    assert st.misses >= 9, st  # it did miss (until the callable or its site went eager)
    assert figures["objects"] < 5_000, figures
    assert figures["objects_second_half"] < 500, figures
    assert figures["objects_with_warmup"] < 50_000, figures  # includes <= 8 records per site
    assert figures["rss_mib"] < 64, figures


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_ten_thousand_hits_do_not_grow_memory(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    program = PROGRAMS[name]
    compiled = magpy.compile(program, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a settled program warns about nothing
        figures = measure(compiled, program, lambda i: "same", HIT_CALLS)
    st = magpy.stats(compiled)
    report(capsys, f"{HIT_CALLS} hits ({name})", figures, st)
    assert st.fallbacks == 0, st
    assert st.hits >= HIT_CALLS, st
    assert st.misses <= 3, st  # all misses happened in the warm-up
    assert figures["objects"] < 1_000, figures
    assert figures["objects_second_half"] < 500, figures
    assert figures["rss_mib"] < 64, figures


def magpy_linecache_entries() -> int:
    # torch.fx registers the source of every GraphModule too; only MagPy's own entries count
    return sum(1 for k in list(linecache.cache) if str(k).startswith("<magpy-"))


def test_compile_and_reset_cycles_do_not_grow_linecache(
    capsys: pytest.CaptureFixture[str],
) -> None:
    x = torch.randn(4)

    def cycle() -> None:
        compiled = magpy.compile(split, backend="eager")
        for _ in range(3):
            compiled(x, "same")
        magpy.reset()

    for _ in range(3):
        cycle()
    entries0, objects0 = magpy_linecache_entries(), live_objects()
    for _ in range(CYCLES):
        cycle()
    entries1, objects1 = magpy_linecache_entries(), live_objects()
    with capsys.disabled():
        print(
            f"\nmeasured {CYCLES} compile/reset cycles: MagPy linecache entries "
            f"{entries1 - entries0:+d}, "
            f"live objects {objects1 - objects0:+d}"
        )
    assert entries1 - entries0 == 0
