"""``zip``/``enumerate`` over iterables only running them can tell: a ``collections.abc.Sequence``
(its ``__iter__`` is a Python generator calling ``__getitem__`` until ``IndexError``, as
transformers' ``config.per_layer_config`` view) or a generator. Followed lazily, one row per loop
step: one record, no break, and a guard that sees what ``__getitem__`` read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy

SCALE = {"k": 2.0}


class View(Sequence[float]):
    """A read-only view of a config's per-layer values (``__getitem__`` reads a global)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> float:
        if isinstance(i, slice):
            raise TypeError("no slices")
        if i < 0 or i >= self.n:
            raise IndexError("layer index out of range")
        return SCALE["k"] * (i + 1)


VIEW = View(3)


def zip_over_view(x: torch.Tensor) -> torch.Tensor:
    out = x
    for name, s in zip(["a", "b", "c", "d"], VIEW, strict=False):  # the view ends first
        out = out * s + (1 if name == "a" else 0)
    return out


def enumerate_view(x: torch.Tensor) -> torch.Tensor:
    for i, s in enumerate(VIEW, 1):
        x = x - s * i
    return x


def _counting(n: int) -> Iterator[int]:
    yield from range(n)


def zip_generator_list(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    gen = _counting(5)
    for i, w in zip(gen, [1.0, 2.0]):  # noqa: B905  (the list ends first: gen's 3rd value is lost)
        x = x + i * w
    return x, next(gen)


def zip_two_generators(x: torch.Tensor) -> torch.Tensor:
    for a, b in zip(_counting(2), _counting(3)):  # noqa: B905  (as people write it)
        x = x * (a + b + 1)
    return x


def _calls(fn: Any, n: int = 3) -> Any:
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(n):
        x = torch.randn(4)
        H.assert_same(compiled(x), fn(x))
    return compiled


def test_zip_and_enumerate_over_a_sequence_view_are_one_record() -> None:
    for fn in (zip_over_view, enumerate_view):
        st = magpy.stats(_calls(fn))
        assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), (fn, st)


def test_zips_of_generators_are_one_record_and_leave_them_as_eager() -> None:
    for fn in (zip_generator_list, zip_two_generators):
        st = magpy.stats(_calls(fn))
        assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), (fn, st)


def test_what_getitem_and_len_read_is_guarded() -> None:
    """A changed global that ``__getitem__`` reads, and a shorter view, make new records."""
    compiled = _calls(zip_over_view)
    try:
        SCALE["k"] = 3.0
        x = torch.randn(4)
        H.assert_same(compiled(x), zip_over_view(x))
        VIEW.n = 2
        x = torch.randn(4)
        H.assert_same(compiled(x), zip_over_view(x))
    finally:
        SCALE["k"], VIEW.n = 2.0, 3
    st = magpy.stats(compiled)
    assert (st.records, st.breaks) == (3, 0), st


def _scaled_params(model: torch.nn.Module, factors: list[float]) -> torch.Tensor:
    total = torch.zeros(())
    for p, f in zip(model.parameters(), factors, strict=True):
        total = total + p.sum() * f
    return total


def test_a_strict_zip_over_a_generator_is_followed() -> None:
    """``zip(model.parameters(), values, strict=True)``: one record; unequal lengths raise
    eager's ``ValueError``."""
    model = torch.nn.Linear(3, 2)
    compiled = magpy.compile(_scaled_params, backend="eager")
    for i in range(3):
        H.assert_same(compiled(model, [1.0, 2.0 + i]), _scaled_params(model, [1.0, 2.0 + i]))
    st = magpy.stats(compiled)
    assert st.breaks == 0 and st.hits >= 1, st
    for bad in ([1.0], [1.0, 2.0, 3.0]):
        try:
            _scaled_params(model, bad)
        except ValueError as exc:
            message = str(exc)
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            compiled(model, bad)
