"""numpy inside the compiled region.

- An ndarray the program creates from guarded values (``np.array(x.shape[2:])``, ``np.tile``,
  arithmetic, subscripts, ``a.T``, in-place changes before its conversion) is a constant of the
  record, and a tensor made from it (``torch.from_numpy``, ``torch.FloatTensor``) a constant of
  the graph, built anew on every call. numpy scalars as operands are the Python numbers torch
  takes them for.
- A small array from outside (an attribute, an argument, a default) that numpy only reads is
  guarded by its contents, so ``np.tile(self.base, 2)``, ``np.sum(self.arr)`` or ``a + 1`` is
  a constant of the record and new contents make a new record; a larger one, a view of one,
  or numpy writing into one is a break. A write to an array a tensor shares memory with is a
  break too, as are numpy over tensors, object arrays, ``np.empty`` and iterating a 2-d array.
- A break at a numpy call with keyword arguments resumes right after that call.

Legacy constructors of numpy numbers (``torch.Tensor([np.exp(..)])``) are in
``test_tensor_ctors.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import numpy as np
import pytest
import torch

import magpy


def _breaks_like_eager(fn: Any, reason: str) -> None:
    ex = H.explain_quietly(fn, torch.randn(3))
    assert reason in H.break_text(ex), H.break_text(ex)
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), fn(x))


# ---------------------------------------------------------------------- numpy: constants
def anchor_grid(image: torch.Tensor) -> torch.Tensor:
    shape = np.array(image.shape[2:])
    levels = [(shape + 2**k - 1) // 2**k for k in (1, 2)]
    grid = np.zeros((0, 4)).astype(np.float32)
    for size in levels:
        xs = (np.arange(0, size[1]) + 0.5) * 2
        ys = (np.arange(0, size[0]) + 0.5) * 2
        xs, ys = np.meshgrid(xs, ys)
        shifts = np.vstack((xs.ravel(), ys.ravel(), xs.ravel(), ys.ravel())).transpose()
        grid = np.append(grid, shifts, axis=0)
    grid = np.expand_dims(grid, axis=0)
    return image.mean() + torch.from_numpy(grid.astype(np.float32))


def test_an_anchor_grid_computed_from_a_shape_is_a_constant_of_one_graph() -> None:
    """``np.array(x.shape[2:])`` and everything numpy computes from it run at record time: one
    graph, a hit on every call of the same shape, a new record for another shape."""
    ex = H.explain_quietly(anchor_grid, torch.randn(1, 2, 8, 6))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    compiled = magpy.compile(anchor_grid, backend="eager")
    for shape in [(1, 2, 8, 6)] * 3 + [(2, 2, 4, 10)] * 2:
        x = torch.randn(*shape)
        H.assert_same(compiled(x), anchor_grid(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 3, 0), st


def gaussian_kernel(size: int, sigma: float, channels: int) -> torch.Tensor:
    grid = np.float32(np.mgrid[0:size, 0:size].T)
    kernel = np.sum(np.exp((grid - size // 2) ** 2 / (-2 * sigma**2)), axis=2)
    kernel /= np.sum(kernel)
    kernel = np.tile(kernel, (channels, 1, 1))
    return torch.autograd.Variable(torch.FloatTensor(kernel[:, None, :, :]), requires_grad=False)


class Blur(torch.nn.Module):
    """Builds its kernel with numpy on the first call and keeps it."""

    def __init__(self, size: int = 3, sigma: float = 1.5) -> None:
        super().__init__()
        self.size, self.sigma = size, sigma
        self.kernel: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is None or self.kernel.shape[0] != x.shape[1]:
            self.kernel = gaussian_kernel(self.size, self.sigma, x.shape[1])
        return torch.nn.functional.conv2d(x, self.kernel, groups=x.shape[1], padding=1)


def test_a_kernel_built_with_numpy_and_stored_on_the_module_is_one_graph() -> None:
    """``np.mgrid``, in-place ``/=``, ``np.tile``, ``a[:, None]`` and ``torch.FloatTensor(a)``:
    the first call's graph builds the kernel (a new tensor, stored on the module), the next
    calls reuse it."""
    ex = H.explain_quietly(Blur(), torch.randn(2, 3, 5, 5))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    mine, ref = Blur(), Blur()
    compiled = magpy.compile(mine, backend="eager")
    for _ in range(4):
        x = torch.randn(2, 3, 5, 5)
        H.assert_same(compiled(x), ref(x))
        H.assert_same(mine.kernel, ref.kernel)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st


def constant_offsets(x: torch.Tensor) -> torch.Tensor:
    return x + torch.from_numpy(np.arange(3.0))


def test_the_graph_builds_a_fresh_constant_tensor_on_every_call() -> None:
    """Changing a returned constant in place leaves the next call's untouched."""
    compiled = magpy.compile(lambda x: torch.from_numpy(np.arange(3.0) * x.shape[0]))
    outs = []
    for _ in range(3):
        out = compiled(torch.ones(2))
        assert torch.equal(out, torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64))
        out.add_(100)
        outs.append(out)
    assert outs[1] is not outs[2]
    compiled = magpy.compile(constant_offsets, backend="eager")
    for _ in range(3):
        x = torch.randn(3, dtype=torch.float64)
        H.assert_same(compiled(x), constant_offsets(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def numpy_scalar_tensor(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor(np.float64(2.5)) + x.sum()


def transposed(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = np.arange(6, dtype=np.float32).reshape(2, 3) * x.shape[0]
    return torch.from_numpy(a.T), torch.tensor(a.T) + x.sum()


def test_constants_keep_the_dtype_and_strides_eager_gives() -> None:
    """``torch.tensor(np.float64(..))`` is float64; ``from_numpy(a.T)`` is not contiguous."""
    compiled = magpy.compile(numpy_scalar_tensor, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        got = compiled(x)
        assert got.dtype == torch.float64
        H.assert_same(got, numpy_scalar_tensor(x))
    compiled = magpy.compile(transposed, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        got, want = compiled(x), transposed(x)
        H.assert_same(got, want)
        assert [t.stride() for t in got] == [t.stride() for t in want]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


class Filled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.as_tensor(np.full((2,), self.scale, dtype=np.float32))


def test_the_guarded_inputs_of_a_numpy_constant_make_new_records() -> None:
    """The constant depends on ``self.scale``: a new value misses and records again."""
    mine, ref = Filled(), Filled()
    compiled = magpy.compile(mine, backend="eager")
    for scale in (2.0, 2.0, 3.0, 3.0):
        mine.scale = ref.scale = scale
        x = torch.randn(2)
        H.assert_same(compiled(x), ref(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st


def edited_before_conversion(x: torch.Tensor, n: int) -> torch.Tensor:
    a = np.zeros(3, dtype=np.float32)
    a[1] = n
    a += 2
    a[0:2] *= 3
    h, w = np.array(x.shape)  # the items of a 1-d array
    return x + torch.from_numpy(a) * h + w


def test_in_place_changes_of_a_new_array_before_its_conversion_are_modelled() -> None:
    """``a[i] = n``, ``a += 2`` and ``a[0:2] *= 3`` on a run-made array: one graph per ``n``."""
    ex = H.explain_quietly(edited_before_conversion, torch.randn(2, 3), 1)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    compiled = magpy.compile(edited_before_conversion, backend="eager")
    for n in (1, 1, 4, 4):
        x = torch.randn(2, 3)
        H.assert_same(compiled(x, n), edited_before_conversion(x, n))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int32], ids=str)
def test_numpy_scalar_operands_are_python_numbers_in_the_graph(dtype: torch.dtype) -> None:
    """``x / np.sqrt(d)``: the graph holds the number torch took the numpy scalar for."""
    np = pytest.importorskip("numpy")

    def scaled(x: torch.Tensor, d: int) -> torch.Tensor:
        return x / np.sqrt(d) + np.float32(0.1) * x - np.int64(2)

    compiled = magpy.compile(scaled, backend="eager")
    for i in range(4):
        x = torch.arange(6).to(dtype) + i
        got, want = compiled(x, 8), scaled(x, 8)
        assert got.dtype == want.dtype and torch.equal(got, want), i
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.fallbacks) == (1, 3, 0), st


# ---------------------------------------------------------------------- numpy: breaks
class Tiled(torch.nn.Module):
    """A numpy attribute the caller changes in place between calls."""

    def __init__(self) -> None:
        super().__init__()
        self.base = np.array([1.0, 2.0], dtype=np.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.from_numpy(np.tile(self.base, 2))


class Member(Tiled):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (2.0 in self.base)


@pytest.mark.parametrize("cls", [Tiled, Member])
def test_numpy_over_an_array_from_outside_is_guarded_by_its_contents(cls: type[Tiled]) -> None:
    """numpy only reads a small outside array: the guard checks its contents (``outside``), so
    the computation is one graph, results follow the contents call by call (new contents miss
    and make a new record) and unchanged contents hit."""
    ex = H.explain_quietly(cls(), torch.randn(4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    mine = cls()
    compiled = magpy.compile(mine, backend="eager")
    for i in range(4):
        mine.base[1] = float(i)
        for _ in range(2):
            x = torch.randn(4)
            H.assert_same(compiled(x), mine(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (4, 4, 0), st


class ArrayScale(torch.nn.Module):
    """A numpy array attribute updated in place between calls, read by numpy functions."""

    def __init__(self) -> None:
        super().__init__()
        self.arr = np.array([1.0, 2.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * np.sum(self.arr) + np.float32(0.5)


def test_pure_call_over_an_array_from_outside_is_a_constant_of_its_contents() -> None:
    """``np.sum(self.arr)`` is frozen into the record only with a guard on the array's
    contents: every call gives eager's result as the array changes in place."""
    m = ArrayScale()
    ex = magpy.explain(m)(torch.ones(3))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    compiled = magpy.compile(m, backend="eager")
    for i in range(4):
        m.arr[0] = float(i)
        x = torch.ones(3)
        assert torch.equal(compiled(x), m(x)), i
    assert magpy.stats(compiled).records == 4


class LargeArrayScale(ArrayScale):
    def __init__(self) -> None:
        super().__init__()
        self.arr = np.ones(MAX_GUARDED + 1)


MAX_GUARDED = 4096  # libs/numpy/outside.py: MAX_GUARDED_ELEMENTS


def test_numpy_over_a_large_array_from_outside_still_breaks() -> None:
    """Past ``MAX_GUARDED_ELEMENTS`` the contents are not guarded (every call would compare
    them): numpy over it stays a break, and results follow the array."""
    m = LargeArrayScale()
    ex = magpy.explain(m)(torch.ones(3))
    assert any("ndarray read from outside" in r.reason for r in ex.break_reasons), ex
    compiled = magpy.compile(m, backend="eager")
    for i in range(3):
        m.arr[0] = float(i)
        x = torch.ones(3)
        assert torch.equal(compiled(x), m(x)), i


def views_outside(x: torch.Tensor, a: Any) -> torch.Tensor:
    b = a.reshape(-1)  # a view of the outside array: a write through it would change it
    b[0] = 7.0
    return x + float(a[0])


def writes_outside(x: torch.Tensor, a: Any) -> torch.Tensor:
    np.multiply(a, 2.0, out=a)
    return x + float(np.sum(a))


def test_writes_to_an_array_from_outside_stay_breaks() -> None:
    """A view of a guarded outside array, or numpy writing into it (``out=``), is a break; the
    array changes call by call as in eager."""
    for fn, reason in ((views_outside, "ndarray"), (writes_outside, "writing into a ndarray")):
        a, b = np.ones(3), np.ones(3)
        ex = H.explain_quietly(fn, torch.ones(2), np.ones(3))
        assert reason in H.break_text(ex), H.break_text(ex)
        compiled = magpy.compile(fn, backend="eager")
        for _ in range(3):
            H.assert_same(compiled(torch.ones(2), a), fn(torch.ones(2), b))
            assert np.array_equal(a, b)


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


def bump_default(x: torch.Tensor, offsets: Any = np.array([1.0, 2.0])) -> torch.Tensor:  # noqa: B008
    offsets += 1
    return x + float(np.sum(offsets))


def test_an_array_default_argument_is_not_a_constant() -> None:
    """A mutable default changes from call to call (the program bumps it in place)."""
    compiled = magpy.compile(bump_default, backend="eager")
    for i in range(4):
        x = torch.zeros(2)
        H.assert_same(compiled(x), x + (3.0 + 2 * (i + 1)))
    assert magpy.stats(compiled).breaks > 0


def write_item(a: Any) -> None:
    a[0] = 5


def write_in_place(a: Any) -> None:
    a += 1


def write_out(a: Any) -> None:
    np.add(a, 1, out=a)


def write_view(a: Any) -> None:
    b = a[:2]
    b[1] = 7


@pytest.mark.parametrize("write", [write_item, write_in_place, write_out, write_view])
def test_writing_an_array_a_tensor_shares_memory_with_breaks(
    write: Callable[[Any], None],
) -> None:
    """``from_numpy``/``as_tensor`` share the array's memory: eager's tensor sees later writes,
    a graph constant would not, so such a write is a break (and results stay eager's)."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        a = np.zeros(3, dtype=np.float32)
        t = torch.as_tensor(a) if write is write_in_place else torch.from_numpy(a)
        write(a)
        return x + t

    _breaks_like_eager(fn, "shares memory")


def changed_through_tensor(x: torch.Tensor) -> torch.Tensor:
    a = np.ones(3, dtype=np.float32)
    t = torch.from_numpy(a)
    t.add_(x)
    return x * float(a.sum())


def test_reading_an_array_after_the_graph_changed_its_tensor_breaks() -> None:
    """``t.add_(x)`` changes the array eager reads next; its value depends on ``x``."""
    _breaks_like_eager(changed_through_tensor, "changed a tensor sharing its memory")


def numpy_of_tensors(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.array([x, x]).sum(0))


def returns_array(x: torch.Tensor) -> tuple[torch.Tensor, Any]:
    return x + 1, np.arange(3) * x.shape[0]


def object_array(x: torch.Tensor) -> torch.Tensor:
    return x + len(np.array([[1, 2], [3]], dtype=object))


def uninitialised(x: torch.Tensor) -> torch.Tensor:
    return x + torch.from_numpy(np.empty(3, dtype=np.float32)).shape[0]


def rows_of_a_matrix(x: torch.Tensor) -> torch.Tensor:
    total = 0
    for row in np.arange(6).reshape(3, 2):
        total += int(row[0])
    return x + total


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (numpy_of_tensors, "reads its values"),
        (object_array, "Python objects"),
        (uninitialised, "numpy.empty"),
        (rows_of_a_matrix, "2-d ndarray"),
    ],
)
def test_numpy_patterns_that_stay_breaks(fn: Callable[..., Any], reason: str) -> None:
    """numpy over tensors, object arrays, ``np.empty`` and 2-d iteration are breaks."""
    _breaks_like_eager(fn, reason)


def test_a_returned_array_is_a_new_object_on_every_call() -> None:
    """The mock never hands out the recording call's array."""
    compiled = magpy.compile(returns_array, backend="eager")
    arrays = []
    with H.runs_eagerly():
        for _ in range(3):
            x = torch.randn(2)
            got, arr = compiled(x)
            H.assert_same(got, x + 1)
            assert np.array_equal(arr, np.arange(3) * 2)
            arrays.append(arr)
    arrays[1][0] = 99
    assert arrays[2][0] == 0 and arrays[1] is not arrays[2]


# ------------------------------------------------------------ a break at a numpy call with keywords
def pick_steps(x: torch.Tensor, keep: int, batch_first: bool) -> torch.Tensor:
    # a break with keyword arguments (a continuous draw: no record is specialised to it)
    if batch_first:
        steps = np.random.uniform(0, x.shape[1] - 0.5, size=keep).round().astype(np.int64)
    else:
        steps = np.random.uniform(0, x.shape[0] - 0.5, size=keep).round().astype(np.int64)
    steps.sort()
    return x[:, steps] if batch_first else x[steps]


def test_a_break_at_a_call_with_keywords_resumes_after_it() -> None:
    """Regression: the place to resume after the break was the CALL right after KW_NAMES,
    which cannot be a site (its keyword names are not on the stack): instrumenting it failed
    ("negative stacksize") and the function ran eagerly."""
    compiled = magpy.compile(pick_steps, backend="eager")
    for i in range(4):
        x = torch.randn(5, 6, 2)
        np.random.seed(i)
        got = compiled(x, 3, i % 2 == 0)
        np.random.seed(i)
        H.assert_same(got, pick_steps(x, 3, i % 2 == 0))
    stats = magpy.stats(compiled)
    assert stats.fallbacks == 0 and stats.hits > 0, stats


# ---------------------------------------------------------------- numpy arrays in tensor indices
class Permute(torch.nn.Module):
    """Channels reordered by an index array kept on the module (Glow's ``Permute2d``)."""

    def __init__(self) -> None:
        super().__init__()
        self.indices = np.arange(3, -1, -1).astype(np.int64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.indices, :, :]


def index_with_arrays(x: torch.Tensor) -> torch.Tensor:
    idx = np.arange(2, -1, -1)
    return x[:, idx] + x[np.array([True, False])].sum()


def test_an_index_array_from_outside_is_a_constant_of_its_contents() -> None:
    """``x[:, self.indices]``: the graph indexes with a constant tensor of the array's values,
    guarded by its contents; a reordered array misses and makes a new record."""
    m = Permute()
    x = torch.randn(2, 4, 2, 2)
    ex = magpy.explain(m)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    compiled = magpy.compile(m, backend="eager")
    for i in range(4):
        if i == 2:
            m.indices[:] = np.array([1, 0, 3, 2])
        H.assert_same(compiled(x), m(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st


def test_run_made_index_and_mask_arrays_are_graph_constants() -> None:
    x = torch.randn(2, 3)
    ex = magpy.explain(index_with_arrays)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    compiled = magpy.compile(index_with_arrays, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 3)
        H.assert_same(compiled(x), index_with_arrays(x))
    assert magpy.stats(compiled).hits == 2


def test_a_float_index_array_stays_a_break() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x[np.array([0.0, 1.0]).astype(np.int32)]

    ex = H.explain_quietly(f, torch.randn(3))
    assert "int32 ndarray as a tensor index" in H.break_text(ex), H.break_text(ex)


class SharedWithTensor(torch.nn.Module):
    """An outside array and a tensor over its memory; the graph updates the tensor in place
    before numpy reads the array."""

    def __init__(self) -> None:
        super().__init__()
        self.arr = np.ones(3, dtype=np.float32)
        self.t = torch.from_numpy(self.arr)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.t.add_(x)
        return x + float(np.sum(self.arr))


def test_an_outside_array_the_graph_may_have_written_is_not_guarded() -> None:
    """Its values when numpy reads them are not the ones the guard reads at entry: a break,
    and every call is eager's."""
    ex = H.explain_quietly(SharedWithTensor(), torch.ones(3))
    assert "ndarray read from outside" in H.break_text(ex), H.break_text(ex)
    m, ref = SharedWithTensor(), SharedWithTensor()
    compiled = magpy.compile(m, backend="eager")
    for i in range(4):
        x = torch.full((3,), float(i))
        H.assert_same(compiled(x), ref(x))
