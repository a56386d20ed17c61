"""Patterns from ParityBench programs that broke the graph: small programs written anew.

- ``next()`` of an iterator over a list built during the run, then ``enumerate``/``zip`` over
  what is left of it (a "mean of an iterable" helper); ``zip(it, it)`` pairs one iterator's
  values.
- ``==`` of objects whose classes keep identity equality (a config holding a loss module
  compared with a string), and ``is`` between objects: guarded so that another aliasing misses.
- A module built inside ``forward`` that keeps a tensor made deterministically from its
  arguments (``Regression(n)(x)``).
- A module whose instance holds its own ``forward`` (a weight-drop wrapper).
- A tensor operation returning a tuple that mixes tensors and None
  (``F.multi_head_attention_forward(..., need_weights=False)``).
"""

from __future__ import annotations

from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn.functional as F

import magpy


def _reasons(fn: Any, *args: Any) -> tuple[int, list[str]]:
    ex = magpy.explain(fn)(*args)
    return ex.graph_count, [r.reason for r in ex.break_reasons]


# ---------------------------------------------------------------------- iterators
def mean(values: Any, empty: Any = 0) -> Any:
    it = iter(values)
    try:
        n = 1
        acc = next(it)
    except StopIteration:
        return empty
    for n, v in enumerate(it, 2):  # noqa: B007  (n is read after the loop)
        acc = acc + v
    if n == 1:
        return acc
    return acc / n


def mean_of_scaled(x: torch.Tensor, k: int) -> Any:
    return mean([x * i for i in range(k)])


def mean_of_nothing(x: torch.Tensor) -> Any:
    return x + mean([])


def pairs(x: torch.Tensor) -> Any:
    it = iter([x, x + 1, x + 2, x + 3, x + 4])
    out = [a * b + i for i, (a, b) in enumerate(zip(it, it, strict=False))]
    return out, next(it, None), next(it, x)


def advanced_behind_enumerate(x: torch.Tensor) -> Any:
    it = iter([x, x + 1, x + 2, x + 3])
    e = enumerate(it)
    first = next(e)[1]
    next(it)  # the enumerate's next value is now x + 3, not x + 1
    return first, [v for _, v in e]


@pytest.mark.parametrize("k", [1, 3])
def test_next_then_enumerate_over_the_rest_of_a_list(k: int) -> None:
    """``next(it)`` takes the first value of a list built during the run and ``enumerate(it)``
    the rest: one graph, served by the cache."""
    compiled = magpy.compile(mean_of_scaled, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        H.assert_same(compiled(x, k), mean_of_scaled(x, k))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert _reasons(mean_of_scaled, torch.randn(4), k) == (1, [])


def test_next_of_an_exhausted_iterator_raises_stop_iteration() -> None:
    """``next()`` at the end raises StopIteration, which the program catches."""
    _one_record_like_eager(mean_of_nothing)


def test_zip_of_one_iterator_twice_pairs_its_values() -> None:
    """``zip(it, it)`` takes two values of ``it`` per pair and one more at the end; the
    iterator stands where eager leaves it (``next(it, default)`` afterwards)."""
    _one_record_like_eager(pairs)


def _one_record_like_eager(fn: Any) -> None:
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        H.assert_same(compiled(x), fn(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st


def test_an_iterator_advanced_behind_an_enumerate_breaks() -> None:
    """An enumerate whose iterator was advanced elsewhere is not followed (a break, never a
    stale value)."""
    _, reasons = _reasons(advanced_behind_enumerate, torch.randn(4))
    assert "using a zip/enumerate whose iterator was advanced elsewhere" in reasons
    compiled = magpy.compile(advanced_behind_enumerate, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        H.assert_same(compiled(x), advanced_behind_enumerate(x))
    assert magpy.stats(compiled).fallbacks == 0


# ---------------------------------------------------------------------- identity
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
    assert _reasons(loss, torch.randn(4, 4), torch.randn(4, 4)) == (1, [])
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
    assert _reasons(fn, torch.randn(3), m1, m2) == (1, [])


def test_class_identity_is_guarded_by_identity() -> None:
    """``cls is A`` pins ``cls``: another class misses instead of reusing the record."""
    compiled = magpy.compile(class_is, backend="eager")
    for cls in (A, A, B, B, A):
        x = torch.randn(3)
        H.assert_same(compiled(x, cls), class_is(x, cls))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 3, 0), st


# ---------------------------------------------------------------------- modules built in forward
SHARED = torch.arange(4.0).view(1, 4, 1, 1)


class Regression(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.disp = torch.Tensor([list(range(n))]).view(1, n, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x * self.disp.data, 1, keepdim=True)


class SharedTable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.disp = SHARED  # the module's tensor is a global one (changed between calls)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.disp


class Noise(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.noise = torch.randn(1, n, 1, 1)  # a fresh random tensor on every construction

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.noise


def regress(x: torch.Tensor, n: int) -> torch.Tensor:
    return Regression(n)(torch.softmax(x, dim=1))


def shared(x: torch.Tensor) -> torch.Tensor:
    return SharedTable()(x)


def noisy(x: torch.Tensor) -> torch.Tensor:
    return Noise(4)(x)


def test_a_module_built_in_forward_with_a_deterministic_tensor() -> None:
    """A module built inside forward keeps a tensor made from its (guarded) arguments: the
    tensor is rebuilt by the graph, one graph serves every call."""
    compiled = magpy.compile(regress, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4, 3, 3)
        H.assert_same(compiled(x, 4), regress(x, 4))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert _reasons(regress, torch.randn(2, 4, 3, 3), 4) == (1, [])
    x = torch.randn(2, 3, 3, 3)  # another n: another record
    H.assert_same(compiled(x, 3), regress(x, 3))
    assert magpy.stats(compiled).records == 2


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (shared, "SharedTable.disp: a tensor a module built inside forward keeps"),
        (noisy, "Noise draws random numbers when built inside forward"),
    ],
)
def test_a_module_built_in_forward_with_other_tensors_breaks(fn: Any, reason: str) -> None:
    """A tensor the module shares with outside state, or drawn at random, is not a constant of
    the record: a break, and every call equals eager."""
    _, reasons = _reasons(fn, torch.randn(2, 4, 3, 3))
    assert any(r.startswith(reason) for r in reasons), reasons
    compiled = magpy.compile(fn, backend="eager")
    for i in range(3):
        x = torch.randn(2, 4, 3, 3)
        torch.manual_seed(i)
        got = compiled(x)
        torch.manual_seed(i)
        H.assert_same(got, fn(x))
        SHARED.add_(1)
    assert magpy.stats(compiled).fallbacks == 0


# ---------------------------------------------------------------------- forward on the instance
def weight_drop(module: torch.nn.Module, p: float) -> None:
    raw = module.weight
    del module._parameters["weight"]
    module.register_parameter("weight_raw", torch.nn.Parameter(raw.detach().clone()))
    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        w = F.dropout(module.weight_raw, p=p, training=module.training)
        module.weight = w
        return original(*args, **kwargs)

    module.forward = forward


class Wrapper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.other = torch.nn.Linear(4, 4)
        self.forward = self.other.forward  # type: ignore[method-assign]  (a bound method)


def _dropped_linear() -> torch.nn.Linear:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    weight_drop(lin, 0.5)
    return lin.eval()


def test_a_module_whose_instance_holds_its_forward() -> None:
    """``module.forward = f`` on the instance: ``module(x)`` calls ``f(x)``; the function is
    guarded by identity and the attribute it writes is written back on a hit."""
    got_mod, want_mod = _dropped_linear(), _dropped_linear()
    compiled = magpy.compile(got_mod, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4)
        H.assert_same(compiled(x), want_mod(x))
        H.assert_same(got_mod.weight, want_mod.weight)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert _reasons(_dropped_linear(), torch.randn(2, 4)) == (1, [])
    got_mod.forward = lambda x: x * 3  # another forward: the guard misses
    want_mod.forward = lambda x: x * 3
    x = torch.randn(2, 4)
    H.assert_same(compiled(x), want_mod(x))
    assert magpy.stats(compiled).records == 2


def test_a_module_whose_forward_is_another_modules_bound_method() -> None:
    """``self.forward = self.other.forward``: calling the module runs ``other``'s forward."""
    mod = Wrapper().eval()
    compiled = magpy.compile(mod, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4)
        H.assert_same(compiled(x), mod(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st


# ---------------------------------------------------------------------- tuples with None
class Pool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = F.multi_head_attention_forward(
            query=x,
            key=x,
            value=x,
            embed_dim_to_check=8,
            num_heads=2,
            q_proj_weight=self.q.weight,
            k_proj_weight=self.k.weight,
            v_proj_weight=self.v.weight,
            in_proj_weight=None,
            in_proj_bias=torch.cat([self.q.bias, self.k.bias, self.v.bias]),
            bias_k=None,
            bias_v=None,
            add_zero_attn=False,
            dropout_p=0.0,
            out_proj_weight=self.o.weight,
            out_proj_bias=self.o.bias,
            use_separate_proj_weight=True,
            training=self.training,
            need_weights=False,
        )
        return out + 1


def test_an_operation_returning_a_tensor_and_none() -> None:
    """``(out, None)`` from one operation: the tensor is a graph output, None a constant."""
    mod = Pool().eval()
    compiled = magpy.compile(mod, backend="eager")
    for _ in range(3):
        x = torch.randn(5, 2, 8)
        H.assert_same(compiled(x), mod(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
