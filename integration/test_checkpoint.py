"""``torch.utils.checkpoint`` inside the compiled region.

``checkpoint(fn, *args)`` computes ``fn(*args)`` in the forward pass: it is followed (with or
without reentrant autograd, and ``checkpoint_sequential`` too) into one graph, and the warnings
torch's own code issues there (``use_reentrant`` not given, no input requiring grad) are
replayed with eager's file and line. With inputs that require grad the graph is differentiated
directly, with the gradients of eager's recomputation. A reentrant checkpoint of inputs that
require grad, and ``preserve_rng_state=False``, are breaks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import magpy


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
    ex = H.explain_quietly(model, torch.randn(2, 4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    log = recorded("always")
    wants = [model(torch.ones(2, 4) * i) for i in range(3)]
    expected = H.warnings_seen(log)
    assert expected or reentrant is False
    compiled = magpy.compile(model, backend="eager")
    log = recorded("always")
    outs = [compiled(torch.ones(2, 4) * i) for i in range(3)]
    assert H.warnings_seen(log) == expected
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
    ex = H.explain_quietly(fn, block, torch.randn(2, 4, requires_grad=True))
    assert reason in H.break_text(ex), H.break_text(ex)
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4, requires_grad=True)
        H.assert_same(compiled(block, x), fn(block, x))
