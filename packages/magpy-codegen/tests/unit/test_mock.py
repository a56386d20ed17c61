"""Unit tests for generated mocks (_mock.py): results, aliasing, write-backs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from magpy_codegen import NameAllocator, generate_mock
from magpy_refgraph import (
    Apply,
    Build,
    BuildKind,
    CallMethod,
    Constant,
    FromPath,
    Item,
    Local,
    Path,
    Plan,
)


def _run(rec: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    inputs = rec.guard.check(fn, args, kwargs)
    assert inputs is not None
    return rec.mock(fn, args, kwargs, inputs)


class Counter:
    def __init__(self, count: int) -> None:
        self.count = count


class TestAliasing:
    def test_new_list_returned_twice_is_one_object(self, record_of: Any) -> None:
        """A new list referenced twice in the result is built once."""

        def f(x: torch.Tensor) -> Any:
            a = [x + 1, 2]
            return a, a

        rec, _ = record_of(f, torch.ones(2))
        out = _run(rec, f, torch.zeros(2))
        assert out[0] is out[1]
        assert torch.equal(out[0][0], torch.ones(2)) and out[0][1] == 2

    def test_each_call_builds_fresh_objects(self, record_of: Any) -> None:
        """Two mock calls never share a new object."""

        def f(x: torch.Tensor) -> Any:
            return [x + 1]

        rec, _ = record_of(f, torch.ones(2))
        x = torch.ones(2)
        assert _run(rec, f, x) is not _run(rec, f, x)

    def test_returned_input_is_the_very_input(self, record_of: Any) -> None:
        """Inputs returned by the program come back as the very objects of this call."""

        def f(x: torch.Tensor, lst: list[int], y: torch.Tensor) -> Any:
            return x + 1, lst, y

        rec, _ = record_of(f, torch.ones(2), [1], torch.ones(2))
        x, lst, y = torch.zeros(2), [5], torch.zeros(2)
        out = _run(rec, f, x, lst, y)
        assert out[1] is lst
        assert out[2] is y

    def test_input_tensor_used_by_ops_and_returned_is_the_input(self, record_of: Any) -> None:
        """An input tensor both computed with and returned is the caller's tensor (eager)."""

        def f(x: torch.Tensor) -> Any:
            return x * 2, x

        rec, _ = record_of(f, torch.ones(2))
        x = torch.full((2,), 3.0)
        out = _run(rec, f, x)
        assert out[1] is x
        assert torch.equal(out[0], torch.full((2,), 6.0))

    def test_shared_new_object_inside_two_containers(self, record_of: Any) -> None:
        """A new list stored in a tuple and a dict is one object in both."""

        def f(x: torch.Tensor) -> Any:
            inner = [x * 2]
            return (inner,), {"k": inner}

        rec, _ = record_of(f, torch.ones(2))
        t, d = _run(rec, f, torch.ones(2))
        assert t[0] is d["k"]


class TestResults:
    def test_result_equals_eager_on_new_values(self, record_of: Any) -> None:
        """The mock computes the program's result for new tensor values."""

        def f(x: torch.Tensor, y: torch.Tensor) -> Any:
            return (x * y).sum(dim=0) - y.mean(), {"shape": tuple(x.shape)}

        rec, _ = record_of(f, torch.randn(3, 2), torch.randn(3, 2))
        x, y = torch.randn(3, 2), torch.randn(3, 2)
        out = _run(rec, f, x, y)
        expected = f(x, y)
        assert torch.allclose(out[0], expected[0])
        assert out[1] == expected[1]

    def test_constant_result_without_graph(self, record_of: Any) -> None:
        """A program without tensor ops has no graph; the mock still returns the result."""

        def f(n: int) -> Any:
            return n * 2, "s"

        rec, _ = record_of(f, 3)
        assert rec.graph_module is None and rec.op_count == 0
        assert "__magpy_outs = ()" in rec.mock_source
        assert _run(rec, f, 3) == (6, "s")


class TestWriteBacks:
    def test_setattr_is_replayed_on_the_callers_object(self, record_of: Any) -> None:
        """obj.count = obj.count + 1 is replayed on the object passed to this call."""

        def f(obj: Counter, x: torch.Tensor) -> torch.Tensor:
            obj.count = obj.count + 1
            return x * 2

        rec, _ = record_of(f, Counter(1), torch.ones(2))
        obj = Counter(41)
        out = _run(rec, f, obj, torch.ones(2))
        assert obj.count == 42
        assert torch.equal(out, torch.full((2,), 2.0))

    def test_setitem_is_replayed_on_the_callers_dict(self, record_of: Any) -> None:
        """d['y'] = x + 1 writes a fresh graph output into the caller's dict."""

        def f(d: dict[str, Any], x: torch.Tensor) -> dict[str, Any]:
            d["y"] = x + 1
            return d

        rec, _ = record_of(f, {"a": 1}, torch.ones(2))
        d = {"a": 1}
        out = _run(rec, f, d, torch.zeros(2))
        assert out is d
        assert torch.equal(d["y"], torch.ones(2))

    def test_entry_values_are_read_before_writes(self, record_of: Any) -> None:
        """Recipes read entry state before any write-back (a swap stays a swap)."""

        def f(obj: Any, x: torch.Tensor) -> torch.Tensor:
            a, b = obj.a, obj.b
            obj.a = b
            obj.b = a
            return x + 1

        class Pair:
            pass

        first = Pair()
        first.a, first.b = [1], [2]
        rec, _ = record_of(f, first, torch.ones(2))
        assert first.a == [2] and first.b == [1]
        p = Pair()
        a, b = [10], [20]
        p.a, p.b = a, b
        _run(rec, f, p, torch.ones(2))
        assert p.a is b and p.b is a

    def test_inplace_mutation_of_an_input_is_applied(self, record_of: Any) -> None:
        """x.add_(1) in the program mutates the tensor passed to the mock call."""

        def f(x: torch.Tensor) -> None:
            x.add_(1)

        rec, _ = record_of(f, torch.zeros(2))
        x = torch.zeros(2)
        assert _run(rec, f, x) is None
        assert torch.equal(x, torch.ones(2))


class TestGeneratedMockSource:
    def test_build_kinds_render_as_constructors(self) -> None:
        """Tuple, list, set, dict and slice builds become literal constructors; keys build once."""
        x = Path(Local("args"), (Item(0),))
        shared = Build(1, BuildKind.LIST, (FromPath(x),))
        result = Build(
            2,
            BuildKind.TUPLE,
            (
                shared,
                shared,
                Build(3, BuildKind.SET, (Constant(1),)),
                Build(4, BuildKind.DICT, (Constant("k"), shared), (dict,)),
                Build(5, BuildKind.SLICE, (Constant(None), Constant(2), Constant(None))),
                Apply(Constant(len), (shared,)),
            ),
        )
        plan = Plan(
            guards=None,
            aliases=(),
            distinct=(),
            inputs=(),
            result=result,
            writebacks=(),
            num_outputs=0,
        )
        code = generate_mock(plan, NameAllocator(), has_graph=False, qualname="q")
        mock = code.load()["__magpy_mock"]
        obj = object()
        out = mock(None, (obj,), {}, ())
        assert out[0] is out[1] and out[0] == [obj]
        assert out[2] == {1}
        assert out[3] == {"k": [obj]} and out[3]["k"] is out[0]
        assert out[4] == slice(None, 2, None)
        assert out[5] == 1
        assert code.source.count("[v") == 1  # the shared list is built by one expression

    def test_set_builds_add_in_order_and_method_writebacks_replay(self) -> None:
        """A SET build adds its parts one after another (as the program did: a display of
        constants would merge a frozenset, another layout); a CallMethod write-back calls the
        method on the entry object, so the caller's set ends with eager's layout."""
        x = Path(Local("args"), (Item(0),))
        plan = Plan(
            guards=None,
            aliases=(),
            distinct=(),
            inputs=(),
            result=Build(1, BuildKind.SET, tuple(Constant(v) for v in (10, 1, 2, 3))),
            writebacks=(
                CallMethod(FromPath(x), "discard", (Constant(1),)),
                CallMethod(FromPath(x), "add", (Constant(17),)),
            ),
            num_outputs=0,
        )
        mock = generate_mock(plan, NameAllocator(), has_graph=False).load()["__magpy_mock"]
        s = {1, 9}
        out = mock(None, (s,), {}, ())
        want: set[int] = set()
        for v in (10, 1, 2, 3):
            want.add(v)
        assert list(out) == list(want)
        ref = {1, 9}
        ref.discard(1)
        ref.add(17)
        assert list(s) == list(ref)


@pytest.mark.parametrize("mode", ["c", "python"])
def test_fresh_outputs_of_copies_exactly_the_outputs_that_are_inputs(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mock's ``fresh_outputs_of``: the C pointer comparison and the Python set of ids
    agree; an output that *is* an input becomes a copy, every other output stays itself."""
    from magpy_codegen import _cbuild, _mock

    found = _cbuild.load_disjoint()
    if mode == "c":  # (built on every version: disjoint uses the stable API)
        assert found is not None, _cbuild.reason
        monkeypatch.setattr(_mock, "_DISJOINT", [found])
    else:
        monkeypatch.setattr(_mock, "_DISJOINT", [_mock._disjoint_python])
    params = tuple(torch.randn(2) for _ in range(300))
    x, fresh = torch.randn(3), torch.randn(3)
    inputs = (x, *params)
    same = _mock.fresh_outputs_of([fresh, 1.5], inputs)
    assert type(same) is tuple and same[0] is fresh and same[1] == 1.5
    out = _mock.fresh_outputs_of((fresh, params[-1], x), inputs)
    assert out[0] is fresh and out[1] is not params[-1] and out[2] is not x
    assert torch.equal(out[1], params[-1]) and torch.equal(out[2], x)
