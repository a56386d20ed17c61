"""The registry: ordered rule lists, hooks, and the call and attribute rules the layers register.

The order of the call rules is data (``registry.CALL_RULE_ORDER``); these tests pin the
mechanism (declared order wins over registration order, unknown and duplicate rules are refused)
and the places in the order that decide overlapping cases, each with the program that shows why.
"""

from __future__ import annotations

import array
import dataclasses
import functools

import pytest
import torch

import magpy_monitor  # noqa: F401  (imports driver.plugins: every rule is registered)
from magpy_monitor import capture
from magpy_monitor.core import registry
from magpy_monitor.core.registry import Hook, RuleList
from magpy_refgraph import InternalError


class TestRuleList:
    def test_rules_are_tried_in_the_declared_order_whatever_the_registration_order(self) -> None:
        rules: RuleList[object] = RuleList("test rules", ("first", "second", "third"))
        rules.register("third", lambda x: True)(lambda: "c")
        rules.register("first", lambda x: True)(lambda: "a")
        rules.register("second", lambda x: True)(lambda: "b")
        assert [r.name for r in rules] == ["first", "second", "third"]
        assert [r.handle() for r in rules] == ["a", "b", "c"]

    def test_missing_names_the_declared_rules_nobody_registered(self) -> None:
        rules: RuleList[object] = RuleList("test rules", ("a", "b"))
        rules.register("b", lambda x: True)(lambda: None)
        assert rules.missing() == ["a"]
        assert len(rules) == 1

    def test_a_rule_not_in_the_order_is_refused(self) -> None:
        rules: RuleList[object] = RuleList("test rules", ("a",))
        with pytest.raises(InternalError, match="not declared"):
            rules.register("z", lambda x: True)

    def test_a_rule_registered_twice_is_refused(self) -> None:
        rules: RuleList[object] = RuleList("test rules", ("a",))
        rules.register("a", lambda x: True)(lambda: None)
        with pytest.raises(InternalError, match="registered twice"):
            rules.register("a", lambda x: True)

    def test_an_order_that_names_a_rule_twice_is_refused(self) -> None:
        with pytest.raises(InternalError, match="declared twice"):
            RuleList("test rules", ("a", "a"))


class TestHook:
    def test_a_hook_calls_what_its_provider_gave(self) -> None:
        hook: Hook[object] = Hook("double")
        hook.provide(lambda x: 2 * x)
        assert hook.impl(21) == 42

    def test_a_hook_nobody_provided_is_an_internal_error(self) -> None:
        with pytest.raises(InternalError, match="never provided"):
            Hook("lonely").impl  # noqa: B018

    def test_a_hook_provided_twice_is_refused(self) -> None:
        hook: Hook[object] = Hook("once")
        hook.provide(len)
        with pytest.raises(InternalError, match="provided twice"):
            hook.provide(len)


class TestRegisteredRules:
    @pytest.mark.parametrize("rules", [registry.CALL_RULES, registry.ATTR_RULES], ids=repr)
    def test_every_declared_rule_is_registered_once_the_package_is_imported(
        self, rules: RuleList[object]
    ) -> None:
        assert rules.missing() == []
        assert [r.name for r in rules] == list(rules.order)

    def test_every_hook_in_the_registry_is_provided(self) -> None:
        hooks = {n: h for n, h in vars(registry).items() if isinstance(h, Hook)}
        assert hooks, "the registry declares hooks"
        assert [n for n, h in hooks.items() if h.fn is None] == []

    def test_the_native_method_rule_is_last_and_always_applies(self) -> None:
        last = list(registry.CALL_RULES)[-1]
        assert last.name == "native method"
        assert last.applies(object()) is True

    @pytest.mark.parametrize(
        ("earlier", "later", "why"),
        [
            ("grad-mode exit", "context exit", "no_grad's __exit__ is a graph node, not replayed"),
            ("builtin", "python function", "a modelled Python-level builtin is not followed"),
            ("module with own __call__", "module call", "a Python __call__ override is followed"),
            ("modelled Function.apply, bound", "bound method", "MyFn.apply is not unbound"),
            ("tensor method self", "graph operator", "x.add(y) records x as an argument"),
            ("tensor value read", "dynamic", "t.item() is speculated before it is a break"),
            ("opaque forward", "python function", "an RNN's forward is one node"),
            ("compiled callable", "python __call__", "a compiled callable is not followed"),
            ("DTensor placement class", "plain class", "Shard(d) is a constant, not built"),
            ("DTensor placement query", "bound method", "p.is_shard() of a constant p"),
        ],
    )
    def test_overlapping_call_rules_are_ordered(self, earlier: str, later: str, why: str) -> None:
        order = registry.CALL_RULE_ORDER
        assert order.index(earlier) < order.index(later), why

    @pytest.mark.parametrize(
        ("earlier", "later"),
        [
            ("tensor attribute", "from outside"),
            ("known attribute", "super()"),
            ("array made by the run", "constant"),
            ("known object", "replayed object"),
        ],
    )
    def test_overlapping_attribute_rules_are_ordered(self, earlier: str, later: str) -> None:
        order = registry.ATTR_RULE_ORDER
        assert order.index(earlier) < order.index(later)


def _x() -> torch.Tensor:
    return torch.randn(2, 3)


class _Twice(torch.nn.Module):
    """A module whose own ``__call__`` doubles what forward gives."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().__call__(x)


@dataclasses.dataclass
class _Out:
    y: torch.Tensor


class TestRulesDecideTheCall:
    """Programs whose call could match more than one rule: the earlier rule decides."""

    def test_a_module_with_its_own_call_is_followed_through_it(self) -> None:
        m = _Twice()
        x = _x()
        result = capture(lambda t: m(t), (x,), {})
        assert result.failure is None
        torch.testing.assert_close(result.value, 2 * (x + 1))
        assert result.graph is not None
        assert sum(n.op == "call_function" for n in result.graph.nodes) == 2

    def test_a_partial_of_a_python_function_is_forwarded(self) -> None:
        def scale(t: torch.Tensor, k: float) -> torch.Tensor:
            return t * k

        half = functools.partial(scale, k=0.5)
        x = _x()
        result = capture(lambda t: half(t), (x,), {})
        assert result.failure is None
        torch.testing.assert_close(result.value, x * 0.5)

    def test_a_dataclass_built_by_the_run_is_replayed_and_its_field_read(self) -> None:
        x = _x()
        result = capture(lambda t: _Out(t.relu()).y + 1, (x,), {})
        assert result.failure is None
        torch.testing.assert_close(result.value, x.relu() + 1)

    def test_an_unannotated_native_method_stops_the_capture_with_its_name(self) -> None:
        buf = array.array("d", [1.0])
        result = capture(lambda t: (buf.tolist(), t + 1), (_x(),), {})
        assert result.failure is not None
        assert "array" in str(result.failure)
