"""Dynamic shapes in codegen: relaxed TENSOR_META checks, graphs compiled for symbolic inputs,
and the shape guard over their inputs (_guard.py, _backend.py, _record.py)."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
import torch.fx as fx

from magpy_codegen import NameAllocator, ShapeGuard, build_record, compile_graph, shape_guard
from magpy_codegen._guard import check_expr
from magpy_monitor import Val, capture
from magpy_monitor.core.shapes import ShapeTracker, tensor_meta
from magpy_refgraph import GuardKind, GuardReq, Local, Path

X = Path(Local("x"))


def _check(payload: tuple[Any, ...], t: Any) -> bool:
    names = NameAllocator()
    expr = check_expr(GuardReq(X, GuardKind.TENSOR_META, payload), "v", names.const)
    return bool(eval(expr, dict(names.consts), {"v": t}))


def _symbolic_graph(
    *examples: torch.Tensor, dims: tuple[int, ...] = (0,), propagate: bool = False
) -> fx.Graph:
    """``relu(x0 + x1 + ...)`` whose placeholders have fakes with ``dims`` symbolic.

    ``propagate``: compute the output's fake value, as the monitor does when the program reads
    its shape (which makes the ShapeEnv assume ``x0`` and ``x1`` have equal sizes).
    """
    tracker = ShapeTracker()
    g = fx.Graph()
    acc = None
    for i, t in enumerate(examples):
        node = g.placeholder(f"x{i}")
        node.meta["example_value"] = t
        tracker.add_input(Val(t), node, dims, f"x{i}")
        acc = node if acc is None else g.call_function(operator.add, (acc, node))
    assert acc is not None
    out = g.call_method("relu", (acc,))
    g.output((out,))
    if propagate:
        tracker.fake(out)
    return g


class TestDynamicTensorCheck:
    def test_static_sizes_ndim_and_layout_are_checked(self) -> None:
        payload = tensor_meta(torch.ones(3, 4), (0,))
        assert _check(payload, torch.ones(7, 4))
        assert not _check(payload, torch.ones(7, 5))
        assert not _check(payload, torch.ones(7, 4, 1))
        assert not _check(payload, torch.ones(4, 7).t())
        assert not _check(payload, torch.ones(7, 4, dtype=torch.float64))

    def test_dynamic_sizes_must_be_at_least_two(self) -> None:
        payload = tensor_meta(torch.ones(3, 4), (0,))
        assert _check(payload, torch.ones(2, 4))
        assert not _check(payload, torch.ones(1, 4))
        assert not _check(payload, torch.ones(0, 4))

    def test_static_payload_is_exact(self) -> None:
        payload = tensor_meta(torch.ones(3, 4))
        assert _check(payload, torch.ones(3, 4))
        assert not _check(payload, torch.ones(5, 4))


class TestSymbolicCompile:
    @pytest.mark.parametrize("propagate", [False, True])
    def test_eager_runs_any_size_and_guards_relations(self, propagate: bool) -> None:
        graph = _symbolic_graph(torch.ones(3, 4), torch.ones(3, 4), propagate=propagate)
        gm, compiled = compile_graph(graph, [torch.ones(3, 4)] * 2, "eager")
        guard = shape_guard(gm)
        assert isinstance(guard, ShapeGuard)
        a, b = torch.randn(5, 4), torch.randn(5, 4)
        assert guard(a, b)
        torch.testing.assert_close(compiled(a, b)[0], (a + b).relu())
        assert not guard(a, torch.randn(1, 4))  # sizes 0 and 1 are specialised
        # only what was assumed is guarded: unequal sizes fail in the graph, as in eager
        assert guard(a, torch.randn(6, 4)) is not propagate

    def test_static_graph_has_no_shape_guard(self) -> None:
        g = fx.Graph()
        x = g.placeholder("x")
        x.meta["example_value"] = torch.ones(2)
        g.output((g.call_method("relu", (x,)),))
        gm, _ = compile_graph(g, [torch.ones(2)], "eager")
        assert shape_guard(gm) is None

    def test_callable_backend_gets_real_inputs_and_fake_metadata(self) -> None:
        seen: list[Any] = []

        def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
            seen.extend(example_inputs)
            seen.extend(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")
            return gm.forward

        example = torch.ones(3, 4)
        compile_graph(_symbolic_graph(example), [example], backend)
        assert seen[0] is example
        assert isinstance(seen[1].shape[0], torch.SymInt)

    def test_aot_eager_compiles_for_symbolic_sizes(self) -> None:
        _, compiled = compile_graph(
            _symbolic_graph(torch.ones(3, 4)), [torch.ones(3, 4)], "aot_eager"
        )
        for n in (2, 5, 9):
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x)[0], x.relu())


class TestRecord:
    def test_symbolic_record_serves_every_size_but_one(self) -> None:
        def fn(x: torch.Tensor) -> torch.Tensor:
            return x.view(x.shape[0], 2, -1).sum(1) * x.size(1)

        result = capture(fn, (torch.randn(3, 4),), {}, promote_all=True)
        assert result.plan is not None and result.graph is not None
        rec = build_record(result.plan, result.graph, result.example_inputs, "eager", qualname="fn")
        assert "is_contiguous" in rec.guard_source
        for shape in [(2, 4), (5, 6), (9, 2)]:
            x = torch.randn(*shape)
            inputs = rec.guard.check(fn, (x,), {})
            assert inputs is not None, shape
            torch.testing.assert_close(rec.mock(fn, (x,), {}, inputs), fn(x))
        assert rec.guard.check(fn, (torch.randn(1, 4),), {}) is None  # size 1 is specialised
        assert rec.guard.check(fn, (torch.randn(3, 4, 1),), {}) is None


@pytest.mark.parametrize("n", [2, 7])
def test_shape_guard_source_names_inputs(n: int) -> None:
    graph = _symbolic_graph(torch.ones(3, 4), torch.ones(3, 4), propagate=True)
    gm, _ = compile_graph(graph, [torch.ones(3, 4)] * 2, "eager")
    guard = shape_guard(gm)
    assert guard is not None and "L['t0']" in guard.source and "L['t1']" in guard.source
    assert guard(torch.ones(n, 4), torch.ones(n, 4))


def test_bare_graph_gets_the_relations_the_monitor_assumed() -> None:
    """A record with nothing to compile still checks what reading sizes relied on."""
    graph = _symbolic_graph(torch.ones(3, 4), torch.ones(3, 4), propagate=True)
    guard = shape_guard(graph)
    assert guard is not None
    assert guard(torch.ones(5, 4), torch.ones(5, 4))
    assert not guard(torch.ones(5, 4), torch.ones(6, 4))
    assert shape_guard(_symbolic_graph(torch.ones(3, 4), dims=())) is None


def test_a_size_the_shape_env_fixed_is_checked() -> None:
    """A guard that turned a symbol into a constant (a compiler specialising it) is kept."""
    graph = _symbolic_graph(torch.ones(3, 4))
    (ph,) = [n for n in graph.nodes if n.op == "placeholder"]
    int(ph.meta["magpy_fake"].shape[0])  # guards s0 == 3, as a specialising compiler does
    guard = shape_guard(graph)
    assert guard is not None
    assert guard(torch.ones(3, 4))
    assert not guard(torch.ones(5, 4))
