"""Tuples and lists combined by operators: the result's items keep their provenance.

Regression: ``(t,) + outside_tuple[1:]`` once became a constant tuple, so a cache hit returned
the tensors of the recording call (Longformer's attention returned stale outputs).
"""

from __future__ import annotations

from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


def concat_outputs(x: torch.Tensor, extra: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return (x * 2,) + extra[1:]  # noqa: RUF005  (the concatenation is what is tested)


def repeat_and_pick(x: torch.Tensor, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    doubled = pair * 2
    both = list(pair) + [x]  # noqa: RUF005
    return doubled[3] + both[2] + (2 * (x,))[1]


def grow_list(x: torch.Tensor, acc: list[torch.Tensor]) -> int:
    acc += [x + 1, x - 1]
    acc *= 1
    return len(acc)


def test_a_tuple_built_from_outside_items_is_not_a_constant() -> None:
    """Each call's result holds this call's tensors (never the recording call's)."""
    compiled = magpy.compile(concat_outputs, backend="eager")
    for _ in range(4):
        x = torch.randn(3)
        extra = (torch.randn(2), torch.randn(2), torch.randn(2))
        got, want = compiled(x, extra), concat_outputs(x, extra)
        H.assert_same(got, want)
        assert got[1] is extra[1] and got[2] is extra[2]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


def test_repeat_and_concat_of_sequences() -> None:
    """``seq * n``, ``list + list`` and ``n * tuple`` follow their items: one graph."""
    compiled = magpy.compile(repeat_and_pick, backend="eager")
    for _ in range(3):
        x, pair = torch.randn(2), (torch.randn(2), torch.randn(2))
        H.assert_same(compiled(x, pair), repeat_and_pick(x, pair))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_in_place_list_operators_change_the_callers_list() -> None:
    """``lst += [...]`` and ``lst *= n`` are mutations of the caller's list, replayed on a hit."""
    compiled = magpy.compile(grow_list, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        got_acc, want_acc = [torch.zeros(2)], [torch.zeros(2)]
        H.assert_same(compiled(x, got_acc), grow_list(x, want_acc))
        H.assert_same(got_acc, want_acc)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def shift_by_array(x: torch.Tensor, offsets: Any) -> torch.Tensor:
    shifted = offsets + 1  # an ndarray: its contents are not guarded, so this breaks
    return x + float(shifted[0])


def test_arithmetic_on_an_opaque_array_is_not_a_constant() -> None:
    """``ndarray + 1`` must not become a constant of the record (the array's contents are not
    guarded): new contents give new results."""
    np = pytest.importorskip("numpy")
    compiled = magpy.compile(shift_by_array, backend="eager")
    for k in range(4):
        x, offsets = torch.ones(2), np.array([float(k), 0.0])
        H.assert_same(compiled(x, offsets), shift_by_array(x, offsets))


def leave_one_out(x: torch.Tensor) -> torch.Tensor:
    parts = torch.split(x, [2, 2, 2], dim=1)
    # `parts[:0] + rest` and `head + parts[3:]` are the other operand itself (CPython returns it)
    return torch.cat([torch.cat(parts[:i] + parts[i + 1 :], 1) for i in range(3)], 1)


def drop_diagonal(d: torch.Tensor) -> torch.Tensor:
    rows = []
    for i, row in enumerate(d):
        rows.append(torch.cat([row[:i], row[i + 1 :]]))
    return torch.stack(rows)


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    total = 0
    for row in x:
        total = total + row * 2
    return total


def bump_rows(x: torch.Tensor) -> torch.Tensor:
    for k, row in enumerate(x):
        row.add_(k)
    for row in x:
        row.mul_(2)
    return x.sum()


@pytest.mark.parametrize(
    ("fn", "shape"),
    [(leave_one_out, (2, 6)), (drop_diagonal, (4, 4)), (sum_rows, (3, 5))],
    ids=["concat-with-empty-slice", "enumerate-tensor", "iterate-tensor"],
)
def test_tensor_rows_and_tuple_slices_are_one_graph(fn: Any, shape: tuple[int, ...]) -> None:
    """``for row in x`` / ``enumerate(x)`` are an unbind in the graph; ``t[:0] + u`` keeps u."""
    ex = magpy.explain(fn)(torch.randn(*shape))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(*shape)
        H.assert_same(compiled(x), fn(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_in_place_updates_of_rows_change_the_callers_tensor() -> None:
    compiled = magpy.compile(bump_rows, backend="eager")
    for _ in range(3):
        got_x = torch.randn(3, 2)
        want_x = got_x.clone()
        H.assert_same(compiled(got_x), bump_rows(want_x))
        H.assert_same(got_x, want_x)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def unpack_maps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x, y = map(lambda t: t * 2, (a, b))
    p, q = map(torch.relu, [a, b])
    (u,) = filter(lambda t: t.dim() == 2, (a, b.sum()))
    return x + y + p + q + u


def merge_heads_attention(x: torch.Tensor) -> torch.Tensor:
    """elektronn3's SelfAttention: ``q, k, v = map(merge_heads, (q, k, v))``."""
    q, k, v = x, *(x * 2).chunk(2, dim=-1)
    b = q.shape[0]
    merge = lambda z: z.reshape(b, -1, 2, 2).transpose(1, 2).reshape(b * 2, -1, 2)  # noqa: E731
    q, k, v = map(merge, (q[..., :4], k, v))
    return torch.einsum("bie,bje->bij", q, k) * 2**-0.5


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [(unpack_maps, [(2, 2), (2, 2)]), (merge_heads_attention, [(2, 3, 8)])],
    ids=["map-filter", "merge-heads"],
)
def test_unpacking_map_and_filter_is_one_graph(fn: Any, shapes: list[tuple[int, ...]]) -> None:
    """``a, b = map(f, pair)``: CPython calls ``f`` back from the native unpacking."""
    ex = magpy.explain(fn)(*(torch.randn(*s) for s in shapes))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        args = [torch.randn(*s) for s in shapes]
        H.assert_same(compiled(*args), fn(*args))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st
