"""Legacy tensor constructors, ``nn.Parameter``, ``Tensor.type``, scripted functions, partials.

- ``torch.Tensor([0])``/``torch.FloatTensor([...])`` are ``torch.tensor(data, dtype=...)`` of
  guarded data (of a ``range``: an ``arange``); ``torch.Tensor(n, m)`` is uninitialised
  memory, allowed only when the program fills it before anything reads it (else a break: the
  values of memory nobody wrote differ between eager and any replay, so a program that reads
  them is left to eager rather than given other garbage).
- ``nn.Parameter(t, requires_grad=False)`` consumed by tensor operations is ``t.detach()``;
  a Parameter that escapes, or ``requires_grad=True``, is left to eager.
- ``x.type(torch.FloatTensor)`` is a dtype conversion; ``F.threshold``'s
  ``has_torch_function_unary`` depends on argument types only.
- A ``torch.jit.script`` function is followed into its Python source; a traced one is a break.
- ``functools.partial(f, ...)`` is followed into ``f``.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import magpy


def _one_graph(fn: Any, *args: Any) -> None:
    explained = magpy.explain(fn)(*args)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), str(explained)


def _reasons(fn: Any, *args: Any) -> list[str]:
    return [r.reason for r in magpy.explain(fn)(*args).break_reasons]


def _inputs(*shape: int, dtype: torch.dtype = torch.float32) -> Callable[[int], Any]:
    return lambda i: ((torch.randn(*shape, dtype=dtype),), {})


# ---------------------------------------------------------------------- legacy constructors
def legacy_data(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    d = torch.Tensor([0]).float()
    w = torch.FloatTensor([0.0448, 0.2856, 0.3001])
    idx = torch.LongTensor([[1, 2], [3, 4]])
    return (
        x + d + w,
        idx * 2,
        torch.DoubleTensor((1, 2.5)),
        torch.BoolTensor([0, 2]),
        torch.ByteTensor([1, 255]),
        torch.IntTensor([-3, 7]),
        torch.HalfTensor([0.5]),
        torch.Tensor(),
    )


def test_legacy_constructors_with_data_are_one_graph(check: Any) -> None:
    """Every legacy type gives eager's dtype and values, from a cached graph."""
    _one_graph(legacy_data, torch.randn(3))
    check(legacy_data, _inputs(3))


class Gaussian(nn.Module):
    """SSIM losses' window: ``torch.Tensor`` of numpy numbers computed from an attribute."""

    def __init__(self, size: int = 5) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        c = self.size // 2
        g = torch.Tensor([np.exp(-((i - c) ** 2) / float(2 * sigma**2)) for i in range(self.size)])
        return x * (g / g.sum())


def test_legacy_constructor_of_numpy_numbers(check: Any) -> None:
    check(Gaussian(), lambda i: ((torch.randn(5), 1.5), {}), calls=3)
    _one_graph(Gaussian(), torch.randn(5), 1.5)


class Weighted(nn.Module):
    """Constructor data read from an attribute: guarded, so a change makes a new record."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = [0.5, 1.5, 2.5]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.FloatTensor(self.weights)


def test_legacy_constructor_data_is_guarded() -> None:
    m = Weighted()
    compiled = magpy.compile(m, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        H.assert_same(compiled(x), m(x))
    m.weights = [1.0, 2.0, 3.0]
    H.assert_same(compiled(x), x * torch.tensor([1.0, 2.0, 3.0]))
    m.weights[1] = -4.0
    H.assert_same(compiled(x), x * torch.tensor([1.0, -4.0, 3.0]))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (3, 1, 0), st


def filled(x: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    w = torch.Tensor(n, n).fill_(1 / (n - 1))
    z = torch.FloatTensor(n).zero_()
    return w @ x + z


def test_legacy_sizes_filled_at_once_are_one_graph(check: Any) -> None:
    """``torch.Tensor(n, n).fill_(v)`` overwrites all of the uninitialised memory."""
    _one_graph(filled, torch.randn(4))
    check(filled, _inputs(4))


def ranges(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.size(0)
    return (
        x + torch.LongTensor(range(n)),
        torch.FloatTensor(range(2, 2 * n, 2)) * x[1:],
        torch.Tensor(range(n)),
        torch.BoolTensor(range(n)),
        x.new(range(n)),
    )


def test_legacy_constructors_of_a_range_are_one_graph(check: Any) -> None:
    """``torch.LongTensor(range(n))``: an int64 ``arange`` converted to the type's dtype, as the
    constructor converts Python ints; ``n`` follows the guarded size."""
    _one_graph(ranges, torch.randn(4))
    check(ranges, _inputs(4))
    compiled = magpy.compile(ranges, backend="eager")
    for n in (3, 5, 5):
        x = torch.randn(n)
        H.assert_same(compiled(x), ranges(x))
    st = magpy.stats(compiled)
    assert st.breaks == 0 and st.hits >= 1, st


def reads_uninitialised(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    t = torch.Tensor(2, 3)
    return (t + y).shape[0] + y


def returns_uninitialised(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 2, torch.Tensor(2, 3)


@pytest.mark.parametrize("fn", [reads_uninitialised, returns_uninitialised])
def test_unfilled_legacy_allocation_is_left_to_eager(fn: Callable[..., Any]) -> None:
    """No record may read or hand out memory a legacy constructor did not initialise."""
    compiled = magpy.compile(fn, backend="eager")
    with H.runs_eagerly(fn is returns_uninitialised):
        for _ in range(3):
            x = torch.randn(3)
            got, want = compiled(x), fn(x)
            if isinstance(want, tuple):
                H.assert_same(got[0], want[0])
                assert got[1].shape == want[1].shape and got[1].dtype == want[1].dtype
            else:
                H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert st.breaks + st.fallbacks >= 1, st
    if fn is returns_uninitialised:
        assert (st.records, st.hits) == (0, 0), st
    else:  # only what follows the break (``shape[0] + y``) has a record
        assert (st.records, st.hits) == (1, 1), st


def aliases(x: torch.Tensor) -> torch.Tensor:
    return torch.Tensor(x)


def test_legacy_constructor_of_a_tensor_breaks_and_aliases_like_eager() -> None:
    assert any("alias of its storage" in r for r in _reasons(aliases, torch.randn(2)))
    compiled = magpy.compile(aliases, backend="eager")
    for _ in range(2):
        x = torch.randn(2)
        got = compiled(x)
        assert got.data_ptr() == x.data_ptr() and torch.equal(got, x)


def tensor_new(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + x.new([1, 2, 3]), x.new(2, 3).zero_()


def test_tensor_new_follows_the_tensors_dtype(check: Any) -> None:
    check(tensor_new, _inputs(3, dtype=torch.float64))


# ---------------------------------------------------------------------- nn.Parameter
class PositionalEncoding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pe = torch.randn(5, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.Parameter(self.pe, requires_grad=False)


def test_parameter_consumed_by_tensor_ops_is_one_graph(check: Any) -> None:
    _one_graph(PositionalEncoding(), torch.randn(2, 5, 4))
    check(PositionalEncoding(), _inputs(2, 5, 4))


def test_parameter_shares_the_storage_it_wraps() -> None:
    """An in-place update of the source tensor between calls shows in the next result."""
    m = PositionalEncoding()
    compiled = magpy.compile(m, backend="eager")
    x = torch.zeros(2, 5, 4)
    H.assert_same(compiled(x), m(x))
    m.pe.add_(1.0)
    H.assert_same(compiled(x), m(x))
    assert magpy.stats(compiled).hits == 1


class StoresParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pe = torch.randn(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.p = nn.Parameter(self.pe * 2, requires_grad=False)
        return x + self.p


def returns_parameter(x: torch.Tensor) -> torch.Tensor:
    return nn.Parameter(x * 2, requires_grad=False)


def test_an_escaping_parameter_is_a_real_parameter() -> None:
    """A Parameter stored or returned is never replaced by the graph's plain tensor."""
    m = StoresParameter()
    compiled = magpy.compile(m, backend="eager")
    with H.runs_eagerly():
        for _ in range(3):
            x = torch.randn(4)
            H.assert_same(compiled(x), x + m.pe * 2)
            assert type(m.p) is nn.Parameter and not m.p.requires_grad
    compiled_fn = magpy.compile(returns_parameter, backend="eager")
    with H.runs_eagerly():
        for _ in range(3):
            x = torch.randn(4)
            got = compiled_fn(x)
            assert type(got) is nn.Parameter and torch.equal(got, x * 2)
    for c in (compiled, compiled_fn):
        assert magpy.stats(c).records == 0, magpy.stats(c)


def new_leaf(x: torch.Tensor) -> torch.Tensor:
    return x * 3 + nn.Parameter(x * 2)


def test_parameter_requiring_grad_is_left_to_eager() -> None:
    assert any("requires_grad=True" in r for r in _reasons(new_leaf, torch.randn(2)))
    compiled = magpy.compile(new_leaf, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        got = compiled(x)
        H.assert_same(got, new_leaf(x))
        assert got.requires_grad


# ---------------------------------------------------------------------- Tensor.type
def type_conversions(x: torch.Tensor) -> tuple[Any, ...]:
    sign = x.lt(0).type(torch.FloatTensor) * (x.ge(0).type(torch.FloatTensor) - 1)
    return (
        sign,
        x.type("torch.DoubleTensor"),
        x.type(torch.float16),
        x.type(dtype=torch.LongTensor),
        x.type(),
        x.type(torch.FloatTensor),
    )


def test_tensor_type_conversions_are_one_graph(check: Any) -> None:
    _one_graph(type_conversions, torch.randn(4))
    compiled = check(type_conversions, _inputs(4))
    x = torch.randn(4)
    assert compiled(x)[5] is x  # already a FloatTensor: the tensor itself, as in eager


def to_cuda_type(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).type(torch.cuda.FloatTensor)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_a_cuda_tensortype_raises_like_eager() -> None:
    compiled = magpy.compile(to_cuda_type, backend="eager")
    for _ in range(2):
        with pytest.raises(Exception) as want:
            to_cuda_type(torch.randn(2))
        with pytest.raises(want.type, match=re.escape(str(want.value))):
            compiled(torch.randn(2))


# ---------------------------------------------------------------------- has_torch_function
class HardSigmoid(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = 0.2 * x + 0.5
        x = F.threshold(-x, -1, -1)
        return F.threshold(-x, 0, 0)


class Tagged(torch.Tensor):
    """A subclass with torch's default ``__torch_function__``: has_torch_function is True."""


def test_has_torch_function_is_a_constant_over_guarded_types(check: Any) -> None:
    _one_graph(HardSigmoid(), torch.randn(3))
    m = HardSigmoid()
    check(m, _inputs(2, 3))
    compiled = magpy.compile(m, backend="eager")
    plain = torch.randn(3)
    H.assert_same(compiled(plain), m(plain))
    tagged = torch.randn(3).as_subclass(Tagged)
    got, want = compiled(tagged), m(tagged)
    assert type(got) is type(want) is Tagged and torch.equal(got, want)
    assert magpy.stats(compiled).hits == 0  # the subclass did not hit the plain record


# ---------------------------------------------------------------------- torch.jit
def _quietly(make: Callable[..., Any], *args: Any) -> Any:
    """``torch.jit.script``/``trace`` warn that they are deprecated (warnings are errors)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return make(*args)


def _script(fn: Callable[..., Any]) -> Any:
    return _quietly(torch.jit.script, fn)


@_script
def rotary(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos[..., : q.shape[-2], :], sin[..., : q.shape[-2], :]
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), -1)
    return q * cos + rotated * sin


@_script
def autocrop(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if a.shape[-1] > b.shape[-1]:
        a = a[..., : b.shape[-1]]
    return a, b


@_script
def scale_by(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s


class Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cos = torch.randn(8, 4)
        self.sin = torch.randn(8, 4)

    def forward(self, q: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        out = rotary(q, self.cos, self.sin)
        a, b = autocrop(skip, out)
        return scale_by(a, 0.5) + b


def test_scripted_functions_are_followed_into_their_python_source(check: Any) -> None:
    """One graph; the shape branch inside ``autocrop`` is taken per guarded shape."""
    m = Rotary()
    _one_graph(m, torch.randn(3, 4), torch.randn(3, 6))

    def inputs(i: int) -> Any:
        width = 6 if i % 2 == 0 else 4
        return (torch.randn(3, 4), torch.randn(3, width)), {}

    check(m, inputs, calls=4, expect_records=2)


def int_for_float(x: torch.Tensor) -> torch.Tensor:
    return scale_by(x, 2)  # type: ignore[arg-type]


def test_scripted_call_with_converted_arguments_breaks() -> None:
    """TorchScript converts an int passed for a float (a LongTensor times 2.0 is float): the
    Python source would compute in int64, so the call is not followed."""
    x = torch.arange(3)
    reasons = _reasons(int_for_float, x)
    assert any("argument 's' is a int" in r for r in reasons), reasons
    compiled = magpy.compile(int_for_float, backend="eager")
    for _ in range(3):
        got = compiled(x)
        assert got.dtype == torch.float32
        H.assert_same(got, int_for_float(x))


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


traced_double = _quietly(torch.jit.trace, _double, torch.ones(2))


def calls_traced(x: torch.Tensor) -> torch.Tensor:
    return traced_double(x) + 1


def test_traced_function_is_a_break() -> None:
    assert any("traced function" in r for r in _reasons(calls_traced, torch.randn(2)))
    compiled = magpy.compile(calls_traced, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        H.assert_same(compiled(x), calls_traced(x))


# ---------------------------------------------------------------------- functools.partial
def focal(
    logits: torch.Tensor, target: torch.Tensor, gamma: float = 2.0, alpha: float | None = None
) -> torch.Tensor:
    p = torch.sigmoid(logits)
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    loss = loss * (1 - p).pow(gamma)
    if alpha is not None:
        loss = loss * alpha
    return loss.mean()


class PartialLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.loss_fn = functools.partial(focal, gamma=3.0, alpha=0.25)
        self.act = functools.partial(F.leaky_relu, negative_slope=0.3)
        self.scaled = functools.partial(torch.mul, 2.0)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.act(self.scaled(x)), target)


def test_partials_are_followed(check: Any) -> None:
    m = PartialLoss()
    _one_graph(m, torch.randn(4), torch.rand(4))
    check(m, lambda i: ((torch.randn(4), torch.rand(4)), {}))


def test_partial_keywords_are_guarded() -> None:
    m = PartialLoss()
    compiled = magpy.compile(m, backend="eager")
    x, t = torch.randn(4), torch.rand(4)
    H.assert_same(compiled(x, t), m(x, t))
    m.loss_fn.keywords["alpha"] = None
    H.assert_same(compiled(x, t), m(x, t))
    m.loss_fn = functools.partial(focal, gamma=1.0)
    H.assert_same(compiled(x, t), m(x, t))
    st = magpy.stats(compiled)
    assert (st.records, st.breaks) == (3, 0), st


SCALE3 = functools.partial(scale_by, s=3.0)


def calls_partial_of_scripted(x: torch.Tensor) -> torch.Tensor:
    return SCALE3(x) + 1


def test_scripted_function_behind_a_partial_breaks() -> None:
    """The partial calls the scripted function from native code: nothing to follow."""
    reasons = _reasons(calls_partial_of_scripted, torch.randn(2))
    assert any("called from native code" in r for r in reasons), reasons
    compiled = magpy.compile(calls_partial_of_scripted, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        H.assert_same(compiled(x), calls_partial_of_scripted(x))


def boxes_filled_by_channel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    boxes = torch.FloatTensor(*x.shape, 3)  # YOLO heads: one channel at a time
    boxes[..., 0] = x + 1
    boxes[..., 2] = y * 2
    boxes[..., 1] = x * y
    return boxes * 2


def boxes_read_half_filled(x: torch.Tensor) -> torch.Tensor:
    boxes = torch.FloatTensor(*x.shape, 3)
    boxes[..., 0] = x
    return boxes[..., 0] + 1  # channels 1 and 2 are still garbage: a read is a break


def test_a_tensor_filled_one_index_at_a_time_is_initialised() -> None:
    ex = magpy.explain(boxes_filled_by_channel)(torch.randn(4), torch.randn(4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    H.assert_compiles_like_eager(
        boxes_filled_by_channel, lambda i: ([torch.randn(2, 4), torch.randn(2, 4)], {}), calls=3
    )
    ex = magpy.explain(boxes_read_half_filled)(torch.randn(4))
    assert [r.reason for r in ex.break_reasons] == [
        "reads a tensor a legacy constructor left uninitialised (fill it first)"
    ], str(ex)
