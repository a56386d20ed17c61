"""Unit tests for generated guards (_guard.py): hit on the recorded state, miss after a change."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as module_hooks

import magpy_refgraph
from magpy_codegen import NameAllocator, generate_guard
from magpy_codegen._guard import _CUSTOM_CHECKS, _value_check
from magpy_refgraph import (
    CustomPayload,
    GuardKind,
    GuardReq,
    GuardSet,
    InternalError,
    Item,
    IterLen,
    Local,
    Outcome,
    Path,
    Plan,
    SetItems,
    SetOrder,
)


class Net(nn.Module):
    """Reads an attribute, a dict entry, a list length and a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.k = 2

    def forward(self, x: torch.Tensor, cfg: dict[str, int], items: list[int]) -> torch.Tensor:
        y = self.lin(x) * self.k
        for key in cfg:
            y = y * cfg[key]
        return y + len(items)


class State:
    """One call's entry state; ``call`` runs a guard on it."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.net = Net()
        self.x = torch.randn(2, 3)
        self.cfg = {"a": 3, "b": 1}
        self.items = [1, 2]

    @property
    def args(self) -> tuple[Any, ...]:
        return (self.x, self.cfg, self.items)

    def call(self, guard: Callable[..., Any]) -> Any:
        return guard(self.net, self.args, {})


@pytest.fixture
def net_record(record_of: Any) -> Any:
    state = State()
    rec, _ = record_of(state.net, *state.args)
    return rec


def _add_forward_hook(s: State) -> None:
    s.net.register_forward_hook(lambda *a: None)


def _add_pre_hook_on_submodule(s: State) -> None:
    s.net.lin.register_forward_pre_hook(lambda *a: None)


def _override_forward(s: State) -> None:
    s.net.forward = types.MethodType(Net.forward, s.net)


def _swap_submodule(s: State) -> None:
    s.net.lin = nn.Linear(3, 3, bias=False)


MUTATIONS: dict[str, Callable[[State], None]] = {
    "attribute_value": lambda s: setattr(s.net, "k", 3),
    "attribute_type_equal_value": lambda s: setattr(s.net, "k", 2.0),
    "tensor_dtype": lambda s: setattr(s, "x", s.x.double()),
    "tensor_shape": lambda s: setattr(s, "x", torch.randn(4, 3)),
    "tensor_stride": lambda s: setattr(s, "x", s.x.t().contiguous().t()),
    "tensor_requires_grad": lambda s: s.x.requires_grad_(),
    "tensor_subclass": lambda s: setattr(s, "x", nn.Parameter(s.x)),
    "parameter_shape": lambda s: setattr(s.net.lin, "weight", nn.Parameter(torch.randn(3, 4))),
    "submodule_swapped": _swap_submodule,
    "dict_value": lambda s: s.cfg.__setitem__("a", 4),
    "dict_key_added": lambda s: s.cfg.__setitem__("c", 1),
    "dict_key_order": lambda s: setattr(s, "cfg", {"b": 1, "a": 3}),
    "list_length": lambda s: s.items.append(3),
    "list_replaced_by_tuple": lambda s: setattr(s, "items", (1, 2)),
    "forward_hook": _add_forward_hook,
    "submodule_pre_hook": _add_pre_hook_on_submodule,
    "forward_overridden_on_instance": _override_forward,
}


class TestHitAndMiss:
    def test_hit_returns_the_graph_inputs(self, net_record: Any) -> None:
        """On the recorded state the guard returns the input tuple (the very tensors)."""
        s = State()
        inputs = s.call(net_record.guard.check)
        assert isinstance(inputs, tuple)
        assert all(
            a is b for a, b in zip(inputs, (s.x, s.net.lin.weight, s.net.lin.bias), strict=True)
        )

    def test_hit_on_equal_but_distinct_state(self, net_record: Any) -> None:
        """Another state with equal guarded values (fresh tensors, same meta) hits."""
        s = State()
        s.x = torch.randn(2, 3)
        s.cfg = dict(s.cfg)
        s.items = [7, 8]
        assert s.call(net_record.guard.check) is not None

    def test_unobserved_change_still_hits(self, net_record: Any) -> None:
        """Changing tensor *values* or list *items* (not read) keeps the guard passing."""
        s = State()
        with torch.no_grad():
            s.net.lin.weight.add_(1)
        s.items[0] = 100
        assert s.call(net_record.guard.check) is not None

    @pytest.mark.parametrize("mutate", list(MUTATIONS.values()), ids=list(MUTATIONS))
    def test_single_mutation_misses(self, net_record: Any, mutate: Callable[[State], None]) -> None:
        """One change to a guarded value makes the guard return None."""
        s = State()
        assert s.call(net_record.guard.check) is not None
        mutate(s)
        assert s.call(net_record.guard.check) is None

    def test_global_module_hook_misses(self, net_record: Any) -> None:
        """A global forward hook registered on all modules makes the guard miss."""
        s = State()
        handle = module_hooks.register_module_forward_hook(lambda *a: None)
        try:
            assert s.call(net_record.guard.check) is None
        finally:
            handle.remove()
        assert s.call(net_record.guard.check) is not None

    def test_grad_mode_switch_misses(self, net_record: Any) -> None:
        """A record made with grad enabled misses under torch.no_grad()."""
        s = State()
        with torch.no_grad():
            assert s.call(net_record.guard.check) is None
        assert s.call(net_record.guard.check) is not None

    def test_record_made_under_no_grad_misses_with_grad(self, record_of: Any) -> None:
        """A record made under no_grad hits only under no_grad."""

        def f(t: torch.Tensor) -> torch.Tensor:
            return t * 2

        x = torch.ones(2)
        with torch.no_grad():
            rec, _ = record_of(f, x)
            assert rec.guard.check(f, (x,), {}) is not None
        assert rec.guard.check(f, (x,), {}) is None

    def test_argument_layout_changes_miss(self, record_of: Any) -> None:
        """Another function, an extra positional or keyword argument all miss."""

        def f(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return x + 1

        def g(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return x + 1

        x = torch.ones(2)
        rec, _ = record_of(f, x)
        assert rec.guard.check(f, (x,), {}) is not None
        assert rec.guard.check(g, (x,), {}) is None
        assert rec.guard.check(f, (x, 1), {}) is None
        assert rec.guard.check(f, (x,), {"extra": 1}) is None
        assert rec.guard.check(f, [x], {}) is None

    def test_rebinding_a_called_global_misses(
        self, record_of: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Replacing a global function the program called makes the guard miss."""
        x = torch.ones(2)
        rec, _ = record_of(_calls_helper, x)
        assert rec.guard.check(_calls_helper, (x,), {}) is not None
        monkeypatch.setitem(globals(), "_helper", lambda t: t)
        assert rec.guard.check(_calls_helper, (x,), {}) is None

    def test_aliasing_of_inputs_is_guarded(self, record_of: Any) -> None:
        """A record of f(x, x) misses on f(x, y), and a record of f(x, y) misses on f(x, x)."""

        def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

        x, y = torch.ones(2), torch.zeros(2)
        same, _ = record_of(add, x, x)
        distinct, _ = record_of(add, x, y)
        assert same.guard.check(add, (y, y), {}) is not None
        assert same.guard.check(add, (x, y), {}) is None
        assert distinct.guard.check(add, (y, x), {}) is not None
        assert distinct.guard.check(add, (x, x), {}) is None


def _helper(t: torch.Tensor) -> torch.Tensor:
    return t * 3


def _calls_helper(x: torch.Tensor) -> torch.Tensor:
    return _helper(x) + 1


class TestExceptionsAreMisses:
    def test_missing_attribute_is_a_miss(self, net_record: Any) -> None:
        """An AttributeError while reading a guarded attribute is a miss, not an error."""
        s = State()
        del s.net.k
        assert s.call(net_record.guard.check) is None

    def test_missing_key_is_a_miss(self, record_of: Any) -> None:
        """A KeyError while reading a guarded item is a miss."""

        def f(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
            return x * d["a"]

        x = torch.ones(2)
        rec, _ = record_of(f, x, {"a": 2})
        assert rec.guard.check(f, (x, {"b": 2}), {}) is None

    def test_raising_property_is_a_miss(self, record_of: Any) -> None:
        """A property that raises while the guard reads it gives a miss."""

        class Box:
            fail = False

            @property
            def scale(self) -> int:
                if self.fail:
                    raise RuntimeError("no scale")
                return 2

        def f(x: torch.Tensor, box: Box) -> torch.Tensor:
            return x * box.scale

        x, box = torch.ones(2), Box()
        rec, _ = record_of(f, x, box)
        assert rec.guard.check(f, (x, box), {}) is not None
        box.fail = True
        assert rec.guard.check(f, (x, box), {}) is None

    def test_garbage_arguments_are_a_miss(self, net_record: Any) -> None:
        """Arguments of the wrong shape entirely never raise out of the guard."""
        assert net_record.guard.check(None, None, None) is None
        assert net_record.guard.check(object(), (), {}) is None


class TestGeneratedGuardSource:
    def _plan(self, guards: list[GuardReq]) -> Plan:
        return Plan(
            guards=GuardSet(guards),
            aliases=(),
            distinct=(),
            inputs=(),
            result=None,  # type: ignore[arg-type]
            writebacks=(),
            num_outputs=0,
        )

    def test_each_path_is_evaluated_once(self) -> None:
        """Several checks on one path read it into one local variable."""
        p = Path(Local("args"), (Item(0),))
        plan = self._plan([GuardReq(p, GuardKind.TYPE, list), GuardReq(p, GuardKind.LEN, 2)])
        code = generate_guard(plan, NameAllocator(), grad_enabled=True, qualname="q")
        assert code.source.count("args[0]") == 1
        guard = code.load()["__magpy_guard"]
        assert guard(None, ([1, 2],), {}) == ()
        assert guard(None, ([1, 2, 3],), {}) is None
        assert guard(None, ((1, 2),), {}) is None

    def test_checks_run_cheapest_first(self) -> None:
        """TYPE is checked before LEN on the same path (short-circuit order)."""
        p = Path(Local("args"))
        plan = self._plan([GuardReq(p, GuardKind.LEN, 2), GuardReq(p, GuardKind.TYPE, tuple)])
        src = generate_guard(plan, NameAllocator(), grad_enabled=True).source
        assert src.index("type(args)") < src.index("len(args)")

    def test_value_guard_compares_type_and_value(self) -> None:
        """A VALUE guard on 1 rejects True and 1.0 (equal but different types)."""
        p = Path(Local("kwargs"))
        plan = self._plan([GuardReq(p, GuardKind.VALUE, 1)])
        guard = generate_guard(plan, NameAllocator(), grad_enabled=True).load()["__magpy_guard"]
        # kwargs is the guarded root here: any object can be passed in its place
        assert guard(None, (), 1) == ()
        assert guard(None, (), True) is None
        assert guard(None, (), 1.0) is None

    def test_set_guards_check_contents_and_order(self) -> None:
        """``SetItems`` accepts an equal set of the same element types in any order;
        ``SetOrder`` also wants the same iteration order."""
        from magpy_refgraph import set_contents, set_order

        def built(*values: int) -> set[int]:
            s: set[int] = set()
            for v in values:
                s.add(v)
            return s

        p = Path(Local("kwargs"))
        contents = self._plan([GuardReq(p, GuardKind.CUSTOM, SetItems(set_contents({1, 9})))])
        guard = generate_guard(contents, NameAllocator(), grad_enabled=True).load()["__magpy_guard"]
        assert guard(None, (), built(9, 1)) == ()
        assert guard(None, (), {1.0, 9}) is None
        assert guard(None, (), {1}) is None
        order = self._plan([GuardReq(p, GuardKind.CUSTOM, SetOrder(set_order(built(1, 9))))])
        guard = generate_guard(order, NameAllocator(), grad_enabled=True).load()["__magpy_guard"]
        assert guard(None, (), built(1, 9)) == ()
        assert guard(None, (), built(9, 1)) is None

    def test_a_dynamic_tensor_fixed_by_a_static_check_fails_early(self) -> None:
        """A tensor whose sizes are dynamic in one check and fixed in another (a whole-call
        record's trip count): the fixed sizes are checked in the dynamic check's place, not
        only in the C++ batch at the guard's end, so a record of another length fails there."""
        from magpy_monitor.core.shapes import tensor_meta

        x, later = Path(Local("args"), (Item(0),)), Path(Local("args"), (Item(1),))
        t = torch.zeros(5, 3)
        plan = self._plan([
            GuardReq(x, GuardKind.TENSOR_META, tensor_meta(t, {0})),
            GuardReq(later, GuardKind.TYPE, list),
            GuardReq(x, GuardKind.TENSOR_META, tensor_meta(t, set())),
        ])  # fmt: skip
        code = generate_guard(plan, NameAllocator(), grad_enabled=False)
        src = code.source
        assert ".shape[0] >=" not in src and src.index(".shape ==") < src.index("# v1: Tensor")
        guard = code.load()["__magpy_guard"]
        with torch.no_grad():
            assert guard(None, (torch.ones(5, 3), []), {}) == ()
            assert guard(None, (torch.ones(6, 3), []), {}) is None
            assert guard(None, (torch.ones(5, 3), ()), {}) is None

    def test_unknown_custom_payload_is_an_internal_error(self) -> None:
        """A CUSTOM payload without an emitter (a bare string) is refused, not guessed."""
        plan = self._plan([GuardReq(Path(Local("kwargs")), GuardKind.CUSTOM, "module_call")])
        with pytest.raises(InternalError, match="unknown custom guard"):
            generate_guard(plan, NameAllocator(), grad_enabled=True)

    def test_every_custom_payload_class_has_an_emitter(self) -> None:
        """Each exported CUSTOM payload class generates a check."""
        classes = [
            getattr(magpy_refgraph, name)
            for name in magpy_refgraph.__all__
            if isinstance(getattr(magpy_refgraph, name), type)
            and issubclass(getattr(magpy_refgraph, name), CustomPayload)
            and getattr(magpy_refgraph, name) is not CustomPayload
        ]
        assert set(classes) == set(_CUSTOM_CHECKS)

    def test_iter_len_and_outcome_guards(self) -> None:
        """``IterLen`` counts the values left (exactly or at least); ``Outcome`` re-asks fn."""
        p = Path(Local("kwargs"))

        def load(payload: object) -> Any:
            plan = self._plan([GuardReq(p, GuardKind.CUSTOM, payload)])
            code = generate_guard(plan, NameAllocator(), grad_enabled=True)
            return code.load()["__magpy_guard"]

        at_least, exactly = load(IterLen(False, 2)), load(IterLen(True, 2))
        assert at_least(None, (), iter([1, 2, 3])) == ()
        assert at_least(None, (), iter([1])) is None
        assert exactly(None, (), iter([1, 2])) == ()
        assert exactly(None, (), iter([1, 2, 3])) is None
        chunk = load(IterLen(False, 2, below=4))  # a split loop's chunk of 2 iterations
        assert chunk(None, (), iter(range(5, 8))) == ()
        assert chunk(None, (), iter(range(5, 6))) is None
        assert chunk(None, (), iter(range(5, 9))) is None
        positive = load(Outcome(lambda v: v > 0, True))
        assert positive(None, (), 5) == ()
        assert positive(None, (), -5) is None

    def test_grad_mode_is_checked_first(self) -> None:
        """The first check of every guard is the grad mode it was recorded under."""
        src = generate_guard(self._plan([]), NameAllocator(), grad_enabled=False).source
        first_check = next(line for line in src.splitlines() if line.strip().startswith("if "))
        assert "is not False" in first_check


_TUPLE_PROBES: list[Any] = [
    (1, 2),
    (1.0, 2),
    (True, 2),
    (1, True),
    torch.Size([1, 2]),
    (3, 4),
    (),
    [1, 2],
    (1, "a", True),
    (1, "a", 1),
    (1, 2, 3),
]


@pytest.mark.parametrize("value", [(1, 2), torch.Size([1, 2]), (1, "a", True), (), (1.0, 2)])
def test_a_tuple_value_check_agrees_with_exact_tokens(value: Any) -> None:
    """A tuple of ints, strs and bools (or a ``torch.Size``) is checked by its type, its items'
    types and ``==``; it passes exactly where ``exact_token``s are equal (``1`` is neither
    ``1.0`` nor ``True``; a ``torch.Size`` is not a tuple)."""
    names = NameAllocator()
    expr = _value_check("v", value, names.const)
    for probe in _TUPLE_PROBES:
        scope = dict(names.consts) | {"v": probe}
        want = type(probe) is not list and (
            magpy_refgraph.exact_token(probe) == magpy_refgraph.exact_token(value)
        )
        assert bool(eval(expr, scope)) is want, (value, probe, expr)
