"""``scalar_tensor``: a promoted Python scalar as the graph's 0-d input, exactly what
``torch.tensor`` makes of it (Python's precision), whichever factory builds it."""

from __future__ import annotations

import math

import pytest
import torch

from magpy_monitor import scalar_tensor


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (0, torch.int64),
        (-5, torch.int64),
        (2**63 - 1, torch.int64),
        (-(2**63), torch.int64),
        (True, torch.bool),
        (False, torch.bool),
        (0.1, torch.float64),
        (1.5e308, torch.float64),
        (-0.0, torch.float64),
        (math.inf, torch.float64),
    ],
)
def test_value_and_dtype_are_pythons(value: float, dtype: torch.dtype) -> None:
    t = scalar_tensor(value)
    assert t.dtype is dtype and t.dim() == 0 and not t.requires_grad
    assert t.item() == value and type(t.item()) is type(value)
    assert math.copysign(1, t.item()) == math.copysign(1, value)


def test_nan_stays_nan() -> None:
    assert math.isnan(scalar_tensor(math.nan).item())


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70])
def test_an_int_beyond_int64_raises(value: int) -> None:
    """(A guard catches it: that call misses, it is never wrapped around.)"""
    with pytest.raises((RuntimeError, OverflowError, ValueError)):
        scalar_tensor(value)


def test_the_default_device_applies() -> None:
    with torch.device("meta"):
        assert scalar_tensor(3).device.type == "meta"
        assert scalar_tensor(0.5).device.type == "meta"
