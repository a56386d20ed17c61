"""``torch.compiler.set_stance`` (and ``magpy.set_stance``, the same) while MagPy compiles.

The stance is torch's own state, read on every compiled call: each stance keeps its torch
meaning (``magpy_runtime/cache/_stance.py``). Every test compares the compiled results to eager over
several calls and counts records, hits and misses with ``magpy.stats``, so a cache that never
hits, or a stance that is ignored, cannot pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn as nn

import magpy


@pytest.fixture(autouse=True)
def _default_stance() -> Iterator[None]:
    """Each test starts and ends in torch's default stance (a failing test may leave one)."""
    torch.compiler.set_stance("default")
    yield
    torch.compiler.set_stance("default")


def affine(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).sin()


def with_break(x: torch.Tensor) -> torch.Tensor:
    y = x.cos() * 3
    torch._dynamo.graph_break()
    return y + x.sum()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * 2


def same(compiled: Callable[..., Any], eager: Callable[..., Any], *args: Any) -> None:
    torch.testing.assert_close(compiled(*args), eager(*args), rtol=0, atol=0)


def counts(compiled: Any) -> tuple[int, int, int]:
    """``(records, hits, misses)``."""
    st = magpy.stats(compiled)
    return st.records, st.hits, st.misses


SETTERS = {"torch": torch.compiler.set_stance, "magpy": magpy.set_stance}


# ---------------------------------------------------------------------- force_eager
@pytest.mark.parametrize("setter", SETTERS)
def test_force_eager_as_context_manager_records_and_serves_nothing(setter: str) -> None:
    """Inside ``with set_stance("force_eager")`` the original code runs: no record is made or
    served; outside, the callable records and then hits."""
    compiled = magpy.compile(affine, backend="eager")
    x = torch.randn(4, 3)
    with SETTERS[setter]("force_eager"):
        for _ in range(3):
            same(compiled, affine, x)
    assert counts(compiled) == (0, 0, 0)
    for _ in range(3):
        same(compiled, affine, x)
    assert counts(compiled) == (1, 2, 1)
    with SETTERS[setter]("force_eager"):
        same(compiled, affine, x)  # a record that would serve is not used either
    assert counts(compiled) == (1, 2, 1)


@pytest.mark.parametrize("setter", SETTERS)
def test_force_eager_as_decorator_and_plain_call(setter: str) -> None:
    """The decorator form holds during the decorated function only; the plain call holds
    until the stance is set back."""
    compiled = magpy.compile(Block())
    eager = compiled._orig_mod
    x = torch.randn(2, 6)

    @SETTERS[setter]("force_eager")
    def uncompiled_calls() -> None:
        for _ in range(2):
            same(compiled, eager, x)

    uncompiled_calls()
    assert counts(compiled) == (0, 0, 0)
    SETTERS[setter]("force_eager")
    same(compiled, eager, x)
    assert counts(compiled) == (0, 0, 0)
    SETTERS[setter]("default")
    same(compiled, eager, x)
    same(compiled, eager, x)
    assert counts(compiled) == (1, 1, 1)


def test_force_eager_steps_sites_of_a_split_program_aside() -> None:
    """A program split at a graph break: under force_eager its sites neither serve nor record
    (their hits and records do not move)."""
    compiled = magpy.compile(with_break, backend="eager")
    x = torch.randn(5)
    for _ in range(4):
        same(compiled, with_break, x)
    before = magpy.stats(compiled)
    assert before.hits > 0 and before.records > 0
    with torch.compiler.set_stance("force_eager"):
        for _ in range(3):
            same(compiled, with_break, torch.randn(7, 2))
    after = magpy.stats(compiled)
    assert (after.records, after.hits, after.misses) == (
        before.records,
        before.hits,
        before.misses,
    )


# ---------------------------------------------------------------------- eager_on_recompile
def test_eager_on_recompile_serves_records_and_makes_none() -> None:
    """Records that pass serve the call; a call none serves runs natively, recording
    nothing; back in the default stance it is recorded."""
    compiled = magpy.compile(affine, backend="eager", dynamic=False)
    a, b = torch.randn(4, 3), torch.randn(6, 3)
    same(compiled, affine, a)
    assert counts(compiled) == (1, 0, 1)
    with magpy.set_stance("eager_on_recompile"):
        for _ in range(3):
            same(compiled, affine, a)  # hits
            same(compiled, affine, b)  # a miss, run natively
    assert counts(compiled) == (1, 3, 4)
    same(compiled, affine, b)
    same(compiled, affine, b)
    assert counts(compiled) == (2, 4, 5)


def test_eager_on_recompile_on_a_split_program_records_no_segment() -> None:
    """A split program's sites serve their records under eager_on_recompile and record
    nothing for inputs they have no record for."""
    compiled = magpy.compile(with_break, backend="eager", dynamic=False)
    x = torch.randn(5)
    for _ in range(4):
        same(compiled, with_break, x)
    records, hits, _ = counts(compiled)
    with torch.compiler.set_stance("eager_on_recompile"):
        same(compiled, with_break, x)
        assert counts(compiled)[:2] == (records, hits + 2)  # both segments hit
        for n in (7, 9):
            same(compiled, with_break, torch.randn(n, 2))
    assert counts(compiled)[0] == records


# ---------------------------------------------------------------------- fail_on_recompile
def test_fail_on_recompile_raises_where_a_record_would_be_made() -> None:
    """As in TorchDynamo: a call that would be recorded raises (a RuntimeError), the first
    call too; calls records serve run compiled."""
    compiled = magpy.compile(affine, backend="eager", dynamic=False)
    a, b = torch.randn(4, 3), torch.randn(6, 3)
    with (
        torch.compiler.set_stance("fail_on_recompile"),
        pytest.raises(RuntimeError, match="fail_on_recompile"),
    ):
        compiled(a)
    assert counts(compiled)[0] == 0
    same(compiled, affine, a)
    with magpy.set_stance("fail_on_recompile"):
        for _ in range(3):
            same(compiled, affine, a)
        with pytest.raises(magpy.StanceError, match=r"fail_on_recompile.*affine has 1 record"):
            compiled(b)
    assert counts(compiled)[:2] == (1, 3)
    same(compiled, affine, b)
    assert counts(compiled)[0] == 2


def test_fail_on_recompile_raises_at_a_site_of_a_split_program() -> None:
    """A split program whose site has no record for the call raises there, in the program."""
    compiled = magpy.compile(with_break, backend="eager", dynamic=False)
    x = torch.randn(5)
    for _ in range(4):
        same(compiled, with_break, x)
    records = counts(compiled)[0]
    with torch.compiler.set_stance("fail_on_recompile"):
        same(compiled, with_break, x)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            compiled(torch.randn(8, 3))
    assert counts(compiled)[0] == records


# ---------------------------------------------------------------------- eager_then_compile
@pytest.mark.parametrize("stance", ["eager_then_compile", "aot_eager_then_compile"])
def test_eager_then_compile_records_dynamic_from_the_second_call(stance: str) -> None:
    """The first call runs natively; the second records with what changed between the two
    dynamic (the batch size and the scalar), so later sizes and scalars hit that record."""

    def scaled(x: torch.Tensor, k: int) -> torch.Tensor:
        return (x * k).tanh().sum(0)

    compiled = magpy.compile(scaled, backend="eager")
    with torch.compiler.set_stance(stance):
        same(compiled, scaled, torch.randn(3, 4), 2)
        assert counts(compiled) == (0, 0, 1)
        same(compiled, scaled, torch.randn(5, 4), 3)
        assert counts(compiled) == (1, 0, 2)
        for n, k in ((7, 4), (9, 5), (2, 6)):
            same(compiled, scaled, torch.randn(n, 4), k)
    assert counts(compiled) == (1, 3, 2)
    # without the stance the first size is static: two records for the same calls
    magpy.reset()  # (a second compilation of ``scaled`` would adopt the first's record)
    plain = magpy.compile(scaled, backend="eager")
    for n, k in ((3, 2), (5, 3), (7, 4), (9, 5), (2, 6)):
        same(plain, scaled, torch.randn(n, 4), k)
    assert counts(plain) == (2, 3, 2)


# ---------------------------------------------------------------------- skip_guard_eval_unsafe
def test_skip_guard_eval_unsafe_is_refused_with_the_reason() -> None:
    """``magpy.set_stance`` refuses it before setting anything; set through torch, a compiled
    call refuses it (a result from a record whose guard was skipped could be wrong)."""
    with pytest.raises(magpy.StanceError, match=r"no part of it can be skipped"):
        magpy.set_stance("default", skip_guard_eval_unsafe=True)
    compiled = magpy.compile(affine, backend="eager")
    x = torch.randn(3)
    same(compiled, affine, x)
    with (
        torch.compiler.set_stance("default", skip_guard_eval_unsafe=True),
        pytest.raises(magpy.StanceError, match="skip_guard_eval_unsafe"),
    ):
        compiled(x)
    same(compiled, affine, x)
    assert counts(compiled) == (1, 1, 1)


def test_unknown_stance_is_an_error() -> None:
    with pytest.raises(magpy.StanceError, match="unknown stance"):
        magpy.set_stance("sometimes_eager")
    compiled = magpy.compile(affine, backend="eager")
    # (torch checks a stance's name only when it compiles)
    with (
        torch.compiler.set_stance("sometimes_eager"),
        pytest.raises(RuntimeError, match=r"invalid torch\.compile stance"),
    ):
        compiled(torch.randn(3))


# ---------------------------------------------------------------------- force_backend
def test_force_backend_records_with_that_backend_apart() -> None:
    """Under ``force_backend`` the records are made with that backend (a counting callable
    here) and serve the calls under it; the callable's own records serve the others."""
    seen: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.append(len(gm.graph.nodes))
        return gm.forward

    compiled = magpy.compile(affine, backend="eager")
    x = torch.randn(4)
    same(compiled, affine, x)
    same(compiled, affine, x)
    assert counts(compiled) == (1, 1, 1) and seen == []
    with magpy.set_stance(force_backend=counting):
        for _ in range(3):
            same(compiled, affine, x)
    assert len(seen) == 1  # one record with the forced backend, then hits
    assert counts(compiled) == (2, 3, 2)
    same(compiled, affine, x)
    assert counts(compiled) == (2, 4, 2) and len(seen) == 1
    with pytest.raises(RuntimeError, match="non-default stance"):
        magpy.set_stance("force_eager", force_backend="eager")


def test_set_stance_inside_a_compiled_function_is_a_graph_break() -> None:
    """Changing the stance is an effect on the compiler: in a compiled function the call runs
    natively, at a graph break, and the function stays correct."""

    def toggles(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        torch.compiler.set_stance("default")
        return y * 2

    compiled = magpy.compile(toggles, backend="eager")
    x = torch.randn(3)
    for _ in range(4):
        same(compiled, toggles, x)
    st = magpy.stats(compiled)
    assert st.breaks >= 1 and st.hits >= 1
