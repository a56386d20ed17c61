"""Iterators and the builtins that drive them: ``iter``/``next``, ``enumerate``, ``zip``, and
generators consumed by native code.

- ``next()`` of an iterator over a list built during the run, then ``enumerate`` over what is
  left of it (a "mean of an iterable" helper); ``next()`` at the end raises StopIteration, which
  the program catches. An enumerate whose iterator was advanced elsewhere is a break.
- ``zip`` over a tensor and other iterables (the rows are the outputs of one ``unbind(0)`` in
  the graph); ``zip(it, it)`` pairs one iterator's values; ``zip(strict=True)`` that would raise
  is a break; ``zip(*map(f, xs))`` regroups results (mmdetection's ``multi_apply``).
- Generators consumed by native code: ``dict(gen)``, ``OrderedDict(gen)``, ``(*gen,)``,
  ``list.extend(gen)`` and ``zip(*gen)`` resume the generator's frame, which is followed.

``itertools`` and ``map`` are in ``test_itertools.py``, ``yield from`` in ``test_yield_from.py``.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


def _one_record_like_eager(fn: Any) -> None:
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        H.assert_same(compiled(x), fn(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st


# ---------------------------------------------------------------------- iter, next and enumerate
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
    assert H.graphs(mean_of_scaled, torch.randn(4), k) == (1, [])


def test_next_of_an_exhausted_iterator_raises_stop_iteration() -> None:
    """``next()`` at the end raises StopIteration, which the program catches."""
    _one_record_like_eager(mean_of_nothing)


def test_an_iterator_advanced_behind_an_enumerate_breaks() -> None:
    """An enumerate whose iterator was advanced elsewhere is not followed (a break, never a
    stale value)."""
    _, reasons = H.graphs(advanced_behind_enumerate, torch.randn(4))
    assert "using a zip/enumerate whose iterator was advanced elsewhere" in reasons
    compiled = magpy.compile(advanced_behind_enumerate, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        H.assert_same(compiled(x), advanced_behind_enumerate(x))
    assert magpy.stats(compiled).fallbacks == 0


# ---------------------------------------------------------------------- zip
def pairs(x: torch.Tensor) -> Any:
    it = iter([x, x + 1, x + 2, x + 3, x + 4])
    out = [a * b + i for i, (a, b) in enumerate(zip(it, it, strict=False))]
    return out, next(it, None), next(it, x)


def test_zip_of_one_iterator_twice_pairs_its_values() -> None:
    """``zip(it, it)`` takes two values of ``it`` per pair and one more at the end; the
    iterator stands where eager leaves it (``next(it, default)`` afterwards)."""
    _one_record_like_eager(pairs)


class Mix(torch.nn.Module):
    """A weighted sum of the rows of a tensor, the weights a softmax split into pieces."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.scalars = torch.nn.Parameter(torch.randn(n))
        self.gamma = torch.nn.Parameter(torch.ones(1))

    def forward(self, tensors: torch.Tensor) -> torch.Tensor:
        weights = torch.split(torch.softmax(self.scalars, dim=0), 1)
        pieces = []
        for weight, tensor in zip(weights, tensors, strict=False):
            pieces.append(weight * tensor)
        return self.gamma * sum(pieces)


def zip_two_tensors_and_a_list(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    scales = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # longer than the tensors: zip stops at the shortest
    return [x * s - y for x, y, s in zip(a, b, scales, strict=False)]


def test_zip_over_a_tensor_takes_its_rows(check: Any) -> None:
    """``zip(weights, t)`` pairs ``t``'s rows (an unbind in the graph) with the other values."""
    check(Mix(4), H.randn_inputs((4, 2, 3)), calls=4)
    assert H.graphs(Mix(4), torch.randn(4, 2, 3)) == (1, [])
    check(zip_two_tensors_and_a_list, H.randn_inputs((3, 2), (4, 2)), calls=4)


def zip_strict(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    return [x + y for x, y in zip(a, b, strict=True)]


def test_zip_strict_over_tensors_of_unequal_lengths_breaks() -> None:
    """``zip(strict=True)`` that would raise is a break, and the program's ValueError comes
    through."""
    a, b = torch.randn(3), torch.randn(4)
    _, reasons = H.graphs(zip_strict, torch.randn(3), torch.randn(3))
    assert reasons == []
    compiled = magpy.compile(zip_strict, backend="eager")
    with pytest.raises(ValueError, match="zip"):
        compiled(a, b)


def multi_apply(func: Any, *args: Any, **kwargs: Any) -> tuple[list[Any], ...]:
    """mmdetection's helper: ``func`` over each level, results regrouped per output."""
    pfunc = functools.partial(func, **kwargs) if kwargs else func
    map_results = map(pfunc, *args)
    return tuple(map(list, zip(*map_results)))  # noqa: B905  (as the library writes it)


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cls = torch.nn.Conv2d(4, 2, 1)
        self.reg = torch.nn.Conv2d(4, 3, 1)

    def forward_single(self, x: torch.Tensor, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
        return self.cls(x), self.reg(x) * scale

    def forward(self, feats: Any) -> Any:
        if isinstance(feats, torch.Tensor):
            return multi_apply(self.forward_single, feats)  # over the rows of a tensor
        return multi_apply(self.forward_single, feats, scale=0.5)


def test_multi_apply_over_levels(check: Any) -> None:
    """``zip(*map(f, xs))`` with a bound method ``f`` (followed, not run inside the graph):
    over a tensor's rows and over a tuple of feature maps."""
    check(Head(), H.randn_inputs((3, 4, 5, 5)), calls=3)
    levels = lambda i: (((torch.randn(2, 4, 8, 8), torch.randn(2, 4, 4, 4)),), {})  # noqa: E731
    check(Head(), levels, calls=3)
    ex = magpy.explain(Head())((torch.randn(2, 4, 8, 8), torch.randn(2, 4, 4, 4)))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    assert "forward_single" not in str(ex.ops_per_graph), str(ex)


# --------------------------------------------------------------- generators consumed by native code
class MetaLinear(torch.nn.Linear):
    """pytorch-meta's MetaModule: parameters passed in, or taken from the module through
    ``OrderedDict(self.named_parameters())`` (a generator consumed by native code)."""

    def forward(self, x: torch.Tensor, params: Any = None) -> Any:
        if params is None:
            params = dict(self.named_parameters())
        ordered = collections.OrderedDict(self.named_parameters())
        every = (*self.parameters(),)
        listed = [0]
        listed.extend(p.numel() for p in self.parameters())
        out = torch.nn.functional.linear(x, params["weight"], params.get("bias"))
        # (REALM's span helper: a generator as the star-arguments of a native call)
        starts, ends = zip(*(self._span(x, w) for w in range(1, 3)))  # noqa: B905
        return out + ordered["bias"] + every[1], listed, torch.cat(starts), torch.cat(ends)

    @staticmethod
    def _span(x: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.arange(x.shape[1] - width + 1), torch.arange(width - 1, x.shape[1])


def test_generators_consumed_by_native_code(check: Any) -> None:
    """``dict(gen)``, ``OrderedDict(gen)``, ``(*gen,)``, ``list.extend(gen)`` and
    ``zip(*gen)``: the generator's frame is followed as the native consumer resumes it."""
    check(MetaLinear(3, 2), lambda i: ((torch.randn(4, 3),), {}), calls=3)
    assert H.graphs(MetaLinear(3, 2), torch.randn(4, 3)) == (1, [])


# ---------------------------------------------------------------------- dict subclasses
class _Output(collections.OrderedDict):  # type: ignore[type-arg]
    """Like transformers' ``ModelOutput``: its own ``__getitem__`` (which may disagree with
    what it stores), the dict's own keys/items/iteration."""

    def __getitem__(self, k: Any) -> Any:
        return dict(self.items())[k] * 1.0 if isinstance(k, str) else tuple(self.values())[k]


OUT = _Output(a=torch.ones(3), b=torch.full((3,), 2.0))


def sum_of_output(x: torch.Tensor) -> torch.Tensor:
    for k, v in OUT.items():
        x = x + v * (2 if k == "a" else 3)
    return x + sum(OUT[k] for k in OUT.keys())  # noqa: SIM118  (the view, as ModelOutput does)


def test_a_dict_subclass_from_outside_is_read_as_stored_and_guarded() -> None:
    """Its entries are read where they are stored (``dict.__getitem__``: the guard runs none of
    its Python); a changed entry or key set misses."""
    compiled = magpy.compile(sum_of_output, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), sum_of_output(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st
    saved = dict(OUT)
    try:
        OUT["a"] = torch.full((3,), 5.0)  # a new tensor object: the record's input path
        x = torch.randn(3)
        H.assert_same(compiled(x), sum_of_output(x))
        OUT["c"] = torch.zeros(3)
        x = torch.randn(3)
        H.assert_same(compiled(x), sum_of_output(x))
    finally:
        OUT.clear()
        OUT.update(saved)
    assert magpy.stats(compiled).records == 2
