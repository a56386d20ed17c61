"""Patterns met in ParityBench models: numpy arrays made during the run, ``warnings.warn``, and
``torch.utils.checkpoint``.

- An ndarray the program creates from guarded values (``np.array(x.shape[2:])``, ``np.tile``,
  arithmetic, subscripts, ``a.T``) is a constant of the record, and a tensor made from it
  (``torch.from_numpy``, ``torch.FloatTensor``) a constant of the graph, built on every call.
  Arrays from outside keep breaking, as does a write to an array a tensor shares memory with.
- ``warnings.warn`` is replayed by the mock with the attribution eager computes, so the warning
  filters and registries behave as in eager.
- ``checkpoint(fn, *args)`` computes ``fn(*args)`` in the forward pass: followed, with the
  warnings torch's own code issues there.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import numpy as np
import pytest
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import magpy


@pytest.fixture
def recorded() -> Iterator[Callable[[str], list[warnings.WarningMessage]]]:
    """Every warning of the test is recorded (pytest's "error" filter would turn them into
    exceptions); ``recorded(action)`` sets the filter and returns the list it fills."""
    with warnings.catch_warnings(record=True) as log:

        def use(action: str) -> list[warnings.WarningMessage]:
            warnings.simplefilter(action)
            log.clear()
            return log

        use("always")
        yield use


def _explain(fn: Any, *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return magpy.explain(fn)(*args)


def _reasons(ex: Any) -> str:
    return " | ".join(r.reason for r in ex.break_reasons)


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
    ex = _explain(anchor_grid, torch.randn(1, 2, 8, 6))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), _reasons(ex)
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
    ex = _explain(Blur(), torch.randn(2, 3, 5, 5))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), _reasons(ex)
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
    ex = _explain(edited_before_conversion, torch.randn(2, 3), 1)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), _reasons(ex)
    compiled = magpy.compile(edited_before_conversion, backend="eager")
    for n in (1, 1, 4, 4):
        x = torch.randn(2, 3)
        H.assert_same(compiled(x, n), edited_before_conversion(x, n))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st


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
def test_numpy_over_an_array_from_outside_keeps_breaking(cls: type[Tiled]) -> None:
    """Guards check an outside array's type only: results follow its contents call by call."""
    ex = _explain(cls(), torch.randn(4))
    assert "ndarray read from outside" in _reasons(ex), _reasons(ex)
    mine = cls()
    compiled = magpy.compile(mine, backend="eager")
    for i in range(4):
        mine.base[1] = float(i)
        x = torch.randn(4)
        H.assert_same(compiled(x), mine(x))
    assert magpy.stats(compiled).breaks > 0


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


def _breaks_like_eager(fn: Any, reason: str) -> None:
    ex = _explain(fn, torch.randn(3))
    assert reason in _reasons(ex), _reasons(ex)
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), fn(x))


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
    for _ in range(3):
        x = torch.randn(2)
        got, arr = compiled(x)
        H.assert_same(got, x + 1)
        assert np.array_equal(arr, np.arange(3) * 2)
        arrays.append(arr)
    arrays[1][0] = 99
    assert arrays[2][0] == 0 and arrays[1] is not arrays[2]


# ---------------------------------------------------------------------- warnings
class Unmatched(torch.nn.Module):
    """InstanceNorm1d(num_features) fed another channel count warns (stacklevel=2)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.InstanceNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.view(x.size(0), 4, -1)) * 2


def warn_here(x: torch.Tensor, level: str) -> torch.Tensor:
    warnings.warn(f"level {level}", RuntimeWarning)  # noqa: B028  (names this line)
    return x.add_(1)


def _seen(log: list[warnings.WarningMessage]) -> list[tuple[Any, ...]]:
    return [(str(w.message), w.category, w.filename, w.lineno) for w in log]


def _calls(fn: Callable[..., Any], extra: tuple[Any, ...], n: int = 3) -> list[Any]:
    """``fn(x, *extra)`` on ``n`` fresh inputs."""
    return [fn(torch.ones(2, 16), *extra) for _ in range(n)]


@pytest.mark.parametrize("action", ["always", "default", "once", "module", "ignore"])
@pytest.mark.parametrize("make", [Unmatched, lambda: warn_here], ids=["torch_module", "direct"])
def test_a_warning_inside_the_program_is_replayed_like_eager(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    action: str,
    make: Callable[[], Any],
) -> None:
    """The replay names the file and line eager names (torch's ``_call_impl`` for the
    ``stacklevel=2`` of InstanceNorm), so each filter shows what eager shows, on every hit."""
    fn = make()
    extra = ("a",) if fn is warn_here else ()
    ex = _explain(fn, torch.randn(2, 16), *extra)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), _reasons(ex)
    log = recorded(action)  # (setting a filter forgets what the registries saw)
    wants = _calls(fn, extra)
    expected = _seen(log)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded(action)
    outs = _calls(compiled, extra)
    assert _seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_a_warning_registry_cleared_between_calls_shows_the_warning_again(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """Under "default" a warning shows once per location; the replay consults the module's
    ``__warningregistry__`` as it is at each call (here emptied between calls)."""
    compiled = magpy.compile(warn_here, backend="eager")
    for fn in (warn_here, compiled):
        log = recorded("default")
        for i in range(4):
            if i == 2:
                warn_here.__globals__.pop("__warningregistry__", None)
            fn(torch.zeros(2), "b")
        assert [str(w.message) for w in log] == ["level b", "level b"]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


def test_an_error_filter_raises_where_eager_raises(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """A record is guarded on the filters not turning the warning into an exception: with an
    "error" filter the warning raises before the program's in-place change, as in eager."""
    recorded("always")
    compiled = magpy.compile(warn_here, backend="eager")
    compiled(torch.zeros(2), "c")
    compiled(torch.zeros(2), "c")
    recorded("error")
    for fn in (warn_here, compiled):
        x = torch.zeros(2)
        with pytest.raises(RuntimeWarning, match="level c"):
            fn(x, "c")
        assert torch.equal(x, torch.zeros(2))
    recorded("always")
    x = torch.zeros(2)
    H.assert_same(compiled(x, "c"), torch.ones(2))
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2), st


def warn_then_block(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("before the block", stacklevel=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = x + 1
    return y


def test_a_replayed_warning_and_a_catch_warnings_block_never_share_a_record(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """Entering ``catch_warnings`` resets every registry (so "default" shows a warning again on
    every call), which the mock does not replay: the block after a replayed warning breaks."""
    fn = warn_then_block
    ex = _explain(fn, torch.ones(2))
    assert "catch_warnings" in _reasons(ex), _reasons(ex)
    log = recorded("default")
    wants = [fn(torch.ones(2)) for _ in range(3)]
    expected = _seen(log)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded("default")
    outs = [compiled(torch.ones(2)) for _ in range(3)]
    assert _seen(log) == expected and len(expected) == 3
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)


def warn_with_label(x: torch.Tensor, label: str) -> torch.Tensor:
    warnings.warn("label " + label, stacklevel=1)
    return x * 2


def warn_in_caller(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("names the caller", stacklevel=2)
    return x * 2


def test_the_message_is_guarded_and_a_warning_naming_the_caller_breaks(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """A message computed from an argument is guarded (another value records again);
    ``stacklevel`` reaching past the compiled function is a break."""
    log = recorded("always")
    compiled = magpy.compile(warn_with_label, backend="eager")
    for label in ("p", "p", "q", "q"):
        H.assert_same(compiled(torch.ones(2), label), torch.ones(2) * 2)
    assert [str(w.message) for w in log] == ["label p", "label p", "label q", "label q"]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st
    ex = _explain(warn_in_caller, torch.ones(2))
    assert "names a frame outside the compiled code" in _reasons(ex), _reasons(ex)


# ---------------------------------------------------------------------- checkpoint
class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


class Checkpointed(torch.nn.Module):
    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.block = Block()
        self.blocks = torch.nn.Sequential(Block(), Block(), Block())
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reentrant is None:
            y = checkpoint(self.block, x)
        else:
            y = checkpoint(self.block, x, use_reentrant=self.reentrant)
        z = checkpoint(self._scaled, y, 3.0, use_reentrant=bool(self.reentrant))
        return checkpoint_sequential(self.blocks, 2, z, use_reentrant=bool(self.reentrant))

    def _scaled(self, y: torch.Tensor, k: float) -> torch.Tensor:
        return y * k


@pytest.mark.parametrize("reentrant", [None, True, False])
def test_checkpoint_forward_is_the_function_with_eagers_warnings(
    recorded: Callable[[str], list[warnings.WarningMessage]], reentrant: bool | None
) -> None:
    """``checkpoint(module, x)`` (with or without reentrant autograd) and
    ``checkpoint_sequential``: one graph; the warnings torch issues (``use_reentrant`` not
    given, no input requiring grad) are replayed with eager's file and line."""
    torch.manual_seed(0)
    model = Checkpointed(reentrant)
    ex = _explain(model, torch.randn(2, 4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), _reasons(ex)
    log = recorded("always")
    wants = [model(torch.ones(2, 4) * i) for i in range(3)]
    expected = _seen(log)
    assert expected or reentrant is False
    compiled = magpy.compile(model, backend="eager")
    log = recorded("always")
    outs = [compiled(torch.ones(2, 4) * i) for i in range(3)]
    assert _seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_non_reentrant_checkpoint_gives_eagers_gradients() -> None:
    """With inputs that require grad the graph is differentiated directly: the same gradients
    as eager's recomputation, for the input and for the parameters."""
    torch.manual_seed(0)
    mine = Checkpointed(False)
    ref = Checkpointed(False)
    ref.load_state_dict(mine.state_dict())
    compiled = magpy.compile(mine, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4, requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        got, want = compiled(x), ref(xr)
        H.assert_same(got, want)
        got.sum().backward()
        want.sum().backward()
        H.assert_same(x.grad, xr.grad)
    for p, q in zip(mine.parameters(), ref.parameters(), strict=True):
        H.assert_same(p.grad, q.grad)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def reentrant_with_grad(block: Block, x: torch.Tensor) -> torch.Tensor:
    return checkpoint(block, x, use_reentrant=True)


def without_rng_state(block: Block, x: torch.Tensor) -> torch.Tensor:
    return checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)


@pytest.mark.parametrize(
    ("fn", "reason"),
    [(reentrant_with_grad, "require grad"), (without_rng_state, "preserve_rng_state")],
)
def test_checkpoint_cases_that_stay_breaks(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    fn: Callable[..., Any],
    reason: str,
) -> None:
    """A reentrant checkpoint of inputs that require grad (its autograd Function's outputs),
    and ``preserve_rng_state=False`` (another backward pass), are breaks."""
    block = Block()
    ex = _explain(fn, block, torch.randn(2, 4, requires_grad=True))
    assert reason in _reasons(ex), _reasons(ex)
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4, requires_grad=True)
        H.assert_same(compiled(block, x), fn(block, x))
