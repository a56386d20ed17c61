"""``torch._dynamo.config.recompile_limit`` and ``magpy.config.max_records``: one limit.

Both name the records a compiled callable keeps before it runs eagerly
(``magpy_runtime._config.record_limit``). Precedence: a callable's own
``options={"magpy.max_records": n}`` first; else the smaller of the two settings that hold
another value than their common default, 8; else 8. The warning on reaching the limit names
the setting used. Every test compares to eager and counts records (``dynamic=False``: one
record per shape).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo.config as dynamo_config

import magpy


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def run_shapes(compiled: Any, n: int) -> None:
    """``n`` calls, each of a new shape, each compared to eager; then one more of the first
    shape (a hit where a record serves it)."""
    for size in range(2, n + 2):
        x = torch.randn(size)
        torch.testing.assert_close(compiled(x), double(x), rtol=0, atol=0)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), double(x), rtol=0, atol=0)


def limited(n_calls: int, match: str) -> magpy.CacheStats:
    compiled = magpy.compile(double, backend="eager", dynamic=False)
    with pytest.warns(magpy.MagPyWarning, match=match):
        run_shapes(compiled, n_calls)
    return magpy.stats(compiled)


def test_torch_recompile_limit_is_honoured_and_named() -> None:
    with dynamo_config.patch(recompile_limit=3):
        st = limited(5, r"more than 3 records \(the limit torch._dynamo.config.recompile_limit")
    assert (st.records, st.fallbacks) == (3, 1)


def test_magpy_max_records_is_honoured_and_named() -> None:
    with magpy.config.patch(max_records=2):
        st = limited(4, r"more than 2 records \(the limit magpy.config.max_records sets")
    assert (st.records, st.fallbacks) == (2, 1)


@pytest.mark.parametrize(("mine", "theirs", "used"), [(2, 4, "magpy"), (5, 3, "torch")])
def test_both_set_the_smaller_wins(mine: int, theirs: int, used: str) -> None:
    name = {"magpy": "magpy.config.max_records", "torch": "torch._dynamo.config.recompile_limit"}
    with magpy.config.patch(max_records=mine), dynamo_config.patch(recompile_limit=theirs):
        st = limited(6, rf"more than {min(mine, theirs)} records \(the limit {name[used]}")
    assert st.records == min(mine, theirs)


def test_torch_limit_above_magpy_default_is_used() -> None:
    """torch's limit set above 8 while MagPy's is at its default: torch's counts."""
    with dynamo_config.patch(recompile_limit=10):
        compiled = magpy.compile(double, backend="eager", dynamic=False)
        run_shapes(compiled, 10)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.fallbacks) == (10, 1, 0)


def test_callable_option_wins_over_both() -> None:
    with dynamo_config.patch(recompile_limit=1), magpy.config.patch(max_records=2):
        compiled = magpy.compile(
            double, backend="eager", dynamic=False, options={"magpy.max_records": 3}
        )
        with pytest.warns(
            magpy.MagPyWarning, match=r"more than 3 records \(the limit options\['magpy"
        ):
            run_shapes(compiled, 5)
    assert magpy.stats(compiled).records == 3


def test_default_limit_without_settings_is_eight() -> None:
    assert dynamo_config.recompile_limit == 8 and magpy.config.max_records == 8
    st = limited(9, r"more than 8 records \(the limit magpy.config.max_records \(default\)")
    assert (st.records, st.fallbacks) == (8, 1)  # (eager for good: the last call no hit)
