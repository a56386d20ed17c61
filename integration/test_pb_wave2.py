"""More ParityBench patterns that broke the graph, as small programs written anew.

- Star-unpacking a tensor (``x, *rest = f(x)``) and ``zip`` over a tensor and other iterables:
  the rows are the outputs of one ``unbind(0)`` in the graph.
- ``p.data = torch.clamp(p.data, lo, hi)`` on a parameter in ``forward``: a storage swap in the
  graph (``set_`` with grad mode off); values, gradients and version counters match eager.
- ``t.requires_grad = flag``: a write-back the mock replays on the tensor after the graph.
- ``t.shape.__len__()``: ``len`` of the shape.
- ``torch.get_autocast_dtype``/``is_autocast_enabled``/``get_default_dtype`` (and the deprecated
  ``get_autocast_cpu_dtype``): constants of the record guarded by reading the state again.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


def _reasons(fn: Any, *args: Any) -> tuple[int, list[str]]:
    ex = magpy.explain(fn)(*args)
    return ex.graph_count, [r.reason for r in ex.break_reasons]


def _stats(compiled: Any) -> tuple[int, int, int, int]:
    st = magpy.stats(compiled)
    return st.records, st.hits, st.breaks, st.fallbacks


# ---------------------------------------------------------------------- rows of a tensor
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
    assert _reasons(Rescale(), torch.randn(4, 5)) == (1, [])
    check(ends_and_middle, H.randn_inputs((5, 3)), calls=4)
    assert _reasons(ends_and_middle, torch.randn(5, 3)) == (1, [])


def test_star_unpacking_rows_follows_the_first_size() -> None:
    """The number of rows is guarded: another first size is another record."""
    compiled = magpy.compile(ends_and_middle, backend="eager")
    for n in (3, 5, 3, 5, 2):
        t = torch.randn(n, 2)
        H.assert_same(compiled(t), ends_and_middle(t))
    assert _stats(compiled) == (3, 2, 0, 0)


class Mix(torch.nn.Module):
    """A weighted sum of the rows of a tensor, the weights a softmax split into pieces."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.scalars = torch.nn.Parameter(torch.randn(n))
        self.gamma = torch.nn.Parameter(torch.ones(1))

    def forward(self, tensors: torch.Tensor) -> torch.Tensor:
        weights = torch.split(torch.softmax(self.scalars, dim=0), 1)
        pieces = []
        for weight, tensor in zip(weights, tensors, strict=False):
            pieces.append(weight * tensor)
        return self.gamma * sum(pieces)


def zip_two_tensors_and_a_list(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    scales = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # longer than the tensors: zip stops at the shortest
    return [x * s - y for x, y, s in zip(a, b, scales, strict=False)]


def test_zip_over_a_tensor_takes_its_rows(check: Any) -> None:
    """``zip(weights, t)`` pairs ``t``'s rows (an unbind in the graph) with the other values."""
    check(Mix(4), H.randn_inputs((4, 2, 3)), calls=4)
    assert _reasons(Mix(4), torch.randn(4, 2, 3)) == (1, [])
    check(zip_two_tensors_and_a_list, H.randn_inputs((3, 2), (4, 2)), calls=4)


def zip_strict(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    return [x + y for x, y in zip(a, b, strict=True)]


def test_zip_strict_over_tensors_of_unequal_lengths_breaks() -> None:
    """``zip(strict=True)`` that would raise is a break, and the program's ValueError comes
    through."""
    a, b = torch.randn(3), torch.randn(4)
    _, reasons = _reasons(zip_strict, torch.randn(3), torch.randn(3))
    assert reasons == []
    compiled = magpy.compile(zip_strict, backend="eager")
    with pytest.raises(ValueError, match="zip"):
        compiled(a, b)


# ---------------------------------------------------------------------- p.data = new
class Bounded(torch.nn.Module):
    """Clamps its parameters in place of ``.data`` before using them (an activation with
    learnable, bounded shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(1.5))
        self.mu = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.a.data = torch.clamp(self.a.data, 1.01, 6.0)
        self.mu.data = torch.clamp(self.mu.data, -0.5, 0.5)
        return self.a * torch.exp(-((x - self.mu) ** 2))


def _train_steps(
    model: torch.nn.Module, call: Callable[[torch.Tensor], torch.Tensor], steps: int
) -> Iterator[tuple[torch.Tensor, dict[str, Any]]]:
    """Run ``steps`` training steps (parameters pushed out of bounds in between); yield the
    output and the parameters' values, gradients and versions after each."""
    for i in range(steps):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, generator=g, requires_grad=True)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(2.5)
        out = call(x)
        out.sum().backward()
        yield (
            out,
            {
                name: (p.detach().clone(), p.grad.clone(), p._version, p.requires_grad, p.is_leaf)
                for name, p in model.named_parameters()
            }
            | {"x.grad": x.grad},
        )


def _assert_trains_like_eager(
    make: Callable[[], torch.nn.Module], twice: bool, backend: str, steps: int = 4
) -> Any:
    torch.manual_seed(0)
    model = make()
    reference = copy.deepcopy(model)  # (load_state_dict would count as an update: a version)
    compiled = magpy.compile(model, backend=backend)

    def run(fn: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        return (lambda x: fn(fn(x))) if twice else fn

    got = list(_train_steps(model, run(compiled), steps))
    want = list(_train_steps(reference, run(reference), steps))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        H.assert_same(g, w, f"step {i}")
    return compiled


@pytest.mark.parametrize("twice", [False, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_setting_data_of_parameters_trains_like_eager(backend: str, twice: bool) -> None:
    """``p.data = clamp(p.data)``: one graph; outputs, parameters, their gradients and version
    counters match eager, also when the compiled module runs twice before ``backward`` (the
    second call swaps the storage of a parameter the first one saved for backward)."""
    compiled = _assert_trains_like_eager(Bounded, twice, backend)
    steps = 4 * (2 if twice else 1)
    assert _stats(compiled) == (1, steps - 1, 0, 0)
    assert _reasons(Bounded(), torch.randn(3)) == (1, [])


class Aliases(torch.nn.Module):
    """Reads ``p.data`` before swapping it and returns both: the old storage is not ``p``'s."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old = self.w.data
        self.w.data = old.clamp(-0.3, 0.3)
        return old * 1, self.w * x


def test_setting_data_keeps_the_old_storage_apart(check: Any) -> None:
    """A view of the old storage keeps the old values after the swap, as in eager."""

    def make(i: int) -> Any:
        return [torch.randn(4)], {}

    model = Aliases()
    with torch.no_grad():
        model.w.mul_(4)
    check(model, make, calls=4)


class Grow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.w.data = torch.cat([self.w.data, self.w.data[:1] * 0.5])  # one more element
        return x * self.w.sum()


def test_setting_data_to_another_shape_breaks() -> None:
    """A new value of another shape is a graph break (the capture's view of ``p`` would be
    stale); the results still match eager."""
    _, reasons = _reasons(Grow(), torch.randn(3))
    assert any("another shape" in r for r in reasons), reasons
    torch.manual_seed(0)
    model = Grow()
    reference = copy.deepcopy(model)
    compiled = magpy.compile(model, backend="eager")
    for _ in range(4):
        x = torch.randn(3)
        H.assert_same(compiled(x), reference(x))
        H.assert_same(model.w, reference.w)
    assert magpy.stats(compiled).fallbacks == 0


def data_of_a_new_tensor(x: torch.Tensor) -> torch.Tensor:
    t = x * 2
    t.data = x.clamp(0, 1)
    return t + 1


def test_setting_data_of_a_tensor_made_by_the_run_breaks() -> None:
    _, reasons = _reasons(data_of_a_new_tensor, torch.randn(3))
    assert "setting .data of a tensor created during the run" in reasons
    compiled = magpy.compile(data_of_a_new_tensor, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), data_of_a_new_tensor(x))
    assert magpy.stats(compiled).fallbacks == 0


# ---------------------------------------------------------------------- t.requires_grad = flag
def zero_conv(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    out.requires_grad = True
    return out


def wants_grad_then_uses(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    out.requires_grad = True
    return out * 2


def test_requires_grad_set_on_a_new_tensor(check: Any) -> None:
    """``out.requires_grad = True`` on a tensor the graph makes: replayed by the mock; the
    output is a leaf that requires grad, as in eager."""

    def make(i: int) -> Any:
        return [torch.randn(3, 2), torch.zeros(2, 4, dtype=torch.long)], {}

    compiled = check(zero_conv, make, calls=4)
    out = compiled(*make(9)[0])
    assert out.requires_grad and out.is_leaf
    assert _reasons(zero_conv, *make(0)[0]) == (1, [])


def test_a_tensor_used_after_its_requires_grad_changed_breaks() -> None:
    """An operation of the graph on the tensor after the change would not see the new flag:
    a graph break, and the result carries a gradient function as in eager."""
    _, reasons = _reasons(wants_grad_then_uses, torch.randn(3))
    assert any("after its requires_grad was changed" in r for r in reasons), reasons
    compiled = magpy.compile(wants_grad_then_uses, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        got, want = compiled(x), wants_grad_then_uses(x)
        H.assert_same(got, want)
        assert got.grad_fn is not None
    assert magpy.stats(compiled).fallbacks == 0


def input_wants_grad(x: torch.Tensor) -> torch.Tensor:
    x.requires_grad = True
    return x


class Freeze(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))
        self.b = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.b
        self.w.requires_grad = False
        return y


def test_requires_grad_set_on_tensors_from_outside(check: Any) -> None:
    """An input that starts requiring grad and a parameter frozen in ``forward``: write-backs
    on the very objects (the inputs and the module state are compared with eager)."""
    check(input_wants_grad, H.randn_inputs((3,)), calls=4)
    compiled = check(Freeze(), H.randn_inputs((3,)), calls=4, expect_records=2)
    # the first call froze ``w``; the second record serves the frozen module
    assert magpy.stats(compiled).hits == 2


def int_wants_grad(x: torch.Tensor) -> torch.Tensor:
    i = x.long()
    i.requires_grad = True  # RuntimeError: only floating point and complex tensors
    return i


def test_requires_grad_on_an_integer_tensor_raises_as_in_eager() -> None:
    compiled = magpy.compile(int_wants_grad, backend="eager")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="floating point"):
            compiled(torch.randn(3))


# ---------------------------------------------------------------------- shape.__len__()
def weighted(loss: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    if weights.shape.__len__() == 2 or (weights.shape.__len__() == 1 and loss.shape.__len__() == 2):
        weights = weights.unsqueeze(-1)
    if weights.shape.__len__() != loss.shape.__len__():  # (pytest rewrites `assert`)
        raise ValueError("weights and loss differ in rank")
    return loss * weights


def test_dunder_len_of_a_shape(check: Any) -> None:
    """``t.shape.__len__()`` is ``len(t.shape)``: no break."""
    check(weighted, H.randn_inputs((2, 4, 3), (2, 4)), calls=3)
    check(weighted, H.randn_inputs((4, 3), (4,)), calls=3)
    assert _reasons(weighted, torch.randn(4, 3), torch.randn(4)) == (1, [])


# ---------------------------------------------------------------------- global state
def autocast_aware(x: torch.Tensor) -> torch.Tensor:
    low = torch.get_autocast_dtype("cpu") == torch.bfloat16
    if low and torch.is_autocast_enabled("cpu"):
        return x * 2
    return x + float(torch.get_default_dtype() == torch.float64)


def test_autocast_and_default_dtype_reads_follow_the_state() -> None:
    """The reads are constants of the record, guarded by reading the state again: calling the
    compiled function inside ``torch.autocast``, or after ``set_default_dtype``, misses."""
    assert _reasons(autocast_aware, torch.randn(3)) == (1, [])
    compiled = magpy.compile(autocast_aware, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        H.assert_same(compiled(x), autocast_aware(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            H.assert_same(compiled(x), autocast_aware(x))
    with torch.autocast("cpu", dtype=torch.float16):
        H.assert_same(compiled(x), autocast_aware(x))
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        for _ in range(2):
            H.assert_same(compiled(x), autocast_aware(x))
    finally:
        torch.set_default_dtype(before)
    H.assert_same(compiled(x), autocast_aware(x))
    assert _stats(compiled) == (4, 4, 0, 0)


def deprecated_reads(x: torch.Tensor) -> torch.Tensor:
    if torch.get_autocast_cpu_dtype() == torch.float16:
        return x - 1
    return x + 1


def _warnings_of(fn: Any, x: torch.Tensor) -> tuple[Any, list[tuple[Any, ...]]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(x)
    return out, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]


def test_a_deprecated_read_replays_its_warning() -> None:
    """``torch.get_autocast_cpu_dtype()`` warns on every call: every hit warns as eager does
    (same message, category, file and line), and the guard reads the state without warning."""
    compiled = magpy.compile(deprecated_reads, backend="eager")
    x = torch.randn(3)
    for _ in range(3):
        got, got_w = _warnings_of(compiled, x)
        want, want_w = _warnings_of(deprecated_reads, x)
        H.assert_same(got, want)
        assert got_w == want_w and len(want_w) == 1, (got_w, want_w)
        assert want_w[0][0] is DeprecationWarning
    assert _stats(compiled) == (1, 2, 0, 0)


def autocast_read_inside_a_block(x: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", enabled=False):
        on = torch.is_autocast_enabled("cpu")
    return x * 2 if on else x


def test_a_read_after_the_run_changed_the_state_breaks() -> None:
    """Inside a disabled autocast block the read does not see the state the guard checks."""
    _, reasons = _reasons(autocast_read_inside_a_block, torch.randn(3))
    assert "reads the autocast after the run changed it" in reasons
    compiled = magpy.compile(autocast_read_inside_a_block, backend="eager")
    x = torch.randn(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            H.assert_same(compiled(x), autocast_read_inside_a_block(x))
    assert magpy.stats(compiled).fallbacks == 0
