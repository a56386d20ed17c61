"""A Python list from outside that the program grows on every call (``core.growing``).

An output buffer, a history, a neural stack's items: ``self.values.insert(len(self), v)``,
``self.buf.insert(0, x)``, ``self.log.append(y)``. The list's length changes on every call, so
a record guarded on it would be made again on every call. The rule: appends and inserts into a
list whose contents the run does not read are replayed by the mock on the real list (no guard
on its length); ``len()`` of such a list, once its length was seen to change, is an entry int
computed on each call. At most two records (the second once the length was seen changing),
and from the third call on every call is a hit; the lists hold what eager's hold.

Each test runs the program eagerly and compiled side by side on fresh inputs and compares the
outputs and every list item by item after each call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy

CALLS = 6


def _lists(m: nn.Module) -> dict[str, list[Any]]:
    return {k: v for k, v in vars(m).items() if type(v) is list}


def run_side_by_side(
    make: Callable[[], nn.Module], nargs: int, *, dynamic: bool | None = None
) -> Any:
    """``make()`` twice; ``CALLS`` calls on fresh inputs; outputs and lists equal each call."""
    eager, target = make(), make()
    compiled = magpy.compile(target, backend="eager", dynamic=dynamic)
    for call in range(CALLS):
        xs = [torch.randn(3) for _ in range(nargs)]
        H.assert_same(compiled(*xs), eager(*xs), f"call {call}: out")
        H.assert_same(_lists(target), _lists(eager), f"call {call}: lists")
    return magpy.stats(compiled)


class InsertAtLength(nn.Module):
    """Two lists grown through ``insert`` at the first one's length (a neural queue's push)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[torch.Tensor] = []
        self.strengths: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.values)

    def forward(self, v: torch.Tensor, d: torch.Tensor) -> None:
        index = len(self)
        self.values.insert(index, v)
        self.strengths.insert(index, d.relu())


class InsertAtFront(nn.Module):
    """A constant index: nothing about the list's length matters."""

    def __init__(self) -> None:
        super().__init__()
        self.recent: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        self.recent.insert(0, y)
        self.recent.append(y + 1)
        return y


class ScaledByCount(nn.Module):
    """The length after an append feeds tensor arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x)
        n = len(self.seen)
        self.count = n
        return x * n + len(self.seen)


class InsertBeforeLast(nn.Module):
    """Index arithmetic over the length; inserting into an empty list at -1 puts it first."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.items.insert(len(self.items) - 1, x)
        return x.sin()


@pytest.mark.parametrize(
    ("make", "nargs", "records"),
    [
        (InsertAtLength, 2, 2),
        (InsertAtFront, 1, 1),
        (ScaledByCount, 1, 2),
        (InsertBeforeLast, 1, 2),
    ],
    ids=["insert-at-length", "insert-at-front", "scaled-by-count", "insert-before-last"],
)
def test_a_list_grown_on_every_call_settles_to_one_record(
    make: Callable[[], nn.Module], nargs: int, records: int
) -> None:
    stats = run_side_by_side(make, nargs)
    assert stats.records == records, stats
    assert stats.hits == CALLS - records, stats
    assert stats.breaks == 0 and stats.fallbacks == 0, stats


class ReadAfterInsert(nn.Module):
    """The run reads the list after inserting: the inserts are placed as in this call."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[torch.Tensor] = [torch.zeros(3)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.items.insert(len(self.items) // 2, x)
        self.items.insert(0, x + 1)
        return torch.stack(self.items).sum(0)


class BoundedHistory(nn.Module):
    """A history capped at four items: the cap is a branch on the length."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.insert(len(self.history), x)
        if len(self.history) > 4:
            self.history.pop(0)
        return x + len(self.history)


@pytest.mark.parametrize("make", [ReadAfterInsert, BoundedHistory], ids=["read", "bounded"])
@pytest.mark.parametrize("dynamic", [None, False, True], ids=["auto", "static", "dynamic"])
def test_lists_read_after_growing_are_equal_to_eager(
    make: Callable[[], nn.Module], dynamic: bool | None
) -> None:
    """Reads of the contents guard the entry length: always correct, whatever ``dynamic``."""
    stats = run_side_by_side(make, 1, dynamic=dynamic)
    assert stats.records >= 1 and stats.breaks == 0, stats


class InsertReadPop(nn.Module):
    """An item inserted in front of the entry items, the items read, the item taken out again:
    the entry items are found behind the inserted one (each by its entry position)."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[torch.Tensor] = [torch.zeros(2), torch.ones(4)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.items.insert(0, x)
        self.items.insert(-1, x * 2)
        y = self.items[1].sum() + self.items[2].sum() * 2 + self.items[3].sum() * 3
        self.items.pop(0)
        self.items.pop(1)
        return y + self.items[0].sum()


def test_items_read_after_inserts_in_front_of_them() -> None:
    stats = run_side_by_side(InsertReadPop, 1)
    assert (stats.records, stats.hits, stats.fallbacks) == (1, CALLS - 1, 0), stats


def test_a_bounded_history_hits_once_full() -> None:
    stats = run_side_by_side(BoundedHistory, 1)
    assert stats.hits >= 1, stats  # (calls 5 and 6 find four items: the length settled)


def test_a_list_replaced_by_another_type_misses() -> None:
    """The entry length is computed by the guard: a tuple in the list's place is a miss."""
    target = InsertAtLength()
    compiled = magpy.compile(target, backend="eager")
    for _ in range(3):
        compiled(torch.randn(3), torch.randn(3))
    records = magpy.stats(compiled).records
    target.values = tuple(target.values)  # type: ignore[assignment]
    with pytest.raises(AttributeError, match="insert"):
        compiled(torch.randn(3), torch.randn(3))  # eager's own error, from the program
    assert magpy.stats(compiled).records == records
