"""Objects from outside whose class has its own ``__getattribute__`` (issue 18; transformers'
configs): the hook is followed, so what it reads is guarded where it is stored and a hit runs
no hook; ``hasattr``/``getattr`` with a default of a name the hook does not find are False /
the default, guarded as absent. Every change the hook would see makes the record miss.

The same for a class's Python ``__getattr__`` (issue 36; diffusers' ``ModelMixin``: a config
name first, then ``Module.__getattr__``), which runs where the plain lookup misses: followed,
so ``self.lin`` is guarded where the hook found it and the guard's memo keeps it (a hit runs
neither the hook nor the guard's walk of the module tree).
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy
from magpy_codegen import _memo
from magpy_refgraph import GuardKind


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


# ---------------------------------------------------------------------- a Python __getattr__
class FrozenConfig(collections.OrderedDict):  # type: ignore[type-arg]
    """Like diffusers' FrozenDict: its items are also its attributes."""

    def __init__(self, **items: Any) -> None:
        super().__init__(**items)
        for key, value in items.items():
            object.__setattr__(self, key, value)


class ConfigModel(nn.Module):
    """Like diffusers' ModelMixin: ``__getattr__`` answers config names, then Module's."""

    has_flag = None  # (a class attribute: found without the hook)

    def __init__(self) -> None:
        super().__init__()
        self._internal_dict = FrozenConfig(scale=2.0)
        self.lin = nn.Linear(4, 4)

    def __getattr__(self, name: str) -> Any:
        own = self.__dict__
        in_config = "_internal_dict" in own and hasattr(own["_internal_dict"], name)
        if in_config and name not in own:
            return own["_internal_dict"][name]
        return super().__getattr__(name)

    @property
    def config(self) -> FrozenConfig:
        return self._internal_dict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * self.config.scale
        if hasattr(self, "extra"):  # the hook raises: False
            y = self.extra(y)
        if hasattr(self, "has_flag") and self.has_flag is not None:
            y = y - 1
        return y + getattr(self, "offset", 0.25)


@pytest.fixture
def memo_hits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a guard's memo held (its stable part skipped)."""
    _memo._load_holds()
    check, count = _memo._CHECK[0], [0]

    def holds(state: Any, absent: Any) -> bool:
        held = check.holds(state, absent)
        count[0] += held
        return held

    monkeypatch.setattr(_memo, "_CHECK", [check._replace(holds=holds)])
    return count


def _getattr_runs(compiled: Any, x: torch.Tensor) -> int:
    codes = {ConfigModel.__getattr__.__code__, nn.Module.__getattr__.__code__}
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


def test_reads_through_getattr_are_kept_by_the_memo(memo_hits: list[int]) -> None:
    """One record; its hits are served by the memo and run no ``__getattr__``."""
    torch.manual_seed(0)
    model = ConfigModel().eval()
    compiled = magpy.compile(model, backend="eager")
    for _ in range(4):
        x = torch.randn(2, 4)
        H.assert_same(compiled(x), model(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 3, 0, 0), st
    memo = compiled._magpy_state.records[0].memo_guard_code.memo
    assert memo.state is not None and memo.off is None, memo.off
    # (``hasattr`` of a class attribute, which the hook never decides: in the memo too)
    kept = {(req.kind, req.payload) for _, req in memo.checks}
    assert (GuardKind.HASATTR, "has_flag") in kept, kept
    held = memo_hits[0]
    assert _getattr_runs(compiled, torch.randn(2, 4)) == 0
    assert memo_hits[0] == held + 1 and magpy.stats(compiled).hits == 4


_GETATTR_CHANGES = {
    "submodule replaced": lambda m: setattr(m, "lin", nn.Linear(4, 4)),
    "shadowed in the instance dict": lambda m: object.__setattr__(m, "lin", nn.Identity()),
    "hasattr becomes True": lambda m: setattr(m, "extra", nn.Tanh()),
    "config gains the default's name": lambda m: setattr(
        m, "_internal_dict", FrozenConfig(scale=2.0, offset=5.0)
    ),
    "config value changed in place": lambda m: object.__setattr__(m.config, "scale", 3.0),
    "class attribute shadows the hook": lambda m: setattr(ConfigModel, "offset", 7.0),
    "class attribute removed": lambda m: delattr(ConfigModel, "has_flag"),
    "class attribute set": lambda m: setattr(ConfigModel, "has_flag", 1),
    "hook replaced": lambda m: setattr(
        ConfigModel,
        "__getattr__",
        lambda self, name: 0.5 if name == "offset" else nn.Module.__getattr__(self, name),
    ),
}


@pytest.mark.parametrize("name", list(_GETATTR_CHANGES))
def test_every_change_getattr_would_see_misses(name: str) -> None:
    torch.manual_seed(0)
    model = ConfigModel().eval()
    compiled = magpy.compile(model, backend="eager")
    saved = dict(vars(ConfigModel))
    try:
        for _ in range(3):
            x = torch.randn(2, 4)
            H.assert_same(compiled(x), model(x))
        with torch.no_grad():
            _GETATTR_CHANGES[name](model)
        for _ in range(2):
            x = torch.randn(2, 4)
            H.assert_same(compiled(x), model(x))
    finally:
        for key in ("offset", "has_flag", "__getattr__"):
            if key in saved:
                setattr(ConfigModel, key, saved[key])
            elif key in vars(ConfigModel):
                delattr(ConfigModel, key)
