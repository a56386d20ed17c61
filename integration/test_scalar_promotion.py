"""Promotion of Python scalars that change between calls (the paper's section 6.2.1).

A guarded int, float or bool that takes another value in a later call becomes a graph input
(a 0-d tensor) in the next record, and Python arithmetic over it, comparisons included, is
computed in the graph. Every test compares against eager on every call, dtype included, and
counts records, so a cache that never hits, or one record per value, cannot pass.

numpy scalars as operands: ``test_numpy.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import magpy

Program = Callable[[torch.Tensor, int, bool], torch.Tensor]

PROGRAMS: dict[str, Program] = {
    "bool_times_tensor": lambda x, s, f: x * f,
    "bools_added_are_ints": lambda x, s, f: x * (f + f),
    "negated_bool": lambda x, s, f: x * -f,
    "int_true_division": lambda x, s, f: x * (s / 3),
    "int_to_a_negative_power": lambda x, s, f: x * (2**-s),
    "comparison": lambda x, s, f: x * (s > 3),
    "comparison_and_bool": lambda x, s, f: x * ((s > 3) & f),
    "comparison_xor_bool": lambda x, s, f: x + ((s > 3) ^ f),
    "float_and_bool_mixed": lambda x, s, f: x * (s * 0.1 + f),
}


def _run(fn: Program, dtype: torch.dtype, values: Any, backend: str = "eager") -> Any:
    compiled = magpy.compile(fn, backend=backend)
    for i, (s, f) in enumerate(values):
        x = torch.randn(4, dtype=dtype, generator=torch.Generator().manual_seed(i))
        got, want = compiled(x, s, f), fn(x, s, f)
        assert got.dtype == want.dtype, (i, s, f)
        assert torch.equal(got, want), (i, s, f, got, want)
    return magpy.stats(compiled)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_promoted_ints_and_bools_match_eager_in_three_records(
    name: str, dtype: torch.dtype
) -> None:
    """12 (int, bool) combinations: a record for the first call, one after the int changes and
    one after the bool changes; every later call hits."""
    st = _run(PROGRAMS[name], dtype, itertools.product(range(1, 7), (True, False)))
    assert st.records <= 3 and st.fallbacks == 0, st
    assert st.hits >= 9, st


def test_promoted_float_keeps_double_precision() -> None:
    """``x64 * s``: the promoted float enters as a double, so the product is eager's exactly."""

    def scale(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * (s * 3.0) + s

    compiled = magpy.compile(scale, backend="eager")
    for i in range(20):
        x = torch.randn(5, dtype=torch.float64)
        s = 0.1 + i / 7
        assert torch.equal(compiled(x, s), scale(x, s)), i
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (2, 18), st


class Gate(nn.Module):
    """A bool attribute used as data (not branched on) and a changing temperature."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.enabled = True
        self.temperature = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.lin(x) / self.temperature, -1) * self.enabled


def test_bool_attribute_used_as_data_is_promoted() -> None:
    m = Gate()
    compiled = magpy.compile(m, backend="eager")
    for i in range(20):
        m.enabled, m.temperature = i % 3 != 0, 0.5 + i / 10
        x = torch.randn(2, 6)
        assert torch.equal(compiled(x), m(x)), i
    st = magpy.stats(compiled)
    assert st.records <= 3 and st.hits >= 17, st


def test_branch_on_a_bool_specialises_it() -> None:
    """A bool that decides a branch is control flow: one record per outcome, then only hits."""

    def pick(x: torch.Tensor, s: int, f: bool) -> torch.Tensor:
        return x.sin() if f else x.cos()

    st = _run(pick, torch.float32, [(1, i % 2 == 0) for i in range(10)])
    assert (st.records, st.hits) == (2, 8), st


def test_promoted_bool_through_inductor() -> None:
    st = _run(
        PROGRAMS["comparison_and_bool"],
        torch.float32,
        itertools.product(range(1, 5), (True, False)),
        backend="inductor",
    )
    assert st.records <= 3 and st.fallbacks == 0, st


def warmup_scale(x: torch.Tensor, step: int, warmup: int) -> torch.Tensor:
    lr = step / warmup if step < warmup else 1.0
    return x * lr


def parity_gate(x: torch.Tensor, s: int) -> torch.Tensor:
    y = x * s
    if s % 2 == 0 and s > 4:
        return y + 1
    return y - 1


def magnitude_gate(x: torch.Tensor, t: float) -> torch.Tensor:
    if abs(t) > 0.5:
        return x * t
    return x


@pytest.mark.parametrize(
    ("fn", "values", "records"),
    [
        (warmup_scale, [(s, 10) for s in range(20)], 3),
        (parity_gate, [(s,) for s in range(20)], 4),
        (magnitude_gate, [(s / 10,) for s in range(-10, 10)], 3),
    ],
    ids=["step-below-warmup", "parity-and-threshold", "abs-threshold"],
)
def test_branch_on_a_promoted_scalar_guards_the_outcome(
    fn: Callable[..., torch.Tensor], values: list[tuple[Any, ...]], records: int
) -> None:
    """``if step < warmup``: once ``step`` changes, the record guards the branch's outcome
    (the same Python expression over the new value), not the value: 20 values, a few records
    (the first specialised one, then one per outcome)."""
    compiled = magpy.compile(fn, backend="eager")
    for i, args in enumerate(values):
        x = torch.randn(3)
        got, want = compiled(x, *args), fn(x, *args)
        assert torch.equal(got, want), (i, args)
    st = magpy.stats(compiled)
    assert (st.records, st.fallbacks) == (records, 0), st
    assert st.hits == len(values) - records, st
