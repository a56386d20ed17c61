"""Provenance and guard requirements of captured runs (_capture.py, _calls.py, _planner.py).

Provenance travels with the shadow values, not with ``id()``: an int read from an attribute and
a literal of the same value (the same small-int object in CPython) are told apart, and a value
is guarded only when the program's behaviour depends on it.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magpy_monitor import CaptureResult, capture
from magpy_refgraph import (
    Apply,
    Build,
    FromPath,
    GraphOut,
    GuardKind,
    ModuleNoHooks,
    NotInInstanceDict,
    SetAttr,
)

PROPERTY = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _x() -> torch.Tensor:
    return torch.ones(2, 3)


def guards(result: CaptureResult) -> set[tuple[str, str, Any]]:
    """The guard requirements as (path, kind name, payload) triples (hashable payloads only)."""
    assert result.failure is None, repr(result.failure)
    assert result.plan is not None
    out = set()
    for g in result.plan.guards:
        payload = g.payload
        try:
            hash(payload)
        except TypeError:
            payload = repr(payload)
        out.add((str(g.path), g.kind.name, payload))
    return out


def value_guards(result: CaptureResult) -> dict[str, Any]:
    """path -> payload of the VALUE guards."""
    return {p: v for p, k, v in guards(result) if k == "VALUE"}


class Scaled(nn.Module):
    """Reads small ints from attributes; ``mode`` selects what the forward does with them."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.k = 1
        self.j = 1
        self.flag = True
        self.mode = mode

    def forward(self, x: torch.Tensor) -> Any:
        if self.mode == "observed":
            return x * self.k
        if self.mode == "unobserved":
            k = self.k
            return x * 1 + 0, k
        if self.mode == "one_of_two":
            k, j = self.k, self.j
            return x * j, k
        if self.mode == "branch":
            if self.flag:
                return x + 1
            return x - 1
        if self.mode == "range":
            for i in range(self.k):
                x = x + i
            return x
        return x * 1


class TestProvenance:
    def test_observed_attribute_gets_a_value_guard_on_its_path(self) -> None:
        """x * self.k guards the value of L.fn.k (path from the module called as fn)."""
        result = capture(Scaled("observed"), (_x(),), {})
        assert value_guards(result).get("L.fn.k") == 1

    def test_unobserved_attribute_is_not_guarded_even_if_a_literal_equals_it(self) -> None:
        """self.k (== 1) only passed through is not guarded although literal 1 is used."""
        result = capture(Scaled("unobserved"), (_x(),), {})
        assert "L.fn.k" not in value_guards(result)
        assert result.value[1] == 1

    def test_only_the_observed_one_of_two_equal_attributes_is_guarded(self) -> None:
        """Two attributes holding the same small int: only the one used is guarded."""
        result = capture(Scaled("one_of_two"), (_x(),), {})
        vg = value_guards(result)
        assert vg.get("L.fn.j") == 1
        assert "L.fn.k" not in vg

    def test_literal_needs_no_guard(self) -> None:
        """A literal 1 in the program produces no VALUE guard at all."""
        result = capture(Scaled("literal"), (_x(),), {})
        assert set(value_guards(result)) == {"L.fn.mode"}

    def test_branch_on_attribute_guards_its_value(self) -> None:
        """`if self.flag:` guards L.fn.flag is True."""
        result = capture(Scaled("branch"), (_x(),), {})
        assert value_guards(result).get("L.fn.flag") is True

    def test_range_of_attribute_guards_its_value(self) -> None:
        """range(self.k) guards L.fn.k; range(1) would not."""
        result = capture(Scaled("range"), (_x(),), {})
        assert value_guards(result).get("L.fn.k") == 1

    def test_literal_range_is_not_guarded(self) -> None:
        """range(1) with a literal guards nothing about the loop bound."""

        def loop(x: torch.Tensor, k: int) -> torch.Tensor:
            for i in range(1):
                x = x + i
            return x

        result = capture(loop, (_x(), 1), {})
        assert "L.args[1]" not in value_guards(result)

    def test_local_literal_bool_is_not_guarded(self) -> None:
        """A branch on a local bound to a literal adds no VALUE guard."""

        def branch(x: torch.Tensor, flag: bool) -> torch.Tensor:
            t = True
            if t:
                return x + 1
            return x

        result = capture(branch, (_x(), True), {})
        assert value_guards(result) == {}

    @PROPERTY
    @given(k=st.integers(min_value=-10, max_value=1000))
    def test_argument_int_guarded_by_value_iff_used(self, k: int) -> None:
        """An int argument used in a tensor op gets VALUE k; passed through, no guard."""

        def used(x: torch.Tensor, n: int) -> torch.Tensor:
            return x * n

        def passed(x: torch.Tensor, n: int) -> Any:
            return x * 1, n

        assert value_guards(capture(used, (_x(), k), {})) == {"L.args[1]": k}
        result = capture(passed, (_x(), k), {})
        assert value_guards(result) == {}
        assert result.value[1] == k

    def test_scalar_arithmetic_on_an_attribute_is_replayed_not_guarded(self) -> None:
        """obj.count + 1 stored back is an Apply recipe; count is type-guarded only."""

        class Obj:
            count = 0

        def bump(obj: Obj, x: torch.Tensor) -> torch.Tensor:
            obj.count = obj.count + 1
            return x * 2

        obj = Obj()
        obj.count = 5
        result = capture(bump, (obj, _x()), {})
        g = guards(result)
        assert ("L.args[0].count", "TYPE", int) in g
        assert "L.args[0].count" not in value_guards(result)
        assert result.plan is not None
        (wb,) = result.plan.writebacks
        assert isinstance(wb, SetAttr) and wb.name == "count"
        assert isinstance(wb.value, Apply)
        assert obj.count == 6


class TestGuardKinds:
    def test_tensor_argument_gets_tensor_meta(self) -> None:
        """A tensor input is guarded by (type, dtype, device, shape, stride, requires_grad)."""
        x = torch.ones(2, 3, dtype=torch.float64)
        result = capture(lambda t: t + 1, (x,), {})
        assert result.plan is not None
        (meta,) = [g for g in result.plan.guards if g.kind is GuardKind.TENSOR_META]
        assert str(meta.path) == "L.args[0]"
        assert meta.payload[:6] == (torch.Tensor, torch.float64, x.device, (2, 3), (3, 1), False)

    def test_root_guards_fix_function_and_argument_layout(self) -> None:
        """fn is ID-guarded, args/kwargs TYPE-guarded, len(args) and kwargs keys fixed."""

        def f(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        g = guards(capture(f, (_x(),), {}))
        assert ("L.fn", "ID", f) in g
        assert ("L.args", "TYPE", tuple) in g
        assert ("L.args", "LEN", 1) in g
        assert ("L.kwargs", "KEYS", ()) in g

    def test_module_call_guards_type_and_hooks_and_lifts_parameters(self) -> None:
        """A module call guards its type and 'no hooks'; its parameters are graph inputs, read
        where the module stores them (``_parameters``), with its ``__dict__`` not shadowing."""
        lin = nn.Linear(3, 2)

        def f(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
            return m(x)

        result = capture(f, (lin, _x()), {})
        g = guards(result)
        assert ("L.args[0]", "TYPE", nn.Linear) in g
        assert ("L.args[0]", "CUSTOM", ModuleNoHooks()) in g
        assert result.plan is not None
        assert [str(p) for p in result.plan.inputs] == [
            "L.args[1]",
            "L.args[0]._parameters['weight']",
            "L.args[0]._parameters['bias']",
        ]
        assert ("L.args[0]", "CUSTOM", NotInInstanceDict("weight")) in g

    def test_len_of_a_list_is_guarded(self) -> None:
        """len(lst) used by the program guards LEN on the list."""

        def f(x: torch.Tensor, lst: list[int]) -> torch.Tensor:
            return x * len(lst)

        assert ("L.args[1]", "LEN", 3) in guards(capture(f, (_x(), [7, 8, 9]), {}))

    def test_iterating_a_dict_guards_its_keys(self) -> None:
        """for k in d guards the keys (and their order) of d."""

        def f(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
            for k in d:
                x = x * d[k]
            return x

        g = guards(capture(f, (_x(), {"a": 2, "b": 3}), {}))
        assert ("L.args[1]", "KEYS", ("a", "b")) in g
        assert ("L.args[1]['a']", "VALUE", 2) in g

    def test_called_global_function_is_id_guarded(self) -> None:
        """A user function called through a global is guarded by identity at G.<name>."""
        result = capture(_calls_global_helper, (_x(),), {})
        assert ("G._global_helper", "ID", _global_helper) in guards(result)

    def test_same_tensor_twice_is_one_input_and_an_alias(self) -> None:
        """f(x, x): one graph input, and the plan requires args[0] is args[1]."""
        x = _x()
        result = capture(lambda a, b: a + b, (x, x), {})
        assert result.plan is not None
        assert [str(p) for p in result.plan.inputs] == ["L.args[0]"]
        assert [(str(a), str(b)) for a, b in result.plan.aliases] == [("L.args[0]", "L.args[1]")]


def _global_helper(t: torch.Tensor) -> torch.Tensor:
    return t * 3


def _calls_global_helper(x: torch.Tensor) -> torch.Tensor:
    return _global_helper(x) + 1


class TestResultRecipes:
    def test_tensor_result_comes_from_the_graph(self) -> None:
        """A computed tensor result is a graph output."""
        result = capture(lambda t: t * 2, (_x(),), {})
        assert result.plan is not None
        assert result.plan.result == GraphOut(0)
        assert result.plan.num_outputs == 1

    def test_returned_input_comes_from_its_path(self) -> None:
        """An input returned untouched is read back from its entry path."""
        result = capture(lambda t, lst: lst, (_x(), [1]), {})
        assert result.plan is not None
        assert result.plan.result == FromPath(result.plan.result.path)
        assert str(result.plan.result.path) == "L.args[1]"

    def test_new_container_is_built_once(self) -> None:
        """A new list returned twice is one Build recipe referenced twice."""

        def f(x: torch.Tensor) -> Any:
            a = [x + 1]
            return a, a

        result = capture(f, (_x(),), {})
        assert result.plan is not None
        outer = result.plan.result
        assert isinstance(outer, Build)
        first, second = outer.parts
        assert isinstance(first, Build) and isinstance(second, Build)
        assert first.key == second.key

    @pytest.mark.parametrize("value", [None, 3, "s", 2.5, (1, "a")])
    def test_constant_results(self, value: Any) -> None:
        """A literal result is returned as captured (any value type)."""
        result = capture(lambda t: value, (_x(),), {})
        assert result.failure is None
        assert result.value == value
