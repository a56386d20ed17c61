"""Never differs from eager: generators and iterators (issue 17).

Generator functions called inside the compiled function, generator expressions, ``yield from``,
a generator passed in and partially consumed (its state after the call is observed), iterators
kept across calls.
"""

from __future__ import annotations

from collections.abc import Iterator

import _integration_differential as D
import torch

case = D.case


def _gen(x: torch.Tensor, n: int) -> Iterator[torch.Tensor]:
    for i in range(n):
        yield x * i


@case("generators", inductor=True)
def generator_function_inside(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        total = torch.zeros_like(x)
        for t in _gen(x, n):
            total = total + t
        return total

    cf = w.compile(f)
    return [cf(torch.ones(2) * k, n) for k, n in ((1, 3), (2, 3), (1, 4), (3, 3))]


@case("generators", inductor=True)
def generator_expression_sum(w: D.World) -> object:
    def f(xs: list[torch.Tensor]) -> torch.Tensor:
        return sum((x * x for x in xs), torch.zeros(2))

    cf = w.compile(f)
    obs = []
    for k in (2, 2, 3, 2):
        obs.append(cf([torch.full((2,), float(i)) for i in range(k)]))
    return obs


@case("generators")
def generator_expression_to_tuple(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(x[i] + 1 for i in range(x.shape[0]) if i % 2 == 0)

    cf = w.compile(f)
    return [cf(torch.arange(float(n))) for n in (4, 4, 5, 4)]


def _inner(x: torch.Tensor) -> Iterator[torch.Tensor]:
    yield x + 1
    yield x + 2
    return None


def _outer(x: torch.Tensor) -> Iterator[torch.Tensor]:
    yield x
    yield from _inner(x)
    yield x * 10


@case("generators")
def yield_from_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> list[torch.Tensor]:
        return list(_outer(x))

    cf = w.compile(f)
    return [cf(torch.ones(2) * k) for k in range(4)]


def _returns(x: torch.Tensor) -> Iterator[torch.Tensor]:
    yield x
    return x.sum()


def _delegates(x: torch.Tensor, box: list[object]) -> Iterator[torch.Tensor]:
    r = yield from _returns(x)
    box.append(r)
    yield r


@case("generators")
def yield_from_return_value(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[list[torch.Tensor], list[object]]:
        box: list[object] = []
        return list(_delegates(x, box)), box

    cf = w.compile(f)
    return [cf(torch.arange(3.0) * k) for k in range(3)]


@case("generators")
def generator_passed_in_partially_consumed(w: D.World) -> object:
    def f(it: Iterator[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        a = next(it)
        b = next(it)
        return a + b + x

    cf = w.compile(f)
    obs = []
    for k in range(4):
        g = (torch.full((2,), float(i + k)) for i in range(5))
        r = cf(g, torch.ones(2))
        obs.append((r, list(g)))  # what is left in it, as in eager
    return obs


@case("generators")
def iterator_across_calls(w: D.World) -> object:
    def f(it: Iterator[int], x: torch.Tensor) -> torch.Tensor:
        return x * next(it)

    cf = w.compile(f)
    it = iter([1, 2, 2, 3, 2])
    obs = [cf(it, torch.ones(2)) for _ in range(5)]
    obs.append(w.attempt(lambda: cf(it, torch.ones(2))))  # StopIteration
    return obs


@case("generators")
def generator_exhausted_inside(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, object]:
        g = _gen(x, n)
        first = next(g)
        rest = list(g)
        return first, next(g, "done") if not rest else len(rest)

    cf = w.compile(f)
    return [cf(torch.ones(2), n) for n in (1, 1, 3, 3, 1)]


@case("generators")
def zip_map_filter_iterators(w: D.World) -> object:
    def f(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> list[torch.Tensor]:
        pairs = zip(xs, ys, strict=True)
        prods = map(lambda p: p[0] * p[1], pairs)
        return list(filter(lambda t: bool(t.sum() > 0), prods))

    cf = w.compile(f)
    obs = []
    for k in range(4):
        xs = [torch.full((2,), float(i - 1)) for i in range(3)]
        ys = [torch.full((2,), float(k)) for _ in range(3)]
        obs.append(cf(xs, ys))
    return obs


@case("generators")
def generator_with_state_in_closure(w: D.World) -> object:
    log: list[int] = []

    def counting(x: torch.Tensor, n: int) -> Iterator[torch.Tensor]:
        for i in range(n):
            log.append(i)
            yield x + i

    def f(x: torch.Tensor) -> torch.Tensor:
        out = x
        for t in counting(x, 3):
            out = out * t
        return out

    cf = w.compile(f)
    outs = [cf(torch.ones(2) * k) for k in range(4)]
    return outs, log


@case("generators")
def generator_send(w: D.World) -> object:
    def acc() -> Iterator[float]:
        total = 0.0
        while True:
            v = yield total
            total += v

    def f(x: torch.Tensor, vals: list[float]) -> torch.Tensor:
        g = acc()
        next(g)
        s = 0.0
        for v in vals:
            s = g.send(v)
        return x * s

    cf = w.compile(f)
    return [cf(torch.ones(2), v) for v in ([1.0, 2.0], [1.0, 2.0], [3.0], [1.0, 2.0])]


@case("generators")
def enumerate_over_generator(w: D.World) -> object:
    def f(x: torch.Tensor) -> list[torch.Tensor]:
        return [t * i for i, t in enumerate(_gen(x, 3), start=1)]

    cf = w.compile(f)
    return [cf(torch.ones(2) * k) for k in range(3)]


test_eager, test_inductor = D.tests(__name__)
