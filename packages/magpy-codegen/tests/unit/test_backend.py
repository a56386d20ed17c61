"""Unit tests for backend resolution and graph compilation (_backend.py, _record.py)."""

from __future__ import annotations

import gc
import linecache
import operator
import weakref
from typing import Any

import pytest
import torch
import torch.fx as fx

from magpy_codegen import BACKENDS, compile_graph, resolve_backend
from magpy_codegen._backend import gains_nothing
from magpy_codegen._fusable import nothing_to_fuse
from magpy_refgraph import MagPyError, UnknownOptionError


def _graph() -> fx.Graph:
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(operator.mul, (x, 2))
    z = g.call_method("relu", (y,))
    g.output((y, z))
    return g


class TestResolveBackend:
    def test_known_names(self) -> None:
        """'eager', 'inductor', 'inductor_fast_random' and 'aot_eager' are the named backends."""
        assert set(BACKENDS) == {"eager", "inductor", "inductor_fast_random", "aot_eager"}
        for name in BACKENDS:
            assert resolve_backend(name) is BACKENDS[name]

    def test_unknown_name_is_a_value_error_naming_the_choices(self) -> None:
        """An unknown name raises UnknownOptionError (a ValueError) listing every choice."""
        with pytest.raises(ValueError, match="nope") as info:
            resolve_backend("nope")
        assert isinstance(info.value, UnknownOptionError)
        assert isinstance(info.value, MagPyError)
        for name in ("eager", "inductor", "aot_eager"):
            assert name in str(info.value)
        assert "callable" in str(info.value)

    def test_callable_is_used_as_is(self) -> None:
        """A callable backend is returned unchanged."""

        def mine(gm: Any, example_inputs: list[Any]) -> Any:
            return gm.forward

        assert resolve_backend(mine) is mine

    @pytest.mark.parametrize("bad", [None, 3, ["eager"]])
    def test_non_string_non_callable_is_a_type_error(self, bad: Any) -> None:
        """Anything else is a TypeError that names the type it got."""
        with pytest.raises(TypeError, match=type(bad).__name__):
            resolve_backend(bad)


class TestCompileGraph:
    def test_eager_runs_the_graph(self) -> None:
        """compile_graph with 'eager' returns the GraphModule and a callable giving a tuple."""
        gm, compiled = compile_graph(_graph(), [torch.ones(2)], "eager")
        assert isinstance(gm, fx.GraphModule)
        x = torch.tensor([-1.0, 2.0])
        out = compiled(x)
        assert isinstance(out, tuple)
        assert torch.equal(out[0], x * 2) and torch.equal(out[1], (x * 2).relu())

    def test_callable_backend_gets_graph_module_and_example_inputs(self) -> None:
        """A callable backend is called once with (gm, example_inputs); its result is used."""
        calls: list[tuple[Any, list[Any]]] = []
        example = [torch.ones(3)]

        def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
            calls.append((gm, example_inputs))
            return lambda *a: ("compiled", a)

        gm, compiled = compile_graph(_graph(), example, backend)
        assert len(calls) == 1
        assert calls[0][0] is gm
        assert calls[0][1] == example and calls[0][1][0] is example[0]
        assert compiled(1) == ("compiled", (1,))

    def test_the_compiled_graph_keeps_no_example_tensor(self) -> None:
        """Once compiled, the placeholders hold the example's metadata, not the tensor."""
        g = _graph()
        example = torch.ones(3, 2)
        next(iter(g.nodes)).meta["example_value"] = example
        seen: list[Any] = []

        def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
            seen.append(next(iter(gm.graph.nodes)).meta.get("example_value"))
            return gm.forward

        gm, _ = compile_graph(g, [example], backend)
        assert seen == [example]  # the backend still sees it
        meta = next(iter(gm.graph.nodes)).meta
        assert "example_value" not in meta
        assert tuple(meta["tensor_meta"].shape) == (3, 2)
        alive = weakref.ref(example)
        seen.clear()
        del example
        gc.collect()
        assert alive() is None

    def test_the_fx_source_goes_with_the_graph_module(self) -> None:
        """fx's linecache entry of a compiled GraphModule's forward lives as long as it does."""
        gm, compiled = compile_graph(_graph(), [torch.ones(2)], "eager")
        key = type(gm).forward.__code__.co_filename
        assert linecache.getlines(key)  # a traceback through the graph shows its lines
        del gm, compiled
        gc.collect()
        assert key not in linecache.cache

    def test_build_record_calls_the_backend_with_the_capture_inputs(self, record_of: Any) -> None:
        """build_record passes the captured graph and example inputs to a callable backend."""
        seen: list[tuple[Any, list[Any]]] = []

        def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
            seen.append((gm, list(example_inputs)))
            return gm.forward

        x = torch.ones(2)
        rec, result = record_of(lambda t: t + 1, x, backend=backend)
        assert len(seen) == 1
        gm, inputs = seen[0]
        assert rec.graph_module is gm
        assert inputs[0] is x and len(inputs) == len(result.example_inputs)

    def test_backend_not_called_without_ops(self, record_of: Any) -> None:
        """A graph without operations is not compiled."""
        calls: list[Any] = []

        def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
            calls.append(gm)
            return gm.forward

        rec, _ = record_of(lambda t, n: n, torch.ones(2), 3, backend=backend)
        assert calls == []
        assert rec.graph_module is None


class TestNothingToFuse:
    """``"inductor"`` runs a graph as is when its only work is one operator (``_fusable``)."""

    @staticmethod
    def _traced(fn: Any) -> fx.Graph:
        return fx.symbolic_trace(fn).graph

    @pytest.mark.parametrize(
        "fn",
        [
            lambda p: (p[:, 1], p[:, 1].any()),  # a view and one reduction
            lambda x: (x.new_zeros(3, 4), x.new_zeros(3, 4), x.size(0)),  # made from a shape
            lambda x: x.view(-1).transpose(0, 0).sum(),
            lambda x: torch.relu(x),
            lambda x: x.mT.sum(),  # a property that is a view (``getattr(x, "mT")``)
            lambda x: x.T.data.unsafe_split(1)[0].sum(),  # views the schema leaves unsaid
        ],
        ids=["view-and-any", "new_zeros", "views-and-sum", "one-op", "mT", "unsafe_split"],
    )
    def test_one_operator_besides_views_is_nothing_to_fuse(self, fn: Any) -> None:
        assert nothing_to_fuse(self._traced(fn))

    @pytest.mark.parametrize(
        "fn",
        [
            lambda x: torch.relu(x) + 1,  # two operators: Inductor fuses them
            lambda x, i: x[i].sum(),  # a tensor index gathers: work
            lambda x: x.add_(1),  # an in-place update keeps the compiler's path
            lambda x: torch.nn.functional.relu(x, inplace=True),
        ],
        ids=["two-ops", "tensor-index", "in-place-method", "inplace-kwarg"],
    )
    def test_fusable_or_mutating_graphs_are_compiled(self, fn: Any) -> None:
        assert not nothing_to_fuse(self._traced(fn))

    def test_inductor_runs_such_a_graph_as_is(self) -> None:
        """No compile: the graph's own forward, with eager's values; a fusable graph is
        still handed to the backend (checked without compiling, through ``gains_nothing``)."""
        graph = self._traced(lambda p: (p[:, 1], p[:, 1].any()))
        p = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
        gm, compiled = compile_graph(graph, [p], "inductor")
        assert compiled == gm.forward
        view, any_ = compiled(p)
        assert torch.equal(view, p[:, 1]) and bool(any_)
        assert gains_nothing(BACKENDS["inductor"], graph)
        assert not gains_nothing(BACKENDS["aot_eager"], graph)  # (a checking backend)
        assert not gains_nothing(BACKENDS["inductor"], _graph())
