"""``itertools``, ``map`` and other native code that calls Python back, inside the compiled
region.

The combinatoric functions only rearrange what they are given, so over tensors (DeepCTR's
``itertools.combinations(embeddings, 2)``) the values they give are the same tensors, found
again by identity, or the rows of one ``unbind(0)`` when a tensor is iterated; over numbers
their values are constants guarded by the numbers. The real iterator is never copied: a copy
of ``islice(xs, 1, None)`` shares, and advances, the list iterator it draws from (the program
then saw an empty slice). Lazy iterators over iterators, and endless ones, are graph breaks.
Numbers that ``map``, ``sorted(key=...)`` or ``functools.reduce`` pass to a Python callback are
the known items, not constants.

``iter``/``next``, ``enumerate`` and ``zip`` are in ``test_iteration.py``.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


def rearranged(t: torch.Tensor, parts: list[torch.Tensor], k: int) -> Any:
    pairs = [x * y for x, y in itertools.combinations(parts, 2)]
    crossed = [x - y for x, y in itertools.product(t, parts[:2])]
    ordered = [x + y for x, y in itertools.permutations(t, 2)]
    again = list(itertools.repeat(t, k))
    tail = [p * 2 for p in itertools.islice(parts, 1, None)]
    chained = [x @ y for x, y in itertools.pairwise(parts)]
    squared = [x * y for x, y in itertools.product(t, repeat=2)]
    with_repl = [x + y for x, y in itertools.combinations_with_replacement(parts[:2], 2)]
    return pairs, crossed, ordered, again, tail, chained, squared, with_repl


def _rearranged_inputs(i: int) -> H.Inputs:
    g = torch.Generator().manual_seed(i)
    return (torch.randn(3, 2, generator=g), [torch.randn(2, generator=g) for _ in range(3)], 2), {}


def test_combinatorics_over_tensors_are_one_graph(check: Any) -> None:
    compiled = check(rearranged, _rearranged_inputs, calls=3)
    args = _rearranged_inputs(7)[0]
    out = compiled(*args)
    assert out[3][0] is args[0] and out[3][1] is args[0]  # repeat gives the tensor itself
    assert H.graphs(rearranged, *args) == (1, [])


def counted(x: torch.Tensor, n: int, r: int) -> Any:
    total = x
    for c in itertools.combinations(range(n), r):
        total = total + sum(c) * c[0]
    sums = list(itertools.accumulate([n, r, 3]))
    return total, sums, list(itertools.islice(range(10), n))


def test_combinatorics_over_numbers_are_guarded() -> None:
    """The numbers the values follow from (``n``, ``r``) are guarded: new ones, a new record."""
    compiled = magpy.compile(counted, backend="eager")
    x = torch.randn(3)
    for n, r in ((4, 2), (4, 2), (5, 2), (4, 3), (5, 2)):
        H.assert_same(compiled(x, n, r), counted(x, n, r))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (3, 2, 0)


def test_combinations_of_a_tensors_rows() -> None:
    """DeepCTR's AFM layer given one tensor: ``combinations(t, 2)`` iterates its rows, those
    of one ``unbind(0)`` in the graph; their number follows the guarded first size."""

    def afm(t: torch.Tensor) -> torch.Tensor:
        rows, cols = [], []
        for r, c in itertools.combinations(t, 2):
            rows.append(r)
            cols.append(c)
        return torch.cat(rows, dim=1) * torch.cat(cols, dim=1)

    compiled = magpy.compile(afm, backend="eager")
    for shape in ((3, 2, 4), (3, 2, 4), (4, 2, 4)):
        t = torch.randn(shape)
        H.assert_same(compiled(t), afm(t))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 1, 0)
    assert H.graphs(afm, torch.randn(3, 2, 4)) == (1, [])


def sliced(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    return x + sum(itertools.islice(xs, 1, None))


def sliced_iterator(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    it = iter(xs)
    head = list(itertools.islice(it, 1))
    return x + sum(head) + 10 * sum(it)


def chained_then_drawn(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    it = iter(xs)
    a = list(itertools.chain(it))
    b = next(it, 99)
    for v in it:
        b = b + v
    return x + len(a) + 10 * b


def counting(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    for i, v in zip(itertools.count(), xs):
        x = x + i * v
    return x


@pytest.mark.parametrize("fn", [sliced, sliced_iterator, chained_then_drawn, counting])
def test_iterators_the_shadow_cannot_follow_stay_correct(fn: Any) -> None:
    """Regressions: ``islice`` over a list gave an empty slice on every call (the values were
    read from a copy that advanced the real one's source); ``chain(it)`` left ``it``'s shadow
    at its start, so the mock rebuilt it there (``next(it, 99)`` gave 1); ``count()`` hung the
    monitor. Each now equals eager on every call, with a break where it must."""
    compiled = magpy.compile(fn, backend="eager")
    for i in range(4):
        x, xs = torch.randn(2), [1, 2, 3 + i % 2]
        H.assert_same(compiled(x, xs), fn(x, xs))
    assert magpy.stats(compiled).hits >= 1


def chained_partly(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    it = iter(xs)
    ch = itertools.chain(reversed(xs), it, [10])
    a, b = next(ch), next(ch)
    for v in ch:  # (the reversed part, then two of it's values)
        if v == xs[1]:
            break
    rest = list(it)
    return x + a + 10 * b + 100 * sum(rest)


def chained_then_stale(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    it = iter(xs)
    ch = itertools.chain(it, [10])
    a = next(ch)
    rest = list(it)  # the chain's part advanced outside the chain
    return x + a + sum(rest) * 100 + len(list(ch))


def test_a_chain_advances_the_iterators_it_draws_from() -> None:
    """``chain(it, ...)`` moves ``it`` as it gives values, so the mock rebuilds ``it`` where the
    chain left it; an iterator advanced outside the chain makes the chain's shadow stale."""
    for fn, stale in (
        (chained_then_drawn, False),
        (chained_partly, False),
        (chained_then_stale, True),
    ):
        count, reasons = H.graphs(fn, torch.randn(2), [1, 2, 3])
        if stale:
            assert "advanced elsewhere" in reasons[0], reasons
        else:
            assert (count, reasons) == (1, [])
        compiled = magpy.compile(fn, backend="eager")
        for i in range(4):
            x, xs = torch.randn(2), [1, 2, 3 + i % 2]
            H.assert_same(compiled(x, xs), fn(x, xs))
        assert magpy.stats(compiled).hits >= 2


def test_a_lazy_iterator_over_an_iterator_breaks() -> None:
    _, reasons = H.graphs(sliced_iterator, torch.randn(2), [1, 2])
    assert "itertools.islice over an iterator" in reasons[0]
    count, reasons = H.graphs(counting, torch.randn(2), [1, 2])
    assert count >= 1 and "itertools.count without an end" in reasons[0]


def drawn_late(x: torch.Tensor, xs: list[torch.Tensor]) -> Any:
    doubled = map(lambda v: v * 2, xs)
    xs.append(x)  # the map draws from the list when it is consumed, not when it is made
    first, again = list(doubled), list(doubled)
    it = iter([1, 2, 3])
    absolute = map(abs, it)
    head = next(it)
    return first, again, tuple(absolute), head


def test_a_map_draws_its_values_when_consumed(check: Any) -> None:
    """Regression: ``map(abs, it)`` then ``next(it)`` gave ``(1, 2, 3)``, the values ``it`` had
    when the map was made; and a second ``list()`` of a consumed map is empty."""
    check(drawn_late, lambda i: ((torch.randn(2), [torch.randn(2), torch.randn(2)]), {}), calls=3)
    assert H.graphs(drawn_late, torch.randn(2), [torch.randn(2)]) == (1, [])


# ------------------------------------------------------------------ native code calling Python back
def callbacks_over_numbers(x: torch.Tensor, xs: list[int]) -> torch.Tensor:
    shifted = list(map(lambda v: v + 1, xs))
    order = sorted(xs, key=lambda v: -v)
    digits = functools.reduce(lambda a, b: a * 10 + b, xs)
    return x * shifted[1] + order[0] + digits


def test_numbers_passed_to_callbacks_keep_their_origin() -> None:
    """Regression: native code (``map``, ``sorted``, ``reduce``) calling a Python function
    back bound each number by identity, as a constant: ``list(map(f, xs))`` kept returning the
    first call's values when ``xs`` changed. Each call's arguments are now the known items."""
    compiled = magpy.compile(callbacks_over_numbers, backend="eager")
    x = torch.ones(2)
    for xs in ([1, 2], [1, 2], [5, 7], [5, 7], [9, 3]):
        H.assert_same(compiled(x, xs), callbacks_over_numbers(x, xs))
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.breaks) == (3, 2, 0), stats


def sorted_new_numbers(x: torch.Tensor, start: int) -> Any:
    # sorted()'s own walk over a range (or a map) makes other int and float objects than the
    # monitor's walk: the result's elements are found by value, equal ones in stable order
    ints = sorted(range(start + 3, start, -1))
    floats = sorted(map(float, (start + 0.5, start - 0.5, start - 0.5)))
    pairs = sorted(zip([start + 2, start + 1], [2.5, 1.5], strict=True))
    return x * ints[0] + floats[0] * pairs[0][1], ints, floats, pairs


def test_sorted_finds_new_numbers_by_value(check: Any) -> None:
    def inputs(i: int) -> H.Inputs:
        return (torch.randn(3, generator=torch.Generator().manual_seed(i)), 300), {}

    check(sorted_new_numbers, inputs, calls=3)
    assert H.graphs(sorted_new_numbers, *inputs(5)[0]) == (1, [])
