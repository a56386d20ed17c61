"""Properties and Python descriptors of objects from outside the compiled region.

Reading ``self.prop`` of a module runs the property's getter. The monitor follows it like a
call: what it computes goes into the graph, what it reads is guarded, what it changes the mock
replays. Regression: the getter was not followed and its result was read like a plain
attribute. The guard then ran the getter on every call (a counter advanced twice per call), and
the graph took a stale result as an input.

Also: ``functools.cached_property``, parametrized weights (``torch.nn.utils.parametrize``), and
a property that builds a new object on every read (a break, never an internal error).
"""

from __future__ import annotations

import functools
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch.nn.utils import parametrize

import magpy


class Counting(torch.nn.Module):
    """A property with an effect, one computing tensors, one giving a callable."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.shape = (2, 3)
        self.w = torch.nn.Parameter(torch.randn(6, 2))

    @property
    def step(self) -> int:
        self.calls += 1
        return self.calls

    @property
    def indices(self) -> torch.Tensor:  # (torchmultimodal's BroadcastedPositionEmbedding)
        return torch.cartesian_prod(*[torch.arange(s) for s in self.shape])

    @property
    def act(self) -> Any:
        return torch.tanh if self.calls % 2 else torch.relu

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> Any:
        picked = self.indices[ids].float() @ self.w[:2]
        scaled = x * self.step + len(self.indices)
        return self.act(scaled) + picked, getattr(self, "step")  # noqa: B009  (the builtin, on purpose)


def _counting_inputs(i: int) -> H.Inputs:
    return (torch.randn(2, 2), torch.tensor([i % 6, (i + 1) % 6])), {}


def test_module_properties_are_followed(check: Any) -> None:
    """Each call runs ``step`` twice, as eager does; ``act`` follows the counter's parity."""
    check(Counting(), _counting_inputs, calls=6, expect_records=2)
    assert H.graphs(Counting(), *_counting_inputs(0)[0]) == (1, [])


def test_a_property_counter_is_not_run_by_the_guard() -> None:
    compiled_module = Counting()
    compiled = magpy.compile(compiled_module, backend="eager")
    for i in range(4):
        compiled(*_counting_inputs(i)[0])
        assert compiled_module.calls == 2 * (i + 1)


class Lazy:
    """A Python non-data descriptor that computes and caches on the instance
    (``lazy_property``), and ``functools.cached_property``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __get__(self, obj: Any, owner: Any) -> Any:
        value = self.fn(obj)
        obj.__dict__[self.fn.__name__] = value
        return value


class Cached(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 3.0

    @Lazy
    def table(self) -> list[float]:
        return [self.scale, self.scale * 2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.table[1]


def test_a_python_descriptor_of_a_module_is_followed() -> None:
    """The first call runs ``__get__`` (followed: the mock stores the cached list); later
    calls find it in the instance's ``__dict__``, a plain read."""
    module = Cached()
    compiled = magpy.compile(module, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), x * 6.0)
    assert module.__dict__["table"] == [3.0, 6.0]
    assert magpy.stats(compiled).breaks == 0


class Weighted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        parametrize.register_parametrization(self.lin, "weight", Symmetric())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Symmetric(torch.nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w.triu() + w.triu(1).transpose(0, 1)


def test_a_parametrized_weight_is_computed_in_the_graph(check: Any) -> None:
    """``torch.nn.utils.parametrize`` makes ``weight`` a property of a new class: its
    parametrization runs in the graph, from the current original weight."""
    module = Weighted()
    compiled = check(module, H.randn_inputs((2, 3)), calls=3)
    with torch.no_grad():
        module.lin.parametrizations.weight.original.add_(1.0)
    x = torch.randn(2, 3)
    H.assert_same(compiled(x), module(x))
    assert H.graphs(Weighted(), torch.randn(2, 3)) == (1, [])


class Asking(torch.nn.Module):
    def __init__(self, present: bool) -> None:
        super().__init__()
        self.calls = 0
        self.present = present

    @property
    def step(self) -> int:
        self.calls += 1
        if not self.present:
            raise AttributeError("step")  # (hasattr: False; getattr: its default)
        return self.calls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "step"):
            x = x + 1
        return x * getattr(self, "step", 0)


@pytest.mark.parametrize("present", [True, False])
def test_asking_for_a_property_runs_it_once(present: bool) -> None:
    """``hasattr``/``getattr(..., default)`` of a property run its getter, followed like a read:
    one graph. A getter that raises AttributeError (the answer is "absent") is a break; either
    way the getter runs exactly as often as in eager. (Absent: the first call breaks and writes
    ``calls``, the module's own state, so the second is captured whole once more before the
    module splits, see docs/lazy-init.md: its segments hit from the fourth call.)"""
    graphs, reasons = H.graphs(Asking(present), torch.randn(2))
    if present:
        assert (graphs, reasons) == (1, [])
    else:
        assert reasons and "step was called but its frame" in reasons[0]
    module, eager = Asking(present), Asking(present)
    compiled = magpy.compile(module, backend="eager")
    for _ in range(4):
        x = torch.randn(2)
        H.assert_same(compiled(x), eager(x))
        assert module.calls == eager.calls
    assert magpy.stats(compiled).hits >= 1  # (calls is guarded, then promoted)


@pytest.mark.parametrize("cached", [functools.cached_property, property])
def test_standard_library_descriptors(cached: Any) -> None:
    class Config:
        def __init__(self, hidden: int) -> None:
            self.hidden = hidden

        def _size(self) -> int:
            return self.hidden * 2

        size = cached(_size)

    cfg = Config(4)

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * cfg.size

    compiled = magpy.compile(scaled, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        H.assert_same(compiled(x), scaled(x))
    cfg.hidden = 5
    if cached is property:
        H.assert_same(compiled(x), x * 10)
    else:  # (cached on the instance by the first call)
        H.assert_same(compiled(x), x * 8)


class FreshIndices(torch.nn.Module):
    """multimodal's BroadcastedPositionEmbedding: a property that builds a new tensor per read."""

    @property
    def indices(self) -> torch.Tensor:
        return torch.arange(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + len(self.indices) + self.indices.sum()


def test_a_property_giving_a_new_object_per_read_breaks_cleanly(check: Any) -> None:
    """Regression: the second read of ``self.indices`` was an internal error (the callable then
    ran eagerly for good, with a warning); it is a graph break, and the results stay eager's."""
    compiled = magpy.compile(FreshIndices(), backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), FreshIndices()(x))
    stats = magpy.stats(compiled)
    assert stats.fallbacks == 0 and stats.hits > 0, stats
