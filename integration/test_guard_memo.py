"""The guard's memo (issue 18, ``magpy_codegen/_memo.py``): a hit skips the walk of the module
tree, globals and closures while nothing they depend on changed, and every change the full
guard would catch is still caught.

Each mutation below happens after the memo is armed; the call after it must equal eager (a new
record, or a hit whose guard re-checked in full and found the change harmless), and where the
change invalidates the recorded graph, the stats must show a miss.
"""

from __future__ import annotations

import collections
import enum
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import magpy
from magpy_codegen import _cbuild, _memo
from magpy_codegen._memo import MAX_ARMS
from magpy_monitor import INTERP, ClassEntry
from magpy_refgraph import GuardKind, GuardReq, Outcome


@pytest.fixture(params=["c", "python"], autouse=True)
def snapcheck(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with the snapshot check in C (``_snapcheck.c``, built on first use) and in
    Python: they must agree."""
    _memo._load_holds()
    if request.param == "python":
        monkeypatch.setattr(_memo, "_CHECK", [_memo.PYTHON_CHECK])
    elif not INTERP.c_snapshot_check:
        pytest.skip(f"no C check on this Python: {_cbuild.reason}")
    else:
        assert _memo._CHECK[0] is not _memo.PYTHON_CHECK, _cbuild.reason
    return str(request.param)


class _Deep(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)) for _ in range(depth))
        )
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.blocks(x)) * self.scale


def _warm(model: Any, make: Callable[[], Any] = lambda: torch.randn(2, 8)) -> Any:
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        x = make()
        torch.testing.assert_close(compiled(x), model(x))
    rec = compiled._magpy_state.records[0]
    assert rec.memo_guard_code is not None, "no memo after the first hit"
    memo = rec.memo_guard_code.memo
    assert memo.state is not None and memo.off is None, memo.off
    return compiled


def _same(compiled: Any, model: Any, x: torch.Tensor) -> None:
    torch.testing.assert_close(compiled(x), model(x))


def _lines(fn: Callable[[], Any]) -> int:
    """Python lines MagPy runs in ``fn()``: in its packages and its generated guard and mock
    (the operator graph the eager backend runs in Python is the program's work)."""
    count = [0]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if event == "line" and ("magpy" in name or "<magpy-" in name):
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count[0]


def test_lines_per_hit_do_not_grow_with_depth() -> None:
    """A 2-block and a 24-block model run the same number of Python lines on a hit, and
    few: the module walk is skipped (the parameters are checked in one C++ call)."""
    counts = []
    for depth in (2, 24):
        torch.manual_seed(0)
        model = _Deep(depth).eval()
        compiled = _warm(model)
        x = torch.randn(2, 8)
        hits = magpy.stats(compiled).hits
        counts.append(_lines(lambda: compiled(x)))  # noqa: B023
        assert magpy.stats(compiled).hits == hits + 1
    assert counts[0] == counts[1], counts
    assert counts[1] < 80, counts


_MUTATIONS: dict[str, Callable[[_Deep], Any]] = {
    "submodule replaced": lambda m: m.blocks[0].__setitem__(1, nn.Identity()),
    "parameter replaced, other shape": lambda m: setattr(
        m.blocks[1][0], "bias", nn.Parameter(torch.zeros(1))
    ),
    "parameter replaced, same shape": lambda m: setattr(
        m.blocks[1][0], "weight", nn.Parameter(torch.ones(8, 8))
    ),
    "forward hook": lambda m: m.blocks[0][0].register_forward_hook(lambda mod, a, o: o * 3),
    "forward pre-hook": lambda m: m.blocks[1].register_forward_pre_hook(lambda mod, a: a[0] + 1),
    "plain attribute": lambda m: setattr(m, "scale", 5.0),
    "requires_grad off": lambda m: m.blocks[0][0].weight.requires_grad_(False),
    "data swapped, offset": lambda m: setattr(m.blocks[0][0].weight, "data", torch.randn(9, 8)[1:]),
    "instance forward": lambda m: setattr(m.blocks[1][1], "forward", lambda x: x - 1),
    "class changed": lambda m: setattr(m.blocks[0][1], "__class__", _Norm2),
    "instance dict replaced": lambda m: setattr(m.blocks[1][1], "__dict__", _swapped(m)),
    "block removed": lambda m: m.blocks.__delitem__(1),
}


class _Norm2(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 10


def _swapped(m: _Deep) -> dict[str, Any]:
    d = dict(m.blocks[1][1].__dict__)
    d["eps"] = 1.0
    return d


@pytest.mark.parametrize("name", list(_MUTATIONS))
def test_a_change_under_the_memo_is_caught(name: str) -> None:
    torch.manual_seed(0)
    model = _Deep(3).eval()
    compiled = _warm(model)
    with torch.no_grad():
        _MUTATIONS[name](model)
    for _ in range(2):
        _same(compiled, model, torch.randn(2, 8))


def _shifted(x: torch.Tensor) -> torch.Tensor:
    return x + 1


SCALE = 2.0


def test_globals_closures_and_function_slots_under_the_memo() -> None:
    """What a function reads from outside: a global rebound, a global defined that shadows a
    builtin, a closure cell rebound, a helper's ``__code__`` and ``__defaults__`` swapped, a
    module attribute monkeypatched, a class method replaced."""
    global SCALE
    offset = 1.0

    def helper(x: torch.Tensor, k: float = 1.0) -> torch.Tensor:
        return x * k

    def f(x: torch.Tensor) -> torch.Tensor:
        return helper(_shifted(torch.nn.functional.relu(x)), 2.0) * SCALE + offset + abs(-1)

    compiled = _warm(f, lambda: torch.randn(3))
    changes: list[Callable[[], Any]] = []

    def rebind_global() -> None:
        global SCALE
        SCALE = 3.0

    def rebind_cell() -> None:
        nonlocal offset
        offset = 7.0

    changes += [rebind_global, rebind_cell]
    changes.append(lambda: setattr(helper, "__code__", (lambda x, k=1.0: x - k).__code__))
    changes.append(lambda: setattr(helper, "__defaults__", (4.0,)))
    changes.append(lambda: globals().__setitem__("abs", lambda v: 100))
    old_relu = torch.nn.functional.relu
    changes.append(lambda: setattr(torch.nn.functional, "relu", torch.sigmoid))
    try:
        for change in changes:
            change()
            for _ in range(2):
                x = torch.randn(3)
                torch.testing.assert_close(compiled(x), f(x))
    finally:
        torch.nn.functional.relu = old_relu
        globals().pop("abs", None)
        SCALE = 2.0


class _Config:
    def __init__(self) -> None:
        self.width = 2.0


class _WithConfig(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = _Config()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.config.width + self.bonus()

    def bonus(self) -> float:
        return 0.5


def test_plain_objects_and_classes_under_the_memo() -> None:
    """An attribute of a plain object the module holds, a method replaced on the class, a
    class attribute added that shadows nothing read... each call equals eager."""
    model = _WithConfig().eval()
    compiled = _warm(model, lambda: torch.randn(2, 4))
    old = _WithConfig.bonus
    try:
        for change in (
            lambda: setattr(model.config, "width", 3.0),
            lambda: setattr(_WithConfig, "bonus", lambda self: 9.0),
            lambda: setattr(_Config, "unrelated", 1),
            lambda: setattr(model, "config", _Config()),
        ):
            change()
            for _ in range(2):
                _same(compiled, model, torch.randn(2, 4))
    finally:
        _WithConfig.bonus = old  # type: ignore[method-assign]


class _Tagged(nn.Module):
    """Its ``tag`` (read by its forward) is rebound to a new object between calls by the
    caller, not by its forward (a forward's own writes keep the memo armed, see
    ``test_own_writes_keep_the_memo_armed``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.tag: object = object()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tag is None:
            return x
        return self.lin(x)


def test_a_memo_that_keeps_changing_turns_itself_off() -> None:
    """Re-armed on every call (an attribute the guard reads is rebound by someone else before
    each call): after ``MAX_ARMS`` the memo is off, the full guard runs, results stay eager's."""
    model = _Tagged().eval()
    compiled = magpy.compile(model, backend="eager")
    for _ in range(MAX_ARMS + 4):
        model.tag = object()
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), model(x))
    memo = compiled._magpy_state.records[0].memo_guard_code.memo
    assert memo.off is not None and "re-armed" in memo.off
    assert magpy.stats(compiled).hits >= MAX_ARMS


class _Square(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            x.mul_(2)  # an in-place write to the input: it matters whether it is the weight
        return x @ self.weight


def test_an_argument_that_is_a_parameter_under_the_memo() -> None:
    """The parameters' distinctness is checked once by the stable part; an argument that is
    one of them is still told apart on every call (a miss, and eager's result and writes)."""
    model, twin = _Square(), _Square()
    twin.load_state_dict(model.state_dict())
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        x = torch.randn(4, 4)
        torch.testing.assert_close(compiled(x.clone()), twin(x.clone()))
    assert compiled._magpy_state.records[0].memo_guard_code.memo.state is not None
    misses = magpy.stats(compiled).misses
    got = compiled(model.weight)
    want = twin(twin.weight)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(model.weight, twin.weight)
    assert magpy.stats(compiled).misses > misses


def test_the_two_checks_agree_on_changed_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """After each kind of change, the check in use and the Python check give the same answer,
    each on the snapshot it took itself (3.13: the C check vouches for a module's whole
    ``__dict__`` with its values state, where the Python check reads the entries one by one)."""
    in_use = _memo._CHECK[0]

    def warmed(check: _memo.SnapshotCheck) -> tuple[Any, Any]:
        monkeypatch.setattr(_memo, "_CHECK", [check])
        torch.manual_seed(0)
        model = _Deep(2).eval()
        compiled = _warm(model)
        return model, compiled._magpy_state.records[0].memo_guard_code.memo.state

    pairs = [warmed(in_use), warmed(_memo.PYTHON_CHECK)]
    changes: list[Callable[[Any], Any]] = [
        lambda m: None,
        lambda m: setattr(m, "scale", 3.0),
        lambda m: m.blocks[0][0].register_forward_hook(lambda mod, a, o: o),
        lambda m: setattr(m.blocks[1][1], "__class__", _Norm2),
    ]
    verdicts = []
    for change in changes:
        got = []
        for (model, state), check in zip(pairs, (in_use, _memo.PYTHON_CHECK), strict=True):
            change(model)
            got.append(check.holds(state, _memo._ABSENT))
        assert got[0] == got[1], got
        verdicts.append(got[0])
    assert verdicts == [True, False, False, False]


def test_inductor_through_the_memo() -> None:
    """The same through Inductor: hits served by the memo, a parameter swap caught."""
    torch.manual_seed(0)
    model = _Deep(2).eval()
    compiled = magpy.compile(model, backend="inductor")
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 8)
            torch.testing.assert_close(compiled(x), model(x))
        assert compiled._magpy_state.records[0].memo_guard_code is not None
        model.blocks[0][0].weight = nn.Parameter(torch.randn(8, 8))
        x = torch.randn(2, 8)
        torch.testing.assert_close(compiled(x), model(x))


class _Meta(type):
    reads = 0

    def __getattribute__(cls, name: str) -> Any:
        if name == "factor":
            _Meta.reads += 1
        return super().__getattribute__(name)


class _Scaled(metaclass=_Meta):
    factor = 3.0


def test_a_metaclass_that_looks_attributes_up_itself_runs_every_call() -> None:
    """A class attribute read through a metaclass ``__getattribute__`` is user code: the memo
    leaves it to the per-call part, which reads it on every call as the guard did before."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * _Scaled.factor

    compiled = _warm(f, lambda: torch.randn(3))
    _Scaled.factor = 5.0
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    before = _Meta.reads
    compiled(x)
    assert _Meta.reads > before
    _Scaled.factor = 3.0


# ------------------------------------------------- library registries, class entries, enums
class _Registry(dict):  # type: ignore[type-arg]
    """Like transformers' ``_CanRecordRegistry``: a dict subclass with Python methods of its
    own, its items and length the native ones."""

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(str(key), value)

    def get(self, key: Any) -> Any:  # type: ignore[override]
        return super().get(str(key)) or {}


REGISTRY = _Registry()


class _Mode(enum.Enum):
    DOUBLE = "double"
    HALF = "half"


MODE = _Mode.DOUBLE


class _Factor:
    """A descriptor object of the program's: the guard checks which one the class holds."""

    def __init__(self, k: float) -> None:
        self.k = k

    def __get__(self, obj: Any, cls: Any = None) -> float:
        return self.k


class _Base:
    factor = _Factor(2.0)


class _Scaler(_Base):
    pass


SCALER = _Scaler()


def _registry_program(x: torch.Tensor) -> torch.Tensor:
    for name, k in REGISTRY.get("scales").items():
        x = x * k if name != "skip" else x
    x = x * 2 if MODE is _Mode.DOUBLE else x / 2
    return x * SCALER.factor + len(REGISTRY)


def _kept(compiled: Any) -> list[GuardReq]:
    """The requirements the memo keeps (checked only when its snapshot does not hold)."""
    memo = compiled._magpy_state.records[0].memo_guard_code.memo
    assert memo.state is not None and memo.off is None, memo.off
    return [req for _, req in memo.checks]


def _restore() -> None:
    global MODE
    MODE = _Mode.DOUBLE
    _Base.factor = _Factor(2.0)  # type: ignore[misc]
    if "factor" in vars(_Scaler):
        del _Scaler.factor
    REGISTRY.clear()
    REGISTRY["scales"] = {"a": 2.0, "b": 3.0}


def test_registries_class_entries_and_enum_values_are_kept_by_the_memo() -> None:
    """A dict subclass's keys, length and items, which descriptor a class holds (a class
    entry), an enum member checked by identity: the memo keeps them."""
    _restore()
    compiled = _warm(_registry_program, lambda: torch.randn(3))
    kept = _kept(compiled)
    assert any(r.kind is GuardKind.KEYS and "REGISTRY" in str(r.path) for r in kept), kept
    assert any(r.kind is GuardKind.LEN and "REGISTRY" in str(r.path) for r in kept), kept
    assert any(isinstance(r.payload, _Mode) for r in kept), kept
    entries = [r for r in kept if isinstance(r.payload, Outcome)]
    assert any(type(r.payload.fn) is ClassEntry for r in entries), entries
    REGISTRY.clear()


_REGISTRY_CHANGES: dict[str, Callable[[], Any]] = {
    "registry item replaced": lambda: REGISTRY.__setitem__("scales", {"a": 5.0}),
    "item of an item added": lambda: REGISTRY["scales"].__setitem__("skip", 9.0),
    "registry key added": lambda: REGISTRY.__setitem__("other", {}),
    "registry cleared": lambda: REGISTRY.clear(),
    "enum global rebound": lambda: globals().__setitem__("MODE", _Mode.HALF),
    "descriptor replaced on the base": lambda: setattr(_Base, "factor", _Factor(4.0)),
    "descriptor shadowed on the class": lambda: setattr(_Scaler, "factor", _Factor(6.0)),
    "descriptor's state changed": lambda: setattr(_Base.__dict__["factor"], "k", 8.0),
}


@pytest.mark.parametrize("name", list(_REGISTRY_CHANGES))
def test_a_change_to_a_registry_class_entry_or_enum_is_caught(name: str) -> None:
    _restore()
    compiled = _warm(_registry_program, lambda: torch.randn(3))
    try:
        _REGISTRY_CHANGES[name]()
        for _ in range(2):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), _registry_program(x))
    finally:
        _restore()
        REGISTRY.clear()


class _Flagged(nn.Module):
    """Reads its own ``__dict__``'s keys (as diffusers' ``__getattr__`` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if "flag" in self.__dict__:
            y = y + 1
        return y * len(self.__dict__)


@pytest.mark.parametrize("how", ["setattr", "object.__setattr__", "__dict__ item", "delattr"])
def test_the_keys_of_a_module_dict_under_the_memo(how: str, snapcheck: str) -> None:
    """A module's ``__dict__`` gains or loses a key after the memo is armed. The memo keeps its
    keys where its check vouches for the whole dict (3.11's version tag; 3.12's watcher; 3.13's
    C check with the values state, as 3.13 stores an attribute of an object whose values live
    inline without a new version); the change is seen either way."""
    torch.manual_seed(0)
    model = _Flagged().eval()
    if how == "delattr":
        model.flag = 0
    compiled = _warm(model, lambda: torch.randn(2, 4))
    kept = any(r.kind is GuardKind.KEYS and "__dict__" in str(r.path) for r in _kept(compiled))
    assert kept == (INTERP.instance_dict_tags_exact or snapcheck == "c"), kept
    change = {
        "setattr": lambda: setattr(model, "flag", 1),
        "object.__setattr__": lambda: object.__setattr__(model, "flag", 1),
        "__dict__ item": lambda: model.__dict__.__setitem__("flag", 1),
        "delattr": lambda: delattr(model, "flag"),
    }[how]
    misses = magpy.stats(compiled).misses
    change()
    for _ in range(2):
        _same(compiled, model, torch.randn(2, 4))
    assert magpy.stats(compiled).misses == misses + 1


class _OrderedScales(collections.OrderedDict):  # (transformers' ModelOutput is one too)
    pass


class _ScaledInOrder(nn.Module):
    def __init__(self, scales: collections.OrderedDict[str, float]) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scales = scales

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        for name, s in self.scales.items():
            y = y * s + len(name)
        return y


@pytest.mark.parametrize("kind", [collections.OrderedDict, _OrderedScales])
def test_the_order_of_an_ordered_dict_is_checked_every_call(kind: type) -> None:
    """``move_to_end`` reorders an ``OrderedDict`` (or a subclass) and keeps its dict version:
    the memo never keeps its keys' order, so the reorder is seen on the next call."""
    torch.manual_seed(0)
    model = _ScaledInOrder(kind(a=2.0, bb=3.0, ccc=0.5)).eval()
    compiled = _warm(model, lambda: torch.randn(2, 4))
    kept = [r for r in _kept(compiled) if r.kind is GuardKind.KEYS and "scales" in str(r.path)]
    assert not kept, kept
    for key in ("a", "ccc"):
        model.scales.move_to_end(key)
        for _ in range(2):
            _same(compiled, model, torch.randn(2, 4))


# ---- the record's own writes (issue 36, ``_memo.written``): a forward that counts its calls
# (``self.steps += 1``) or rebinds a list attribute (``self.features = []``) rewrites its
# module's ``__dict__`` on every call. Before, that renewed the dict's version, so the snapshot
# failed on every hit, was re-armed (the full stable walk) and turned itself off after
# ``MAX_ARMS`` calls (``magpy bench --size small``'s ``dynamic`` model). Now the written
# attributes are checked by the per-call part and the written object's dict entry by entry:
# the memo stays armed, while a change by anyone else is still caught.

OWN_CALLS = MAX_ARMS + 8


class _Stepping(nn.Module):
    """Counts its calls, rebinds a list that its blocks' hooks fill, reads a flag and a scale."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.steps = 0
        self.features: list[torch.Tensor] = []
        self.with_features = False
        self.scale = 2.0
        for block in self.blocks:
            block.register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self.features.append(output)

    def forward(self, x: torch.Tensor) -> Any:
        self.steps += 1
        self.features = []
        for block in self.blocks:
            x = torch.relu(block(x))
        if self.with_features:
            return x * self.scale, torch.stack(self.features)
        return x * self.scale


def _stepping() -> tuple[_Stepping, _Stepping, Any]:
    model = _Stepping().eval()
    twin = _Stepping().eval()
    twin.load_state_dict(model.state_dict())
    return model, twin, magpy.compile(model, backend="eager")


def _step(compiled: Any, model: _Stepping, twin: _Stepping) -> None:
    x = torch.randn(2, 4)
    got, want = compiled(x), twin(x)
    torch.testing.assert_close(got, want)
    assert model.steps == twin.steps
    assert len(model.features) == len(twin.features) == 3
    for a, b in zip(model.features, twin.features, strict=True):
        torch.testing.assert_close(a, b)


def _memo_of(compiled: Any, record: int = 0) -> Any:
    code = compiled._magpy_state.records[record].memo_guard_code
    assert code is not None, "no memo after the first hit"
    return code.memo


def test_own_writes_keep_the_memo_armed() -> None:
    """Many hits in a row: one record, its memo armed once and still on (before: re-armed on
    every hit, off after MAX_ARMS)."""
    model, twin, compiled = _stepping()
    for _ in range(OWN_CALLS):
        _step(compiled, model, twin)
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits) == (1, OWN_CALLS - 1)
    memo = _memo_of(compiled)
    assert memo.off is None, memo.off
    assert memo.arms == 1 and memo.state is not None
    assert memo.valid(model) is not None  # (it holds after the last hit's own writes)


def test_an_outside_change_to_a_guarded_attribute_still_misses() -> None:
    """After the memo held for many hits, the caller flips the flag, changes the scale, or
    rebinds the counter to a float: each next call equals eager and is a miss (a new record
    or an eager fallback), never a hit of the old record."""
    changes = (
        lambda m: setattr(m, "with_features", True),
        lambda m: setattr(m, "scale", 3.0),
        lambda m: setattr(m, "steps", 0.5),
    )
    for change in changes:
        model, twin, compiled = _stepping()
        for _ in range(OWN_CALLS):
            _step(compiled, model, twin)
        hits = magpy.stats(compiled).hits
        change(model)
        change(twin)
        _step(compiled, model, twin)
        stats = magpy.stats(compiled)
        assert stats.hits == hits, "the changed call hit the old record"
        for _ in range(3):
            _step(compiled, model, twin)
        assert _memos_on(compiled)


def _memos_on(compiled: Any) -> bool:
    """Every record's memo is still on (an outside change re-arms a memo, it does not turn
    it off)."""
    records = compiled._magpy_state.records
    return all(r.memo_guard_code is None or r.memo_guard_code.memo.off is None for r in records)


def test_an_outside_write_to_an_unread_attribute_keeps_hitting() -> None:
    """Someone else writes an attribute the forward never reads: the snapshot (entry by entry
    for the written module) still holds or is re-armed once; every call hits and equals eager."""
    model, twin, compiled = _stepping()
    for _ in range(4):
        _step(compiled, model, twin)
    model.unrelated = 1
    for _ in range(OWN_CALLS):
        _step(compiled, model, twin)
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits) == (1, OWN_CALLS + 3)
    assert _memo_of(compiled).arms <= 2
