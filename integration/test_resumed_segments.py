"""No cliff after a graph break: the code after it runs compiled (issue 19).

A break inside a layer of a model (a size read from a tensor's values, as in Longformer's
global attention) puts the model in split mode. What follows the break must still be
recorded: the rest of the layer, the next layers of a loop over ``enumerate(self.layers)``
(the loop's iterator is on the stack where a segment is cut), a segment that deleted a local
(``del attn_scores``), and one cut before a call of a bound method (the method is on the
stack). Each program: equal to eager over several calls, no site that gave up
(``stats().eager_sites``), and after the warm-up a call monitors nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


@pytest.fixture(autouse=True)
def _value_reads_break() -> Iterator[None]:
    """A value read is a break here (no speculation): the break these programs need."""
    from magpy_runtime._config import config

    with config.patch(speculate=False):
        yield


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.lin(h)
        scores = h * 2
        kept = self.count(scores)  # a break inside a bound method's call
        del scores
        return torch.relu(h) + kept

    def count(self, scores: torch.Tensor) -> int:
        return int((scores > 0).nonzero().shape[0])  # a size read from values: a break


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(3))
        self.out = torch.nn.Linear(8, 2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            h = layer(h) * (i + 1)
        return self.out(h)


def _calls(compiled: Any, model: Any, n: int) -> None:
    for _ in range(n):
        x = torch.randn(4, 8)
        H.assert_same(compiled(x), model(x))


def test_the_layers_after_a_break_inside_a_loop_run_compiled() -> None:
    model = Encoder()
    compiled = magpy.compile(model, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", magpy.MagPyWarning)  # (the break's own warning)
        _calls(compiled, model, 4)
    before = magpy.stats(compiled)
    assert before.eager_sites == 0, before
    with warnings.catch_warnings():
        # (on a loaded machine, MagPy's checks at 12 sites around these tiny layers can
        # outweigh the layers: that share is no cliff, and not what is tested here)
        warnings.filterwarnings("ignore", "magpy: .* outside compiled graphs")
        _calls(compiled, model, 3)
    after = magpy.stats(compiled)
    assert after.misses == before.misses, after  # nothing monitored: every site hits
    assert after.hits >= before.hits + 3 * 4, after  # (the encoder, each layer's pieces)
    assert after.fallbacks == 0 and after.breaks >= 1, after


class BuildsParts(torch.nn.Module):
    """Builds a module with parameters on each call (a break) and hands it to a method call:
    on 3.11 the break is decided at that call's ``PRECALL``, one instruction before its
    ``CALL``."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(8))

    def make(self, width: int) -> torch.nn.Sequential:
        parts: list[torch.nn.Module] = []
        for _ in range(2):
            parts.append(torch.nn.ReLU())
        parts.append(torch.nn.Linear(width, width))
        torch.nn.init.constant_(parts[-1].weight, 0.25)
        torch.nn.init.zeros_(parts[-1].bias)
        return torch.nn.Sequential(*parts)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.make(h.shape[1])(h * self.scale)


def test_a_break_inside_a_call_sequence_resumes_after_the_call() -> None:
    """No site between a call's instructions (there the stack is one the compiler counts as
    already shortened): the segment resumes after the call, and no site fails (was, on 3.11:
    'runs eagerly: RuntimeError: Failed to compute stacksize, got negative size' after an
    explain, a fallback)."""
    model = BuildsParts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explained = magpy.explain(BuildsParts())(torch.randn(4, 8))
        compiled = magpy.compile(model, backend="eager")
        _calls(compiled, model, 4)
    assert explained.graph_break_count >= 1
    assert not [w for w in caught if "runs eagerly" in str(w.message)], caught
    stats = magpy.stats(compiled)
    # (a site may still give up: each call's Sequential is a new object, so the segment
    # that calls it never hits; that is a choice, not a failure)
    assert stats.fallbacks == 0 and stats.hits >= 2, stats
