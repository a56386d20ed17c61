"""What Reformer's reversible layers need, as small programs.

- ``MyFunction.apply(...)`` of a ``torch.autograd.Function`` under ``no_grad``: no backward can
  be needed, so ``apply`` computes ``forward(ctx, *args)`` and the monitor follows it
  (``libs/torch/functions.py``), whatever it is given (a ``ModuleList``, a list it appends
  to); an input it returns comes back as a view, as from ``apply``. With grad mode on the call
  stays one graph node.
- ``hasattr`` of a namedtuple made in the run: its class decides (guarded).
- ``x.new(*size)`` (uninitialised) filled by ``scatter_`` of an ``argsort`` along the same dim:
  a permutation of every row writes every element.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn

import magpy


class Reversible(torch.autograd.Function):
    """Reformer's pattern: the layers and lists to fill are arguments of the Function."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layers: nn.ModuleList, seen: list[Any]) -> Any:
        a, b = torch.chunk(x, 2, dim=-1)
        for layer in layers:
            a, b = b, a + layer(b)
            seen.append(b)
        ctx.save_for_backward(a.detach(), b.detach())
        ctx.layers = layers
        flags = ctx.needs_input_grad
        return torch.cat([a, b], dim=-1), x, flags

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # pragma: no cover - never needed here
        raise AssertionError("no backward under no_grad")


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x: torch.Tensor) -> Any:
        seen: list[torch.Tensor] = []
        with torch.no_grad():
            out, same, flags = Reversible.apply(x, self.layers, seen)
        return out * 2, same, flags, seen


def _x(i: int) -> H.Inputs:
    return (torch.randn(2, 8, generator=torch.Generator().manual_seed(i)),), {}


def test_function_under_no_grad_is_its_forward(check: Any) -> None:
    """One graph, the hits equal to eager (outputs, the list filled, the returned input a view
    of it, ``needs_input_grad``)."""
    model = Stack().eval()
    compiled = check(model, _x, calls=3)
    x = _x(5)[0][0]
    out = compiled(x)
    assert out[1] is not x and out[1]._base is x and out[2] == (False, False, False)
    assert H.graphs(model, x) == (1, [])


class Passes(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> Any:
        return x, x + 1

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # pragma: no cover - never needed here
        raise AssertionError("no backward under no_grad")


def passes_a_view(x: torch.Tensor) -> Any:
    v = x[1:]
    with torch.no_grad():
        same, other = Passes.apply(v)
    return same, other, v


def test_an_input_apply_returns_is_a_view_of_its_base(check: Any) -> None:
    """``apply`` gives back an input as a new view (of the input's base when it is a view):
    the graph's ``view_as`` aliases as eager's does (the helper compares aliasing)."""
    compiled = check(passes_a_view, lambda i: ((torch.randn(5),), {}), calls=3)
    x = torch.randn(5)
    same, _, v = compiled(x)
    assert same is not v and same._base is x


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


def doubled(x: torch.Tensor) -> torch.Tensor:
    return Doubled.apply(x) + 1


@pytest.mark.parametrize("grad", [False, True])
def test_grad_mode_decides_forward_or_node(grad: bool) -> None:
    """Grad mode off: the forward's ``mul``; on: ``apply`` as one node (its backward kept)."""
    x = torch.randn(3, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        ex = magpy.explain(doubled)(x)
        compiled = magpy.compile(doubled, backend="eager")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), doubled(x))
    names = [str(getattr(n.target, "__name__", n.target)) for n in ex.graphs[0].graph.nodes]
    assert ("Doubled_apply" in names) is grad and ("mul" in names) is not grad
    assert H.counters(compiled) == (1, 2, 0, 0)


# ---------------------------------------------------------------------- hasattr, scatter_
Attended = namedtuple("Attended", ["hidden", "probs"])
Hashed = namedtuple("Hashed", ["hidden", "probs", "buckets"])


def attend(x: torch.Tensor, hashed: bool) -> Any:
    out = Hashed(x * 2, x, x.argmax(-1)) if hashed else Attended(x + 1, x)
    buckets = out.buckets if hasattr(out, "buckets") else None
    return out.hidden, buckets


def test_hasattr_of_a_namedtuple_made_in_the_run(check: Any) -> None:
    check(attend, lambda i: ((torch.randn(2, 3), i % 2 == 0), {}), calls=4, expect_records=2)


def undo_sort(keys: torch.Tensor) -> Any:
    order = torch.argsort(keys, dim=-1)
    ramp = torch.arange(keys.shape[-1]).expand(keys.shape)
    undo = order.new(*order.size())
    undo.scatter_(-1, order, ramp)
    return order, undo


def test_a_legacy_tensor_filled_by_scatter_of_an_argsort(check: Any) -> None:
    check(undo_sort, lambda i: ((torch.randn(2, 3, 5),), {}), calls=3)


def partly_filled(keys: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(keys[:, :2], dim=-1)  # narrower than the target: column 2 unwritten
    undo = keys.new(*keys.size())
    return undo.scatter_(-1, order, keys[:, :2])


def test_a_scatter_that_may_leave_elements_unwritten_is_a_break() -> None:
    ex = magpy.explain(partly_filled)(torch.randn(4, 3))
    assert "left uninitialised" in H.break_text(ex)
