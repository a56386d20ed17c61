"""Unit tests for outlining marked calls into invoke_subgraph (_regions.py), on graphs built
by hand: each call's nodes carry ``meta[REGION] = (call id, name)`` as the monitor sets it."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from magpy_codegen._regions import OUTLINED, outline_regions
from magpy_monitor import REGION


def _chain(constants: list[float], *, effect: int | None = None) -> fx.GraphModule:
    """x -> (x * c + 1).sin() per constant c, each step one marked call."""
    g = fx.Graph()
    v: Any = g.placeholder("x")
    for i, c in enumerate(constants):
        a = g.call_function(operator.mul, (v, c))
        b = g.call_function(operator.add, (a, 1.0))
        v = g.call_method("sin_" if i == effect else "sin", (b,))
        for n in (a, b, v):
            n.meta[REGION] = (i, "step")
        if i == effect:
            v.meta["effect"] = True
    g.output((v,))
    return fx.GraphModule(torch.nn.Module(), g)


def _targets(gm: fx.GraphModule) -> list[str]:
    hop = torch.ops.higher_order.invoke_subgraph
    return [n.args[0].target for n in gm.graph.nodes if n.target is hop]


def test_identical_calls_share_one_subgraph() -> None:
    gm = _chain([2.0, 2.0, 2.0])
    x = torch.randn(3)
    new = outline_regions(gm, [x])
    assert new is not None and _targets(new) == ["magpy_region_0"] * 3
    assert torch.equal(new(x)[0], gm(x)[0])


def test_signed_zero_constants_are_not_the_same_call() -> None:
    """0.0 == -0.0 in Python; the subgraphs differ (x * -0.0 is -0.0 where x > 0)."""
    gm = _chain([0.0, -0.0])
    new = outline_regions(gm, [torch.randn(3)])
    assert new is not None and _targets(new) == ["magpy_region_0", "magpy_region_1"]


def test_other_operand_shapes_are_other_subgraphs() -> None:
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    outs = []
    for i, v in enumerate((x, y)):
        n = g.call_method("cos", (v,))
        n.meta[REGION] = (i, "cos")
        outs.append(n)
    g.output(tuple(outs))
    gm = fx.GraphModule(torch.nn.Module(), g)
    new = outline_regions(gm, [torch.randn(3), torch.randn(4)])
    assert new is not None and _targets(new) == ["magpy_region_0", "magpy_region_1"]


def test_a_call_updating_a_tensor_in_place_stays_inline() -> None:
    gm = _chain([2.0, 2.0], effect=1)
    x = torch.randn(3)
    new = outline_regions(gm, [x])
    assert new is not None and _targets(new) == ["magpy_region_0"]
    assert new.meta[OUTLINED] == [
        "step: magpy_region_0",
        "step: inlined (updates a tensor in place)",
    ]
    assert torch.equal(new(x)[0], gm(x)[0])


def test_unmarked_graph_is_left_alone() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_method("cos", (x,)),))
    gm = fx.GraphModule(torch.nn.Module(), g)
    assert outline_regions(gm, [torch.randn(3)]) is None and OUTLINED not in gm.meta
