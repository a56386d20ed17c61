"""Sizes counted from a mask, and lists of sizes compared with them (Longformer's global tokens).

Longformer gathers its global tokens with ``mask.nonzero()``, sizes buffers by their count (a
0-d tensor: ``n = mask.sum(1).max()``, used as ``new_zeros(b, n, d)``, ``arange(n)``) and
asserts ``list(scores.size()) == [b, n, d]``: ``int == tensor`` inside a list comparison, a
tensor's value read into Python. The sizes stay graph values; the comparison is modelled
element by element (``pyobj/compare.py``), its outcome assumed and checked after the graph, so
the whole program is one graph. A call whose count differs fails the check and is recorded
again, with eager's result.
"""

from __future__ import annotations

import torch

import magpy


def gather_global(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    counts = mask.long().sum(dim=1)
    n = counts.max()
    where = mask.nonzero(as_tuple=True)
    local = torch.arange(n) < counts.unsqueeze(-1)
    buf = x.new_zeros(x.shape[0], n, x.shape[-1])
    buf[local.nonzero(as_tuple=True)] = x[where]
    assert list(buf.size()) == [x.shape[0], n, x.shape[-1]], "wrong buffer size"
    return buf.sum(1) + x.mean(1) * len(local.nonzero(as_tuple=True)[0])


def _inputs(seed: int, globals_per_row: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(globals_per_row), 8, 4, generator=g)
    mask = torch.zeros(len(globals_per_row), 8, dtype=torch.bool)
    for row, cols in enumerate(globals_per_row):
        mask[row, cols] = True
    return x, mask


def test_counted_sizes_and_a_list_compare_are_one_graph() -> None:
    ex = magpy.explain(gather_global)(*_inputs(0, [[0], [0]]))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    assert any("(truth value True)" in a for a in ex.assumptions), str(ex)


def test_the_same_count_hits_and_another_count_is_recorded_again() -> None:
    compiled = magpy.compile(gather_global, backend="eager")
    layouts = [[[0], [0]], [[2], [5]], [[1], [3]], [[0, 3], [1]], [[0, 6], [2, 4]], [[7], [7]]]
    for i, layout in enumerate(layouts):
        args = _inputs(i, layout)
        torch.testing.assert_close(compiled(*args), gather_global(*args), rtol=0, atol=0)
    st = magpy.stats(compiled)
    # one record per distinct (largest count, number of global tokens): (1, 2), (2, 3), (2, 4);
    # the last call's counts are the first's again. Before the shape of ``buf`` (sized by a
    # tensor) and of ``nonzero(as_tuple=True)[0]`` were known to depend on values, the len()
    # was a constant of the record and the fifth call was wrong
    assert (st.records, st.hits, st.breaks, st.assumption_misses) == (3, 3, 0, 2), st


def ordered(x: torch.Tensor, k: int) -> torch.Tensor:
    if [x.argmax(), k] == [0, k]:  # (tensor == int, then int == int)
        return x + 1
    if (k, x.argmax()) != (k, 1):
        return x * 2
    return x - 1


def test_a_sequence_compare_of_tensors_assumes_each_outcome() -> None:
    ex = magpy.explain(ordered)(torch.tensor([3.0, 1.0, 2.0]), 5)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    compiled = magpy.compile(ordered, backend="eager")
    xs = [[3.0, 1.0, 2.0], [4.0, 0.0, 1.0], [0.0, 5.0, 1.0], [0.0, 1.0, 6.0], [9.0, 1.0, 2.0]]
    for values in xs:
        x = torch.tensor(values)
        assert torch.equal(compiled(x, 5), ordered(x, 5))
    st = magpy.stats(compiled)
    # argmax 0, 0, 1, 2, 0: three outcomes, three records; the fifth call hits the first
    assert (st.records, st.hits, st.breaks) == (3, 2, 0), st
    x = torch.tensor([0.0, 7.0, 1.0])
    assert torch.equal(compiled(x, 6), ordered(x, 6))  # another k: guarded by value
    assert magpy.stats(compiled).records == 4


def test_a_failing_assert_on_a_list_compare_raises_as_eager() -> None:
    def sized(x: torch.Tensor) -> torch.Tensor:
        n = (x > 0).sum()
        assert [n] == [2], "not two positives"
        return x * n

    compiled = magpy.compile(sized, backend="eager")
    x = torch.tensor([1.0, -1.0, 2.0])
    assert torch.equal(compiled(x), sized(x))
    try:
        compiled(torch.tensor([1.0, 1.0, 2.0]))
    except AssertionError as e:
        assert "not two positives" in str(e)
    else:
        raise AssertionError("the program's assert did not fire")
    assert torch.equal(compiled(x * 3), sized(x * 3))
    st = magpy.stats(compiled)
    assert (st.records, st.breaks) == (1, 0) and st.hits == 1, st


def counted_prefix(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n = mask.sum()
    head = x[:n]  # (a slice bounded by a 0-d tensor)
    return head * len(head) + x.narrow(0, 0, n).sum() + torch.ones(n).sum()


def test_a_slice_bounded_by_a_count_is_checked() -> None:
    """``len(x[:n])`` is the count: assumed and checked (it was a constant of the record, so a
    call with another count gave the first call's length)."""
    compiled = magpy.compile(counted_prefix, backend="eager")
    for i, bits in enumerate([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1], [0, 0, 1]]):
        x, mask = torch.randn(6, generator=torch.Generator().manual_seed(i)), torch.tensor(bits)
        assert torch.equal(compiled(x, mask), counted_prefix(x, mask))
    st = magpy.stats(compiled)
    # counts 2, 1, 3, 2, 1: one record each for 2, 1 and 3, then hits
    assert (st.records, st.hits, st.breaks, st.assumption_misses) == (3, 2, 0, 2), st
