"""Tuples and lists: combined by operators, unpacked, copied and assigned by slice, and a
tensor's rows taken as a sequence; the result's items keep their provenance.

Regression: ``(t,) + outside_tuple[1:]`` once became a constant tuple, so a cache hit returned
the tensors of the recording call (Longformer's attention returned stale outputs).

- Iterating a tensor (``for row in x``, ``enumerate(x)``, ``sum(t)``) and star-unpacking it
  (``x, *rest = t``) take its rows from one ``unbind(0)`` in the graph; the number of rows is
  guarded.
- An unpacking that raises ValueError (``_, b, n, h = x.size()`` of a 3-d tensor) runs the
  program's own handler, in the graph.
- ``list.copy`` keeps the items' shadows, so the copy can be changed; extended-slice
  assignment (``x[::2] = a``) on a list, and its ValueError.
- A tuple that mixes tensors and None from one operation
  (``F.multi_head_attention_forward(..., need_weights=False)``).

``zip`` over a tensor is in ``test_iteration.py``.
"""

from __future__ import annotations

from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn.functional as F

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


# ---------------------------------------------------------------------- unpacking
class Rescale(torch.nn.Module):
    """``x, *rest = self.fn(x)``: the first row is scaled, the others pass through."""

    def __init__(self) -> None:
        super().__init__()
        self.fn = torch.nn.ReLU()
        self.g = torch.nn.Parameter(torch.randn(5))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, *rest = self.fn(x)
        return x * self.g, *rest


def ends_and_middle(t: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    a, *middle, b = t * 2
    return a - b, middle


def test_star_unpacking_a_tensor_gives_its_rows(check: Any) -> None:
    """``x, *rest = t`` takes ``t``'s rows from an unbind in the graph; ``rest`` is a list."""
    check(Rescale(), H.randn_inputs((4, 5)), calls=4)
    assert H.graphs(Rescale(), torch.randn(4, 5)) == (1, [])
    check(ends_and_middle, H.randn_inputs((5, 3)), calls=4)
    assert H.graphs(ends_and_middle, torch.randn(5, 3)) == (1, [])


def test_star_unpacking_rows_follows_the_first_size() -> None:
    """The number of rows is guarded: another first size is another record."""
    compiled = magpy.compile(ends_and_middle, backend="eager")
    for n in (3, 5, 3, 5, 2):
        t = torch.randn(n, 2)
        H.assert_same(compiled(t), ends_and_middle(t))
    assert H.counters(compiled) == (3, 2, 0, 0)


def add_batch_if_missing(x: torch.Tensor, h: tuple[int, ...]) -> Any:
    try:
        _, b, n, k = x.size()
    except:  # noqa: E722  (as the model does)
        x = x.unsqueeze(0)
        _, b, n, k = x.size()
    try:
        first, second = h
    except ValueError as exc:
        first, second = h[0], str(exc)
    return x.sum(1) * b + n * k, first, second


def test_an_unpacking_error_handled_by_the_program(check: Any) -> None:
    """Both outcomes are one graph each; the handler's ``except ValueError as exc`` sees
    CPython's own message."""
    for shape, h in [((2, 3, 4), (1, 2, 3)), ((1, 2, 3, 4), (5, 6))]:
        check(add_batch_if_missing, lambda i, s=shape, h=h: ((torch.randn(*s), h), {}), calls=3)
        assert H.graphs(add_batch_if_missing, torch.randn(*shape), h) == (1, [])
    out = magpy.compile(add_batch_if_missing, backend="eager")(torch.randn(2, 3, 4), (1, 2, 3))
    assert out[2] == "too many values to unpack (expected 2)"


# ------------------------------------------------------------------- list.copy and slice assignment
def reshape_and_interleave(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Any:
    shape = list(x.size())
    target = shape.copy()
    target[1] = 1
    parts: list[Any] = [None] * 4
    parts[::2] = torch.chunk(a, 2, dim=1)
    parts[1::2] = torch.chunk(b, 2, dim=1)
    return x.mean(1, keepdim=True).expand(*target), torch.cat(parts, 1), shape


def test_list_copy_and_slice_assignment(check: Any) -> None:
    check(reshape_and_interleave, H.randn_inputs((2, 3, 4), (2, 4), (2, 4)), calls=3)
    args = (torch.randn(2, 3, 4), torch.randn(2, 4), torch.randn(2, 4))
    assert H.graphs(reshape_and_interleave, *args) == (1, [])


def wrong_length_slice(a: torch.Tensor) -> Any:
    parts: list[Any] = [None] * 4
    parts[::2] = torch.chunk(a, 3, dim=0)  # ValueError: 3 items into 2 places
    return parts


def test_a_failing_slice_assignment_raises_the_users_error() -> None:
    compiled = magpy.compile(wrong_length_slice, backend="eager")
    for _ in range(2):
        try:
            compiled(torch.randn(3))
        except ValueError as exc:
            assert "extended slice of size 2" in str(exc)
        else:
            raise AssertionError("no ValueError")


# ---------------------------------------------------------------------- sum() over a tensor's rows
def add_rows(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return sum(xs), sum(xs, torch.ones(4))  # type: ignore[return-value]


def test_sum_over_a_tensors_rows(check: Any) -> None:
    """raster-vision's AddTensors: ``sum(t)`` adds the rows one by one, as eager does (not
    ``t.sum(0)``, whose rounding may differ); the number of rows is guarded."""
    check(add_rows, lambda i: ((torch.rand(3, 4),), {}), calls=3)
    assert H.graphs(add_rows, torch.rand(3, 4)) == (1, [])
    compiled = magpy.compile(add_rows, backend="eager")
    for n in (2, 5):
        xs = torch.rand(n, 4)
        H.assert_same(compiled(xs), add_rows(xs))


# -------------------------------------------------- a tuple of a tensor and None from one operation
class Pool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = F.multi_head_attention_forward(
            query=x,
            key=x,
            value=x,
            embed_dim_to_check=8,
            num_heads=2,
            q_proj_weight=self.q.weight,
            k_proj_weight=self.k.weight,
            v_proj_weight=self.v.weight,
            in_proj_weight=None,
            in_proj_bias=torch.cat([self.q.bias, self.k.bias, self.v.bias]),
            bias_k=None,
            bias_v=None,
            add_zero_attn=False,
            dropout_p=0.0,
            out_proj_weight=self.o.weight,
            out_proj_bias=self.o.bias,
            use_separate_proj_weight=True,
            training=self.training,
            need_weights=False,
        )
        return out + 1


def test_an_operation_returning_a_tensor_and_none() -> None:
    """``(out, None)`` from one operation: the tensor is a graph output, None a constant."""
    mod = Pool().eval()
    compiled = magpy.compile(mod, backend="eager")
    for _ in range(3):
        x = torch.randn(5, 2, 8)
        H.assert_same(compiled(x), mod(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
