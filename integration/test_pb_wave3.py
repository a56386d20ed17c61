"""ParityBench patterns that broke the graph (dev files 457 on), as small programs written anew.

- ``try: _, b, n, h = x.size()`` / ``except: x = x.unsqueeze(0)``: the unpacking raises
  ValueError (the length is guarded) and the program's own handler runs, in the graph.
- ``shape = list(x.size()); target = shape.copy(); target[1] = 1``: ``list.copy`` keeps the
  items' shadows, so the copy can be changed.
- ``x = [None] * 2c; x[::2] = a; x[1::2] = b``: extended-slice assignment on a list.
- ``torch.equal(q, k)``: a Python bool read from tensor values, like ``.item()``.
"""

from __future__ import annotations

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
