"""The object model of containers (pyobj/containers, collections, sets, setstate) at capture level.

What a capture must record for each container operation: which guards make the record valid
(a set's contents and iteration order, a list's length, the keys a mapping is read by), which
write-backs replay the program's changes to containers from outside, and how a container built
during the run is rebuilt by the result recipe. End-to-end tests of the same features (compiled
against eager) are in ``integration/test_sets_and_collections.py`` and ``test_list_appends.py``.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from magpy_monitor import CaptureResult, capture
from magpy_refgraph import (
    AppendItem,
    Build,
    CallMethod,
    Constant,
    ReplaceContents,
    SetItems,
    SetOrder,
)


def _x() -> torch.Tensor:
    return torch.ones(2)


def _captured(fn: Any, *args: Any) -> CaptureResult:
    result = capture(fn, args, {})
    assert result.failure is None, repr(result.failure)
    assert result.plan is not None
    return result


def _custom(result: CaptureResult, path: str) -> list[Any]:
    assert result.plan is not None
    return [
        g.payload for g in result.plan.guards if str(g.path) == path and g.kind.name == "CUSTOM"
    ]


def _constants(parts: tuple[Any, ...]) -> list[Any]:
    """The values of a recipe's ``Constant`` parts (recipes compare by identity)."""
    assert all(isinstance(p, Constant) for p in parts), parts
    return [p.value for p in parts]


class TestSetsFromOutside:
    def test_membership_guards_the_sets_contents_not_its_order(self) -> None:
        def f(x: torch.Tensor, s: set[int]) -> torch.Tensor:
            return x + (1 if 2 in s else 0)

        payloads = _custom(_captured(f, _x(), {1, 2, 3}), "L.args[1]")
        assert [type(p) for p in payloads] == [SetItems]
        assert payloads[0].items == frozenset({(int, 1), (int, 2), (int, 3)})

    def test_iteration_guards_the_contents_and_the_order(self) -> None:
        def f(x: torch.Tensor, s: set[int]) -> torch.Tensor:
            for v in s:
                x = x * v
            return x

        result = _captured(f, _x(), {3, 1, 2})
        kinds = {type(p) for p in _custom(result, "L.args[1]")}
        assert kinds == {SetItems, SetOrder}
        (order,) = [p for p in _custom(result, "L.args[1]") if isinstance(p, SetOrder)]
        assert order.order == tuple((int, v) for v in {3, 1, 2})

    def test_adding_and_discarding_are_replayed_as_method_calls(self) -> None:
        def f(x: torch.Tensor, s: set[int]) -> torch.Tensor:
            s.add(5)
            s.discard(1)
            return x

        s = {1, 2}
        result = _captured(f, _x(), s)
        assert s == {2, 5}  # the monitored run is the real one
        assert result.plan is not None
        calls = [w for w in result.plan.writebacks if isinstance(w, CallMethod)]
        assert [(w.name, _constants(w.args)) for w in calls] == [("add", [5]), ("discard", [1])]


class TestSetsBuiltByTheRun:
    def test_a_set_built_in_the_run_is_rebuilt_in_insertion_order_without_guards(self) -> None:
        def f(x: torch.Tensor) -> Any:
            s = set()
            s.add(3)
            s.add(1)
            return x + len(s), s

        result = _captured(f, _x())
        assert result.plan is not None
        # no guard on the set: the CUSTOM guards left are the function's code and that the
        # module's globals still do not shadow ``set`` and ``len``
        custom = [g for g in result.plan.guards if g.kind.name == "CUSTOM"]
        assert sorted(repr(g.payload.fn) for g in custom) == [
            "code_of(TestSetsBuiltByTheRun."
            "test_a_set_built_in_the_run_is_rebuilt_in_insertion_order_without_guards.<locals>.f)",
            "defines('len')",
            "defines('set')",
        ]
        built = result.plan.result
        assert isinstance(built, Build)
        (inner,) = [p for p in built.parts if isinstance(p, Build)]
        assert inner.kind == "set"
        assert _constants(inner.parts) == [3, 1]
        assert result.value[1] == {1, 3}


class TestListsAndDictsFromOutside:
    def test_appending_to_an_outside_list_is_replayed_without_a_length_guard(self) -> None:
        def f(x: torch.Tensor, log: list[Any]) -> torch.Tensor:
            log.append(x.sum())
            return x

        result = _captured(f, _x(), [1, 2])
        assert result.plan is not None
        assert [type(w) for w in result.plan.writebacks] == [AppendItem]
        on_list = {g.kind.name for g in result.plan.guards if str(g.path).startswith("L.args[1]")}
        assert on_list == {"TYPE"}  # its length and contents are not read

    def test_writing_an_outside_dict_replaces_its_contents(self) -> None:
        def f(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
            d["k"] = 3
            d.pop("a")
            return x

        d = {"a": 1}
        result = _captured(f, _x(), d)
        assert d == {"k": 3}
        assert result.plan is not None
        (write,) = result.plan.writebacks
        assert isinstance(write, ReplaceContents)
        assert write.kind == "dict"
        assert _constants(write.parts) == ["k", 3]

    def test_reading_an_outside_list_by_index_guards_its_length_and_the_item(self) -> None:
        def f(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
            return x * xs[1]

        result = _captured(f, _x(), [1.0, 2.0, 3.0])
        assert result.plan is not None
        got = {(str(g.path), g.kind.name) for g in result.plan.guards}
        assert ("L.args[1]", "TYPE") in got
        assert ("L.args[1][1]", "VALUE") in got


class TestCollectionsBuiltByTheRun:
    def test_defaultdict_gives_the_default_for_a_missing_key(self) -> None:
        def f(x: torch.Tensor) -> Any:
            d: collections.defaultdict[str, int] = collections.defaultdict(int)
            d["a"] += 1
            return x * d["a"], d["b"]

        result = _captured(f, _x())
        torch.testing.assert_close(result.value[0], _x())
        assert result.value[1] == 0

    def test_counter_over_an_outside_list_guards_each_item(self) -> None:
        def f(x: torch.Tensor, xs: list[str]) -> torch.Tensor:
            c = collections.Counter(xs)
            return x * c["a"] + c["zz"]

        result = _captured(f, _x(), ["a", "b", "a"])
        assert result.plan is not None
        values = {str(g.path): g.payload for g in result.plan.guards if g.kind.name == "VALUE"}
        assert values == {"L.args[1][0]": "a", "L.args[1][1]": "b", "L.args[1][2]": "a"}
        torch.testing.assert_close(result.value, _x() * 2)

    def test_a_bounded_deque_drops_from_the_left(self) -> None:
        def f(x: torch.Tensor) -> Any:
            q = collections.deque([1, 2, 3], maxlen=2)
            q.append(4)
            return x * q[0], q

        result = _captured(f, _x())
        torch.testing.assert_close(result.value[0], _x() * 3)
        assert list(result.value[1]) == [3, 4]

    def test_an_ordered_dict_keeps_move_to_end(self) -> None:
        def f(x: torch.Tensor) -> Any:
            o: collections.OrderedDict[str, int] = collections.OrderedDict()
            o["b"] = 1
            o["a"] = 2
            o.move_to_end("b")
            return x * o[next(iter(o))], list(o)

        result = _captured(f, _x())
        torch.testing.assert_close(result.value[0], _x() * 2)
        assert result.value[1] == ["a", "b"]
