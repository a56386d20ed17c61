"""A list from outside joined into one tensor (``torch.stack(outputs)``, ``torch.cat``).

Where a segment joins a list it got from outside before reading or changing it (appending to
it aside), the joined tensor is an entry value the guard computes
(``magpy_monitor.core.joined``): the list's length is one size of it, dynamic after a miss, so
a loop's outputs stacked after the loop (or a list argument of changing length) need a few
records, not one per length. Every case is compared with eager, the list too, and its record
count is asserted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy

_LENGTHS = [3, 4, 5, 6, 7, 2, 1, 9]  # (8: max_records for one record per length)


def stack(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(xs)


def stack_dim1_twice(xs: list[torch.Tensor]) -> Any:
    y = torch.stack(xs, 1)
    return y, y, y * 2


def cat_last_then_sum(xs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.cat(xs, -1).sum(0)


def item_changed_through_an_alias(xs: list[torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    h.add_(1)  # h is xs[-1]: the join must see the update
    return torch.cat(xs, dim=0)


def joined_then_changed(xs: list[torch.Tensor]) -> torch.Tensor:
    y = torch.stack(xs)
    y.mul_(2)
    return y


def appended_then_joined(xs: list[torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    xs.append(z)
    return torch.stack(xs)


def appended_twice_then_cat(xs: list[torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    xs.append(z)
    xs.append(z * 2)
    return torch.cat(xs, 1)


def joined_then_appended(xs: list[torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    y = torch.stack(xs)
    xs.append(z)
    return y + 1


# (program, most records over the lengths)
CASES: list[tuple[Callable[..., Any], int]] = [
    (stack, 3),
    (stack_dim1_twice, 3),
    (cat_last_then_sum, 3),
    (item_changed_through_an_alias, len(_LENGTHS)),  # (the items are read: one per length)
    (joined_then_changed, 4),  # (the update of the joined tensor is a graph break)
    # (the entry items joined by the guard, the appended tensors after them in the graph)
    (appended_then_joined, 3),
    (appended_twice_then_cat, 3),
    (joined_then_appended, 3),
]


def _args(fn: Callable[..., Any], n: int) -> tuple[Any, ...]:
    xs = [torch.randn(2, 3) for _ in range(n)]
    if fn is cat_last_then_sum:
        return (tuple(xs),)
    if fn is item_changed_through_an_alias:
        return (xs, xs[-1])
    if fn in (appended_then_joined, appended_twice_then_cat, joined_then_appended):
        return (xs, torch.randn(2, 3))
    return (xs,)


def _copy(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with fresh tensors, the aliasing between them kept."""
    memo: dict[int, Any] = {}

    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return memo.setdefault(id(x), x.clone())
        return type(x)(one(t) for t in x)

    return tuple(one(a) for a in args)


@pytest.mark.parametrize(("fn", "most"), CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_joined_lists_equal_eager(fn: Callable[..., Any], most: int) -> None:
    compiled = magpy.compile(fn, backend="eager")
    for n in _LENGTHS:
        args = _args(fn, n)
        mine, theirs = _copy(args), _copy(args)
        H.assert_same(compiled(*mine), fn(*theirs), f"length {n}")
        H.assert_same(mine, theirs, f"arguments after, length {n}")
    st = magpy.stats(compiled)
    assert st.records <= most and st.fallbacks == 0, st
    if most < len(_LENGTHS):
        assert st.hits >= len(_LENGTHS) - most, st


def test_the_joined_tensor_is_one_object() -> None:
    compiled = magpy.compile(stack_dim1_twice, backend="eager")
    for n in (3, 4, 5, 6):
        y, y_again, _ = compiled([torch.randn(2) for _ in range(n)])
        assert y is y_again and y.shape == (2, n)


def test_gradients_flow_to_the_items() -> None:
    def loss(ws: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(ws).pow(2).sum()

    compiled = magpy.compile(loss, backend="eager")
    for n in (3, 4, 5, 6):
        ws = [torch.randn(3, requires_grad=True) for _ in range(n)]
        compiled(ws).backward()
        got = [w.grad for w in ws]
        for w in ws:
            w.grad = None
        loss(ws).backward()
        H.assert_same(got, [w.grad for w in ws])
    assert magpy.stats(compiled).records <= 3


def test_items_that_cannot_be_joined_raise_as_eager() -> None:
    compiled = magpy.compile(stack, backend="eager")
    for n in (3, 4, 5):
        compiled([torch.randn(2) for _ in range(n)])
    bad = [torch.randn(2), torch.randn(3)]
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        compiled(bad)
    H.assert_same(compiled([torch.randn(2)] * 4).shape, torch.Size([4, 2]))


def test_inductor_joins_a_list_of_changing_length() -> None:
    compiled = magpy.compile(cat_last_then_sum, backend="inductor")
    for n in (3, 4, 5, 7):
        xs = tuple(torch.randn(2, 3) for _ in range(n))
        H.assert_same(compiled(xs), cat_last_then_sum(xs))
    assert magpy.stats(compiled).records <= 2
