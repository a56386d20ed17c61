"""One record for N instances (``magpy_runtime.cache._pool``): compiled callables of the same
code and settings adopt each other's records where the guard passes, so identical blocks compiled
one by one compile one graph; blocks that differ in structure, a hyperparameter, an instance
override or a hook, and functions that only share code, do not share. Outputs are compared with
eager on fresh inputs over several calls; backend compiles are counted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import magpy


class Block(nn.Module):
    def __init__(self, width: int = 8, eps: float = 1e-5) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width, eps=eps)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.relu(self.lin(x)) * self.scale + x)


class Counting:
    """A backend that runs the graph as is and counts the graphs it was given."""

    def __init__(self) -> None:
        self.compiles = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.compiles += 1
        return gm.forward


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    magpy.reset()
    yield
    magpy.reset()


def _calls(compiled: list[Any], eager: list[Any], rounds: int = 3, width: int = 8) -> None:
    """Every compiled callable against its eager twin on fresh inputs, ``rounds`` times."""
    for _ in range(rounds):
        for fast, slow in zip(compiled, eager, strict=True):
            x = torch.randn(2, width)
            torch.testing.assert_close(fast(x), slow(x), rtol=0, atol=0)


def _origins(compiled: list[Any]) -> set[int]:
    return {id(r.origin or r) for c in compiled for r in c._magpy_state.records}


def test_identical_blocks_compiled_one_by_one_compile_one_graph() -> None:
    backend = Counting()
    blocks = [Block() for _ in range(12)]
    compiled = [magpy.compile(b, backend=backend) for b in blocks]
    _calls(compiled, blocks)
    assert backend.compiles == 1
    assert len(_origins(compiled)) == 1
    assert [magpy.stats(c).records for c in compiled] == [1] * 12
    # only the first block monitored a call; the others adopted its record on their first
    assert [magpy.stats(c).misses for c in compiled] == [1] + [0] * 11
    assert sum(magpy.stats(c).hits for c in compiled) == 3 * 12 - 1


def test_bound_forwards_as_fsdp_users_compile_share_one_graph() -> None:
    backend = Counting()
    blocks = [Block() for _ in range(4)]
    eager = [b.forward for b in blocks]
    for b in blocks:
        b.forward = magpy.compile(b.forward, backend=backend)  # type: ignore[method-assign]
    _calls([b.forward for b in blocks], eager)
    assert backend.compiles == 1


def test_blocks_that_differ_get_their_own_records() -> None:
    """A hyperparameter (``scale``, LayerNorm's ``eps``), a shape, an instance override of
    ``forward`` and a forward hook each fail the shared guard: never a wrong adoption."""
    backend = Counting()
    plain, other_eps, other_scale = Block(), Block(eps=1e-3), Block()
    other_scale.scale = 2.0
    overridden, hooked = Block(), Block()
    overridden.forward = lambda x: Block.forward(overridden, x) * 3  # type: ignore[method-assign]
    hooked.register_forward_hook(lambda m, args, out: out + 1)
    blocks = [plain, other_eps, other_scale, overridden, hooked]
    compiled = [magpy.compile(b, backend=backend) for b in blocks]
    _calls(compiled, blocks)
    assert len(_origins(compiled)) == 5
    wide, wide_eager = [magpy.compile(Block(16), backend=backend)], None
    wide_eager = [wide[0]._magpy_original]
    _calls(wide, wide_eager, width=16)
    assert backend.compiles == 6


def test_a_block_changed_after_adopting_records_again() -> None:
    backend = Counting()
    blocks = [Block() for _ in range(3)]
    compiled = [magpy.compile(b, backend=backend) for b in blocks]
    _calls(compiled, blocks)
    assert backend.compiles == 1
    blocks[2].scale = 3.0
    _calls(compiled, blocks)
    assert backend.compiles == 2
    assert magpy.stats(compiled[2]).records == 2
    blocks[1].scale = 3.0  # now block 1 matches the record block 2 made: adopted, no compile
    _calls(compiled, blocks)
    assert backend.compiles == 2


def test_functions_share_only_with_the_same_function() -> None:
    """Closures of one code with different cells are different functions: no sharing (the
    guard of a whole call need not read cells another closure holds)."""
    backend = Counting()

    def make(k: float) -> Callable[[torch.Tensor], torch.Tensor]:
        def f(x: torch.Tensor) -> torch.Tensor:
            return torch.sin(x) * k

        return f

    f2, f3 = make(2.0), make(3.0)
    compiled = [magpy.compile(f, backend=backend) for f in (f2, f3, f2)]
    _calls(compiled, [f2, f3, f2])
    assert backend.compiles == 2
    assert magpy.stats(compiled[2]).misses == 0  # f2 compiled again adopts


def test_different_settings_do_not_share() -> None:
    first, second = Counting(), Counting()
    blocks = [Block(), Block(), Block()]
    compiled = [
        magpy.compile(blocks[0], backend=first),
        magpy.compile(blocks[1], backend=second),
        magpy.compile(blocks[2], backend=first, dynamic=False),
    ]
    _calls(compiled, blocks)
    assert (first.compiles, second.compiles) == (2, 1)


def test_copies_adopt_and_reset_forgets() -> None:
    """A deep copy of a compiled module (same settings) adopts the original's record; after
    ``magpy.reset()`` nothing is left to adopt."""
    block = Block()
    compiled = magpy.compile(block, backend="eager")
    _calls([compiled], [block])
    twin = copy.deepcopy(compiled)
    _calls([twin], [twin._magpy_original])
    assert len(_origins([compiled, twin])) == 1 and magpy.stats(twin).misses == 0
    before = compiled._magpy_state.records[0]  # (kept alive: ids of dead records are reused)
    magpy.reset()
    again = magpy.compile(Block(), backend="eager")
    _calls([again], [again._magpy_original])
    assert magpy.stats(again).misses == 1
    (rec,) = again._magpy_state.records
    assert (rec.origin or rec) is not before


def test_per_block_inductor_compiles_once() -> None:
    """Through Inductor: four blocks, one graph compiled, outputs equal eager's."""
    blocks = [Block() for _ in range(4)]
    compiled = [magpy.compile(b, backend="inductor") for b in blocks]
    for _ in range(2):
        for fast, slow in zip(compiled, blocks, strict=True):
            x = torch.randn(2, 8)
            torch.testing.assert_close(fast(x), slow(x), rtol=1e-4, atol=1e-5)
    assert len(_origins(compiled)) == 1
    assert all(magpy.stats(c).records == 1 for c in compiled)


class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))) + x


def test_adopted_records_train_each_block_like_eager() -> None:
    """Training through blocks compiled one by one: each block's BatchNorm statistics, its
    parameters and their gradients stay its own (an adopted record writes the block it is
    called with), equal to eager's after several SGD steps."""
    torch.manual_seed(0)
    eager = nn.Sequential(*(ConvBlock() for _ in range(4)))
    fast = copy.deepcopy(eager)
    backend = Counting()
    for block in fast:
        block.forward = magpy.compile(block.forward, backend=backend)  # type: ignore[method-assign]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, fast)]
    for _ in range(4):
        x = torch.randn(2, 4, 6, 6)
        for model, opt in zip((eager, fast), opts, strict=True):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    # two graphs: the first block's input needs no gradient, the others' inputs do
    assert backend.compiles == 2
    assert [magpy.stats(b.forward).misses for b in fast] == [1, 1, 0, 0]
    for (name, a), b in zip(eager.state_dict().items(), fast.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
