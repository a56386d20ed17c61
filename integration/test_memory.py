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
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

import magpy
from magpy_monitor import TABLE, classify

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


# ---------------------------------------------------------------- memory a dropped record returns
CLOSURES = 1_000
RSS_BOUND_MIB = 2.0


def generated_linecache_entries() -> int:
    """MagPy's guard and mock sources and the fx sources of its GraphModules in linecache."""
    return sum(
        1 for k in list(linecache.cache) if str(k).startswith(("<magpy-", "<eval_with_key>"))
    )


def _closure(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return (x * k).relu() + k

    return scaled


def _closures(n: int, *, compiled: bool) -> float:
    """Make, call (a miss, then a hit) and drop ``n`` closures; the RSS growth in MiB."""
    x = torch.randn(16)
    gc.collect()
    rss0 = rss_bytes()
    for k in range(n):
        fn = _closure(k)
        run = magpy.compile(fn, backend="eager") if compiled else fn
        run(x)
        assert torch.equal(run(x), fn(x))
        del fn, run
        if k % 100 == 99:  # (what is measured is what stays, not the garbage before a collection)
            gc.collect()
    gc.collect()
    return (rss_bytes() - rss0) / 2**20


def test_compiled_and_dropped_closures_return_their_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each compiled closure makes a record (generated guard and mock, a GraphModule); once the
    closure is dropped, its linecache entries go and the process's memory does not grow."""
    for _ in range(2):  # warm-up: allocator pools, torch's and MagPy's one-time tables
        _closures(200, compiled=True)
        _closures(200, compiled=False)
    entries0 = generated_linecache_entries()
    eager = _closures(CLOSURES, compiled=False)  # the baseline: the same loop, uncompiled
    growth = _closures(CLOSURES, compiled=True)
    entries = generated_linecache_entries() - entries0
    with capsys.disabled():
        print(
            f"\nmeasured {CLOSURES} compiled-and-dropped closures: linecache entries "
            f"{entries:+d}, RSS {growth:+.2f} MiB (the eager loop {eager:+.2f} MiB)"
        )
    assert entries == 0
    assert growth - max(eager, 0.0) < RSS_BOUND_MIB, (growth, eager)


def _whole(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).relu() + x.sum()


def _broken(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("a break", file=_Null)
    return y.relu() + x.sum()


@pytest.mark.parametrize(
    ("program", "dynamic"),
    [(_whole, False), (_whole, True), (_broken, False)],
    ids=["whole", "whole-dynamic", "segments"],
)
def test_a_recorded_input_is_freed_while_its_record_stays(
    program: Callable[[torch.Tensor], torch.Tensor], dynamic: bool
) -> None:
    """A 100 MB input the recording calls saw is freed after ``del`` (and their outputs with it),
    while the records they made stay cached and serve the next input."""
    compiled = magpy.compile(program, backend="eager", dynamic=dynamic)
    x = torch.randn(25_000_000)  # 100 MB
    alive = weakref.ref(x)
    first = compiled(x)
    second = compiled(x)
    second = compiled(x)  # (segments: the second call records them, the third hits)
    assert torch.equal(first, second)
    st = magpy.stats(compiled)
    assert st.hits >= 1 and st.records >= 1, st
    out = weakref.ref(first)
    del x, first, second
    gc.collect()
    assert alive() is None, "the recording call's input is kept alive"
    assert out() is None, "the recording call's output is kept alive"
    assert magpy.stats(compiled).records == st.records
    y = torch.randn(25_000_000)
    assert torch.equal(compiled(y), program(y))
    after = magpy.stats(compiled)
    assert after.misses == st.misses and after.hits > st.hits, after


def test_the_annotation_memo_keeps_no_callable_alive() -> None:
    """The annotation table memoises lookups without holding the callables it classified, and
    ``magpy.reset()`` forgets every memoised lookup."""
    helper = lambda t: t * 2  # noqa: E731 - a callable the program made
    classify(helper)
    assert classify(helper) is classify(helper)  # memoised
    dead = weakref.ref(helper)
    del helper
    gc.collect()
    assert dead() is None, "the annotation memo keeps a classified callable alive"

    class Owner:
        pass

    owner = Owner()
    classify(owner.__eq__)  # a native bound to the object (cannot be weakly referenced)
    dead = weakref.ref(owner)
    del owner
    gc.collect()
    assert dead() is None, "the annotation memo keeps the object of a bound native alive"
    classify(torch.Tensor.add)  # a native: held by the memo (it cannot be weakly referenced)
    classify(torch.relu)
    assert TABLE.memo_size() >= 2
    magpy.reset()
    assert TABLE.memo_size() == 0
