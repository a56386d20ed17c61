"""Identity and default equality of objects from outside the compiled region.

``==`` of objects whose classes keep identity equality (a config holding a loss module compared
with a string) is an identity test; ``a is b`` between objects and ``cls is A`` between classes
pin them too. Both are guarded, so that another aliasing of the same objects misses instead of
reusing the record.
"""

from __future__ import annotations

from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn.functional as F

import magpy


class Config:
    def __init__(self, mode: Any) -> None:
        self.mode = mode


class Loss(torch.nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.cfg.mode == "focal":
            return ((x - y) ** 2).mean() * 2
        elif self.cfg.mode != "hard":
            return F.mse_loss(x, y)
        return (x - y).abs().mean()


def same_or_not(x: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    return x + 1 if a == b else x - 1


def is_same(x: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    return x + 1 if a is b else x - 1


class A:
    pass


class B:
    pass


def class_is(x: torch.Tensor, cls: type) -> torch.Tensor:
    return x * 2 if cls is A else x * 3


def test_a_module_compared_with_a_string_is_an_identity_test() -> None:
    """``module == "focal"`` falls back to identity (neither side defines equality with the
    other): one graph, the module's class guarded."""
    loss = Loss(Config(torch.nn.MSELoss()))
    compiled = magpy.compile(loss, backend="eager")
    for _ in range(3):
        x, y = torch.randn(4, 4), torch.randn(4, 4)
        H.assert_same(compiled(x, y), loss(x, y))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert H.graphs(loss, torch.randn(4, 4), torch.randn(4, 4)) == (1, [])
    loss.cfg.mode = "focal"  # a string now: the guard misses and the other branch is taken
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    H.assert_same(compiled(x, y), loss(x, y))
    assert magpy.stats(compiled).records == 2


@pytest.mark.parametrize("fn", [same_or_not, is_same])
def test_identity_of_two_objects_is_guarded(fn: Any) -> None:
    """``a == b`` (no custom equality) and ``a is b``: a record made with two distinct objects
    never serves one object passed twice, and the other way round."""
    compiled = magpy.compile(fn, backend="eager")
    m1, m2 = torch.nn.ReLU(), torch.nn.ReLU()
    calls = [(m1, m2), (m1, m1), (m2, m1), (m2, m2), (m1, None), (m1, "relu")]
    for a, b in calls:
        x = torch.randn(3)
        H.assert_same(compiled(x, a, b), fn(x, a, b))
    st = magpy.stats(compiled)
    assert (st.breaks, st.fallbacks) == (0, 0), st
    assert st.hits == 2 and st.records == len(calls) - 2, st
    assert H.graphs(fn, torch.randn(3), m1, m2) == (1, [])


def test_class_identity_is_guarded_by_identity() -> None:
    """``cls is A`` pins ``cls``: another class misses instead of reusing the record."""
    compiled = magpy.compile(class_is, backend="eager")
    for cls in (A, A, B, B, A):
        x = torch.randn(3)
        H.assert_same(compiled(x, cls), class_is(x, cls))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 3, 0), st
