"""Objects from outside whose class has its own ``__getattribute__`` (issue 18; transformers'
configs): the hook is followed, so what it reads is guarded where it is stored and a hit runs
no hook; ``hasattr``/``getattr`` with a default of a name the hook does not find are False /
the default, guarded as absent. Every change the hook would see makes the record miss.
"""

from __future__ import annotations

import sys
from typing import Any

import _integration_helpers as H
import torch

import magpy


class PerLayerMixin:
    """Like transformers' heterogeneity mixin: a hook that looks in the instance dict first."""

    def __getattribute__(self, key: str) -> Any:
        spec = super().__getattribute__("__dict__").get("_per_layer")
        if spec is not None and key in spec:
            raise AttributeError(f"{key} is per layer")
        return super().__getattribute__(key)


class Config(PerLayerMixin):
    """An alias map in the class, resolved by the hook (``hidden_size`` is ``dim``)."""

    attribute_map = {"hidden_size": "dim"}  # noqa: RUF012

    def __init__(self) -> None:
        self.dim = 4
        self.scale = 2.0
        self.use_bias = True

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    @property
    def doubled(self) -> float:
        return self.scale * 2

    def shift(self) -> float:
        return 1.0 if self.use_bias else 0.0


CFG = Config()


def program(x: torch.Tensor) -> torch.Tensor:
    y = x[: CFG.hidden_size] * CFG.scale + CFG.doubled + CFG.shift()
    if hasattr(CFG, "dropout"):
        y = y * 0.5
    return y + getattr(CFG, "eps", 0.25)


def _hook_runs(compiled: Any, x: torch.Tensor) -> int:
    """How many hook frames one call runs (the hit path must run none)."""
    codes = {Config.__getattribute__.__code__, PerLayerMixin.__getattribute__.__code__}
    seen = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            seen[0] += 1

    sys.setprofile(profile)
    try:
        compiled(x)
    finally:
        sys.setprofile(None)
    return seen[0]


def _check(compiled: Any) -> None:
    x = torch.randn(6)
    H.assert_same(compiled(x), program(x))


def test_reads_through_the_hook_are_one_record_and_a_hit_runs_no_hook() -> None:
    compiled = magpy.compile(program, backend="eager")
    for _ in range(3):
        _check(compiled)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert _hook_runs(compiled, torch.randn(6)) == 0
    assert magpy.stats(compiled).hits == 3


def test_every_change_the_hook_would_see_misses() -> None:
    compiled = magpy.compile(program, backend="eager")
    _check(compiled)
    saved = dict(CFG.__dict__)
    changes = [
        lambda: setattr(CFG, "dim", 3),  # through the alias map
        lambda: setattr(CFG, "scale", 3.0),
        lambda: setattr(CFG, "use_bias", False),  # read by a method
        lambda: setattr(CFG, "dropout", 0.1),  # hasattr becomes True
        lambda: setattr(CFG, "eps", 1.0),  # getattr's default is not taken
        lambda: setattr(Config, "attribute_map", {"hidden_size": "dim", "scale": "dim"}),
        lambda: setattr(CFG, "_per_layer", {"scale"}),  # the mixin's hook raises for scale
    ]
    try:
        for change in changes:
            change()
            try:
                got: Any = compiled(torch.ones(6))
            except AttributeError as exc:
                got = exc
            try:
                want: Any = program(torch.ones(6))
            except AttributeError as exc:
                want = exc
            if isinstance(want, Exception):
                assert type(got) is type(want) and str(got) == str(want)
            else:
                H.assert_same(got, want)
    finally:
        Config.attribute_map = {"hidden_size": "dim"}
        CFG.__dict__.clear()
        CFG.__dict__.update(saved)
    _check(compiled)


def test_a_replaced_hook_misses() -> None:
    compiled = magpy.compile(program, backend="eager")
    _check(compiled)
    original = Config.__getattribute__

    def doubled_scale(self: Any, key: str) -> Any:
        value = original(self, key)
        return value * 2 if key == "scale" else value

    Config.__getattribute__ = doubled_scale  # type: ignore[method-assign]
    try:
        _check(compiled)
    finally:
        Config.__getattribute__ = original  # type: ignore[method-assign]
    _check(compiled)
