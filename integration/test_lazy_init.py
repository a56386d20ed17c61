"""Lazy initialisation: a first call that writes state its own guard reads on the next call.

A module (or function) that initialises on its first call (a flag set under a lock, a buffer
registered, a size or a mask cached in an attribute, a global filled) takes a different path on
its second call. The rule (docs/lazy-init.md): a first call that writes the callable's own state
costs at most ONE extra monitored call, never a record per call, never a permanent split:

- a first call that wrote its own state without a break: its record's guard fails on call 2,
  which is monitored and makes the record that serves every later call;
- a first call that wrote its own state and met a graph break: call 2 is captured whole once
  more (not split into segments), and makes that record when the break is gone.

Every test runs the program eagerly and compiled side by side on fresh inputs, compares the
outputs, the modules' state and what was printed, and checks that from the third call on each
call is a hit of the same one-graph whole-call record that runs no line of the program.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any, cast

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy

CALLS = 6


def _state(target: Any) -> dict[str, Any]:
    """What to compare between the eager and the compiled side after each call."""
    if isinstance(target, nn.Module):
        return H._module_state(target)
    return {}


def assert_lazy_init_settles(
    make: Callable[[], Any],
    inputs: Callable[[], tuple[Any, ...]],
    *,
    first_break: bool,
    capsys: pytest.CaptureFixture[str] | None = None,
    state: Callable[[Any], dict[str, Any]] = _state,
) -> Any:
    """``make()`` twice (eager and compiled sides), ``CALLS`` calls on fresh ``inputs()``.

    Equal to eager on every call (outputs, state, printed text); at most two records, no
    segment record, the break (``first_break``) counted once; calls 3+ are hits of one
    whole-call record with a graph, and run none of the program's code."""
    torch.manual_seed(0)
    eager = make()
    torch.manual_seed(0)
    target = make()
    compiled = magpy.compile(target, backend="eager")
    files = H.user_code_files(target)
    assert files, "no user code to watch"
    for i in range(CALLS):
        args = inputs()
        torch.manual_seed(1000 + i)  # (the same draws on both sides: an initialisation's)
        want = eager(*args)
        want_out = capsys.readouterr().out if capsys else ""
        hits = magpy.stats(compiled).hits
        torch.manual_seed(1000 + i)
        with H.count_user_code(files) as seen:
            got = compiled(*args)
        got_out = capsys.readouterr().out if capsys else ""
        H.assert_same(got, want, f"call {i}")
        assert got_out == want_out, f"call {i}: printed {got_out!r}, eager {want_out!r}"
        assert state(target).keys() == state(eager).keys(), f"call {i}"
        for key, value in state(eager).items():
            H.assert_same(state(target)[key], value, f"call {i}: {key}")
        st = magpy.stats(compiled)
        if i >= 2:  # a hit of the whole-call record, no line of the program ran
            assert st.hits == hits + 1, (i, st)
            assert seen.events == 0, (i, seen.calls[:5])
    st = magpy.stats(compiled)
    cache = compiled._magpy_state
    assert st.records <= 2 and not cache.site_records, st
    assert (st.breaks, st.fallbacks, st.native_calls) == (int(first_break), 0, 0), st
    assert not cache.split, "the lazily initialised callable stayed split into segments"
    assert st.hits == CALLS - 2 and st.misses == 2, st
    served = [r for r in cache.records if r.hits]
    assert len(served) == 1 and served[0].hits == CALLS - 2, [r.hits for r in cache.records]
    assert served[0].graph_module is not None and st.graphs >= 1, st
    return compiled


def _x() -> tuple[torch.Tensor]:
    return (torch.randn(2, 4),)


# ---------------------------------------------------------------------------------- modules
class FlagUnderLock(nn.Module):
    """The first call takes a lock in a ``with`` block (a graph break) and sets a flag."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.lin = nn.Linear(4, 4)
        self.lock = threading.Lock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.ready:
            with self.lock:
                self.ready = True
        return self.lin(x).relu() * 2


def test_a_flag_set_under_a_lock_on_the_first_call() -> None:
    """The break of the first call is gone on the second: one whole record, never split."""
    compiled = assert_lazy_init_settles(FlagUnderLock, _x, first_break=True)
    assert compiled._magpy_state.break_reasons, "the first call's break is reported"


class BufferOnFirstCall(nn.Module):
    """A buffer registered on the first call, from the input's width."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "scale" not in self._buffers:
            self.register_buffer("scale", torch.linspace(0.5, 1.5, x.shape[-1]))
        return self.lin(x) * self.scale


def test_a_buffer_registered_on_the_first_call() -> None:
    breaks = bool(H.explain_quietly(BufferOnFirstCall(), torch.randn(2, 4)).break_reasons)
    assert_lazy_init_settles(BufferOnFirstCall, _x, first_break=breaks)


class SizeCached(nn.Module):
    """A size read from the first input and kept in an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.width: int | None = None
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.width is None:
            self.width = x.shape[-1]
        return self.lin(x)[..., : self.width // 2].sum(-1)


def test_a_size_cached_in_an_attribute() -> None:
    assert_lazy_init_settles(SizeCached, _x, first_break=False)


class MaskBuilt(nn.Module):
    """A causal mask built on the first call and kept (a plain attribute, not a buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.mask: torch.Tensor | None = None

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if self.mask is None:
            n = scores.shape[-1]
            self.mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        return scores.masked_fill(self.mask, float("-inf")).softmax(-1)


def test_a_mask_built_on_the_first_call() -> None:
    assert_lazy_init_settles(
        MaskBuilt,
        lambda: (torch.randn(2, 5, 5),),
        first_break=False,
        state=lambda m: {"mask": m.mask},
    )


class Outer(nn.Module):
    """The lazy initialisation (under a lock: a break) is a submodule's."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = FlagUnderLock()
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.inner(x) + x)


def test_lazy_initialisation_inside_a_submodule() -> None:
    assert_lazy_init_settles(Outer, _x, first_break=True)


class PrintsOnce(nn.Module):
    """The first call prints (a real graph break) while it initialises."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.ready:
            print("initialising", tuple(x.shape))
            self.ready = True
        return torch.tanh(self.lin(x))


def test_a_lazy_initialisation_that_prints(capsys: pytest.CaptureFixture[str]) -> None:
    compiled = assert_lazy_init_settles(PrintsOnce, _x, first_break=True, capsys=capsys)
    assert "print" in str(compiled._magpy_state.break_reasons[0]), (
        compiled._magpy_state.break_reasons
    )


class UsesLazyLinear(nn.Module):
    """torch's own lazy initialisation: ``nn.LazyLinear`` makes its weight (random draws) from
    the first input's width and drops its initialising hook. The first call runs the hook
    natively (as ``_call_impl`` does) and records the call of the module as it is from then on:
    one record, hit from the second call on."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.LazyLinear(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


class LazyConvStack(nn.Module):
    """Several of torch's lazy modules, one after the other (each initialises from what the
    previous one made), in a list the forward iterates."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.LazyConv2d(3, 3), nn.LazyBatchNorm2d(), nn.ReLU())
        self.towers = [nn.LazyLinear(5), nn.LazyLinear(2)]
        for i, t in enumerate(self.towers):
            self.add_module(f"tower{i}", t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(x).flatten(1)
        for t in self.towers:
            x = t(x)
        return x


def _lazy_torch_module_records_once(make: Callable[[], nn.Module], x: Callable[[], Any]) -> Any:
    """Eager and compiled side by side over ``CALLS`` calls on fresh inputs, the same draws on
    both sides: equal outputs and state on every call; the first call is the one record (no
    break), every later call a hit of it."""
    torch.manual_seed(0)
    eager = make()
    torch.manual_seed(0)
    target = make()
    compiled = magpy.compile(target, backend="eager")
    for i in range(CALLS):
        args = (x(),)
        torch.manual_seed(1000 + i)
        want = eager(*args)
        torch.manual_seed(1000 + i)
        got = compiled(*args)
        H.assert_same(got, want, f"call {i}")
        for key, value in _state(eager).items():
            H.assert_same(_state(target)[key], value, f"call {i}: {key}")
        st = magpy.stats(compiled)
        assert (st.records, st.breaks, st.fallbacks, st.misses) == (1, 0, 0, 1), (i, st)
        assert st.hits == i and st.graphs == 1, (i, st)
    return compiled


def test_a_lazy_torch_module() -> None:
    compiled = _lazy_torch_module_records_once(UsesLazyLinear, lambda: torch.randn(2, 3))
    assert type(compiled._magpy_original.lin) is nn.Linear  # (it became a Linear, as eagerly)


def test_lazy_torch_modules_in_a_sequence_and_a_list() -> None:
    compiled = _lazy_torch_module_records_once(LazyConvStack, lambda: torch.randn(2, 2, 5, 5))
    kinds = [type(m) for m in compiled._magpy_original.modules()]
    assert nn.Conv2d in kinds and nn.BatchNorm2d in kinds and nn.Linear in kinds, kinds


def test_a_lazy_module_with_another_pre_hook_first_settles() -> None:
    """Another pre-hook runs before the initialising one: that call stays a break (the
    monitor would have to run both natively, in order), and the next call records whole."""

    def make() -> nn.Module:
        mod = UsesLazyLinear()
        mod.lin.register_forward_pre_hook(lambda m, a: (a[0] * 2,), prepend=True)
        return mod

    assert_lazy_init_settles(make, lambda: (torch.randn(2, 3),), first_break=True)


# ---------------------------------------------------------------------------------- functions
TABLE: torch.Tensor | None = None


def uses_a_global_table(x: torch.Tensor) -> torch.Tensor:
    """A global filled on the first call, which prints (a break) while it does."""
    global TABLE
    if TABLE is None:
        print("building the table")
        TABLE = torch.arange(4.0)
    return x * TABLE + 1


def test_a_global_filled_on_the_first_call(capsys: pytest.CaptureFixture[str]) -> None:
    """The function's own bindings count as its state: its global is rebound on call 1. (Each
    side is the same code with globals of its own, so the eager side's first call does not
    initialise the compiled side's.)"""

    def fresh() -> Callable[[torch.Tensor], torch.Tensor]:
        code = uses_a_global_table.__code__
        own = types.FunctionType(code, {**globals(), "TABLE": None}, code.co_name)
        return cast(Callable[[torch.Tensor], torch.Tensor], own)

    assert_lazy_init_settles(fresh, _x, first_break=True, capsys=capsys)
    assert TABLE is None  # (this module's global is left alone)


# ---------------------------------------------------------------------------------- the rule
class CountsAndPrints(nn.Module):
    """Writes its own state (a counter) and breaks (print) on every call: no lazy init."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = x * 2
        print("call", self.calls)
        return y + 1


def prints_every_call(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("called")
    return y + 1


@pytest.mark.parametrize(
    ("make", "whole_calls"),
    [(CountsAndPrints, 2), (lambda: prints_every_call, 1)],
    ids=["own_state_written", "nothing_own_written"],
)
def test_a_break_that_stays_splits_after_at_most_one_more_whole_capture(
    make: Callable[[], Any], whole_calls: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A break every call: split on call 2 if call 1 wrote the callable's own state (one more
    whole capture), on call 1 otherwise; the break counts once, and the segments of the calls
    after serve it as before (equal to eager, printed text included)."""
    eager, compiled = make(), magpy.compile(make(), backend="eager")
    for i in range(CALLS):
        x = torch.randn(3)
        want = eager(x)
        want_out = capsys.readouterr().out
        got = compiled(x)
        assert capsys.readouterr().out == want_out, i
        H.assert_same(got, want, f"call {i}")
        cache = compiled._magpy_state
        assert cache.split == (i + 1 >= whole_calls), (i, cache.split)
    st = magpy.stats(compiled)
    # the whole capture's break counts once (also when met twice), the segment's once; the call
    # after the split records the two segments, every call after that hits both
    assert (st.breaks, st.fallbacks, st.records) == (2, 0, 2), st
    assert st.hits == 2 * (CALLS - whole_calls - 1), st
