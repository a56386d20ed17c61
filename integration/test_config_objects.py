"""Configuration objects and registries as model code uses them inside a forward.

The patterns come from transformers (``ACT2FN``, ``config.get_text_config(decoder=True)``,
``if past_key_values:``, a ``ModelOutput`` whose field a model replaces, ``lru_cache``'d
version checks), written here with plain classes so each is one case: every program is one
graph with no break, equal to eager over several calls on fresh inputs, and a change to
what it read from outside is a miss that gives eager's answer again.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections import OrderedDict
from typing import Any, ClassVar

import _integration_helpers as H
import torch

import magpy


def _one_graph(fn: Any, *args: Any) -> None:
    count, reasons = H.graphs(fn, *args)
    assert (count, reasons) == (1, []), reasons


def _check(compiled: Any, fn: Any, *args: Any) -> None:
    H.assert_same(compiled(*args), fn(*args))


# ---------------------------------------------------------------------- a class registry
class ClassInstantier(OrderedDict):  # transformers' ACT2FN: a lookup builds the layer
    def __getitem__(self, key: str) -> Any:
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT = ClassInstantier({"tanh": torch.nn.Tanh, "gelu": (torch.nn.GELU, {"approximate": "tanh"})})


class Pooler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(4, 4)
        self.act = "tanh"
        self.extra_cls = torch.nn.ReLU  # a layer class kept on the module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ACT[self.act](self.dense(x)) + ACT["gelu"](x) + self.extra_cls()(x)


def test_a_registry_that_builds_layers_is_one_graph_and_its_entries_are_guarded() -> None:
    model = Pooler()
    _one_graph(model, torch.randn(2, 4))
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        _check(compiled, model, torch.randn(2, 4))
    assert H.counters(compiled) == (1, 2, 0, 0)
    saved = dict(ACT)
    try:
        ACT["tanh"] = torch.nn.Sigmoid  # another class under the same name
        _check(compiled, model, torch.randn(2, 4))
        dict.__setitem__(ACT, "gelu", (torch.nn.GELU, {"approximate": "none"}))
        _check(compiled, model, torch.randn(2, 4))
        model.extra_cls = torch.nn.Tanh  # a layer class swapped on the module
        _check(compiled, model, torch.randn(2, 4))
    finally:
        ACT.clear()
        ACT.update(saved)
    assert H.counters(compiled)[0] == 4


# ---------------------------------------------------------------------- copied configurations
class Config:
    attribute_map: ClassVar[dict[str, str]] = {"hidden": "d_model"}

    def __init__(self) -> None:
        self.d_model = 4
        self.scale = 2.0
        self.names = ["a", "bb"]
        self.extra = {"y": (1, 2), "z": [3]}

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key: str, value: Any) -> None:
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    @property
    def is_wide(self) -> bool:
        return hasattr(self, "wide")

    def text_config(self) -> Config:
        out = copy.deepcopy(self)  # what get_text_config(decoder=True) does
        for key in out.to_dict():
            if key == "scale":
                new_key = "hidden"  # (mapped to d_model by the class's __setattr__)
                value = getattr(out, key)
                delattr(out, key)
                setattr(out, new_key, int(value) + out.d_model)
        return out

    def to_dict(self) -> dict[str, Any]:
        output = copy.deepcopy(self.__dict__)
        output["kind"] = "config"
        return output


CONFIG = Config()


def uses_a_copy(x: torch.Tensor) -> torch.Tensor:
    cfg = CONFIG.text_config()
    cfg.names.append("ccc")  # the copy's list, not the source's
    for name in cfg.names:
        x = x + len(name)
    return x * cfg.hidden + cfg.is_wide + getattr(cfg, "missing", 5) + cfg.extra["y"][1]


def test_a_deep_copy_of_a_configuration_is_one_graph_and_leaves_the_source_alone() -> None:
    _one_graph(uses_a_copy, torch.randn(3))
    compiled = magpy.compile(uses_a_copy, backend="eager")
    for _ in range(3):
        _check(compiled, uses_a_copy, torch.randn(3))
    assert CONFIG.names == ["a", "bb"] and CONFIG.scale == 2.0
    assert H.counters(compiled) == (1, 2, 0, 0)


def test_a_change_to_a_copied_configuration_is_a_miss() -> None:
    compiled = magpy.compile(uses_a_copy, backend="eager")
    _check(compiled, uses_a_copy, torch.randn(3))
    changes = [
        lambda: setattr(CONFIG, "d_model", 6),
        lambda: CONFIG.names.append("dddd"),
        lambda: CONFIG.extra.__setitem__("y", (1, 9)),
        lambda: setattr(CONFIG, "wide", True),
    ]
    saved = copy.deepcopy(vars(CONFIG))
    try:
        for change in changes:
            change()
            _check(compiled, uses_a_copy, torch.randn(3))
    finally:
        vars(CONFIG).clear()
        vars(CONFIG).update(saved)
    assert H.counters(compiled)[0] == 1 + len(changes)


# ---------------------------------------------------------------------- truth through Python
class Cache:
    def __init__(self) -> None:
        self.layers: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.layers)


class Flag:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __bool__(self) -> bool:
        return self.on


def branches_on_python_truth(x: torch.Tensor, cache: Cache, flag: Flag) -> torch.Tensor:
    own = Cache()
    if own:
        x = x + 100
    own.layers.append(x)
    if own and cache:  # (cache: from outside, its layers guarded)
        x = x + cache.layers[0]
    if not flag:
        x = x * 3
    return x


def test_a_branch_on_a_python_len_or_bool_is_followed_and_guarded() -> None:
    cache, flag = Cache(), Flag(True)
    cache.layers.append(torch.ones(2))
    _one_graph(branches_on_python_truth, torch.randn(2), cache, flag)
    compiled = magpy.compile(branches_on_python_truth, backend="eager")
    for _ in range(3):
        _check(compiled, branches_on_python_truth, torch.randn(2), cache, flag)
    assert H.counters(compiled) == (1, 2, 0, 0)
    cache.layers.clear()
    _check(compiled, branches_on_python_truth, torch.randn(2), cache, flag)
    flag.on = False
    _check(compiled, branches_on_python_truth, torch.randn(2), cache, flag)
    assert H.counters(compiled)[0] == 3


# ---------------------------------------------------------------------- cached version checks
CALLS: list[str] = []


@functools.lru_cache
def is_at_least(version: str) -> bool:
    CALLS.append(version)
    return version <= "2.13"


def checks_a_version(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if is_at_least("2.9") else x - 2


def test_an_lru_cached_check_over_values_is_a_constant() -> None:
    _one_graph(checks_a_version, torch.randn(2))
    compiled = magpy.compile(checks_a_version, backend="eager")
    for _ in range(3):
        _check(compiled, checks_a_version, torch.randn(2))
    assert H.counters(compiled) == (1, 2, 0, 0)
    assert CALLS == ["2.9"]  # (the cache ran it once, in the first call)


# ---------------------------------------------------------------------- a field replaced
@dataclasses.dataclass
class Output(OrderedDict):  # a ModelOutput: a dict of its non-None fields
    hidden: torch.Tensor | None = None
    pooled: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                super().__setitem__(field.name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)


class Tower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> Output:
        out = Output(hidden=x * 2, pooled=x.sum(0))
        out.pooled = self.proj(out.pooled)  # CLIP's towers replace pooler_output
        return out


def test_a_field_set_on_an_output_built_in_the_run_is_replayed() -> None:
    model = Tower()
    _one_graph(model, torch.randn(3, 4))
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        x = torch.randn(3, 4)
        got, want = compiled(x), model(x)
        assert list(got.keys()) == list(want.keys()) == ["hidden", "pooled"]
        H.assert_same(got.pooled, want.pooled)
        H.assert_same(got["pooled"], want["pooled"])
    assert H.counters(compiled) == (1, 2, 0, 0)


# ---------------------------------------------------------------------- a call over a generator
class Scale(torch.nn.Module):
    def forward(self, g: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return g * v / v.norm()


def _add(*terms: torch.Tensor) -> torch.Tensor:
    return functools.reduce(torch.add, terms)


class Parametrized(torch.nn.Module):  # torch's parametrize: self[0](*originals)
    def __init__(self) -> None:
        super().__init__()
        self.norm = Scale()
        self.original0 = torch.nn.Parameter(torch.tensor(2.0))
        self.original1 = torch.nn.Parameter(torch.randn(3))
        self.ntensors = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        originals = (getattr(self, f"original{i}") for i in range(self.ntensors))
        return x * self.norm(*originals) + _add(*(t * 2 for t in (x, -x)), x)


def test_a_call_over_a_generator_is_followed_into_its_callee() -> None:
    model = Parametrized()
    _one_graph(model, torch.randn(3))
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        _check(compiled, model, torch.randn(3))
    assert H.counters(compiled) == (1, 2, 0, 0)
    model.ntensors = 1  # one original: the callee gets one argument, as in eager
    model.norm = torch.nn.Identity()
    _check(compiled, model, torch.randn(3))
    assert H.counters(compiled)[0] == 2


class HookedConfig:
    """A configuration with Python attribute hooks (as transformers' ``PreTrainedConfig``): an
    alias map read through ``super().__getattribute__``, a ``__setattr__`` that validates."""

    attribute_map: ClassVar[dict[str, str]] = {"kind": "problem_type"}

    def __init__(self) -> None:
        self.problem_type: str | None = None

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key: str, value: Any) -> None:
        if value not in (None, "single", "regression"):
            raise ValueError(value)
        super().__setattr__(key, value)


def _set_once(cfg: Any) -> Any:
    def f(x: torch.Tensor) -> torch.Tensor:
        if cfg.problem_type is None:
            cfg.problem_type = "single"  # (set on the first call: a lazy default)
        return x + 1 if cfg.kind == "single" else x - 1

    return f


def test_an_attribute_a_call_stores_through_a_python_setattr_is_read_back() -> None:
    """The store runs the class's ``__setattr__``; the read after it goes through its Python
    ``__getattribute__`` and ``object.__getattribute__``: it sees the stored value (it was an
    internal error, the function then ran eagerly for good)."""
    ours, theirs = HookedConfig(), HookedConfig()
    compiled, eager = magpy.compile(_set_once(ours), backend="eager"), _set_once(theirs)
    for i in range(6):
        if i == 3:
            ours.problem_type = theirs.problem_type = None
        if i == 5:
            ours.problem_type = theirs.problem_type = "regression"
        x = torch.randn(3)
        assert torch.equal(compiled(x), eager(x)), i
        assert vars(ours) == vars(theirs), i
    st = magpy.stats(compiled)
    # None then set, "single", "regression": three records; calls 2, 3 and 4 hit
    assert (st.records, st.hits, st.fallbacks, st.breaks) == (3, 3, 0, 0), st


# ---------------------------------------------------------------------- dict subclasses as configs
class AttrDict(dict):  # ParityBench's ``_mock_config``: keys are also attributes
    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class CountingDict(dict):  # a Python __missing__: a subscript of a missing key runs it
    def __missing__(self, key: str) -> int:
        return 0


class Scaled(torch.nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * self.cfg["scale"]
        if getattr(self.cfg, "shift", None) is not None:  # (__getattr__: self[name])
            y = y + self.cfg.shift
        return y


def test_a_dict_subclass_whose_subscript_is_dicts_own_is_one_graph() -> None:
    """``cfg[key]`` of a dict subclass that keeps dict's ``__getitem__`` and has no
    ``__missing__`` runs no Python: a guarded item, as for a dict (it was a break). A missing
    key (``getattr(cfg, name, None)`` through ``__getattr__``) is guarded as missing, not by
    the other entries."""
    model = Scaled(AttrDict(scale=2.0))
    _one_graph(model, torch.randn(2, 4))
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        _check(compiled, model, torch.randn(2, 4))
    assert H.counters(compiled) == (1, 2, 0, 0)
    model.cfg["other"] = "unread"  # neither the keys read nor the one missing: still a hit
    _check(compiled, model, torch.randn(2, 4))
    assert H.counters(compiled) == (1, 3, 0, 0)
    model.cfg["shift"] = 1.0  # the missing key is there now: a miss, eager's answer
    _check(compiled, model, torch.randn(2, 4))
    model.cfg["scale"] = 3.0
    _check(compiled, model, torch.randn(2, 4))
    _check(compiled, model, torch.randn(2, 4))
    assert H.counters(compiled) == (3, 4, 0, 0)


def test_a_dict_subclass_with_missing_is_still_a_break() -> None:
    """A subclass with ``__missing__``: a guard reading the item later could run it (Python, or
    defaultdict's insertion), so its subscript stays a break, equal to eager."""
    model = Scaled(CountingDict(scale=2.0))
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        _check(compiled, model, torch.randn(2, 4))
    _, reasons = H.graphs(model, torch.randn(2, 4))
    assert reasons and all("subscript of a CountingDict" in r for r in reasons), reasons
