"""Never differs from eager: recursion (issue 17).

Recursive helpers whose depth varies between calls, mutual recursion, recursion on nested data,
and recursion near ``sys.getrecursionlimit()``: a depth eager reaches is reached compiled, and
one past it raises the same ``RecursionError`` (compared by type and message only there: the
depth at which it is raised differs by MagPy's frames, see README "Frames").
"""

from __future__ import annotations

import sys

import _integration_differential as D
import torch

case = D.case


def _pow(x: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return torch.ones_like(x)
    return x * _pow(x, n - 1)


@case("recursion", inductor=True)
def recursive_helper_depth_varies(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return _pow(x, n)

    cf = w.compile(f)
    return [cf(torch.full((2,), 1.5), n) for n in (3, 3, 5, 3, 0, 5)]


def _is_even(n: int, x: torch.Tensor) -> torch.Tensor:
    return x if n == 0 else _is_odd(n - 1, x + 1)


def _is_odd(n: int, x: torch.Tensor) -> torch.Tensor:
    return x * -1 if n == 0 else _is_even(n - 1, x * 2)


@case("recursion", inductor=True)
def mutual_recursion(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return _is_even(n, x)

    cf = w.compile(f)
    return [cf(torch.ones(2), n) for n in (4, 4, 3, 3, 6)]


def _tree_sum(node: object) -> torch.Tensor:
    if isinstance(node, torch.Tensor):
        return node
    assert isinstance(node, list | tuple)
    total = torch.zeros(2)
    for child in node:
        total = total + _tree_sum(child)
    return total


@case("recursion")
def recursion_over_nested_data(w: D.World) -> object:
    def f(tree: object) -> torch.Tensor:
        return _tree_sum(tree) * 2

    cf = w.compile(f)
    t = torch.ones(2)
    trees = [[t, [t, t]], [t * 2, [t, t]], [t, [t, [t, t]]], [t, [t, t]]]
    return [cf(tree) for tree in trees]


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


@case("recursion")
def python_recursion_feeds_tensor(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * _fib(n)

    cf = w.compile(f)
    return [cf(torch.ones(2), n) for n in (6, 6, 7, 6)]


@case("recursion")
def recursive_closure(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        def go(y: torch.Tensor, k: int) -> torch.Tensor:
            return y if k == 0 else go(y.sin(), k - 1)

        return go(x, n)

    cf = w.compile(f)
    return [cf(torch.ones(3) * 0.5, n) for n in (2, 2, 4, 2)]


def _depth(n: int) -> int:
    return 0 if n == 0 else 1 + _depth(n - 1)


@case("recursion")
def deep_recursion_within_limit(w: D.World) -> object:
    limit = sys.getrecursionlimit()

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x + _depth(n)

    cf = w.compile(f)
    n = limit - 60  # well within eager's reach (the test's own frames take some)
    return [cf(torch.ones(2), n) for _ in range(3)]


def _runaway(n: int) -> int:
    return _runaway(n + 1) + 1


def _exc_kind(r: object) -> object:
    """A RecursionError by type and message (its depth is not part of what is compared)."""
    return (r.type, r.message) if isinstance(r, D.Raised) else r


@case("recursion")
def runaway_recursion_raises(w: D.World) -> object:
    def f(x: torch.Tensor, deep: bool) -> torch.Tensor:
        if deep:
            _runaway(0)
        return x + 1

    cf = w.compile(f)
    obs = []
    for deep in (False, False, True, False, True):
        obs.append(_exc_kind(w.attempt(lambda deep=deep: cf(torch.ones(2), deep))))
    obs.append(sys.getrecursionlimit())
    return obs


@case("recursion", hits=0)  # a RecursionError while monitored: that call runs as eager
def recursion_error_caught_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, str]:
        try:
            _runaway(0)
        except RecursionError as e:
            return x * 2, type(e).__name__
        return x, "none"

    cf = w.compile(f)
    return [cf(torch.ones(2) * k) for k in range(3)], sys.getrecursionlimit()


@case("recursion")
def recursion_limit_read_inside(w: D.World) -> object:
    base = sys.getrecursionlimit()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + (sys.getrecursionlimit() >= base)

    cf = w.compile(f)
    return [cf(torch.ones(2)) for _ in range(3)], sys.getrecursionlimit() == base


def _walk(x: torch.Tensor, n: int, acc: list[torch.Tensor]) -> None:
    acc.append(x)
    if n > 0:
        _walk(x * 2, n - 1, acc)


@case("recursion")
def recursion_appends_to_list(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> list[torch.Tensor]:
        acc: list[torch.Tensor] = []
        _walk(x, n, acc)
        return acc

    cf = w.compile(f)
    return [cf(torch.ones(2), n) for n in (2, 2, 3, 2, 1)]


def _count_down(n: int, x: torch.Tensor) -> torch.Tensor:
    if n <= 0:
        return x
    if n % 3 == 0:
        return _count_down(n - 2, x + n)
    return _count_down(n - 1, x * 1.5)


@case("recursion")
def data_dependent_branches(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return _count_down(n, x)

    cf = w.compile(f)
    return [cf(torch.ones(2), n) for n in (7, 7, 8, 9, 7)]


class _Node:
    def __init__(self, w: torch.Tensor, child: _Node | None) -> None:
        self.w = w
        self.child = child

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w
        return y if self.child is None else self.child.apply(y)


@case("recursion")
def recursive_method_on_linked_objects(w: D.World) -> object:
    def f(node: _Node, x: torch.Tensor) -> torch.Tensor:
        return node.apply(x)

    cf = w.compile(f)
    chain = _Node(torch.tensor(2.0), _Node(torch.tensor(3.0), None))
    obs = [cf(chain, torch.ones(2)), cf(chain, torch.ones(2))]
    chain.child.child = _Node(torch.tensor(0.5), None)  # one deeper between calls
    obs += [cf(chain, torch.ones(2)), cf(chain, torch.ones(2))]
    return obs


test_eager, test_inductor = D.tests(__name__)
