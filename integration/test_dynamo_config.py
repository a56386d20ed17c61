"""``torch._dynamo.config`` settings MagPy does not read, under ``magpy run`` /
``magpy.use_for_torch_compile()`` (issue 38): one the program set to another value than torch's
default is warned once, with the reason, when ``torch.compile`` is served by MagPy; never
ignored silently. The compiled callable still gives eager's results. ``recompile_limit`` is
honoured instead (``integration/test_recompile_limit.py``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

import magpy
from magpy_runtime._torch_compile import DYNAMO_CONFIG_NOT_READ


def _fn(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2 + x.sum()


def test_the_defaults_in_the_table_are_torchs() -> None:
    """The table's defaults are torch's (a torch that changed one would warn every program,
    or none: this says which)."""
    for name, default, _ in DYNAMO_CONFIG_NOT_READ:
        assert torch._dynamo.config._config[name].default == default, name


def _served(**settings: object) -> list[str]:
    """``torch.compile(_fn)`` under MagPy twice with ``settings`` patched: the MagPy warnings;
    each call's results equal to eager's over several calls."""
    magpy.reset()
    with (
        torch._dynamo.config.patch(**settings),
        magpy.use_for_torch_compile() as redirect,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        for _ in range(2):
            compiled = torch.compile(_fn, backend="eager")
            for n in (3, 4, 3):
                x = torch.randn(n)
                assert torch.equal(compiled(x), _fn(x))
        assert redirect.fallbacks == []
    magpy.reset()
    return [str(w.message) for w in caught if issubclass(w.category, magpy.MagPyWarning)]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("automatic_dynamic_shapes", False),
        ("assume_static_by_default", False),
        ("error_on_recompile", True),
        ("suppress_errors", True),
    ],
)
def test_a_setting_not_read_is_warned_once_with_the_reason(name: str, value: object) -> None:
    warned = [m for m in _served(**{name: value}) if "is not read by MagPy" in m]
    assert len(warned) == 1, warned
    reason = next(why for n, _, why in DYNAMO_CONFIG_NOT_READ if n == name)
    assert f"torch._dynamo.config.{name} = {value!r}" in warned[0] and reason in warned[0]


def test_defaults_and_the_recompile_limit_say_nothing() -> None:
    """Torch's defaults, and ``recompile_limit`` (which MagPy honours): no such warning."""
    assert not [m for m in _served() if "is not read by MagPy" in m]
    assert not [m for m in _served(recompile_limit=4) if "is not read by MagPy" in m]
