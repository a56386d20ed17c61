"""``torch.compiler.nested_compile_region``: regional compilation inside what MagPy captures.

The monitor follows a marked function's call as any other and marks the graph nodes it made
(``libs/torch/regions.py``). For Inductor and AOTAutograd the record's graph holds each marked
call as one ``invoke_subgraph`` of a subgraph shared by every identical call, so the backend
compiles it once (``magpy_codegen/_regions.py``), in a training step whose backward is in the
graph as well; with the eager backend it stays inline. A call
that updates a tensor in place (or is otherwise unsound to outline) stays inline, and says why
in ``graph_module.meta["magpy_regions"]``. Results always equal eager's.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.fx as fx

import magpy
from magpy_runtime.store._persist import decode_graph, encode_graph

WIDTH = 8


class Block(torch.nn.Module):
    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 2 * width)
        self.fc2 = torch.nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class MarkedBlock(Block):
    @torch.compiler.nested_compile_region
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Stack(torch.nn.Module):
    def __init__(self, block: type[Block], n: int = 12, widths: list[int] | None = None) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(block(w) for w in (widths or [WIDTH] * n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


class MutatingBlock(Block):
    @torch.compiler.nested_compile_region
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(0.5)  # (an update of its input: not outlined)
        return self.fc1(x)


def _graph(f: Any) -> fx.GraphModule:
    records = f._magpy_state.records
    assert len(records) == 1
    gm = records[0].graph_module
    assert isinstance(gm, fx.GraphModule)
    return gm


def _invokes(gm: fx.GraphModule) -> list[fx.Node]:
    hop = torch.ops.higher_order.invoke_subgraph
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is hop]


def _calls_equal_eager(f: Any, model: torch.nn.Module, calls: int = 3) -> None:
    torch.manual_seed(0)
    for _ in range(calls):
        x = torch.randn(4, WIDTH)
        with torch.no_grad():
            assert torch.allclose(f(x), model(x), atol=1e-5)
    assert magpy.stats(f).records == 1 and magpy.stats(f).breaks == 0


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_marked_blocks_share_one_subgraph(backend: str) -> None:
    """Twelve marked blocks: twelve invoke_subgraph nodes of one subgraph, equal to eager."""
    torch.manual_seed(0)
    model = Stack(MarkedBlock).eval()
    f = magpy.compile(model, backend=backend)
    _calls_equal_eager(f, model)
    gm = _graph(f)
    invokes = _invokes(gm)
    assert len(invokes) == 12
    assert {n.args[0].target for n in invokes} == {"magpy_region_0"}
    assert not any(n.meta.get("magpy_region") for n in gm.graph.nodes)  # (none left inline)
    assert gm.meta["magpy_regions"] == ["MarkedBlock.forward: magpy_region_0"] * 12


def test_marked_blocks_with_grad_equal_eager() -> None:
    """With autograd on, the outlined graph's outputs and the parameters' gradients are eager's."""
    torch.manual_seed(0)
    model = Stack(MarkedBlock, n=3)
    f = magpy.compile(model, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(4, WIDTH)
        model.zero_grad()
        f(x).square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().sum().backward()
        for a, p in zip(got, model.parameters(), strict=True):
            assert torch.allclose(a, p.grad, atol=1e-5)
    assert len(_invokes(_graph(f))) == 3


def test_training_step_with_backward_outlines_regions() -> None:
    """A whole training step compiled (forward, ``loss.backward()``, optimizer step): the
    marked calls are outlined in its graph too (the joint trace goes through each
    ``invoke_subgraph``'s autograd), the graph is compiled (not run as is), and the losses and
    parameters equal eager's over several steps. The first block's input needs no gradient,
    the others' do: two subgraphs."""
    torch.manual_seed(0)
    model = Stack(MarkedBlock, n=3)
    twin = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]

    def step(m: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = m(x).square().sum()
        loss.backward()
        opt.step()
        return loss

    f = magpy.compile(step, backend="aot_eager")
    for _ in range(4):
        x = torch.randn(4, WIDTH)
        assert torch.allclose(f(model, opts[0], x), step(twin, opts[1], x), atol=1e-5)
        for a, b in zip(model.parameters(), twin.parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-5)
    records = f._magpy_state.records
    assert records and magpy.stats(f).breaks == 0
    for rec in records:
        gm = rec.graph_module
        assert gm is not None and "magpy_uncompiled" not in gm.meta, gm.meta
        assert any(n.target is torch.autograd.grad for n in gm.graph.nodes)
        assert [n.args[0].target for n in _invokes(gm)] == [
            "magpy_region_0",
            "magpy_region_1",
            "magpy_region_1",
        ]


def test_blocks_of_two_widths_share_two_subgraphs() -> None:
    torch.manual_seed(0)
    widths = [WIDTH, WIDTH, 2 * WIDTH, 2 * WIDTH]

    class Widening(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = Stack(MarkedBlock, widths=widths[:2])
            self.up = torch.nn.Linear(WIDTH, 2 * WIDTH)
            self.b = Stack(MarkedBlock, widths=widths[2:])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.up(self.a(x)))

    model = Widening().eval()
    f = magpy.compile(model, backend="aot_eager")
    _calls_equal_eager(f, model)
    invokes = _invokes(_graph(f))
    assert [n.args[0].target for n in invokes] == ["magpy_region_0"] * 2 + ["magpy_region_1"] * 2


def test_eager_backend_keeps_regions_inline() -> None:
    torch.manual_seed(0)
    model = Stack(MarkedBlock, n=4).eval()
    f = magpy.compile(model, backend="eager")
    _calls_equal_eager(f, model)
    assert not _invokes(_graph(f))


def test_unmarked_model_is_unchanged() -> None:
    torch.manual_seed(0)
    model = Stack(Block, n=4).eval()
    f = magpy.compile(model, backend="aot_eager")
    _calls_equal_eager(f, model)
    gm = _graph(f)
    assert not _invokes(gm) and "magpy_regions" not in gm.meta
    assert not any(n.meta.get("magpy_region") for n in gm.graph.nodes)


def test_region_updating_its_input_stays_inline() -> None:
    """A marked call that updates its input in place is inlined (and says why), as eager."""
    torch.manual_seed(0)
    model = MutatingBlock().eval()
    f = magpy.compile(model, backend="aot_eager")
    for _ in range(3):
        x = torch.randn(4, WIDTH)
        x_eager = x.clone()
        with torch.no_grad():
            assert torch.allclose(f(x), model(x_eager), atol=1e-6)
        assert torch.equal(x, x_eager)
    gm = _graph(f)
    assert not _invokes(gm)
    assert gm.meta["magpy_regions"] == [
        "MutatingBlock.forward: inlined (updates a tensor in place)"
    ]


def test_region_returning_its_input_view_stays_inline() -> None:
    @torch.compiler.nested_compile_region
    def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:2], x.sin()

    def fn(x: torch.Tensor) -> torch.Tensor:
        a, b = halves(x)
        c, d = halves(x + 1)
        return a + b.sum() + c + d.sum()

    f = magpy.compile(fn, backend="aot_eager")
    for _ in range(3):
        x = torch.randn(4, WIDTH)
        assert torch.allclose(f(x), fn(x), atol=1e-6)
    gm = _graph(f)
    assert not _invokes(gm)
    why = "inlined (gives a tensor sharing storage with an operand or another output)"
    assert (
        gm.meta["magpy_regions"]
        == [f"test_region_returning_its_input_view_stays_inline.<locals>.halves: {why}"] * 2
    )


def test_stored_graph_keeps_the_marks() -> None:
    """A record stored on disk keeps its nodes' marks: loaded, its graph outlines as before."""
    torch.manual_seed(0)
    model = Stack(MarkedBlock, n=2).eval()
    f = magpy.compile(model, backend="eager")
    _calls_equal_eager(f, model)
    graph = _graph(f).graph
    marks = [n.meta.get("magpy_region") for n in graph.nodes]
    assert len({m[0] for m in marks if m}) == 2
    assert [n.meta.get("magpy_region") for n in decode_graph(encode_graph(graph)).nodes] == marks


def test_symbolic_sizes_share_one_subgraph() -> None:
    """With dynamic=True the subgraph takes symbolic sizes: one record for every batch size."""
    torch.manual_seed(0)
    model = Stack(MarkedBlock, n=3).eval()
    f = magpy.compile(model, backend="aot_eager", dynamic=True)
    for batch in (2, 3, 5, 7):
        x = torch.randn(batch, WIDTH)
        with torch.no_grad():
            assert torch.allclose(f(x), model(x), atol=1e-5)
    assert magpy.stats(f).records == 1
    invokes = _invokes(_graph(f))
    assert [n.args[0].target for n in invokes] == ["magpy_region_0"] * 3
