"""Objects from outside whose answers come from their contents or from their class's Python.

``name in self.heads`` (an ``nn.ModuleDict``), ``len(box)`` of a class with ``__len__``,
``str(cfg)`` of a namedtuple: native code reads the object's contents or runs its class's
special methods. The monitor follows a Python ``__contains__``/``__len__`` like a call and
guards containers that read the builtin way item by item (namedtuples, list subclasses,
deques). Regressions: each of these was guarded by the object's type alone, so a later call
with other contents reused a stale answer; ``len()`` also ran a Python ``__len__`` once more
than eager, and the monitor itself ran a callable's Python ``__eq__`` (``fn in (...)``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy

Pair = collections.namedtuple("Pair", "a b")


class Tags(list):  # type: ignore[type-arg]
    """A list subclass that reads its contents the builtin way."""


class Box:
    """Python special methods that count how often they run."""

    def __init__(self, keys: set[int]) -> None:
        self.keys = keys
        self.runs = 0

    def __contains__(self, k: Any) -> bool:
        self.runs += 1
        return k in self.keys

    def __len__(self) -> int:
        self.runs += 1
        return len(self.keys)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def __eq__(self, other: object) -> bool:
        self.runs += 100  # (the monitor must not compare the callable with ==)
        return other is self

    __hash__ = object.__hash__


def heads(x: torch.Tensor, d: torch.nn.ModuleDict) -> torch.Tensor:
    return d["a"](x) if "a" in d else x - 1


CASES: dict[str, tuple[Callable[..., Any], Callable[[int], Any]]] = {
    "module_dict": (heads, lambda i: torch.nn.ModuleDict({"ab"[i % 2]: torch.nn.ReLU()})),
    "list_subclass": (lambda x, c: x + ("a" in c), lambda i: Tags(["a", "b"][i % 2 :])),
    "deque": (lambda x, c: x + ("a" in c), lambda i: collections.deque("ab"[i % 2 :])),
    "namedtuple_str": (lambda x, c: (x, str(c)), lambda i: Pair(i % 2, 2)),
    "namedtuple_eq": (lambda x, c: x + (c == (1, 2)), lambda i: Pair(1, 1 + i % 2)),
    "namedtuple_fstring": (lambda x, c: (x, f"{c.a}-{c}"), lambda i: Pair(i % 2, 2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_answers_follow_the_contents(name: str) -> None:
    """The container alternates between two contents: every answer is eager's, and the
    second round of calls hits the records the first one made."""
    fn, make = CASES[name]
    compiled = magpy.compile(fn, backend="eager")
    for i in range(4):
        x = torch.randn(2)
        H.assert_same(compiled(x, make(i)), fn(x, make(i)))
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.breaks) == (2, 2, 0), stats


def box_program(x: torch.Tensor, box: Box) -> torch.Tensor:
    y = x * len(box)
    if 1 in box:
        y = y + 1
    return box(y)


def test_python_contains_and_len_are_followed() -> None:
    """``1 in box`` and ``len(box)`` run the class's Python once per call, as in eager; their
    answers follow ``box.keys`` (guarded as the methods read it)."""
    ran, eager = Box({1}), Box({1})
    compiled = magpy.compile(box_program, backend="eager")
    for keys in ({1}, {1}, {2, 3}, {2, 3}, {1}):
        ran.keys, eager.keys = set(keys), set(keys)
        x = torch.randn(2)
        H.assert_same(compiled(x, ran), box_program(x, eager))
        assert ran.runs == eager.runs
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.breaks) == (2, 3, 0), stats


def test_in_on_an_object_the_guard_cannot_read_breaks() -> None:
    """A class with only ``__iter__``: ``in`` runs Python the monitor does not follow."""

    class Bag:
        def __init__(self, items: list[int]) -> None:
            self.items = items

        def __iter__(self) -> Any:
            return iter(self.items)

    def fn(x: torch.Tensor, bag: Bag) -> torch.Tensor:
        return x + (1 in bag)

    compiled = magpy.compile(fn, backend="eager")
    for items in ([1], [2], [1]):
        x = torch.randn(2)
        H.assert_same(compiled(x, Bag(items)), fn(x, Bag(items)))
    ex = magpy.explain(fn)(torch.randn(2), Bag([1]))
    assert [r.reason for r in ex.break_reasons] == ["`in` on a Bag"]


def in_views(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
    keys = "a" in d.keys()  # noqa: SIM118  (the view, on purpose)
    return x + keys + 10 * (1 in d.values()) + 100 * (("a", 1) in d.items())


def in_keyword_views(x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return x + ("context" in kwargs.keys())  # noqa: SIM118  (vformer's PreNorm)


def test_in_on_dict_views_follows_the_dict() -> None:
    """Regression: ``k in d.keys()`` of a dict from outside was a constant with no guard on
    the dict's keys (another dict's call got the first answer)."""
    for fn, as_kwargs in ((in_views, False), (in_keyword_views, True)):
        compiled = magpy.compile(fn, backend="eager")
        for d in ({"a": 1}, {"b": 2}, {"a": 1}, {"context": 3}, {"b": 2}):
            x = torch.randn(1)
            got = compiled(x, **d) if as_kwargs else compiled(x, d)
            H.assert_same(got, fn(x, **d) if as_kwargs else fn(x, d))
        stats = magpy.stats(compiled)
        assert stats.breaks == 0 and stats.hits >= 2, stats
