"""Which sizes become dynamic, and when (_dynamic.py: changed_on_miss, changed_scalars,
promote_all; the ``dynamic=`` argument of ``magpy.compile``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import magpy_runtime as magpy
from magpy_monitor import dim_key
from magpy_refgraph import DictItem, Item, Local, Path
from magpy_runtime.cache._dynamic import as_locals, changed_on_miss, changed_scalars, promote_all

X = Path(Local("args"), (Item(0),))


def rows(x: torch.Tensor) -> torch.Tensor:
    return x.view(x.shape[0], -1) * 2


def _state(fast: Any) -> Any:
    return fast._magpy_state


class TestChangedSizes:
    def test_a_miss_names_the_sizes_that_changed(self) -> None:
        fast = magpy.compile(rows, backend="eager", dynamic=False)
        fast(torch.ones(2, 3))
        (rec,) = _state(fast).records
        roots = {"fn": rows, "args": (torch.ones(5, 3),), "kwargs": {}}
        assert changed_on_miss([rec], roots) == {dim_key(X, 0)}
        roots["args"] = (torch.ones(5, 4),)
        assert changed_on_miss([rec], roots) == {dim_key(X, 0), dim_key(X, 1)}

    def test_other_dtype_or_rank_is_not_a_size_change(self) -> None:
        fast = magpy.compile(rows, backend="eager", dynamic=False)
        fast(torch.ones(2, 3))
        (rec,) = _state(fast).records
        for other in (torch.ones(5, 3, dtype=torch.float64), torch.ones(5, 3, 1)):
            assert changed_on_miss([rec], {"fn": rows, "args": (other,), "kwargs": {}}) == set()

    def test_two_records_differing_in_a_size(self) -> None:
        fast = magpy.compile(rows, backend="eager", dynamic=False)
        fast(torch.ones(2, 3))
        fast(torch.ones(4, 3))
        new, old = _state(fast).records
        assert changed_scalars(new.plan, [old]) == {dim_key(X, 0)}


class TestDynamicArgument:
    def test_none_recompiles_once_with_the_size_symbolic(self) -> None:
        fast = magpy.compile(rows, backend="eager")
        for n in (2, 3, 4, 5):
            x = torch.randn(n, 3)
            assert torch.equal(fast(x), rows(x))
        assert _state(fast).dynamic_paths == {dim_key(X, 0)}
        s = magpy.stats(fast)
        assert (s.records, s.hits) == (2, 2)

    def test_true_is_symbolic_from_the_start(self) -> None:
        fast = magpy.compile(rows, backend="eager", dynamic=True)
        for n in (2, 3, 4):
            fast(torch.randn(n, 3))
        assert (magpy.stats(fast).records, magpy.stats(fast).hits) == (1, 2)

    def test_false_never_promotes(self) -> None:
        fast = magpy.compile(rows, backend="eager", dynamic=False)
        for n in (2, 3, 4):
            fast(torch.randn(n, 3))
        assert _state(fast).dynamic_paths == set()
        assert magpy.stats(fast).records == 3

    @pytest.mark.parametrize(
        ("dynamic", "last", "want"),
        [(None, False, False), (None, True, True), (True, False, True), (False, True, False)],
    )
    def test_promote_all(self, dynamic: bool | None, last: bool, want: bool) -> None:
        """The last record allowed by max_records is captured fully dynamic (dynamic=None)."""
        assert promote_all(dynamic, last) is want


class TestAsLocals:
    """A callable's dynamic paths renamed to its function's locals (the sites of split loops)."""

    @staticmethod
    def step(self: Any, x: torch.Tensor, n: int, *rest: Any, scale: float = 1.0) -> Any:
        return x

    def test_positional_arguments_skip_self_when_bound(self) -> None:
        paths = {dim_key(X, 0), Path(Local("args"), (Item(1),))}
        assert as_locals(self.step, True, paths) == {
            dim_key(Path(Local("x")), 0),
            Path(Local("n")),
        }
        assert as_locals(self.step, False, {dim_key(X, 0)}) == {dim_key(Path(Local("self")), 0)}

    def test_keywords_and_what_has_no_local(self) -> None:
        kw = Path(Local("kwargs"), (DictItem("scale"),))
        extra = Path(Local("args"), (Item(5),))  # (taken by *rest: no local of its own)
        other = Path(Local("fn"), (Item(0),))
        assert as_locals(self.step, True, {kw, extra, other}) == {Path(Local("scale"))}
