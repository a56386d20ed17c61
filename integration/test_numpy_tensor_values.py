"""numpy over a tensor's values, and tensors made from arrays from outside, inside one graph.

- ``t.numpy()`` (``t.detach().cpu().numpy()``, ``np.asarray(t)``) whose array only meets numpy
  operations numpy and torch compute alike (comparisons, ``maximum``, ``where``, ``+ - * /``,
  ``astype``, basic subscripts) and goes back into a tensor (``torch.from_numpy``,
  ``as_tensor``, ``tensor``) is tensor math in the graph. A Python branch on its values
  (``if a.sum() > 0``), returning the array and a function torch may round differently
  (``np.exp``) stay breaks. Arithmetic that meets a floating-point condition (``x / 0``) on a
  later call misses and runs eagerly.
- ``torch.from_numpy(a)``/``as_tensor(a)``/``tensor(a)`` of an array from an argument, a global
  or an attribute is a graph input converted on every call: a write into the array between two
  calls is seen, and the tensor shares the array's memory where eager's does.

Arrays made during the run from guarded values (constants of the record): ``test_numpy.py``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import numpy as np
import pytest
import torch

import magpy


def _inputs(*shapes: tuple[int, ...]) -> Callable[[int], Any]:
    return H.randn_inputs(*shapes)


def _one_graph(fn: Any, *args: Any) -> None:
    ex = H.explain_quietly(fn, *args)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)


# ---------------------------------------------------------------------- t.numpy() in the graph
def doubled(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() * 2) + 1


def rectified(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.maximum(x.detach().cpu().numpy(), 0)) + x


def masked(x: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x) > 0.5)


def selected(x: torch.Tensor) -> torch.Tensor:
    a = x.numpy()
    return torch.tensor(np.where(a > 0, a, -1.0))


def converted(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy((x.numpy() / 3).astype(np.float64))


def mixed(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = x.numpy(), y.numpy()
    return torch.from_numpy(a + b), torch.from_numpy(a - 1 / (np.abs(b) + 10))


def sliced(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy()[1:, ::2] * 2) + torch.from_numpy(x.numpy()[0, None, 1::2])


def halved_ints(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.long().numpy() / 2)  # numpy: int64 / int -> float64


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (doubled, [(3, 4)]),
        (rectified, [(3, 4)]),
        (masked, [(5,)]),
        (selected, [(2, 3)]),
        (converted, [(4,)]),
        (mixed, [(3,), (3,)]),
        (halved_ints, [(6,)]),
        (sliced, [(3, 4)]),
    ],
)
def test_numpy_arithmetic_over_tensor_values_is_one_graph(
    check: Any, fn: Callable[..., Any], shapes: list[tuple[int, ...]]
) -> None:
    """The array is the tensor's values; numpy's operations are torch's, in numpy's dtypes."""
    _one_graph(fn, *[torch.randn(*s) for s in shapes])
    check(fn, _inputs(*shapes))


def changed_after_numpy(x: torch.Tensor) -> torch.Tensor:
    a = x.numpy()
    x.add_(1)  # eager's array sees it: it is the tensor's memory
    return torch.from_numpy(a * 3)


def changed_through_from_numpy(x: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(x.numpy())
    t.mul_(2)  # x's memory
    return x + 0


def changed_result(x: torch.Tensor) -> torch.Tensor:
    a = x.numpy() * 2
    t = torch.from_numpy(a)
    t.add_(1)  # a's memory
    return torch.from_numpy(a + 0)


def changed_through_a_slice(x: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(x.numpy()[1:])
    t.mul_(2)  # x's memory, from its second row on
    return x * 1


@pytest.mark.parametrize(
    "fn",
    [changed_after_numpy, changed_through_from_numpy, changed_result, changed_through_a_slice],
)
def test_in_place_changes_reach_the_array_as_in_eager(check: Any, fn: Callable[..., Any]) -> None:
    """``t.numpy()`` and ``torch.from_numpy(a)`` share memory: an in-place change through one
    is seen through the other in the graph too."""
    _one_graph(fn, torch.randn(4))
    check(fn, _inputs((4,)))


def branches_on_values(x: torch.Tensor) -> torch.Tensor:
    a = x.numpy()
    if a.sum() > 0:
        return x + 1
    return x - 1


def returns_array(x: torch.Tensor) -> Any:
    return x.numpy() * 2


def exponent(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.exp(x.numpy()))


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (branches_on_values, "ndarray.sum of a ndarray of tensor values"),
        (returns_array, "ndarray"),
        (exponent, "numpy.exp over a ndarray of tensor values"),
    ],
)
def test_other_uses_of_tensor_values_stay_breaks(fn: Callable[..., Any], reason: str) -> None:
    """A branch on the values, an array that leaves the run, a function torch may round
    differently: a break, and the same results as eager on every call."""
    ex = H.explain_quietly(fn, torch.randn(4))
    assert reason in H.break_text(ex), H.break_text(ex)
    compiled = magpy.compile(fn, backend="eager")
    with H.runs_eagerly(fn is returns_array):  # (no mock can hand out a new array)
        for i in range(4):
            x = torch.randn(4) + (3 if i % 2 else -3)
            got, want = compiled(x.clone()), fn(x.clone())
            if isinstance(want, np.ndarray):
                assert type(got) is np.ndarray and np.array_equal(got, want)
            else:
                H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert st.breaks + st.fallbacks >= 1, st


def ratio(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() / y.numpy())


def test_a_floating_point_condition_on_a_later_call_runs_eagerly() -> None:
    """``x / y`` with a zero in ``y``: numpy warns (divide by zero) in eager; the record assumed
    a finite result, misses, and the program runs eagerly, warning as eager does."""
    compiled = magpy.compile(ratio, backend="eager")
    for y in [torch.rand(3) + 1, torch.rand(3) + 1, torch.tensor([1.0, 0.0, 2.0])]:
        x = torch.randn(3)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = compiled(x, y)
        with warnings.catch_warnings(record=True) as eager_seen:
            warnings.simplefilter("always")
            want = ratio(x, y)
        H.assert_same(got, want)
        assert [w.category for w in seen] == [w.category for w in eager_seen]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.assumption_misses) == (1, 1, 1), st


# ---------------------------------------------------------------------- arrays from outside
def _same_arrays(got: Any, want: Any) -> None:
    assert type(got) is type(want) and got.dtype == want.dtype and np.array_equal(got, want)


def plus_array(x: torch.Tensor, a: Any) -> torch.Tensor:
    return x + torch.from_numpy(a)


def test_an_array_argument_is_a_graph_input_read_on_every_call() -> None:
    compiled = magpy.compile(plus_array, backend="eager")
    _one_graph(plus_array, torch.randn(2, 3), np.ones((2, 3), dtype=np.float32))
    for i in range(4):
        x, a = torch.randn(2, 3), np.random.default_rng(i).random((2, 3), dtype=np.float32)
        H.assert_same(compiled(x, a), plus_array(x, a))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


TABLE = np.arange(6, dtype=np.float32)


def plus_table(x: torch.Tensor) -> torch.Tensor:
    return x * torch.as_tensor(TABLE)


class Offsets(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.offsets = np.zeros(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tensor(self.offsets, dtype=torch.float32)


def test_an_array_written_in_place_between_calls_is_read_again() -> None:
    """A global's and an attribute's array, changed in place between calls: same record, new
    values (the guard checks the layout, the graph reads the memory)."""
    module = Offsets()
    for fn in (plus_table, module):
        compiled = magpy.compile(fn, backend="eager")
        for i in range(4):
            TABLE[:] = np.random.default_rng(i).random(6)
            module.offsets[i] = 10.0 * i
            x = torch.randn(6)
            H.assert_same(compiled(x), fn(x))
        st = magpy.stats(compiled)
        assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


def shares(x: torch.Tensor, a: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(a), torch.as_tensor(a, dtype=torch.float64) + x


def test_tensors_of_an_array_share_its_memory_where_eager_does() -> None:
    compiled = magpy.compile(shares, backend="eager")
    for _ in range(3):
        a, x = np.random.rand(2, 3).astype(np.float32), torch.randn(2, 3, dtype=torch.float64)
        a2 = copy.deepcopy(a)
        got, want = compiled(x, a), shares(x, a2)
        H.assert_same(got, want)
        got[0][0, 0] = 42.0  # eager's first tensor is the array's memory
        want[0][0, 0] = 42.0
        _same_arrays(a, a2)
        assert got[1].data_ptr() != got[0].data_ptr()
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def copied(a: Any) -> torch.Tensor:
    return torch.tensor(a) * 2


def test_another_layout_of_the_array_makes_a_new_record() -> None:
    """dtype, shape and strides are guarded: a transposed or float32 array is a new record with
    eager's strides."""
    compiled = magpy.compile(copied, backend="eager")
    base = np.random.rand(2, 3)
    for a in [base, base + 1, base.T, np.ascontiguousarray(base.T), base.astype(np.float32)]:
        got, want = compiled(a), copied(a)
        H.assert_same(got, want)
        assert got.stride() == want.stride()
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (4, 1, 0), st
