"""Dynamic shapes: a size that changes between calls is recompiled once, symbolically.

``dynamic=None`` (the default) captures static first; a miss caused by changed tensor sizes makes
those dims symbolic in the next record, with guards on what the program relied on. Python that
depends on a size's value (``range(x.shape[0])``, ``if``) specialises it instead, so results stay
right. Every test counts records through ``magpy.stats`` (a cache that never hits cannot pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import magpy


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 32)
        self.l2 = nn.Linear(32, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.l1(x))
        return self.l2(h).view(x.shape[0], 2, -1).sum(1)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(h.reshape(h.size(0), -1))


class Attention(nn.Module):
    """Causal self-attention whose views and mask come from ``x.shape``."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(x.shape[:-1] + (c,))  # noqa: RUF005 (tested)
        return x + self.out(y)


class Block(nn.Module):
    """A transformer-ish block: attention, then an MLP, with learned positions sliced by length."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(64, dim) * 0.02)
        self.attn = Attention(dim)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU())
        self.proj = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.pos[: x.size(1)]
        x = self.attn(x)
        return x + self.proj(self.mlp(x))


def _batches(*shape: int, sizes: list[int]) -> Callable[[int], H.Inputs]:
    """``make_inputs(i)``: one tensor of ``(sizes[i], *shape)``."""

    def make(i: int) -> H.Inputs:
        g = torch.Generator().manual_seed(100 + i)
        return [torch.randn(sizes[i], *shape, generator=g)], {}

    return make


def _run(fn: Any, sizes: list[tuple[int, ...]], **compile_kwargs: Any) -> Any:
    """Call ``fn`` compiled on tensors of ``sizes``, checking every result against eager."""
    compiled = magpy.compile(fn, **compile_kwargs)
    for i, size in enumerate(sizes):
        x = torch.randn(*size, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(compiled(x), fn(x))
    return compiled


BATCHES = list(range(1, 17))


@pytest.mark.parametrize(
    ("model", "shape"),
    [(MLP, (8,)), (Attention, (6, 16))],
    ids=["mlp", "attention"],
)
def test_batch_sizes_1_to_16_take_two_records(model: Any, shape: tuple[int, ...]) -> None:
    """Batch 1 is specialised (as torch does for sizes 0/1); 2..16 share one symbolic record."""
    torch.manual_seed(0)
    H.assert_compiles_like_eager(
        model().eval(),
        _batches(*shape, sizes=BATCHES),
        calls=len(BATCHES),
        expect_records=2,
    )


def test_conv_batch_sizes_take_two_records() -> None:
    """A conv net over batch 1..15: two records. (Batch 16 would add a third: torch's conv
    picks its kernel by batch size, and the fake convolution guards ``batch < 16`` for it.)"""
    torch.manual_seed(0)
    sizes = list(range(1, 16))
    H.assert_compiles_like_eager(
        ConvNet().eval(), _batches(3, 8, 8, sizes=sizes), calls=len(sizes), expect_records=2
    )


def test_sequence_length_changes_in_a_transformer_block() -> None:
    """Lengths 3..14 (views, the causal mask and the position slice follow ``x.shape``)."""
    torch.manual_seed(0)
    block = Block().eval()
    lengths = [5, 7, 3, 12, 9, 14, 4, 7, 11]

    def make(i: int) -> H.Inputs:
        g = torch.Generator().manual_seed(i)
        return [torch.randn(2, lengths[i], 16, generator=g)], {}

    with torch.no_grad():
        H.assert_compiles_like_eager(block, make, calls=len(lengths), expect_records=2)


def test_size_used_as_an_operator_argument_is_computed_in_the_graph() -> None:
    """``x.size(1) * 2`` and ``torch.arange(x.shape[1])`` follow the size: one symbolic record."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], dtype=x.dtype)
        return (x + pos).repeat(1, 2).view(x.size(0), x.size(1) * 2) / x.size(1)

    compiled = _run(fn, [(3, 4), (3, 6), (3, 9), (3, 5), (3, 6)], backend="eager")
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (2, 3)
    code = compiled._magpy_state.records[0].graph_module.code
    assert ".size(1)" in code and "arange" in code


def test_range_over_a_size_specialises_it() -> None:
    """``for i in range(x.shape[0])`` unrolls per value: a record per size, each one right."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        out = x[0]
        for i in range(x.shape[0]):
            out = out + x[i] * i
        return out

    compiled = _run(fn, [(2, 3), (3, 3), (4, 3), (3, 3), (2, 3), (4, 3)], backend="eager")
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.fallbacks) == (3, 3, 0)


def test_a_branch_on_a_size_guards_the_relation_not_the_size() -> None:
    """``if x.shape[0] > 4``: the record of each side serves every size on that side (the
    ShapeEnv records ``s0 <= 4`` / ``4 < s0``; the shape guard checks it), as a growing KV
    cache's length compared with the query's does not make a record per length."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    sizes = [(2, 3), (3, 3), (6, 3), (4, 3), (7, 3), (5, 3), (3, 3), (9, 3)]
    compiled = _run(fn, sizes, backend="eager")
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (3, 5), st


def test_comparisons_between_sizes_guard_their_outcome() -> None:
    """``n == m`` of two dynamic sizes and ``x.numel() == 0``: each outcome a record, whatever
    the sizes (a relation that stops holding misses)."""

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0:
            return y
        if x.shape[0] == y.shape[0]:
            return x + y
        return x.sum() - y

    compiled = magpy.compile(fn, backend="eager")
    for n, m in [(3, 3), (4, 4), (4, 3), (5, 5), (8, 8), (6, 2), (2, 9), (7, 7), (3, 5)]:
        x, y = torch.randn(n), torch.randn(m)
        H.assert_same(compiled(x, y), fn(x, y), f"{n}, {m}")
    st = magpy.stats(compiled)
    assert st.records <= 3 and st.hits >= 6 and st.fallbacks == 0, st


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_split_count_follows_the_size(backend: str) -> None:
    """How many chunks ``split`` returns depends on the size: never replayed with a stale count.

    With ``aot_eager`` the compiler itself specialises the size; the shape guard checks it.
    """

    def fn(x: torch.Tensor) -> Any:
        parts = x.split(2)
        return torch.stack([p.sum() for p in parts]), len(parts)

    compiled = magpy.compile(fn, backend=backend)
    for n in (2, 4, 6, 4, 8, 6):
        x = torch.randn(n, 3)
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    assert magpy.stats(compiled).hits == 2


def test_sizes_returned_to_python() -> None:
    """A size returned (alone or as ``x.shape``) comes from the graph, not from the record."""

    def fn(x: torch.Tensor) -> Any:
        return x.sum(0), x.shape[0], x.shape, len(x)

    compiled = magpy.compile(fn, backend="eager")
    for n in (2, 3, 5, 3):
        x = torch.randn(n, 4)
        got = compiled(x)
        torch.testing.assert_close(got[0], x.sum(0))
        assert got[1:] == (n, torch.Size([n, 4]), n)
        assert type(got[2]) is torch.Size
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (2, 2)


def test_two_dynamic_inputs_guard_their_relation() -> None:
    """``x + y``: equal sizes share a record; a broadcasting y (size 1) gets its own."""

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y).relu()

    compiled = magpy.compile(fn, backend="eager")
    for n, m in [(2, 2), (3, 3), (5, 5), (4, 1), (6, 6), (7, 1)]:
        x, y = torch.randn(n, 3), torch.randn(m, 3)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    st = magpy.stats(compiled)
    assert st.records <= 3 and st.fallbacks == 0


def test_dynamic_true_is_symbolic_from_the_first_capture() -> None:
    compiled = _run(MLP().eval(), [(n, 8) for n in (2, 5, 3, 9, 4)], backend="eager", dynamic=True)
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 4)


def test_dynamic_false_keeps_one_record_per_shape() -> None:
    compiled = _run(MLP().eval(), [(n, 8) for n in (2, 3, 4, 3)], backend="eager", dynamic=False)
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (3, 1)
    assert all(r.graph_module is not None for r in compiled._magpy_state.records)
    assert ".size(" not in compiled._magpy_state.records[0].graph_module.code


def test_the_last_record_allowed_is_fully_dynamic() -> None:
    """With ``max_records=2`` the second record makes every size symbolic, not just dim 0."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0] * x.shape[1]).cumsum(0)

    compiled = _run(
        fn, [(2, 3), (3, 3), (4, 5), (5, 2)], backend="eager", options={"max_records": 2}
    )
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.fallbacks) == (2, 2, 0)


def _symbolic(rec: Any) -> bool:
    return any(
        isinstance(size, torch.SymInt)
        for n in rec.graph_module.graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("magpy_fake"), torch.Tensor)
        for size in n.meta["magpy_fake"].shape
    )


def test_blocks_of_other_widths_keep_static_records() -> None:
    """One function over blocks whose parameters have other sizes (a ResNet's stages): a
    parameter's sizes stay static, so a miss on another width is another block shape, not a
    changed size. Each width gets a static record; none is made symbolic in the input's width
    (which the static weight would pin again), and each is hit on its next call."""

    def step(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(block(x)) + x

    torch.manual_seed(0)
    blocks = [nn.Linear(w, w) for w in (4, 8, 16)]
    compiled = magpy.compile(step, backend="eager")
    for i in range(6):
        block = blocks[i % 3]
        x = torch.randn(2, block.in_features, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(compiled(block, x), step(block, x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.fallbacks) == (3, 3, 0)
    assert not any(_symbolic(r) for r in compiled._magpy_state.records)


def test_inputs_of_one_block_shape_still_become_symbolic() -> None:
    """The same block with a changing batch: the batch size becomes symbolic as before."""
    torch.manual_seed(0)
    block = nn.Linear(4, 4)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(block(x)) + x

    compiled = _run(step, [(n, 4) for n in (2, 3, 5, 7)], backend="eager")
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (2, 2)
    assert _symbolic(compiled._magpy_state.records[0])


def test_dynamic_shapes_across_a_graph_break(capsys: Any) -> None:
    """Segments (sites) get dynamic sizes too: call 1 finds the break, call 2 records both
    segments, call 3 records them again with the batch size symbolic; later calls hit both."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = F.relu(x).view(x.shape[0], -1)
        print("break")
        return y * y.shape[1]

    compiled = _run(fn, [(n, 2, 3) for n in (2, 3, 4, 5, 6, 7)], backend="eager")
    capsys.readouterr()
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.fallbacks) == (4, 6, 0)


@pytest.mark.parametrize(
    ("name", "records"),
    [
        ("c_sequence_length_changes", 2),
        ("c_loop_count_argument", 3),
        ("c_float_argument_changes", 2),
        ("c_flag_flip_recompiles", 2),
    ],
)
def test_conformance_dynamic_programs_record_counts(name: str, records: int, programs: Any) -> None:
    """The conformance programs whose inputs change: right results, and this many records."""
    spec = programs.CASES[name]
    fn, make = spec["build"]()
    compiled = magpy.compile(fn, backend="eager")
    for i in range(spec["calls"]):
        args, kwargs = make(i)
        H.assert_same(compiled(*args, **kwargs), fn(*args, **kwargs), f"{name}, call {i}")
    st = magpy.stats(compiled)
    assert (st.records, st.hits + st.misses, st.fallbacks) == (records, spec["calls"], 0)


@pytest.mark.slow
@pytest.mark.inductor
def test_batch_sizes_through_inductor() -> None:
    """Inductor compiles the symbolic record once (one kernel for batch 2..16)."""
    torch.manual_seed(0)
    with torch.no_grad():
        H.assert_compiles_like_eager(
            Attention().eval(),
            _batches(6, 16, sizes=BATCHES),
            calls=len(BATCHES),
            backend="inductor",
            expect_records=2,
        )
