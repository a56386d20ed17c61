"""The checker itself: ``assert_compiles_like_eager`` fails on wrong results, missing hits and
hits that run user code (so a passing test means something)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch


def affine(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _user_side_graph(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (inputs[0] * 2 + 1,)


def test_check_passes_a_correct_program(check: Callable[..., Any]) -> None:
    """A plain function: equal results, one record, three hits."""
    check(affine, H.randn_inputs((3,)), calls=4)


def test_check_catches_wrong_results() -> None:
    """A backend that computes something else fails the comparison."""

    def wrong_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return lambda *inputs: (inputs[0] * 3,)

    with pytest.raises(AssertionError, match="values differ"):
        H.assert_compiles_like_eager(
            affine, H.randn_inputs((3,)), backend=wrong_backend, check_hits_run_no_user_code=False
        )


def test_check_catches_a_cache_that_never_hits() -> None:
    """A new input shape on every call gives no hit, which fails ``expect_records=1``."""

    def new_shape_each_call(i: int) -> H.Inputs:
        return [torch.randn(i + 1)], {}

    with pytest.raises(AssertionError, match="expected 1 records, 3 hits"):
        H.assert_compiles_like_eager(affine, new_shape_each_call, calls=4)


def test_check_catches_user_code_running_on_a_hit() -> None:
    """A hit whose graph runs a function from the user's file is caught by the trace counter."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return _user_side_graph

    with pytest.raises(AssertionError, match="was a cache hit but ran user code"):
        H.assert_compiles_like_eager(affine, H.randn_inputs((3,)), backend=backend)


def test_check_catches_different_aliasing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Returning a copy where eager returns the input object fails the aliasing check."""
    from magpy_runtime.cache._recordcache import Hit, RecordCache

    real_lookup = RecordCache.lookup

    def copying_hit(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = real_lookup(self, *args, **kwargs)
        if not isinstance(found, Hit):
            return found
        # a "compiler" that breaks aliasing on hits
        return Hit((tuple(t.clone() for t in found.value), found.record, found.tag))

    monkeypatch.setattr(RecordCache, "lookup", copying_hit)

    def returns_input(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x * w

    with pytest.raises(AssertionError, match="aliasing"):
        H.assert_compiles_like_eager(
            returns_input, H.randn_inputs((3,), (3,)), check_hits_run_no_user_code=False
        )


def test_assert_same_compares_structure() -> None:
    """Containers must match in type, keys and length; tensors in meta and values."""
    t = torch.ones(2)
    H.assert_same({"a": (t, 1)}, {"a": (t.clone(), 1)})
    for got, want in [
        ((t,), [t]),
        ({"a": t, "b": t}, {"b": t, "a": t}),
        (t, t.double()),
        (t, t + 1),
        ((t, 1), (t, 2)),
    ]:
        with pytest.raises(AssertionError):
            H.assert_same(got, want)


def test_count_user_code_restores_the_previous_tracer() -> None:
    """The counter puts back whatever trace function was installed before it."""
    with H.count_user_code({__file__}) as outer:
        inner_tracer = sys.gettrace()
        with H.count_user_code({__file__}):
            pass
        assert sys.gettrace() is inner_tracer
        affine(torch.ones(1))
    assert [c.split(":")[0] for c in outer.calls] == ["affine"]
