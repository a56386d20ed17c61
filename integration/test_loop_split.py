"""Loops whose trip count changes from call to call: each iteration becomes a segment.

After a few whole-call records for different trip counts of a ``range()`` loop, MagPy stops
unrolling: the function gets a site at the loop's head, the loop runs in chunks of iterations
(the largest power of two up to ``LOOP_CHUNK`` of those left, while ``LOOP_TAIL`` or more are
left: 15 iterations are 8, 4 and a tail of 3, which goes on with what follows the loop), each
one compiled graph, and the records serve every trip count (the loop index becomes
a graph input, the loop's iterator is guarded by what it has left and advanced by the mock).
"""

from __future__ import annotations

import copy
import random
import warnings

import _integration_helpers as H
import pytest
import torch

import magpy
from magpy._cli import load_models


def rnn_steps(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    outs = []
    h = torch.zeros(x.size(1))
    for t in range(x.size(0)):
        h = torch.tanh(x[t] @ w + h)
        outs.append(h)
    return torch.stack(outs)


def count_up(x: torch.Tensor, n: int) -> torch.Tensor:
    for i in range(n):
        x = x * 0.5 + i
    return x


def _site_records() -> dict[int, int]:
    from magpy_runtime.cache._sites import REGISTRY

    return {
        off: len(site.records) for st in REGISTRY.by_code.values() for off, site in st.sites.items()
    }


def _segments(n: int) -> list[int]:
    """The iterations each segment of a split loop of ``n`` iterations takes: chunks, then the
    tail of fewer than ``LOOP_TAIL`` (possibly none), which goes on after the loop."""
    from magpy_monitor.driver.segments import LOOP_CHUNK, LOOP_TAIL

    out = []
    while n >= LOOP_TAIL:
        out.append(min(LOOP_CHUNK, 1 << (n.bit_length() - 1)))
        n -= out[-1]
    return [*out, n]


def test_a_loop_over_a_changing_length_stops_recompiling() -> None:
    """Whole-call records (each length's loop unrolled) until the next one would use up the
    record budget, then the loop runs in chunks of iterations whose records serve every other
    length."""
    w = torch.randn(4, 4)
    compiled = magpy.compile(rnn_steps, backend="eager")
    whole = magpy.config.max_records - 1  # (lengths 2..8 below)
    lengths = [3, 5, 4, 6, 3, 7, 5, 8, 2, 9, 10, 11, 9, 10, 11, 7, 2, 15]
    per_call = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no site runs out of records here
        for n in lengths:
            x = torch.randn(n, 4)
            before = magpy.stats(compiled)
            H.assert_same(compiled(x, w), rnn_steps(x, w), f"length {n}")
            per_call.append(magpy.stats(compiled).misses - before.misses)
    st = magpy.stats(compiled)
    assert st.fallbacks == 0 and len(compiled._magpy_state.records) == whole, st
    # lengths seen before hit (the whole-call records, or at every site of the split loop); 15
    # (8, 4, then a tail of 3) at most re-records the segments that start at an index none did
    # before (their indexes become graph inputs)
    assert per_call[-6:-1] == [0, 0, 0, 0, 0] and per_call[-1] <= 2, per_call
    records = _site_records()
    # the entry, and the loop's head: a record per chunk (4, 8) and per tail (0..3 iterations,
    # then what follows the loop: ``torch.stack`` of the list as it was at the tail's start
    # and what the tail appended), each at most twice (first specialised on the indexes it
    # saw); no site after the loop
    assert set(records) == {-1, min(o for o in records if o >= 0)}, records
    assert records[-1] <= 2 and max(records.values()) <= 2 * 6, records
    for n in (9, 11, 15):  # split calls: entry, one hit per chunk, the tail
        before = magpy.stats(compiled).hits
        H.assert_same(compiled(torch.ones(n, 4), w), rnn_steps(torch.ones(n, 4), w))
        assert magpy.stats(compiled).hits - before == 1 + len(_segments(n)), n


def test_split_sites_start_dynamic_in_what_the_calls_changed() -> None:
    """When the loop splits, its sites start with what the whole calls saw change (the length:
    ``x``'s dim 0) already dynamic: the entry's first record is symbolic in it and serves every
    later length, instead of a record specialised on one length and then a symbolic one."""
    from magpy_monitor import dim_key
    from magpy_refgraph import Local, Path
    from magpy_runtime.cache._sites import REGISTRY

    w = torch.randn(4, 4)
    compiled = magpy.compile(rnn_steps, backend="eager")
    for n in [*range(2, 2 + magpy.config.max_records - 1), 9, 10, 12, 13, 9]:
        x = torch.randn(n, 4)
        H.assert_same(compiled(x, w), rnn_steps(x, w), f"length {n}")
    code = REGISTRY.state(rnn_steps.__code__)
    assert dim_key(Path(Local("x")), 0) in code.dynamic_paths
    assert len(code.sites[-1].records) == 1, _site_records()
    assert magpy.stats(compiled).fallbacks == 0


def test_a_loop_over_an_int_argument() -> None:
    """``range(n)`` over an int argument: the index becomes a graph input after one miss."""
    compiled = magpy.compile(count_up, backend="eager")
    for n in [4, 6, 5, 7, 3, 8, 6, 9, 10, 4]:
        x = torch.randn(3)
        H.assert_same(compiled(x, n), count_up(x, n), f"n={n}")
    st = magpy.stats(compiled)
    # 3 whole calls, the entry, the head's chunks (4, 8) and tails (0..3), some of them twice
    assert st.fallbacks == 0 and st.records <= 12, st
    for n in (12, 11, 13):  # chunks at new indexes: at most a record each, then served
        x = torch.randn(3)
        H.assert_same(compiled(x, n), count_up(x, n))
    last = magpy.stats(compiled)
    for n in (13, 12, 11, 12):
        x = torch.randn(3)
        H.assert_same(compiled(x, n), count_up(x, n))
    assert magpy.stats(compiled).misses == last.misses, "a trip count seen before re-recorded"


def test_lstm_from_cells_over_changing_sequence_lengths() -> None:
    """The zoo's LSTM built from cells over lengths 1..64: every length equals eager; the records
    stay bounded (none per length), no site runs eagerly."""
    model, _ = load_models().MODELS["lstm"]("small")
    reference = copy.deepcopy(model)
    compiled = magpy.compile(model, backend="eager")
    rng = random.Random(0)
    lengths = [1, 64, *rng.sample(range(2, 64), 30)]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no site runs out of records (and eager with a warning)
        for n in lengths:
            x = torch.randn(n, 2, 32)
            H.assert_same(compiled(x), reference(x), f"length {n}")
    st = magpy.stats(compiled)
    # whole-call records before the loop splits, then entry / loop head (chunks of 4, 8 and 16
    # iterations, tails of 0..3 with ``torch.stack(outputs)``), some of them twice
    assert st.records <= 3 + 3 + 2 * 7 and st.fallbacks == 0, st
    # (a hit per chunk: 64 iterations are 4 hits and the tail, not 64)
    assert st.hits <= sum(1 + len(_segments(n)) for n in lengths), st


@pytest.mark.parametrize("dynamic", [False])
def test_dynamic_false_still_splits_loops_correctly(dynamic: bool) -> None:
    """With ``dynamic=False`` nothing is promoted: the loop still splits, each index its own
    record at the loop's head, bounded by max_records; results equal eager throughout."""
    compiled = magpy.compile(count_up, backend="eager", dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", magpy.MagPyWarning)
        for n in [4, 6, 5, 7, 3, 8]:
            x = torch.randn(3)
            H.assert_same(compiled(x, n), count_up(x, n), f"n={n}")


def add_row_in_place(x: torch.Tensor, i: int) -> torch.Tensor:
    row = x[i]
    row.add_(1)  # changes x through the view
    return x.sum()


def test_in_place_update_through_a_promoted_index_stays_a_view() -> None:
    """``x[i]`` with ``i`` promoted is recorded as a copy; an in-place update through it must
    not be replayed on the copy (it breaks instead), so ``x`` changes exactly as in eager."""
    compiled = magpy.compile(add_row_in_place, backend="eager")
    for i in [0, 1, 2, 0, 1, 2]:
        got_x, want_x = torch.zeros(3, 2), torch.zeros(3, 2)
        H.assert_same(compiled(got_x, i), add_row_in_place(want_x, i))
        H.assert_same(got_x, want_x, f"x after i={i}")
