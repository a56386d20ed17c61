"""``x[t]`` with ``t`` a promoted int (a loop index, an int argument that changes per call).

The graph indexes with the 0-d index input in one ``aten.index``: a negative ``t`` counts from
the end and an out-of-range ``t`` raises ``IndexError`` as eager does (the graph's error makes
the call rerun natively), never a row picked modulo the length.
"""

from __future__ import annotations

import warnings

import _integration_helpers as H
import pytest
import torch

import magpy


def running_sum(x: torch.Tensor, n: int) -> torch.Tensor:
    acc = x[0] * 0
    for t in range(n):
        acc = acc + x[t] * 2
    return acc


def pick_row(x: torch.Tensor, t: int) -> torch.Tensor:
    return x[t] * 2 + 1


def test_a_promoted_index_picks_the_same_row_as_eager() -> None:
    """Every ``t`` in range, negatives too, from one record after the index is promoted."""
    compiled = magpy.compile(pick_row, backend="eager")
    x = torch.randn(6, 3)
    for t in [0, 1, 2, 5, -1, -6, 3, -3, 4]:
        H.assert_same(compiled(x, t), pick_row(x, t), f"t={t}")
    st = magpy.stats(compiled)
    assert st.records <= 2 and st.fallbacks == 0 and st.hits >= 7, st


@pytest.mark.parametrize("t", [6, 7, 100, -7, -100])
def test_a_promoted_index_out_of_range_raises_as_eager(t: int) -> None:
    """An index past either end raises eager's ``IndexError``; the record keeps serving."""
    compiled = magpy.compile(pick_row, backend="eager")
    x = torch.randn(6, 3)
    for s in [0, 1, 2, 3]:
        H.assert_same(compiled(x, s), pick_row(x, s))
    with pytest.raises(IndexError, match="out of bounds"):
        pick_row(x, t)
    with pytest.raises(IndexError, match="out of bounds"):
        compiled(x, t)
    before = magpy.stats(compiled)
    H.assert_same(compiled(x, 4), pick_row(x, 4))
    st = magpy.stats(compiled)
    assert st.hits == before.hits + 1 and st.records == before.records, st
    assert st.fallbacks == 0, st


def test_a_split_loop_running_past_the_tensor_raises_as_eager() -> None:
    """Once the loop is split into segments, a trip count longer than ``x`` raises at the
    step past its end, as eager does; shorter counts go on hitting the records."""
    compiled = magpy.compile(running_sum, backend="eager")
    x = torch.randn(6, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in [2, 3, 4, 5, 6, 3, 5]:
            H.assert_same(compiled(x, n), running_sum(x, n), f"n={n}")
    for n in [7, 9]:
        with pytest.raises(IndexError, match="index 6 is out of bounds"):
            compiled(x, n)
    before = magpy.stats(compiled)
    for n in (5, 3):  # (segments seen before: a chunk of 4 and a tail of 1; a tail of 3)
        H.assert_same(compiled(x, n), running_sum(x, n))
    st = magpy.stats(compiled)
    assert st.misses == before.misses and st.hits > before.hits, st
    assert st.fallbacks == 0 and st.eager_sites == 0, st


# Operations whose result shares the storage of ``x[t]`` (a view, a view among several
# results, a property): eager's ``x[t]`` is a view of ``x``, the graph's a copy, so writing
# the result in place must update ``x`` in both (a graph break where the graph cannot).
_VIEWS_OF_A_ROW = {
    "swapdims": lambda r: r.swapdims(0, 1),
    "adjoint": lambda r: r.adjoint(),
    "ravel": lambda r: r.ravel(),
    "T": lambda r: r.T,
    "mT": lambda r: r.mT,
    "H": lambda r: r.H,
    "mH": lambda r: r.mH,
    "data": lambda r: r.data,
    "split item": lambda r: r.split(1)[0],
    "chunk item": lambda r: r.chunk(3)[1],
    "unbind item": lambda r: r.unbind()[2],
    "tensor_split item": lambda r: torch.tensor_split(r, 2)[0],
    "hsplit item": lambda r: torch.hsplit(r, 2)[1],
    "unsafe_split item": lambda r: r.unsafe_split(1)[0],
    "atleast_3d": lambda r: torch.atleast_3d(r),
    "einsum transpose": lambda r: torch.einsum("ij->ji", r),
    "einsum diagonal": lambda r: torch.einsum("ii->i", r[:, :3]),
}


@pytest.mark.parametrize("name", list(_VIEWS_OF_A_ROW))
def test_writing_a_view_of_a_promoted_row_updates_x_as_eager(name: str) -> None:
    """``op(x[t]).add_(1)`` with ``t`` promoted updates ``x`` as eager does, on every call
    (ATen's alias annotations, ``magpy_monitor.is_view``, carry the copy's mark through
    ``op``; an operation whose schema does not say it may alias is in its explicit table)."""
    op = _VIEWS_OF_A_ROW[name]

    def f(x: torch.Tensor, t: int) -> torch.Tensor:
        v = op(x[t])
        v.add_(1)
        return x * 2

    compiled = magpy.compile(f, backend="eager")
    for t in [0, 1, 2, 3, 1, 2, -1]:
        x = torch.arange(48.0).reshape(4, 3, 4)
        expect = x.clone()
        H.assert_same(compiled(x, t), f(expect, t), f"{name}, t={t}")
        H.assert_same(x, expect, f"{name}: x after t={t}")
    assert magpy.stats(compiled).fallbacks == 0


@pytest.mark.parametrize("name", list(_VIEWS_OF_A_ROW))
def test_a_view_of_a_promoted_row_returned_shares_x_as_eager(name: str) -> None:
    """``op(x[t])`` returned with ``t`` promoted is a view of ``x`` as in eager: a later
    update of ``x`` shows through it (the graph's copy must not escape: the call runs eagerly)."""
    op = _VIEWS_OF_A_ROW[name]

    def f(x: torch.Tensor, t: int) -> torch.Tensor:
        return op(x[t])

    compiled = magpy.compile(f, backend="eager")
    with pytest.warns(magpy.MagPyWarning, match="changes per call escapes the graph"):
        for t in [0, 1, 2, 3, 1, 2, -1]:
            x = torch.arange(48.0).reshape(4, 3, 4)
            expect = x.clone()
            got, want = compiled(x, t), f(expect, t)
            x.mul_(10)
            expect.mul_(10)
            H.assert_same(got, want, f"{name}, t={t}")
