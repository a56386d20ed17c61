"""``warnings`` inside the compiled region: the warnings a program or torch issues, and the
filters a program sets.

- ``warnings.warn`` is replayed by the mock with the attribution eager computes (message,
  category, file and line), so the warning filters and registries behave as in eager on every
  hit: the program's own warnings, torch's (``InstanceNorm1d`` fed another channel count, the
  deprecated ``torch.get_autocast_cpu_dtype()``, the removed ``t.volatile``). A message computed
  from an argument is guarded; a ``stacklevel`` that reaches past the compiled function, and a
  ``catch_warnings`` block after a replayed warning, are breaks; an "error" filter raises where
  eager raises.
- ``warnings.catch_warnings()`` with ``simplefilter``/``filterwarnings`` inside (also set by a
  called function, also with ``return`` inside the block) needs no mock effect: the block
  restores the filters. ``warnings.warn`` inside such a block is a break whose segment re-enters
  the block with the filters set so far. A filter change outside the block, or an "error"
  action, is a break.

The warnings ``torch.utils.checkpoint`` issues are in ``test_checkpoint.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy


def _calls(fn: Callable[..., Any], extra: tuple[Any, ...], n: int = 3) -> list[Any]:
    """``fn(x, *extra)`` on ``n`` fresh inputs."""
    return [fn(torch.ones(2, 16), *extra) for _ in range(n)]


def _break_reasons(fn: Any, *args: Any) -> list[str]:
    explained = magpy.explain(fn)(*args)
    return [str(r.reason) for r in explained.break_reasons]


def _one_tensor(*shape: int) -> Callable[[int], H.Inputs]:
    return H.randn_inputs(shape)


def _warnings_of(fn: Any, x: torch.Tensor) -> tuple[Any, list[tuple[Any, ...]]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(x)
    return out, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]


# ---------------------------------------------------------------------- warnings.warn, replayed
class Unmatched(torch.nn.Module):
    """InstanceNorm1d(num_features) fed another channel count warns (stacklevel=2)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.InstanceNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.view(x.size(0), 4, -1)) * 2


def warn_here(x: torch.Tensor, level: str) -> torch.Tensor:
    warnings.warn(f"level {level}", RuntimeWarning)  # noqa: B028  (names this line)
    return x.add_(1)


@pytest.mark.parametrize("action", ["always", "default", "once", "module", "ignore"])
@pytest.mark.parametrize("make", [Unmatched, lambda: warn_here], ids=["torch_module", "direct"])
def test_a_warning_inside_the_program_is_replayed_like_eager(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    action: str,
    make: Callable[[], Any],
) -> None:
    """The replay names the file and line eager names (torch's ``_call_impl`` for the
    ``stacklevel=2`` of InstanceNorm), so each filter shows what eager shows, on every hit."""
    fn = make()
    extra = ("a",) if fn is warn_here else ()
    ex = H.explain_quietly(fn, torch.randn(2, 16), *extra)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    log = recorded(action)  # (setting a filter forgets what the registries saw)
    wants = _calls(fn, extra)
    expected = H.warnings_seen(log)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded(action)
    outs = _calls(compiled, extra)
    assert H.warnings_seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def softmax_no_dim(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softmax(x * 2) + 1  # (torch warns: "Implicit dimension ...")


class SizeAverageLoss(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (two warnings of torch's Python code: a deprecated argument, a target of another shape)
        a = torch.nn.functional.mse_loss(x, x.flip(0), size_average=False)
        return a + torch.nn.functional.l1_loss(x, x[:1])


@pytest.mark.parametrize("action", ["always", "default", "once", "ignore"])
@pytest.mark.parametrize(
    "make", [lambda: softmax_no_dim, SizeAverageLoss], ids=["function", "module"]
)
def test_a_librarys_warning_is_replayed_and_its_operation_stays_in_the_graph(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    action: str,
    make: Callable[[], Any],
) -> None:
    """torch's own Python warns while an operation runs natively (``libs/stdlib/warnspy``):
    the graph keeps the operation, run without those warnings, and the mock replays them from
    the frame eager names, so each filter shows what eager shows on every hit."""
    fn = make()
    ex = H.explain_quietly(fn, torch.randn(2, 16))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    log = recorded(action)
    wants = _calls(fn, ())
    expected = H.warnings_seen(log)
    assert action == "ignore" or expected  # (eager does warn)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded(action)
    outs = _calls(compiled, ())
    assert H.warnings_seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_a_warning_of_native_code_stays_a_break() -> None:
    """A warning torch's C++ issues (``TORCH_WARN``, maybe once per process) has no
    ``warnings.warn`` call to replay: its instruction runs natively on every call."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.std() * 2 + x  # (one element: "degrees of freedom is <= 0")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reasons = _break_reasons(f, torch.ones(1))
    assert any("issued a warning" in r for r in reasons), reasons
    assert any("degrees of freedom" in str(w.message) for w in caught)


def test_a_warning_registry_cleared_between_calls_shows_the_warning_again(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """Under "default" a warning shows once per location; the replay consults the module's
    ``__warningregistry__`` as it is at each call (here emptied between calls)."""
    compiled = magpy.compile(warn_here, backend="eager")
    for fn in (warn_here, compiled):
        log = recorded("default")
        for i in range(4):
            if i == 2:
                warn_here.__globals__.pop("__warningregistry__", None)
            fn(torch.zeros(2), "b")
        assert [str(w.message) for w in log] == ["level b", "level b"]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


def test_an_error_filter_raises_where_eager_raises(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """A record is guarded on the filters not turning the warning into an exception: with an
    "error" filter the warning raises before the program's in-place change, as in eager."""
    recorded("always")
    compiled = magpy.compile(warn_here, backend="eager")
    compiled(torch.zeros(2), "c")
    compiled(torch.zeros(2), "c")
    recorded("error")
    for fn in (warn_here, compiled):
        x = torch.zeros(2)
        with pytest.raises(RuntimeWarning, match="level c"):
            fn(x, "c")
        assert torch.equal(x, torch.zeros(2))
    recorded("always")
    x = torch.zeros(2)
    H.assert_same(compiled(x, "c"), torch.ones(2))
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2), st


def warn_then_block(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("before the block", stacklevel=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = x + 1
    return y


def test_a_replayed_warning_and_a_catch_warnings_block_never_share_a_record(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """Entering ``catch_warnings`` resets every registry (so "default" shows a warning again on
    every call), which the mock does not replay: the block after a replayed warning breaks."""
    fn = warn_then_block
    ex = H.explain_quietly(fn, torch.ones(2))
    assert "catch_warnings" in H.break_text(ex), H.break_text(ex)
    log = recorded("default")
    wants = [fn(torch.ones(2)) for _ in range(3)]
    expected = H.warnings_seen(log)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded("default")
    outs = [compiled(torch.ones(2)) for _ in range(3)]
    assert H.warnings_seen(log) == expected and len(expected) == 3
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)


def warn_with_label(x: torch.Tensor, label: str) -> torch.Tensor:
    warnings.warn("label " + label, stacklevel=1)
    return x * 2


def warn_in_caller(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("names the caller", stacklevel=2)
    return x * 2


def test_the_message_is_guarded(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """A message computed from an argument is guarded (another value records again)."""
    log = recorded("always")
    compiled = magpy.compile(warn_with_label, backend="eager")
    for label in ("p", "p", "q", "q"):
        H.assert_same(compiled(torch.ones(2), label), torch.ones(2) * 2)
    assert [str(w.message) for w in log] == ["label p", "label p", "label q", "label q"]
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 2, 0), st


class SoftmaxAsIs(nn.Softmax):
    """``nn.Softmax()`` without a dim compiled itself: torch's ``stacklevel=5`` names the
    frame that called its ``forward`` (``_call_impl``), outside the compiled code."""


class BottleSoftmax(nn.Softmax):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.flatten(0, 1)).view(x.shape) * 2


def warn_in_caller_after_break(x: torch.Tensor) -> torch.Tensor:
    y = x * 3
    print("a break: the rest is a segment of its own", end="")
    warnings.warn("names the caller too", stacklevel=2)
    return y + 1


def _from_two_lines(fn: Any, n: int) -> list[Any]:
    """``fn`` called on fresh inputs from two lines in turn (the caller's line changes)."""
    outs = []
    for i in range(n):
        x = torch.randn(2, 3, 4)
        if i % 2:
            outs.append(fn(x))
        else:
            outs.append(fn(x))
    return outs


@pytest.mark.parametrize("action", ["always", "default", "once", "module"])
@pytest.mark.parametrize(
    "make",
    [lambda: warn_in_caller, SoftmaxAsIs, BottleSoftmax, lambda: warn_in_caller_after_break],
    ids=["stacklevel2", "torch_module", "torch_module_subclass", "after_a_break"],
)
def test_a_warning_naming_a_frame_above_the_compiled_code_is_replayed_there(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    action: str,
    make: Callable[[], Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``stacklevel`` reaching past the compiled function (the program's own ``warn``, or
    torch's from the library) names the frame that called it, which is another line, module or
    registry from one call to the next: the mock finds that frame on every hit and warns from
    there, so each filter shows what eager shows (file, line, how often)."""
    fn = make()
    if fn is not warn_in_caller_after_break:  # (explain calls the function from elsewhere)
        ex = H.explain_quietly(fn, torch.randn(2, 3, 4))
        assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    log = recorded(action)
    wants = _from_two_lines(fn, 6)
    expected = H.warnings_seen(log)
    assert expected  # (eager does warn)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded(action)
    outs = _from_two_lines(compiled, 6)
    assert H.warnings_seen(log) == expected
    for got, want in zip(outs, wants, strict=False):
        assert got.shape == want.shape
    st = magpy.stats(compiled)
    if fn is warn_in_caller_after_break:  # (split: its segments hit from the third call on)
        assert st.hits >= 3 and st.fallbacks == 0, st
    else:
        assert (st.records, st.hits, st.breaks) == (1, 5, 0), st
    capsys.readouterr()


# ---------------------------------------------------------------------- warnings torch issues
def deprecated_reads(x: torch.Tensor) -> torch.Tensor:
    if torch.get_autocast_cpu_dtype() == torch.float16:
        return x - 1
    return x + 1


def test_a_deprecated_read_replays_its_warning() -> None:
    """``torch.get_autocast_cpu_dtype()`` warns on every call: every hit warns as eager does
    (same message, category, file and line), and the guard reads the state without warning."""
    compiled = magpy.compile(deprecated_reads, backend="eager")
    x = torch.randn(3)
    for _ in range(3):
        got, got_w = _warnings_of(compiled, x)
        want, want_w = _warnings_of(deprecated_reads, x)
        H.assert_same(got, want)
        assert got_w == want_w and len(want_w) == 1, (got_w, want_w)
        assert want_w[0][0] is DeprecationWarning
    assert H.counters(compiled) == (1, 2, 0, 0)


def still_volatile(x: torch.Tensor) -> torch.Tensor:
    return x if x.volatile else x * 2  # removed attribute: False, with a UserWarning


class VolatileBranch(nn.Module):
    """A ParityBench pattern (``NoisyLinear.forward``): ``x.volatile`` read in ``forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 3
        if not x.volatile:
            y = y + 1
        return y


def test_torch_warns_on_every_read_of_volatile() -> None:
    """What the replay relies on (``warnspy.NATIVE_REPLAYED``): torch's ``volatile`` getter
    warns on every read, not once per process, a UserWarning attributed to the reading line.
    If torch changes that, this fails and the entry must go."""
    from magpy_monitor.libs.stdlib import warnspy

    assert "volatile was removed (Variable.volatile is always False)" in warnspy.NATIVE_REPLAYED
    x = torch.randn(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert x.volatile is False  # (this line)
    assert len(caught) == 3
    assert {(w.category, str(w.message), w.filename) for w in caught} == {
        (UserWarning, "volatile was removed (Variable.volatile is always False)", __file__)
    }
    assert len({w.lineno for w in caught}) == 1


@pytest.mark.parametrize("action", ["always", "default", "once", "module", "ignore"])
@pytest.mark.parametrize(
    "make", [lambda: still_volatile, VolatileBranch], ids=["function", "module"]
)
def test_tensor_volatile_is_false_with_its_warning(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    action: str,
    make: Callable[[], Any],
) -> None:
    """``t.volatile`` (removed in PyTorch 0.4) is always False and torch's native getter warns
    on every read: the read is the constant False and the mock replays the warning from the
    program's line, so each filter shows what eager shows, on every hit; one record."""
    fn = make()
    ex = H.explain_quietly(fn, torch.randn(3))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    log = recorded(action)  # (setting a filter forgets what the registries saw)
    xs = [torch.randn(3) for _ in range(3)]
    wants = [fn(x) for x in xs]
    expected = H.warnings_seen(log)
    assert action == "ignore" or expected  # (eager does warn)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded(action)
    outs = [compiled(x) for x in xs]
    assert H.warnings_seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def volatile_then_native_warning(x: torch.Tensor) -> torch.Tensor:
    # (the call right after the read warns natively: one element, "degrees of freedom <= 0")
    return torch.std(x[:1], 0, True, x.volatile) * 2


def test_the_instruction_after_a_volatile_read_is_still_watched() -> None:
    """The read's warning is replayed when its value is made, at the next instruction's event:
    that instruction (here a call whose native code warns) is still watched, so it stays a
    break and its warning comes from the program's line, not from the graph's code."""
    compiled = magpy.compile(volatile_then_native_warning, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        got, got_w = _warnings_of(compiled, x)
        want, want_w = _warnings_of(volatile_then_native_warning, x)
        H.assert_same(got, want)
        assert got_w == want_w and len(want_w) == 2, (got_w, want_w)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        reasons = _break_reasons(volatile_then_native_warning, torch.randn(3))
    assert any("CALL issued a warning" in r for r in reasons), reasons


def test_tensor_volatile_under_an_error_filter_raises_where_eager_raises(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """With an "error" filter the read raises in eager; the record is guarded on the filters, so
    the compiled function raises too, and serves the record again once the filter is gone."""
    recorded("always")
    compiled = magpy.compile(still_volatile, backend="eager")
    compiled(torch.zeros(2))
    compiled(torch.zeros(2))
    recorded("error")
    for fn in (still_volatile, compiled):
        with pytest.raises(UserWarning, match="volatile was removed"):
            fn(torch.zeros(2))
    log = recorded("always")
    H.assert_same(compiled(torch.zeros(2)), torch.zeros(2))
    assert [str(w.message) for w in log] == [
        "volatile was removed (Variable.volatile is always False)"
    ]
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2), st


def by_entry_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x[mask] * 2  # (a uint8 mask: torch warns that it is deprecated)


def by_own_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x[(x > 0).byte()] + mask.sum()


def _masks() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    return [
        (torch.randn(6, generator=gen), torch.randint(0, 3, (6,), generator=gen).byte())
        for _ in range(3)
    ]


def test_torch_warns_on_every_uint8_mask_index() -> None:
    """What the replay relies on (``warnspy.NATIVE_REPLAYED``): indexing by a uint8 mask warns
    on every execution (``TORCH_WARN``, not once per process), a UserWarning attributed to the
    indexing line, and selects what the mask as bool selects (any nonzero byte). If torch
    changes that, this fails and the entry must go."""
    from magpy_monitor.bytecode.subscripts import UINT8_INDEX_WARNING
    from magpy_monitor.libs.stdlib import warnspy

    assert UINT8_INDEX_WARNING in warnspy.NATIVE_REPLAYED
    x, mask = torch.arange(4.0), torch.tensor([0, 2, 1, 0], dtype=torch.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.equal(x[mask], x[mask.bool()])  # (this line)
    assert len(caught) == 3 and len({w.lineno for w in caught}) == 1
    assert all(w.category is UserWarning and w.filename == __file__ for w in caught)
    assert all(str(w.message).startswith(UINT8_INDEX_WARNING) for w in caught)


@pytest.mark.parametrize("action", ["always", "default", "once", "module", "ignore"])
@pytest.mark.parametrize("fn", [by_entry_mask, by_own_mask], ids=lambda f: f.__name__)
def test_a_uint8_mask_index_replays_its_warning(
    recorded: Callable[[str], list[warnings.WarningMessage]],
    action: str,
    fn: Callable[..., Any],
) -> None:
    """``x[mask]`` with a uint8 mask: the graph indexes with the mask as bool and the mock
    replays torch's warning from the program's line, so each filter shows what eager shows
    on every hit; one record, no break."""
    log = recorded(action)  # (setting a filter forgets what the registries saw)
    inputs = _masks()
    wants = [fn(*a) for a in inputs]
    expected = H.warnings_seen(log)
    assert action == "ignore" or expected  # (eager does warn)
    compiled = magpy.compile(fn, backend="eager")
    log = recorded(action)
    outs = [compiled(*a) for a in inputs]
    assert H.warnings_seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st


def test_a_uint8_mask_index_the_registry_kept_from_the_filters_breaks(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """Under "default" a warning shown at this line before is kept from the filters by the
    module's registry: the run does not see torch's text (it names torch's sources), so the
    index is a break, and nothing is shown, as in eager."""
    log = recorded("default")
    inputs = _masks()
    wants = [by_entry_mask(*a) for a in inputs]  # (shown once: the registry keeps it)
    assert len(log) == 1
    log.clear()
    compiled = magpy.compile(by_entry_mask, backend="eager")
    outs = [compiled(*a) for a in inputs]
    assert log == []
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert st.breaks > 0 and st.graphs > 0, st  # (a break at the index, not a fallback)


def test_a_uint8_mask_index_under_an_error_filter_raises_where_eager_raises(
    recorded: Callable[[str], list[warnings.WarningMessage]],
) -> None:
    """The record is guarded on the filters: with an "error" filter the index raises, as in
    eager, and the record serves again once the filter is gone."""
    recorded("always")
    inputs = _masks()
    compiled = magpy.compile(by_entry_mask, backend="eager")
    compiled(*inputs[0])
    compiled(*inputs[1])
    recorded("error")
    for fn in (by_entry_mask, compiled):
        with pytest.raises(UserWarning, match="uint8"):
            fn(*inputs[2])
    log = recorded("always")
    H.assert_same(compiled(*inputs[2]), by_entry_mask(*inputs[2]))
    assert len(log) == 2
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2), st


# ---------------------------------------------------------------------- warnings.catch_warnings
@pytest.fixture
def filters_kept() -> Iterator[None]:
    """The test may change the warning filters (as eager does); restore them afterwards."""
    with warnings.catch_warnings():
        yield


class SPPF(nn.Module):
    """yolov5's SPPF: the whole body, ``return`` included, inside ``catch_warnings``."""

    def __init__(self) -> None:
        super().__init__()
        self.cv1 = nn.Conv2d(4, 2, 1)
        self.m = nn.MaxPool2d(kernel_size=5, stride=1, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y1 = self.m(x)
            y2 = self.m(y1)
            return torch.cat((x, y1, y2, self.m(y2)), 1)


def test_catch_warnings_with_simplefilter_and_return_inside_is_one_graph(check: Any) -> None:
    """simplefilter inside catch_warnings needs no mock effect: the block restores the filters."""
    before = list(warnings.filters)
    check(SPPF(), _one_tensor(1, 4, 8, 8), calls=4)
    assert warnings.filters == before


def filters_in_block(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings(action="ignore", category=UserWarning):
        warnings.filterwarnings("ignore", message="never", category=DeprecationWarning)
        warnings.simplefilter("default", RuntimeWarning)
        y = x * 2
    return y + 1


def _quiet_user_warnings() -> None:
    warnings.simplefilter("ignore", UserWarning)


def filter_in_callee(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        _quiet_user_warnings()
        return x - 1


@pytest.mark.parametrize("fn", [filters_in_block, filter_in_callee], ids=lambda f: f.__name__)
def test_catch_warnings_arguments_and_filterwarnings(check: Any, fn: Any) -> None:
    """catch_warnings(action=...), filterwarnings(...) and a filter set by a function called
    inside the block are modelled too."""
    before = list(warnings.filters)
    check(fn, _one_tensor(3), calls=3)
    assert warnings.filters == before


def warn_inside(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("shown every call", UserWarning, stacklevel=1)
        return x + 1


def hidden_after_break(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = x + 1
        warnings.warn("hidden by the block's filter", UserWarning, stacklevel=1)
        return y * 2


@pytest.mark.parametrize(
    ("fn", "shown"), [(warn_inside, ["shown every call"]), (hidden_after_break, [])]
)
def test_warn_inside_catch_warnings_breaks_and_sees_the_blocks_filters(
    fn: Callable[[torch.Tensor], torch.Tensor], shown: list[str]
) -> None:
    """warnings.warn is a graph break; a segment ending inside the block re-enters it with the
    filters set so far, so the warning is shown or hidden as eagerly."""
    with warnings.catch_warnings(record=True):
        assert any("warn" in r for r in _break_reasons(fn, torch.randn(3)))
    magpy.reset()
    compiled = magpy.compile(fn, backend="eager")
    before = list(warnings.filters)
    for _ in range(3):
        x = torch.randn(3)
        for call in (fn, compiled):
            with warnings.catch_warnings(record=True) as log:
                got = call(x)
            assert [str(w.message) for w in log] == shown
            H.assert_same(got, (x + 1) * (2 if fn is hidden_after_break else 1))
        assert warnings.filters == before
    st = magpy.stats(compiled)
    assert st.fallbacks == 0 and st.hits >= 2, st


def filter_outside(x: torch.Tensor) -> torch.Tensor:
    warnings.simplefilter("ignore", ResourceWarning)
    return x + 1


def error_action(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return x + 1


@pytest.mark.usefixtures("filters_kept")
@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (filter_outside, "outside a `with warnings.catch_warnings()` block"),
        (error_action, "warnings turned into errors"),
    ],
)
def test_global_filter_changes_and_errors_break(
    fn: Callable[[torch.Tensor], torch.Tensor], reason: str
) -> None:
    """A filter change outside catch_warnings lasts after the call; "error" would make a warning
    raise where the graph does not: both are graph breaks, and the call still does them."""
    assert any(reason in r for r in _break_reasons(fn, torch.randn(3)))
    magpy.reset()
    compiled = magpy.compile(fn, backend="eager")
    with warnings.catch_warnings():
        x = torch.randn(3)
        H.assert_same(compiled(x), x + 1)
        changed = list(warnings.filters)
    with warnings.catch_warnings():
        fn(x)
        assert changed == list(warnings.filters)
