"""Draws from random generators the mock makes again (``libs.stdlib.draws``): ``random.*``,
``np.random.*`` and ``torch.manual_seed`` are one graph, replayed on every hit with the
generators advancing as in eager; a call that draws another value misses (a branch on a drawn
value is never replayed down the wrong side)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

import magpy


def _seed(s: int = 0) -> None:
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def _states() -> tuple[object, ...]:
    return random.random(), float(np.random.rand()), torch.rand(1).item()


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _seeded_calls(fn, x, n: int = 4):  # type: ignore[no-untyped-def]
    """``magpy.compile(fn)`` and ``fn`` over ``n`` calls, each after the same seeding: the
    results and the generators' states after each call are eager's."""
    cf = magpy.compile(fn, backend="eager")
    for _ in range(n):
        _seed()
        got = (cf(x), _states())
        _seed()
        want = (fn(x), _states())
        assert _same(got, want)
    return magpy.stats(cf)


def _one_graph(fn, x) -> None:  # type: ignore[no-untyped-def]
    ex = magpy.explain(fn)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons


def test_python_randint_sizes_a_tensor() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        k = random.randint(1, 4)
        return x.repeat(1, k) * random.choice([2, 3])

    x = torch.randn(2, 3)
    _one_graph(f, x)
    st = _seeded_calls(f, x)
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 3)


def test_numpy_global_draws_and_arrays() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = np.random.randint(0, 10)
        rnd = 2 ** np.random.randint(0, 3, size=[1, x.size(1)])
        return torch.rand((n, 4)), x * torch.from_numpy(rnd).float()

    x = torch.randn(2, 3)
    _one_graph(f, x)
    st = _seeded_calls(f, x)
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 3)


def test_a_drawn_array_met_by_a_numpy_function_stays_a_break() -> None:
    """numpy's float array drawn, met by a numpy function that is no ufunc or operator
    (``np.linalg.norm``: nothing the mock computes again), is a break there, and every call is
    eager's."""

    def f(x: torch.Tensor) -> torch.Tensor:
        rnd = np.random.normal(size=[2])
        return x * random.random() + torch.from_numpy(rnd / np.linalg.norm(rnd)).float()

    x = torch.ones(2)
    ex = magpy.explain(f)(x)
    assert [r.reason for r in ex.break_reasons] == ["numpy.norm over a ndarray of tensor values"]
    _seeded_calls(f, x)


def float_draws(x: torch.Tensor) -> torch.Tensor:
    # (a random scale, a jitter, an augmentation strength: Python floats into tensor arithmetic)
    scale = random.uniform(0.5, 1.5)
    return x * scale + random.random() - np.random.rand() * (x.sum() + random.gauss(0.0, 1.0))


def test_a_python_float_draw_is_a_graph_input() -> None:
    """A Python float drawn that only feeds tensor arithmetic is read from a 0-d double input
    the mock sets on every call to what it draws (the generator advancing as in eager): one
    record, no break, hits from the second call on, unseeded or seeded."""
    _one_graph(float_draws, torch.randn(3))
    st = _unseeded_calls(float_draws, lambda i: torch.randn(3))
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 4), st
    st = _seeded_calls(float_draws, torch.randn(3))
    assert (st.records, st.breaks, st.hits) == (1, 0, 3), st


class DropPath(torch.nn.Module):
    """Stochastic depth as model code writes it: a branch on a float drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if random.random() < 0.5:
            return x
        return x + self.block(x) / 0.5


def test_a_branch_on_a_float_draw_assumes_its_outcome() -> None:
    """The branch's outcome is assumed and checked after the graph: a call that draws the
    other side misses, the generators are put back and the other side's record (or the
    program) runs, so every call is eager's and the generator ends where eager's does."""
    torch.manual_seed(0)
    model = DropPath()
    st = _unseeded_calls(model, lambda i: torch.randn(2, 3), n=16)
    assert st.records == 2 and st.breaks == 0 and st.hits >= 10, st
    assert st.assumption_misses >= 1, st


class Accumulate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.acc.add_(x)
        if random.random() < 0.5:
            return x + self.acc
        return x - self.acc


def test_a_branch_on_a_float_draw_after_an_update_in_place_is_eager() -> None:
    """The graph updates a buffer before the drawn branch: a call that draws the other side
    puts the buffer back with the generators, so the buffer ends as eager's."""
    eager, target = Accumulate(), Accumulate()
    compiled = magpy.compile(target, backend="eager")
    random.seed(0)
    want = [eager(torch.ones(3) * i) for i in range(12)]
    want_next = random.random()
    random.seed(0)
    got = [compiled(torch.ones(3) * i) for i in range(12)]
    assert all(map(torch.equal, got, want)) and random.random() == want_next
    assert torch.equal(target.acc, eager.acc)
    assert magpy.stats(compiled).hits >= 6


def test_a_float_draw_kept_as_a_value_is_eager() -> None:
    """A float drawn that leaves the graph (stored on an object) assumes its exact value: a
    call that draws another misses, and every call leaves what eager leaves."""

    class Last:
        value = 0.0

    def f(x: torch.Tensor) -> torch.Tensor:
        Last.value = random.random()
        return x + 1

    cf = magpy.compile(f, backend="eager")
    for i in range(6):
        _seed(i)
        got = (cf(torch.ones(2)), Last.value, _states())
        _seed(i)
        want = (f(torch.ones(2)), Last.value, _states())
        assert _same(got, want), i


@pytest.mark.slow
def test_a_python_float_draw_through_inductor() -> None:
    cf = magpy.compile(float_draws, backend="inductor")
    _seed(2)
    got = [(cf(torch.ones(3) * i), _states()) for i in range(4)]
    _seed(2)
    want = [(float_draws(torch.ones(3) * i), _states()) for i in range(4)]
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g[0], w[0], rtol=1e-5, atol=1e-6) and g[1] == w[1]
    assert magpy.stats(cf).records == 1 and magpy.stats(cf).hits == 3


def _unseeded_calls(fn, make_x, n: int = 5):  # type: ignore[no-untyped-def]
    """``magpy.compile(fn)`` and ``fn`` side by side over ``n`` calls on fresh inputs, seeded
    once only (each call draws new values): results and generator states equal eager's."""
    cf = magpy.compile(fn, backend="eager")
    _seed(1)
    eager = [(fn(x), _states()) for x in (make_x(i) for i in range(n))]
    _seed(1)
    got = [(cf(x), _states()) for x in (make_x(i) for i in range(n))]
    for i, (g, w) in enumerate(zip(got, eager, strict=True)):
        assert _same(g, w), f"call {i}"
    return magpy.stats(cf)


def gdrop_prop(x: torch.Tensor) -> torch.Tensor:
    # (progressive_growing_of_gans' GDropLayer, mode "prop": numpy noise scaled into the graph)
    shape = [s if axis in (0, 1) else 1 for axis, s in enumerate(x.size())]
    rnd = np.random.normal(size=shape) * (0.2 * x.size(1) ** 0.5) + 1
    return x * torch.from_numpy(rnd).type(x.data.type())


def uniform_and_generator(x: torch.Tensor) -> torch.Tensor:
    rs = np.random.uniform(-1.0, 1.0, size=(x.size(0), 1, 1, 1))
    return x + torch.from_numpy(rs) * 2 - torch.from_numpy(np.random.rand(1, x.size(1), 1, 1))


@pytest.mark.parametrize("fn", [gdrop_prop, uniform_and_generator])
def test_a_continuous_numpy_draw_is_a_graph_input(fn) -> None:  # type: ignore[no-untyped-def]
    """A float array drawn that only feeds tensor arithmetic enters the graph as an input: the
    mock draws it again on every call (the generator advancing as in eager) and the graph
    computes with this call's values. One record, no break, hits from the second call on."""
    _one_graph(fn, torch.randn(2, 3, 4, 4))
    st = _unseeded_calls(fn, lambda i: torch.randn(2, 3, 4, 4))
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 4), st
    st = _seeded_calls(fn, torch.randn(2, 3, 4, 4))
    assert (st.records, st.breaks, st.hits) == (1, 0, 3), st


def numpy_over_draws(x: torch.Tensor) -> torch.Tensor:
    # (progressive_growing_of_gans' GDropLayer, mode "mul", and a log-uniform scale)
    rnd = (1 + 0.2) ** np.random.normal(size=[x.size(0), x.size(1)])
    scale = np.exp(np.random.uniform(-1.0, 1.0, size=[x.size(1)]))
    return x * torch.from_numpy(rnd).float() + torch.from_numpy(scale)


def test_numpy_over_a_drawn_array_is_computed_by_numpy() -> None:
    """numpy arithmetic torch need not compute bit for bit as numpy (``**``, ``np.exp``) over
    arrays drawn: the mock computes it with numpy after its draws on every call and feeds the
    result to the graph. One record, no break, eager's bits and generator state."""
    x = torch.randn(2, 3)
    _one_graph(numpy_over_draws, x)
    st = _unseeded_calls(numpy_over_draws, lambda i: torch.randn(2, 3))
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 4), st


def _overflowing_seed() -> int:
    """A seed whose first draw below gives finite ``exp`` values and a later one does not."""
    for seed in range(1000):
        rs = np.random.RandomState(seed)
        draws = [rs.uniform(0.0, 1000.0, size=[4]) for _ in range(6)]
        if draws[0].max() < 700 and any(d.max() > 710 for d in draws[1:]):
            return seed
    raise AssertionError("no seed found")


def test_numpy_over_draws_that_overflows_misses_and_warns_as_eager() -> None:
    """A later call whose recomputed result is not finite misses: the generators are put back
    and the program runs, numpy warning (or raising) there as in eager."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.from_numpy(np.exp(np.random.uniform(0.0, 1000.0, size=[4])))

    seed = _overflowing_seed()
    cf = magpy.compile(f, backend="eager")
    runs = []
    for fn in (cf, f):
        np.random.seed(seed)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = [fn(torch.zeros(4)) for _ in range(6)]
        runs.append((out, np.random.rand(), [str(w.message) for w in seen]))
    (got, got_next, got_warned), (want, want_next, want_warned) = runs
    assert all(map(torch.equal, got, want)) and got_next == want_next
    assert got_warned == want_warned and want_warned
    assert magpy.stats(cf).hits >= 1


def test_a_continuous_draw_met_by_python_stays_a_break() -> None:
    """The drawn array's values reach Python (a branch on their sum): a break there, and every
    call is eager's."""

    def f(x: torch.Tensor) -> torch.Tensor:
        rnd = np.random.normal(size=[3])
        if rnd.sum() > 0:
            return x * torch.from_numpy(rnd)
        return x - 1

    ex = magpy.explain(f)(torch.ones(3))
    assert ex.graph_break_count >= 1
    st = _unseeded_calls(f, lambda i: torch.randn(3), n=6)
    assert st.fallbacks == 0, st


def test_numpy_choice_indexes_a_list() -> None:
    idx_sets = [(0, 1), (1, 2), (0, 2), (2, 3)]

    def f(x: torch.Tensor) -> torch.Tensor:
        out = x[:, 0]
        for i in np.random.choice(len(idx_sets), 2, replace=False):
            out = out + x[:, list(idx_sets[i])].sum(1)
        return out

    x = torch.randn(3, 4)
    st = _seeded_calls(f, x)
    assert (st.records, st.breaks, st.hits) == (1, 0, 3)


def _reseeds_then_draws() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(7)
        return x + torch.randn(x.shape)

    x = torch.randn(3)
    _one_graph(f, x)
    st = _seeded_calls(f, x)
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 3)


def test_manual_seed_then_randn() -> None:
    _reseeds_then_draws()


def test_manual_seed_after_a_random_op_is_a_break() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + torch.rand(x.shape)
        torch.manual_seed(7)
        return y + torch.randn(x.shape)

    x = torch.randn(3)
    ex = magpy.explain(f)(x)
    assert any("manual_seed" in r.reason for r in ex.break_reasons)
    _seeded_calls(f, x)


def test_branch_on_a_draw_misses_never_replays() -> None:
    """Unseeded: the value drawn decides the branch; every call gives eager's result and leaves
    the generator where eager leaves it (a different draw misses, it is never replayed)."""

    def g(x: torch.Tensor) -> torch.Tensor:
        if random.randint(0, 1):
            return x + 1
        return x - 1

    x = torch.zeros(2)
    cg = magpy.compile(g, backend="eager")
    random.seed(3)
    got = [cg(x) for _ in range(12)]
    after = random.random()
    random.seed(3)
    want = [g(x) for _ in range(12)]
    assert all(map(torch.equal, got, want)) and random.random() == after
    st = magpy.stats(cg)
    assert st.assumption_misses >= 1  # a draw that differs misses


def test_branch_on_a_draw_hits_when_seeded() -> None:
    def g(x: torch.Tensor) -> torch.Tensor:
        if random.randint(0, 1):
            return x + 1
        return x - 1

    st = _seeded_calls(g, torch.zeros(2))
    assert (st.records, st.breaks, st.hits) == (1, 0, 3)


def test_generator_from_outside() -> None:
    rng = np.random.RandomState(5)
    state = rng.get_state()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * int(rng.randint(1, 9))

    cf = magpy.compile(f, backend="eager")
    x = torch.ones(2)
    got = []
    for _ in range(4):
        rng.set_state(state)
        got.append(cf(x))
    rng.set_state(state)
    want = f(x)
    assert all(torch.equal(g, want) for g in got)
    st = magpy.stats(cf)
    assert (st.records, st.breaks, st.hits) == (1, 0, 3)


def test_shuffle_and_unseeded_seed_stay_breaks() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        xs = [1, 2, 3]
        random.shuffle(xs)
        return x * xs[0]

    ex = magpy.explain(f)(torch.ones(2))
    assert ex.graph_break_count >= 1


@pytest.mark.parametrize("backend", ["inductor"])
def test_manual_seed_inductor(backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(11)
        return x + torch.rand(x.shape)

    cf = magpy.compile(f, backend=backend)
    x = torch.zeros(4)
    got = [cf(x) for _ in range(3)]
    want = f(x)
    assert all(torch.equal(g, want) for g in got)


def test_seeding_inside_the_call_is_replayed_in_order() -> None:
    """``np.random.seed(0)`` then a draw, unseeded outside: every call draws the same value, so
    every later call hits, and the generators end where eager leaves them."""

    def f(x: torch.Tensor) -> torch.Tensor:
        np.random.seed(0)
        random.seed(1)
        return x.repeat(np.random.randint(1, 5), random.randint(1, 3))

    x = torch.ones(2, 2)
    _one_graph(f, x)
    cf = magpy.compile(f, backend="eager")
    for _ in range(4):
        torch.manual_seed(5)  # (torch's generator is not reseeded by f; _states draws from it)
        got = (cf(x), _states())
        torch.manual_seed(5)
        want = (f(x), _states())
        assert _same(got, want)
    st = magpy.stats(cf)
    assert (st.records, st.breaks, st.hits) == (1, 0, 3)


class Sampler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rng = random.Random(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[: self.rng.randint(1, 3)]


def test_a_python_generator_from_outside_advances_as_in_eager() -> None:
    m, ref = Sampler(), Sampler()
    cm = magpy.compile(m, backend="eager")
    x = torch.arange(4.0)
    for _ in range(12):
        assert torch.equal(cm(x), ref(x))
    assert m.rng.getstate() == ref.rng.getstate()
    other = random.Random(0)
    m.rng = other  # another generator object: the guard misses, never a stale replay
    ref.rng = random.Random(0)
    assert torch.equal(cm(x), ref(x)) and other.getstate() == ref.rng.getstate()


def test_manual_seed_after_torchdynamo_is_imported() -> None:
    """Importing TorchDynamo wraps ``torch.manual_seed`` (a wrapper that turns TorchDynamo off
    around it); the wrapper is the same reseeding."""
    import torch._dynamo  # (the import replaces torch.manual_seed)

    assert getattr(torch.manual_seed, "__wrapped__", None) is not None
    _reseeds_then_draws()
