"""Tensor values read into Python without a graph break (``_speculation``).

``if t.any():``, ``assert not torch.isnan(t).any()``, ``t.item()``, ``int(t)``: the record
assumes the value the recording run saw, its graph outputs that value, and the mock checks it
before it builds or writes anything. A call whose value differs runs the program again and
records the other case. Every test compares compiled against eager on fresh inputs and counts
records, hits and misses, so that neither a record that never hits nor one that hits wrongly
can pass.

``torch.equal(q, k)``, ``t.is_nonzero()``, ``torch.allclose(a, b)`` and ``max(t.sum(), 1)`` (a
tensor compared with a number) are value reads of the same kind: each outcome is assumed and
checked.
"""

from __future__ import annotations

from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn

import magpy
from magpy_runtime._config import config


def same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b) and a.dtype == b.dtype, (a, b)
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        assert a == b, (a, b)


def checks_of(compiled: Any) -> list[Any]:
    return [c for r in compiled._magpy_state.records for c in r.plan.checks]


# ---------------------------------------------------------------- branches on a tensor
def nan_checked(x: torch.Tensor) -> torch.Tensor:
    assert not torch.isnan(x).any(), "NaN in the input"
    y = x * 2
    if (y > 100).any():
        y = y - 100
    return y.relu()


def test_an_assert_on_tensor_values_is_one_graph_with_a_check() -> None:
    ex = magpy.explain(nan_checked)(torch.randn(5))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    assert len(ex.assumptions) == 2 and "Assumed Values" in str(ex), str(ex)
    line = nan_checked.__code__.co_firstlineno + 1
    assert ex.assumptions[0].endswith(f"test_speculation.py:{line} (truth value False)")
    compiled = magpy.compile(nan_checked, backend="eager")
    for _ in range(4):
        x = torch.randn(5)
        same(compiled(x), nan_checked(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses, st.breaks) == (1, 3, 1, 0), st
    assert [c.truth for c in checks_of(compiled)] == [True, True]


def test_a_failing_assert_raises_the_users_error_and_leaves_the_cache_working() -> None:
    compiled = magpy.compile(nan_checked, backend="eager")
    compiled(torch.randn(5))
    x = torch.randn(5)
    x[2] = float("nan")
    with pytest.raises(AssertionError, match="NaN in the input"):
        compiled(x)
    st = magpy.stats(compiled)
    assert st.assumption_misses == 1 and st.records == 1, st
    for _ in range(3):
        x = torch.randn(5)
        same(compiled(x), nan_checked(x))
    assert magpy.stats(compiled).hits == 3


def test_both_outcomes_of_a_tensor_branch_get_a_record() -> None:
    compiled = magpy.compile(nan_checked, backend="eager")
    for i in range(8):
        x = torch.randn(5)
        if i % 2:
            x[0] = 80.0  # y > 100 somewhere: the other branch
        same(compiled(x), nan_checked(x))
    st = magpy.stats(compiled)
    assert (st.records, st.misses, st.hits, st.breaks) == (2, 2, 6, 0), st


def test_a_branch_on_an_item_comparison_assumes_only_the_outcome() -> None:
    def masked_mean(pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        total = mask.sum()
        if total.item() == 0:
            return total
        return (pred * mask).sum() / total

    compiled = magpy.compile(masked_mean, backend="eager")
    for _ in range(5):  # a different sum each call: one record serves them all
        pred, mask = torch.randn(8), (torch.rand(8) > 0.3).float()
        mask[0] = 1.0
        same(compiled(pred, mask), masked_mean(pred, mask))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.assumption_misses) == (1, 4, 0), st
    pred, mask = torch.randn(8), torch.zeros(8)
    same(compiled(pred, mask), masked_mean(pred, mask))
    assert magpy.stats(compiled).records == 2


# ---------------------------------------------------------------- values read into Python
def scaled_by_total(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    n = x.sum().item()
    return y * n + float(n) / 2, n


def test_an_item_used_in_tensor_math_stays_in_the_graph_unassumed() -> None:
    compiled = magpy.compile(scaled_by_total, backend="eager")
    for _ in range(4):
        x, y = torch.randn(3), torch.randn(3)
        same(compiled(x, y), scaled_by_total(x, y))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st
    assert checks_of(compiled) == []  # nothing left the graph: nothing to assume


def test_an_item_is_detached_like_eager() -> None:
    """``y * x.sum().item()``: no gradient flows into x through the Python number."""
    compiled = magpy.compile(scaled_by_total, backend="eager")
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        y = torch.randn(3, requires_grad=True)
        out, _ = compiled(x, y)
        out.sum().backward()
        x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        ref, _ = scaled_by_total(x2, y2)
        ref.sum().backward()
        assert x.grad is None and x2.grad is None
        assert y.grad is not None and y2.grad is not None
        assert torch.equal(y.grad, y2.grad)
    assert magpy.stats(compiled).hits == 2


def conversions(x: torch.Tensor) -> tuple[Any, ...]:
    return int(x[0] * 3), float(x[1]), bool(x[2]), int(x[3] > 0), x[3].item() < 0


def test_int_float_bool_of_a_tensor_give_eagers_python_values() -> None:
    compiled = magpy.compile(conversions, backend="eager")
    for _ in range(4):
        x = torch.randn(4)
        same(compiled(x), conversions(x))
    xi = torch.tensor([-7, 2, 0, 5])
    same(compiled(xi), conversions(xi))
    st = magpy.stats(compiled)
    assert st.records == 2 and st.hits == 3 and st.breaks == 0, st


def top_k_of_positives(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    k = int((x > 0).sum())
    return torch.topk(v, k).values


def test_a_value_used_as_a_size_is_assumed_exactly() -> None:
    compiled = magpy.compile(top_k_of_positives, backend="eager")
    x, v = torch.tensor([1.0, -1.0, 2.0, 3.0]), torch.randn(4)
    for _ in range(3):
        same(compiled(x, v), top_k_of_positives(x, v))
    (check,) = checks_of(compiled)
    assert (check.truth, check.expected) == (False, 3)
    x2 = torch.tensor([1.0, -1.0, -2.0, 3.0])
    same(compiled(x2, v), top_k_of_positives(x2, v))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.assumption_misses) == (2, 2, 1), st


def test_values_that_keep_changing_become_graph_breaks() -> None:
    """After ``config.max_assumption_misses`` calls that no record served, a value read is a
    break; the assuming records are dropped; every call stays equal to eager."""
    compiled = magpy.compile(top_k_of_positives, backend="eager")
    for n in range(1, 9):
        x = torch.cat([torch.ones(n), -torch.ones(9 - n)])
        v = torch.randn(9)
        same(compiled(x, v), top_k_of_positives(x, v))
    st = magpy.stats(compiled)
    assert st.assumption_misses == config.max_assumption_misses, st
    assert st.breaks >= 1 and st.fallbacks == 0, st
    assert checks_of(compiled) == []


def sizes_through_a_tensor(x: torch.Tensor, p: torch.Tensor) -> tuple[Any, ...]:
    b, c = torch.tensor(p.shape[:2]).tolist()  # (OCR heads read sizes back this way)
    h, w = torch.tensor(x.size()[2:]).tolist()
    signs = (x.sum(dim=(2, 3)) > 0).int().tolist()  # a 2-d list, returned as it is
    return x.view(b, c, h * w).relu(), signs, p.view(b, c, -1).sum().tolist()


def test_tolist_of_a_small_tensor_reads_each_element() -> None:
    """``t.tolist()``: nested lists of numbers, each assumed only where Python needs it (here
    the four sizes of the views; the returned lists come from the graph)."""
    ex = magpy.explain(sizes_through_a_tensor)(torch.randn(2, 3, 4, 5), torch.randn(2, 3, 7))
    assert (ex.graph_count, ex.graph_break_count, len(ex.assumptions)) == (1, 0, 4), str(ex)
    compiled = magpy.compile(sizes_through_a_tensor, backend="eager")
    for _ in range(4):
        x, p = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 7)
        same(compiled(x, p), sizes_through_a_tensor(x, p))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.assumption_misses) == (1, 3, 0), st


# ---------------------------------------------------------------- where it must not assume
class RunningNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(1)  # a tensor from outside, updated in place inside the graph
        if x.abs().max() > 3:
            return x / x.abs().max()
        return x


def bump_then_check(x: torch.Tensor) -> torch.Tensor:
    x[0].add_(1)  # an input updated in place through a view
    return x * 2 if x.sum() > 0 else -x


def test_assumptions_in_a_graph_that_updates_outside_tensors() -> None:
    """The graph updates tensors from outside (a buffer; an input through a view) before its
    check: the mock copies them first and puts them back on a miss, so the update runs once."""
    torch.manual_seed(0)  # both signs of ``x.sum()`` below, whatever ran before this test
    ex = magpy.explain(RunningNorm())(torch.randn(4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    model, ref = RunningNorm(), RunningNorm()
    compiled = magpy.compile(model, backend="eager")
    for i in range(6):
        x = torch.randn(4) * (5 if i % 2 else 1)
        same(compiled(x), ref(x))
        same(model.seen, ref.seen)
    assert magpy.stats(compiled).assumption_misses >= 1
    compiled_fn = magpy.compile(bump_then_check, backend="eager")
    for i in range(6):
        x = torch.randn(4) * (-5 if i % 2 else 5)
        x2 = x.clone()
        same(compiled_fn(x), bump_then_check(x2))
        same(x, x2)
    stats = magpy.stats(compiled_fn)
    assert stats.records == 2 and stats.hits == 4 and stats.breaks == 0, stats


def noisy_branch(x: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    if y.sum() > 0:
        return y
    return -y


def test_assumptions_after_random_numbers_restore_the_generator_on_a_miss() -> None:
    """The graph draws before its checks: a miss puts torch's RNG state back, so the program
    run again (and every later draw) sees the numbers eager sees."""
    ex = magpy.explain(noisy_branch)(torch.randn(6))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    compiled = magpy.compile(noisy_branch, backend="eager")
    for i in range(8):
        x = torch.randn(6)
        torch.manual_seed(i)
        got, after = compiled(x), torch.rand(3)
        torch.manual_seed(i)
        same((got, after), (noisy_branch(x), torch.rand(3)))
    stats = magpy.stats(compiled)
    assert stats.records == 2 and stats.assumption_misses >= 1 and stats.hits >= 5, stats


def own_generator_branch(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    y = x * torch.rand(x.shape, generator=g)
    return y if y.sum() > 0 else -y


def test_drawing_from_the_programs_generator_is_a_break() -> None:
    """A ``torch.Generator`` the program passes can be neither a constant of the graph nor
    restored on a miss: the draw is a break, and the numbers are eager's."""
    ex = magpy.explain(own_generator_branch)(torch.randn(6), torch.Generator().manual_seed(0))
    assert ex.graph_break_count >= 1 and "Generator" in ex.break_reasons[0].reason, str(ex)
    compiled = magpy.compile(own_generator_branch, backend="eager")
    for i in range(3):
        x = torch.randn(6)
        got = compiled(x, torch.Generator().manual_seed(i))
        same(got, own_generator_branch(x, torch.Generator().manual_seed(i)))


def test_speculation_can_be_turned_off() -> None:
    with config.patch(speculate=False):
        ex = magpy.explain(nan_checked)(torch.randn(5))
    assert ex.graph_break_count >= 1, str(ex)
    assert "tensor's value" in ex.break_reasons[0].reason


# ---------------------------------------------------------------- inside segments
def printed_then_checked(x: torch.Tensor) -> torch.Tensor:
    print("step")  # a break: what follows is a segment with a site of its own
    y = x.sin()
    if (y > 0.99).any():
        return y * 0
    return y + 1


def test_assumptions_in_a_segment_after_a_break(capsys: pytest.CaptureFixture[str]) -> None:
    compiled = magpy.compile(printed_then_checked, backend="eager")
    for i in range(8):
        x = torch.full((3,), 1.5708 if i % 3 == 2 else 0.1)
        same(compiled(x), printed_then_checked(x))
    assert capsys.readouterr().out == "step\n" * 16
    st = magpy.stats(compiled)
    reasons = compiled._magpy_state.break_reasons
    assert st.fallbacks == 0 and all("print()" in r.reason for r in reasons), (st, reasons)
    assert st.assumption_misses == 1 and st.records == 3, st
    last = magpy.stats(compiled)
    x = torch.full((3,), 0.1)
    same(compiled(x), printed_then_checked(x))
    now = magpy.stats(compiled)
    assert now.misses == last.misses and now.hits > last.hits, (last, now)


def binned_weights(g: torch.Tensor, w: torch.Tensor, edges: torch.Tensor) -> Any:
    """GHM-C loss weights (mmdetection): a loop of reads, each used in a branch and in a value
    stored into a tensor made before a break."""
    w.clamp_(0, 1)  # an update of an input in place: the read below is a break
    out = torch.zeros_like(g)
    tot = max(w.sum().item(), 1.0)
    n = 0
    for i in range(4):
        inds = (g >= edges[i]) & (g < edges[i + 1])
        num = inds.sum().item()
        if num > 0:
            out[inds] = tot / num  # an update of a segment's input: a break after the branch
            n += 1
    return out / max(n, 1), n


def test_a_segment_cut_before_a_value_use_does_not_keep_the_value() -> None:
    """Regression: the store ``out[inds] = tot / num`` pinned ``num`` (an exact-value check),
    then broke; the segment was cut before the store, dropping the check, but ``num`` stayed a
    constant of the record, so the next call with another count reused it unchecked."""
    compiled = magpy.compile(binned_weights, backend="eager")
    edges = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.01])
    rows = [[0.1, 0.3, 0.6, 0.9], [0.1, 0.3, 0.35, 0.9], [0.1, 0.1, 0.6, 0.6]]
    rows += [[0.8, 0.3, 0.6, 0.9], [0.1, 0.3, 0.6, 0.9], [0.8, 0.9, 0.6, 0.3]]
    for row in rows:
        g, w = torch.tensor(row), torch.rand(4)
        same(compiled(g, w.clone(), edges), binned_weights(g, w.clone(), edges))
    assert magpy.stats(compiled).hits > 0


def wing_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    d = (target - pred).abs()
    near, far = d[d < 0.5], d[d >= 0.5]  # shapes that depend on the values
    return (torch.log1p(near).sum() + (far * 2 - 1).sum()) / (len(near) + len(far))


def focal_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    keep = y != 0
    y = y[keep]
    if len(y) == 0:
        return torch.tensor(0.0)
    x = x[keep]
    rows = torch.arange(len(x))  # a size read from the mask, used by an operation
    return -torch.log_softmax(x, dim=-1)[rows, y].mean()


@pytest.mark.parametrize("fn", [wing_loss, focal_loss])
def test_a_shape_that_depends_on_values_is_assumed(fn: Any) -> None:
    """``len(x[mask])`` assumes the shape the run saw, checked by the graph; another count
    misses (for ``focal_loss`` the graph's own ``arange`` fails first: a miss too)."""
    torch.manual_seed(0)
    fixed = (torch.rand(6, 3), torch.randint(0, 3, (6,)))
    if fn is wing_loss:
        fixed = (torch.rand(4, 4), torch.rand(4, 4))
    ex = magpy.explain(fn)(*fixed)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    assert len(ex.assumptions) == 2, str(ex)  # one per shape read
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        same(compiled(*fixed), fn(*fixed))
    assert magpy.stats(compiled).hits == 2
    other = (torch.rand(6, 3), torch.tensor([1, 0, 0, 2, 1, 0]))
    if fn is wing_loss:
        other = (torch.zeros(4, 4), torch.linspace(0, 1, 16).view(4, 4))
    same(compiled(*other), fn(*other))
    stats = magpy.stats(compiled)
    assert (stats.assumption_misses, stats.fallbacks, stats.records) == (1, 0, 2), stats


# --------------------------------------------------- torch.equal and max() of a tensor and a number
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
    assert H.graphs(same_or_sum, x, x.clone(), x.clone()) == (1, [])


def close_or_apart(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.sum().is_nonzero() and torch.allclose(x, y, atol=1e-3):
        return x * 2
    if torch.is_nonzero(x[0] > 0):
        return x - y
    return x + y


def test_is_nonzero_and_allclose_are_value_reads() -> None:
    """``t.is_nonzero()`` is ``bool(t)``, ``torch.allclose`` is ``isclose(...).all()``: each
    outcome is assumed and checked (they were a break: a tensor operation returning a bool)."""
    compiled = magpy.compile(close_or_apart, backend="eager")
    x = torch.rand(4) + 0.5
    calls = [(x, x + 1e-5), (x * 2, x * 2 - 1e-5), (x, x + 1), (x * 3, x), (x, x.clone())]
    for args in calls:
        H.assert_same(compiled(*args), close_or_apart(*args))
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.breaks) == (2, 3, 0), stats
    assert H.graphs(close_or_apart, x, x + 1) == (1, [])


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
    assert H.graphs(positive_mean, full, torch.rand(6)) == (1, [])
    assert magpy.compile(positive_mean, backend="eager")(empty, torch.rand(6))[1] == 1


@pytest.mark.slow
def test_an_assumption_through_inductor() -> None:
    compiled = magpy.compile(nan_checked, backend="inductor")
    for i in range(4):
        x = torch.randn(5)
        if i == 3:
            x[0] = 80.0
        torch.testing.assert_close(compiled(x), nan_checked(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.assumption_misses) == (2, 2, 1), st
