"""Iterating over a tensor inside one graph: its rows are the outputs of one ``unbind(0)``.

``for row in t``, ``enumerate(t)``, ``zip(t, u)``, ``a, b = t``, ``h, *rest = t`` and, where
native code iterates the tensor, ``list(t)``, ``tuple(t)`` and ``[*t]``: the number of rows is
``t``'s first size, which the guard checks (another size is another record). ``f(*t)`` (the
rows made inside the call instruction itself) stays a break.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


def stacked_loop(x: torch.Tensor) -> torch.Tensor:
    out = []
    for row in x:
        out.append(row * 2)
    return torch.stack(out)


def weighted(x: torch.Tensor) -> torch.Tensor:
    return sum(r * i for i, r in enumerate(x, 1))  # type: ignore[return-value]


def paired(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return [a * b for a, b in zip(x, y, strict=True)]


def unpacked(x: torch.Tensor) -> torch.Tensor:
    a, b, c = x
    return a + b * c


def listed(x: torch.Tensor) -> torch.Tensor:
    rows = list(x)
    return sum(r for r in rows) + rows[-1]  # type: ignore[return-value]


def tupled(x: torch.Tensor) -> torch.Tensor:
    return torch.stack(tuple(x)[::-1]) * 2


def spread(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([*x, x[0]]) + 1


@pytest.mark.parametrize(
    ("fn", "n_inputs"),
    [
        (stacked_loop, 1),
        (weighted, 1),
        (paired, 2),
        (unpacked, 1),
        (listed, 1),
        (tupled, 1),
        (spread, 1),
    ],
)
def test_iterating_a_tensor_is_one_graph(check: Any, fn: Callable[..., Any], n_inputs: int) -> None:
    """Every form gives eager's rows (values and views of ``x``) from a cached graph."""
    ex = H.explain_quietly(fn, *[torch.randn(3, 4) for _ in range(n_inputs)])
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    check(fn, H.randn_inputs(*[(3, 4)] * n_inputs))


def test_another_number_of_rows_is_another_record() -> None:
    compiled = magpy.compile(listed, backend="eager")
    for n in (3, 3, 5, 5, 3):
        x = torch.randn(n, 2)
        H.assert_same(compiled(x), listed(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 3, 0), st


def star_call(x: torch.Tensor) -> torch.Tensor:
    def combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b

    return combine(*x)


def test_rows_made_inside_a_call_instruction_stay_a_break() -> None:
    """``f(*t)``: CALL_FUNCTION_EX turns the tensor into a tuple of rows inside the instruction,
    before the callee's frame starts; no shadow can name them yet."""
    ex = H.explain_quietly(star_call, torch.randn(2, 3))
    assert "iterating over a tensor" in H.break_text(ex), H.break_text(ex)
    compiled = magpy.compile(star_call, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 3)
        H.assert_same(compiled(x), star_call(x))
