"""ParityBench patterns that broke the graph (dev files 457 on), as small programs written anew.

- ``try: _, b, n, h = x.size()`` / ``except: x = x.unsqueeze(0)``: the unpacking raises
  ValueError (the length is guarded) and the program's own handler runs, in the graph.
- ``shape = list(x.size()); target = shape.copy(); target[1] = 1``: ``list.copy`` keeps the
  items' shadows, so the copy can be changed.
- ``x = [None] * 2c; x[::2] = a; x[1::2] = b``: extended-slice assignment on a list.
- ``torch.equal(q, k)``: a Python bool read from tensor values, like ``.item()``.
"""

from __future__ import annotations

import collections
import functools
import warnings
from typing import Any

import _integration_helpers as H
import numpy as np
import torch

import magpy


def _graphs(fn: Any, *args: Any) -> tuple[int, list[str]]:
    ex = magpy.explain(fn)(*args)
    return ex.graph_count, [r.reason for r in ex.break_reasons]


def add_batch_if_missing(x: torch.Tensor, h: tuple[int, ...]) -> Any:
    try:
        _, b, n, k = x.size()
    except:  # noqa: E722  (as the model does)
        x = x.unsqueeze(0)
        _, b, n, k = x.size()
    try:
        first, second = h
    except ValueError as exc:
        first, second = h[0], str(exc)
    return x.sum(1) * b + n * k, first, second


def test_an_unpacking_error_handled_by_the_program(check: Any) -> None:
    """Both outcomes are one graph each; the handler's ``except ValueError as exc`` sees
    CPython's own message."""
    for shape, h in [((2, 3, 4), (1, 2, 3)), ((1, 2, 3, 4), (5, 6))]:
        check(add_batch_if_missing, lambda i, s=shape, h=h: ((torch.randn(*s), h), {}), calls=3)
        assert _graphs(add_batch_if_missing, torch.randn(*shape), h) == (1, [])
    out = magpy.compile(add_batch_if_missing, backend="eager")(torch.randn(2, 3, 4), (1, 2, 3))
    assert out[2] == "too many values to unpack (expected 2)"


def reshape_and_interleave(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Any:
    shape = list(x.size())
    target = shape.copy()
    target[1] = 1
    parts: list[Any] = [None] * 4
    parts[::2] = torch.chunk(a, 2, dim=1)
    parts[1::2] = torch.chunk(b, 2, dim=1)
    return x.mean(1, keepdim=True).expand(*target), torch.cat(parts, 1), shape


def test_list_copy_and_slice_assignment(check: Any) -> None:
    check(reshape_and_interleave, H.randn_inputs((2, 3, 4), (2, 4), (2, 4)), calls=3)
    args = (torch.randn(2, 3, 4), torch.randn(2, 4), torch.randn(2, 4))
    assert _graphs(reshape_and_interleave, *args) == (1, [])


def wrong_length_slice(a: torch.Tensor) -> Any:
    parts: list[Any] = [None] * 4
    parts[::2] = torch.chunk(a, 3, dim=0)  # ValueError: 3 items into 2 places
    return parts


def test_a_failing_slice_assignment_raises_the_users_error() -> None:
    compiled = magpy.compile(wrong_length_slice, backend="eager")
    for _ in range(2):
        try:
            compiled(torch.randn(3))
        except ValueError as exc:
            assert "extended slice of size 2" in str(exc)
        else:
            raise AssertionError("no ValueError")


def same_or_sum(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if torch.equal(q, k) and torch.equal(k, v):
        return q * 2
    return q + k + v


def test_torch_equal_is_a_value_read() -> None:
    """Each outcome of ``torch.equal`` is assumed and checked; tensors of other shapes are
    unequal without reading them."""
    compiled = magpy.compile(same_or_sum, backend="eager")
    x = torch.randn(3)
    calls = [(x, x.clone(), x.clone()), (x, x.clone(), x.clone()), (x, x.clone() + 1, x.clone())]
    calls += [(x, x.clone(), x.clone()), (x, x.clone() + 1, x.clone())]
    for args in calls:
        H.assert_same(compiled(*args), same_or_sum(*args))
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.breaks) == (2, 3, 0), stats
    assert _graphs(same_or_sum, x, x.clone(), x.clone()) == (1, [])


def pick_steps(x: torch.Tensor, keep: int, batch_first: bool) -> torch.Tensor:
    if batch_first:
        steps = np.random.choice(x.shape[1], keep, replace=False)  # a break, keyword args
    else:
        steps = np.random.choice(x.shape[0], keep, replace=False)
    steps.sort()
    return x[:, steps] if batch_first else x[steps]


def test_a_break_at_a_call_with_keywords_resumes_after_it() -> None:
    """Regression: the place to resume after the break was the CALL right after KW_NAMES,
    which cannot be a site (its keyword names are not on the stack): instrumenting it failed
    ("negative stacksize") and the function ran eagerly."""
    compiled = magpy.compile(pick_steps, backend="eager")
    for i in range(4):
        x = torch.randn(5, 6, 2)
        np.random.seed(i)
        got = compiled(x, 3, i % 2 == 0)
        np.random.seed(i)
        H.assert_same(got, pick_steps(x, 3, i % 2 == 0))
    stats = magpy.stats(compiled)
    assert stats.fallbacks == 0 and stats.hits > 0, stats


def still_volatile(x: torch.Tensor) -> torch.Tensor:
    return x if x.volatile else x * 2  # removed attribute: False, with a UserWarning


def test_tensor_volatile_is_false_with_its_warning() -> None:
    """``t.volatile`` (removed in PyTorch 0.4) is always False and warns: the warning is
    replayed by the mock, at the program's line, on every hit."""
    compiled = magpy.compile(still_volatile, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            out = compiled(x)
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            H.assert_same(out, still_volatile(x))
        assert [(str(w.message), w.lineno) for w in got] == [
            (str(w.message), w.lineno) for w in want
        ]
        assert len(want) == 1 and "volatile" in str(want[0].message)
    assert magpy.stats(compiled).hits == 2


class ProjectedLSTM(torch.nn.LSTM):
    """pytorch_forecasting's LSTM/GRU: a subclass whose forward calls ``super().forward``."""

    def __init__(self) -> None:
        super().__init__(4, 8, batch_first=True)
        self.proj = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, hx: Any = None) -> Any:  # type: ignore[override]
        out, (h, _c) = super().forward(x * 2, hx)
        return self.proj(out), h


def test_super_forward_of_an_lstm_is_one_node(check: Any) -> None:
    """``nn.LSTM.forward`` called on the module (not through ``__call__``) is recorded as one
    graph node like the module call, instead of following its weight bookkeeping (weakrefs)."""
    check(ProjectedLSTM(), H.randn_inputs((2, 5, 4)), calls=3)
    assert _graphs(ProjectedLSTM(), torch.randn(2, 5, 4)) == (1, [])


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


class PackedEncoder(torch.nn.Module):
    """StackPropagation-SLU's encoder: pack, a bidirectional LSTM, unpack, cut each row."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 3, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, lens: Any) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, batch_first=True)
        hidden, _ = self.lstm(packed)
        padded, _ = torch.nn.utils.rnn.pad_packed_sequence(hidden, batch_first=True)
        return torch.cat([padded[i][: lens[i], :] for i in range(len(lens))], dim=0)


def packed(x: torch.Tensor, lens: list[int]) -> Any:
    return torch.nn.utils.rnn.pack_padded_sequence(x * 2, lens, batch_first=True)


def test_packed_sequences(check: Any) -> None:
    """``PackedSequence`` (a namedtuple with a Python ``__new__``) is built by following its
    ``__new__`` down to ``tuple.__new__``; an LSTM over it is one node that gets it rebuilt;
    lengths as a list are guarded, as a tensor they stay in the graph."""
    as_list = lambda i: ((torch.rand(4, 4, 4), [4, 3, 2, 2]), {})  # noqa: E731
    as_tensor = lambda i: ((torch.rand(4, 4, 4), torch.tensor([4, 3, 2, 2])), {})  # noqa: E731
    check(PackedEncoder(), as_list, calls=3)
    check(PackedEncoder(), as_tensor, calls=3)
    assert _graphs(PackedEncoder(), *as_tensor(0)[0]) == (1, [])
    out = check(packed, as_list, calls=3)(torch.rand(4, 4, 4), [4, 3, 2, 2])
    assert type(out) is torch.nn.utils.rnn.PackedSequence and out.unsorted_indices is None


def positive_mean(label: torch.Tensor, score: torch.Tensor) -> Any:
    mask = (label > 0.5).float()
    count = max(torch.sum(mask), 1)  # mmaction's loss: a tensor or the int 1
    return (mask * score).sum() / count, count


def test_max_of_a_tensor_and_a_number(check: Any) -> None:
    """``max(t.sum(), 1)`` compares a tensor with a number: the outcome is assumed, and the
    result is the item Python picked (the tensor, or the very int)."""
    full, empty = torch.ones(6), torch.zeros(6)
    check(
        positive_mean,
        lambda i: ((full if i % 2 else empty, torch.rand(6)), {}),
        calls=4,
        expect_records=2,
    )
    assert _graphs(positive_mean, full, torch.rand(6)) == (1, [])
    assert magpy.compile(positive_mean, backend="eager")(empty, torch.rand(6))[1] == 1


class FreshIndices(torch.nn.Module):
    """multimodal's BroadcastedPositionEmbedding: a property that builds a new tensor per read."""

    @property
    def indices(self) -> torch.Tensor:
        return torch.arange(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + len(self.indices) + self.indices.sum()


def test_a_property_giving_a_new_object_per_read_breaks_cleanly(check: Any) -> None:
    """Regression: the second read of ``self.indices`` was an internal error (the callable then
    ran eagerly for good, with a warning); it is a graph break, and the results stay eager's."""
    compiled = magpy.compile(FreshIndices(), backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), FreshIndices()(x))
    stats = magpy.stats(compiled)
    assert stats.fallbacks == 0 and stats.hits > 0, stats


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
    assert _graphs(MetaLinear(3, 2), torch.randn(4, 3)) == (1, [])


def add_rows(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return sum(xs), sum(xs, torch.ones(4))  # type: ignore[return-value]


def test_sum_over_a_tensors_rows(check: Any) -> None:
    """raster-vision's AddTensors: ``sum(t)`` adds the rows one by one, as eager does (not
    ``t.sum(0)``, whose rounding may differ); the number of rows is guarded."""
    check(add_rows, lambda i: ((torch.rand(3, 4),), {}), calls=3)
    assert _graphs(add_rows, torch.rand(3, 4)) == (1, [])
    compiled = magpy.compile(add_rows, backend="eager")
    for n in (2, 5):
        xs = torch.rand(n, 4)
        H.assert_same(compiled(xs), add_rows(xs))


class CallNorm(torch.nn.Module):
    """CartoonGAN's InstanceNormalization: a module that overrides ``__call__`` itself."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(dim))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        mean = x.mean(-1, keepdim=True)
        return (x - mean) * self.scale


class UsesCallNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = CallNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.lin(x)))


def test_a_module_with_its_own_call(check: Any) -> None:
    """Calling it runs its ``__call__`` (followed), not ``forward``
    (``_forward_unimplemented``, which the monitor expected and never saw)."""
    check(UsesCallNorm(), lambda i: ((torch.randn(2, 4),), {}), calls=3)
    assert _graphs(UsesCallNorm(), torch.randn(2, 4)) == (1, [])


Pair = collections.namedtuple("Pair", "a b")


def bound_reads(x: torch.Tensor) -> Any:
    p = Pair(x, 1)
    q = p._make([x * 2, 3])  # a classmethod read through an object the run built
    d = {"k": x + 1, "j": 2}
    pop = d.pop  # a builtin method of a dict the run built, as a value
    return q.a + pop("k"), q, d


def test_methods_read_as_values_from_objects_built_in_the_run(check: Any) -> None:
    check(bound_reads, lambda i: ((torch.randn(3),), {}), calls=3)
    assert _graphs(bound_reads, torch.randn(3)) == (1, [])
