"""The operator graph of a capture (_recorder.py): placeholders, ops, dead code, effects."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from magpy_monitor import capture
from magpy_monitor.core.recorder import GraphConstant, GraphRecorder, held_whole, setitem
from magpy_refgraph import Item, Local, Path


def _graph(fn: Any, *args: Any) -> fx.Graph:
    result = capture(fn, args, {})
    assert result.failure is None, repr(result.failure)
    assert result.graph is not None
    return result.graph


def _ops(graph: fx.Graph) -> list[Any]:
    return [n.target for n in graph.nodes if n.op in ("call_function", "call_method")]


def _placeholders(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def _x() -> torch.Tensor:
    return torch.ones(2, 3)


class TestPlaceholders:
    def test_one_placeholder_per_external_tensor_path(self) -> None:
        """Each entry tensor used by an op gets one placeholder carrying its path and example."""
        x, y = _x(), _x() * 2
        g = _graph(lambda a, b: a * b + a, x, y)
        ph = _placeholders(g)
        assert [n.meta["path"] for n in ph] == [
            Path(Local("args"), (Item(0),)),
            Path(Local("args"), (Item(1),)),
        ]
        assert ph[0].meta["example_value"] is x and ph[1].meta["example_value"] is y

    def test_paths_that_read_alike_get_distinct_parameter_names(self) -> None:
        """``d['a.b']`` and ``d['a_b']`` sanitize alike; the forward must still compile."""
        d = {"a.b": _x(), "a_b": _x() * 3}
        result = capture(lambda m: m["a.b"] * m["a_b"], (d,), {})
        assert result.failure is None and result.graph is not None
        targets = [n.target for n in _placeholders(result.graph)]
        assert len(set(targets)) == 2, targets
        gm = fx.GraphModule(torch.nn.Module(), result.graph)
        (out,) = gm(d["a.b"], d["a_b"])
        assert torch.equal(out, d["a.b"] * d["a_b"])

    def test_tensor_used_twice_is_one_placeholder(self) -> None:
        """A tensor read twice through the same path is one placeholder."""
        g = _graph(lambda a: a * a + a, _x())
        assert len(_placeholders(g)) == 1

    def test_unused_tensor_gets_no_placeholder(self) -> None:
        """A tensor argument no op reads is not a graph input."""
        g = _graph(lambda a, b: a + 1, _x(), _x())
        assert [str(n.meta["path"]) for n in _placeholders(g)] == ["L.args[0]"]

    def test_parameters_become_placeholders_with_module_paths(self) -> None:
        """Module parameters are lifted as inputs at the paths where the module keeps them."""
        g = _graph(nn.Linear(3, 4), _x())
        assert [str(n.meta["path"]) for n in _placeholders(g)] == [
            "L.args[0]",
            "L.fn._parameters['weight']",
            "L.fn._parameters['bias']",
        ]

    def test_placeholders_precede_every_operation(self) -> None:
        """A placeholder created after ops were recorded is still inserted before them."""
        g = _graph(lambda a, b: (a + 1) * b, _x(), _x())
        kinds = [n.op for n in g.nodes]
        first_op = kinds.index("call_function")
        assert "placeholder" not in kinds[first_op:]


class TestOperations:
    def test_expected_ops_in_order(self) -> None:
        """Functions, operators, F.* and methods are recorded with their targets."""

        def f(x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(x) + 1
            return F.softmax(y, dim=-1).sum(dim=0)

        g = _graph(f, _x())
        assert _ops(g) == [torch.relu, operator.add, F.softmax, "sum"]
        (sm,) = [n for n in g.nodes if n.target is F.softmax]
        assert sm.kwargs == {"dim": -1}

    def test_guarded_scalars_are_constants_in_the_graph(self) -> None:
        """An int argument used by an op is a constant argument of the node."""
        g = _graph(lambda x, n: x * n, _x(), 3)
        (mul,) = [n for n in g.nodes if n.target is operator.mul]
        assert mul.args[1] == 3

    def test_output_is_a_tuple_and_graph_lints(self) -> None:
        """The output node returns a tuple of nodes; the graph passes fx lint."""
        g = _graph(lambda x: (x + 1, x * 2), _x())
        g.lint()
        (out,) = [n for n in g.nodes if n.op == "output"]
        assert isinstance(out.args[0], tuple) and len(out.args[0]) == 2

    def test_graph_runs_like_the_program(self) -> None:
        """The captured graph, run on the example inputs, gives the program's result."""
        x = torch.randn(2, 3)
        result = capture(lambda a: (a.relu() * 3 - a).mean(dim=1), (x,), {})
        assert result.graph is not None
        gm = fx.GraphModule(torch.nn.Module(), result.graph)
        (out,) = gm(*result.example_inputs)
        assert torch.equal(out, result.value)

    def test_no_ops_means_empty_graph(self) -> None:
        """A program without tensor ops captures a graph with no call nodes."""
        g = _graph(lambda a, b: b, _x(), 3)
        assert _ops(g) == [] and _placeholders(g) == []


class TestDeadCodeAndEffects:
    def test_dead_intermediates_are_removed(self) -> None:
        """Ops whose results are never used are dropped from the graph."""

        def f(x: torch.Tensor) -> torch.Tensor:
            unused = x * 2
            also_unused = unused.exp()  # noqa: F841
            return x + 1

        assert _ops(_graph(f, _x())) == [operator.add]

    def test_inplace_on_a_new_tensor_is_kept(self) -> None:
        """An in-place op is an effect: kept even when its tensor is never returned."""

        def f(x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y.mul_(2)
            return x * 3

        assert _ops(_graph(f, _x())) == ["clone", "mul_", operator.mul]

    def test_inplace_on_an_input_is_kept_and_applied(self) -> None:
        """x.add_(1) on an input is kept; running the graph mutates the input."""

        def f(x: torch.Tensor) -> None:
            x.add_(1)

        x = torch.zeros(2)
        result = capture(f, (x,), {})
        assert result.failure is None and result.graph is not None
        assert torch.equal(x, torch.ones(2))  # the monitored run itself
        assert _ops(result.graph) == ["add_"]
        fresh = torch.zeros(2)
        fx.GraphModule(torch.nn.Module(), result.graph)(fresh)
        assert torch.equal(fresh, torch.ones(2))

    def test_augmented_assignment_on_input_is_kept(self) -> None:
        """x += 1 on an input tensor is recorded as an in-place op and kept."""

        def f(x: torch.Tensor) -> torch.Tensor:
            x += 1
            return x

        x = torch.zeros(2)
        result = capture(f, (x,), {})
        assert result.failure is None and result.graph is not None
        assert len(_ops(result.graph)) == 1
        assert result.value is x

    def test_setitem_on_a_tensor_is_kept(self) -> None:
        """t[0] = 5 on a new tensor is kept as an effect node."""

        def f(x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y[0] = 5
            return x + 0

        assert setitem in _ops(_graph(f, torch.zeros(3)))

    def test_setitem_node_stands_for_the_updated_tensor(self) -> None:
        """The graph's STORE_SUBSCR node gives the tensor (not None, as operator.setitem
        would): run by the fx interpreter, as AOTAutograd and Inductor trace, later operations
        get the updated tensor."""

        def f(x: torch.Tensor) -> torch.Tensor:
            a = torch.zeros(2, 3)
            a[:, 1:] += x[:, 1:]
            return torch.cumsum(a, dim=1)

        x = torch.randn(2, 3)
        g = _graph(f, x)
        gm = torch.fx.GraphModule(torch.nn.Module(), g)
        (out,) = torch.fx.Interpreter(gm).run(x)
        torch.testing.assert_close(out, f(x))


class _Opaque:
    """An object no fx code can spell (its repr is no expression)."""

    def __init__(self, k: float) -> None:
        self.k = k


def _scaled(x: torch.Tensor, how: _Opaque, opts: dict[str, Any]) -> torch.Tensor:
    return x * how.k + opts["shift"].k


class TestGraphConstants:
    def test_constants_are_bound_into_the_target(self) -> None:
        """An argument wrapped in ``GraphConstant`` (a DTensor's mesh or placements) is held by
        the node's target, whose own arguments are the graph values only: the module's code
        compiles and computes what the call with the objects computes."""
        rec = GraphRecorder()
        x = torch.randn(3)
        node_x = rec.placeholder(Path(Local("x")), x)
        how, shift = _Opaque(2.0), _Opaque(1.0)
        opts = {"shift": GraphConstant(shift)}
        out = rec.call("call_function", _scaled, (node_x, GraphConstant(how), opts), {})
        assert out.args == (node_x,) and out.kwargs == {}
        assert out.target.__name__ == "_scaled_with_constants"
        rec.graph.output(out)
        gm = fx.GraphModule(torch.nn.Module(), rec.graph)
        torch.testing.assert_close(gm(x), x * 2.0 + 1.0)

    def test_a_method_with_constants_is_called_on_its_first_argument(self) -> None:
        rec = GraphRecorder()
        x = torch.randn(2, 3)
        node_x = rec.placeholder(Path(Local("x")), x)
        out = rec.call("call_method", "transpose", (node_x, GraphConstant(0), 1), {})
        assert out.op == "call_function"
        rec.graph.output(out)
        torch.testing.assert_close(fx.GraphModule(torch.nn.Module(), rec.graph)(x), x.T)

    def test_a_dict_holding_graph_values_stays_a_dict(self) -> None:
        """``held_whole``: a dict of options is one constant unless a graph value is in it."""
        rec = GraphRecorder()
        node_x = rec.placeholder(Path(Local("x")), torch.ones(1))
        whole = held_whole({"a": GraphConstant(_Opaque(1.0)), "b": 2})
        assert type(whole) is GraphConstant and whole.obj["b"] == 2
        assert type(whole.obj["a"]) is _Opaque
        assert held_whole({"a": node_x}) == {"a": node_x}
