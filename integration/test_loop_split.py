"""Loops whose trip count changes from call to call: each iteration becomes a segment.

After a few whole-call records for different trip counts of a ``range()`` loop, MagPy stops
unrolling: the function gets sites at the loop's head and after the loop, each iteration runs
one compiled graph, and the records serve every trip count (the loop index becomes a graph
input, the loop's iterator is guarded by what it has left and advanced by the mock).
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
    from magpy_runtime._sites import REGISTRY

    return {
        off: len(site.records) for st in REGISTRY.by_code.values() for off, site in st.sites.items()
    }


def test_a_loop_over_a_changing_length_stops_recompiling() -> None:
    """12 lengths: the whole-call records stop at 3, the loop body then serves every length."""
    w = torch.randn(4, 4)
    compiled = magpy.compile(rnn_steps, backend="eager")
    lengths = [3, 5, 4, 6, 3, 7, 5, 8, 2, 9, 6, 7, 9, 2]
    per_call = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no site runs out of records here
        for n in lengths:
            x = torch.randn(n, 4)
            before = magpy.stats(compiled)
            H.assert_same(compiled(x, w), rnn_steps(x, w), f"length {n}")
            per_call.append(magpy.stats(compiled).misses - before.misses)
    st = magpy.stats(compiled)
    assert st.fallbacks == 0, st
    # lengths seen before (the last four) hit at every site
    assert per_call[-4:] == [0, 0, 0, 0], per_call
    records = _site_records()
    head = [n for off, n in records.items() if off >= 0]
    # the loop's head holds the body (a record for the first index, one with the index as a
    # graph input) and the exit, the site after the loop one record per length (torch.stack of
    # a list whose length is the trip count)
    assert records[-1] <= 2 and min(head) <= 4, records


def test_a_loop_over_an_int_argument() -> None:
    """``range(n)`` over an int argument: the index becomes a graph input after one miss."""
    compiled = magpy.compile(count_up, backend="eager")
    for n in [4, 6, 5, 7, 3, 8, 6, 9, 10, 4]:
        x = torch.randn(3)
        H.assert_same(compiled(x, n), count_up(x, n), f"n={n}")
    st = magpy.stats(compiled)
    assert st.fallbacks == 0 and st.records <= 9, st
    last = magpy.stats(compiled)
    x = torch.randn(3)
    H.assert_same(compiled(x, 12), count_up(x, 12))
    assert magpy.stats(compiled).misses == last.misses, "a new trip count re-recorded"


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
    # whole-call records before the loop splits, then entry / loop head / after the loop
    # (``torch.stack(outputs)`` of a list whose length is one dynamic size)
    assert st.records <= 3 + 3 + 4 + 3 and st.fallbacks == 0, st
    assert st.hits >= sum(lengths[5:]), st  # (one hit per step, at the least, once split)


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
