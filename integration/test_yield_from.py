"""``yield from`` inside generators the monitor follows.

The delegate is another followed generator (``nn.Module.named_modules`` recurses this way, and
``modules()``/``parameters()``/``named_parameters()`` are built on it) or a container whose
items the shadow knows. A delegate of unknown contents, ``send()`` of a value and ``throw()``
stay graph breaks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy


def _assert_one_graph(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]]) -> None:
    """One graph, no break; a compiled ``fn`` matches eager on fresh inputs and hits its cache."""
    ex = magpy.explain(fn)(*make_args())
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(4):
        args = make_args()
        H.assert_same(compiled(*args), fn(*args))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 3, 0, 0), st


def _assert_breaks(
    fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]], reason: str
) -> None:
    """A graph break whose reason mentions ``reason``; results still match eager."""
    ex = magpy.explain(fn)(*make_args())
    assert any(reason in r.reason for r in ex.break_reasons), str(ex)
    compiled = magpy.compile(fn, backend="eager")
    for k in range(3):
        torch.manual_seed(k)  # the same inputs twice (an iterator argument is used up)
        got = compiled(*make_args())
        torch.manual_seed(k)
        H.assert_same(got, fn(*make_args()))
    assert magpy.stats(compiled).breaks >= 1


# ---------------------------------------------------------------------- user generators
def doubled(xs: Any) -> Iterator[torch.Tensor]:
    for x in xs:
        yield x * 2


def chain_of(a: torch.Tensor, b: torch.Tensor) -> Iterator[torch.Tensor]:
    yield from [a, b]  # a list
    yield from (a + 1, b + 1)  # a tuple
    yield from doubled([a, b])  # another followed generator
    yield from {"p": a - 1, "q": b - 1}.values()  # a dict view


def nested(a: torch.Tensor, b: torch.Tensor) -> Iterator[torch.Tensor]:
    yield a
    yield from chain_of(a, b)  # a generator that itself delegates
    for i in range(2):
        yield from doubled([a * i])


def sum_nested(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    total = torch.zeros_like(a)
    for x in nested(a, b):
        total = total + x
    return total


def list_nested(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    return list(nested(a, b))


def two_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3), torch.randn(3)


@pytest.mark.parametrize("fn", [sum_nested, list_nested], ids=lambda f: f.__name__)
def test_yield_from_lists_views_and_generators_nested(fn: Callable[..., Any]) -> None:
    _assert_one_graph(fn, two_tensors)


def counted(x: torch.Tensor) -> Iterator[torch.Tensor]:
    for i in range(3):
        yield x + i
    return x * 10


def take_result(x: torch.Tensor) -> Iterator[torch.Tensor]:
    total = yield from counted(x)  # the delegate's return value
    yield total - 1
    yield from range(2)


def use_result(x: torch.Tensor) -> list[Any]:
    return list(take_result(x))


def consume_returning(x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    out = [v for v in counted(x)]  # FOR_ITER over a generator that returns a value
    return out, x * 3


@pytest.mark.parametrize("fn", [use_result, consume_returning], ids=lambda f: f.__name__)
def test_the_delegate_returns_a_value(fn: Callable[..., Any]) -> None:
    """A generator's return value (CPython raises StopIteration at SEND/FOR_ITER and reports it
    to the tracer) is the value of ``yield from``, and does not end the frame."""
    _assert_one_graph(fn, lambda: (torch.randn(3),))


def leave_early(x: torch.Tensor) -> torch.Tensor:
    out, i = x, 0
    for v in nested(x, x + 1):
        if i == 3:  # leaves `nested` suspended inside its `yield from chain_of(...)`
            break
        out = out + v
        i += 1  # noqa: SIM113  (a plain counter, not enumerate)
    return out


def test_leaving_a_delegating_generator_early() -> None:
    _assert_one_graph(leave_early, lambda: (torch.randn(3),))


# ---------------------------------------------------------------------- nn.Module
class Tree(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 4)))
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                x = m(x)
        n_params = sum(p.numel() for p in self.parameters())
        params = list(self.parameters())
        names = [name for name, _ in self.named_modules()]
        pnames = [name for name, _ in self.named_parameters()]
        kids = len(list(self.children()))
        return x * self.scale * n_params, len(params), names, pnames, kids


def test_module_modules_and_parameters_in_forward() -> None:
    model = Tree()
    _assert_one_graph(model, lambda: (torch.randn(2, 4),))


def test_module_parameters_sum_of_squares() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 2)))

    def fn(x: torch.Tensor) -> torch.Tensor:
        reg = sum((p * p).sum() for p in model.parameters())
        return model(x).sum() + reg

    _assert_one_graph(fn, lambda: (torch.randn(5, 3),))


# ---------------------------------------------------------------------- breaks
def delegate(xs: Any) -> Iterator[Any]:
    yield from xs


def from_native_iterator(x: torch.Tensor, it: Iterator[int]) -> list[Any]:
    return [x * v for v in delegate(it)]


def test_yield_from_a_native_iterator_breaks() -> None:
    _assert_breaks(from_native_iterator, lambda: (torch.randn(2), iter([1, 2, 3])), "iterating")


def send_a_value(x: torch.Tensor) -> tuple[torch.Tensor, Any]:
    gen = delegate(counted(x))
    first = next(gen)
    return first, gen.send(5)


def throw_into(x: torch.Tensor) -> torch.Tensor:
    gen = delegate(counted(x))
    first = next(gen)
    with contextlib.suppress(ValueError):
        gen.throw(ValueError("stop"))
    return first * 2


@pytest.mark.parametrize(
    ("fn", "reason"), [(send_a_value, "send"), (throw_into, "throw")], ids=["send", "throw"]
)
def test_send_and_throw_break(fn: Callable[..., Any], reason: str) -> None:
    _assert_breaks(fn, lambda: (torch.randn(2),), reason)
