"""Writes and reads of tensor attributes inside the compiled region: ``.data``,
``.requires_grad`` and ``.shape.__len__()``.

- ``p.data = torch.clamp(p.data, lo, hi)`` on a parameter in ``forward``: a storage swap in the
  graph (``set_`` with grad mode off); values, gradients and version counters match eager. A new
  value of another shape, and ``.data`` of a tensor the run made, are breaks.
- ``t.requires_grad = flag``: a write-back the mock replays on the tensor after the graph (on a
  tensor the graph makes, on an input, on a parameter). A tensor used by the graph after its
  flag changed, and clearing the flag of an input that requires grad, are breaks; setting it to
  False on a tensor that does not require grad changes nothing.
- ``t.shape.__len__()`` is ``len(t.shape)``.
- Python attributes a program keeps on tensors (``t.stop_gradient = True``, issue 19): set on a
  tensor the graph makes, the mock sets them on the tensor it hands out; set on an input, a
  write-back; read from an input that had one, a guarded path (a changed value misses).

The removed ``t.volatile`` (always False, with a warning) is in ``test_warnings.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy


def _reasons(fn: Any, *args: Any) -> list[str]:
    explained = magpy.explain(fn)(*args)
    return [str(r.reason) for r in explained.break_reasons]


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
    assert H.counters(compiled) == (1, steps - 1, 0, 0)
    assert H.graphs(Bounded(), torch.randn(3)) == (1, [])


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
    _, reasons = H.graphs(Grow(), torch.randn(3))
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
    _, reasons = H.graphs(data_of_a_new_tensor, torch.randn(3))
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
    assert H.graphs(zero_conv, *make(0)[0]) == (1, [])


def test_a_tensor_used_after_its_requires_grad_changed_breaks() -> None:
    """An operation of the graph on the tensor after the change would not see the new flag:
    a graph break, and the result carries a gradient function as in eager."""
    _, reasons = H.graphs(wants_grad_then_uses, torch.randn(3))
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


def loss(model_output: torch.Tensor, targets: list[torch.Tensor]) -> torch.Tensor:
    mel_target, gate_target = targets[0], targets[1]
    mel_target.requires_grad = False
    gate_target.requires_grad = False
    mel_out, mel_post, gate_out, _ = model_output
    mel = nn.MSELoss()(mel_out, mel_target) + nn.MSELoss()(mel_post, mel_target)
    return mel + nn.BCEWithLogitsLoss()(gate_out, gate_target.sigmoid())


def test_requires_grad_false_unpacking_and_losses_built_in_forward(check: Any) -> None:
    """``t.requires_grad = False`` on a tensor that does not require grad changes nothing;
    ``a, b, c, d = t`` unbinds; a loss module built in forward without tensors is stateless."""

    def inputs(i: int) -> H.Inputs:
        (out, mel, gate), _ = H.randn_inputs((4, 5), (5,), (5,), seed=i)(i)
        return [out, [mel, gate]], {}

    check(loss, inputs, calls=3)


def clears_requires_grad(x: torch.Tensor) -> torch.Tensor:
    x.requires_grad = False
    return x * 2


def test_requires_grad_change_breaks() -> None:
    """Changing the flag is a graph break; it still happens."""
    x = torch.randn(3, requires_grad=True)
    assert any("requires_grad" in r for r in _reasons(clears_requires_grad, x))
    magpy.reset()
    compiled = magpy.compile(clears_requires_grad, backend="eager")
    for _ in range(2):
        x = torch.randn(3, requires_grad=True)
        H.assert_same(compiled(x), x.detach() * 2)
        assert not x.requires_grad


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
    assert H.graphs(weighted, torch.randn(4, 3), torch.randn(4)) == (1, [])


# ---------------------------------------------------------------------- Python attributes
def marked(x: torch.Tensor) -> Any:
    y = x * 2
    y.stop_gradient = True
    return y + 1, y, y.stop_gradient


def tagged(x: torch.Tensor) -> torch.Tensor:
    x.tag = "seen"
    return x + 1


def hinted(x: torch.Tensor) -> torch.Tensor:
    return x * (2 if x.scale_hint > 1 else 3)


def test_python_attributes_on_tensors_are_no_break() -> None:
    cm, ct = magpy.compile(marked, backend="eager"), magpy.compile(tagged, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        got, want = cm(x), marked(x)
        H.assert_same(got, want)
        assert got[1].stop_gradient is True and "stop_gradient" not in vars(got[0])
        x = torch.randn(3)
        H.assert_same(ct(x), x + 1)
        assert x.tag == "seen"
    for compiled in (cm, ct):
        st = magpy.stats(compiled)
        assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_a_python_attribute_read_from_an_input_is_guarded() -> None:
    compiled = magpy.compile(hinted, backend="eager")
    x = torch.randn(3)
    for hint in (2, 2, 0, 0, 2):
        x.scale_hint = hint
        H.assert_same(compiled(x), hinted(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 3, 0), st
