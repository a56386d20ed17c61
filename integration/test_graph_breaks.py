"""End-to-end tests of graph breaks: the frame hook (instrumented ``__code__``, sites, segments).

Every program breaks at least once (``print``, ``.item()``). ``.item()`` is a break here because
these tests turn speculation off (``config.speculate``): they test the break machinery, and a
value read is its handiest source (test_speculation.py tests reads that do not break).
Compiled runs must equal eager runs (outputs, printed text, state outside the program),
``magpy.explain`` must report the graphs and breaks, and the tensor work between the breaks must
run as compiled graphs: a counting callable backend counts how many graphs were compiled and how
many times a compiled graph ran.

The exact counts below are what the implementation guarantees today (docs/frame-hook.md):

- the first call captures the whole call, meets the break and switches the callable to *split*
  mode (no graph yet); the next call records one segment per site (a first call that wrote the
  callable's own state is captured whole once more first: docs/lazy-init.md, test_lazy_init.py);
- a callee that breaks is recorded one call level per call: while a caller's segment is being
  monitored, the callee's entry site stays out of the way (the callee is inlined into the
  caller's segment, which then ends at the CALL), so ``f -> g -> h`` needs a few calls to settle;
- a segment that starts inside a ``for`` loop sees the loop's iterator as an external value and
  breaks at the next ``FOR_ITER`` (DESIGN 3.7's ``next(it)`` replay is not implemented), which
  ``explain`` counts as a break;
- dynamic scalar promotion is young (``changed_on_miss``), so programs whose exact counts are
  asserted use an ``.item()`` value only on the Python side (``print``); where the value feeds
  tensor math, only correctness and ``records <= max_records`` per site are asserted.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import inspect
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn

import magpy
from magpy_runtime import MagPyWarning


@pytest.fixture(autouse=True)
def _value_reads_break() -> Iterator[None]:
    from magpy_runtime._config import config

    with config.patch(speculate=False):
        yield


@pytest.fixture(autouse=True)
def _no_finder_left() -> Iterator[None]:
    """No finder (the tracer that looks for the resume point after a break) stays armed.

    A leaked finder keeps the thread's finder count above 0, and then no finder runs on the
    thread again: later tests would silently lose every resume site. Fail, and repair it.
    """
    import magpy_monitor.driver.segments as segments

    yield
    left = getattr(segments._local, "finders", 0)
    segments._local.finders = 0
    assert left == 0, f"{left} finder(s) left armed on this thread"


# state outside the programs: they append to it, compiled and eager runs must append the same
LOG: list[Any] = []


def line_of(fn: Any, needle: str) -> int:
    """The line number of the first source line of ``fn`` that contains ``needle``."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if needle in line:
            return first + i
    raise AssertionError(f"{needle!r} not in the source of {fn!r}")


def lines_of(fn: Any, needle: str) -> set[int]:
    """The line numbers of every source line of ``fn`` that contains ``needle``."""
    lines, first = inspect.getsourcelines(fn)
    return {first + i for i, line in enumerate(lines) if needle in line}


class Counting:
    """A callable backend that counts compilations and executions of the compiled graphs."""

    def __init__(self) -> None:
        self.compiled: list[torch.fx.GraphModule] = []
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.compiled.append(gm)
        forward = gm.forward

        def run(*args: Any) -> Any:
            self.runs += 1
            return forward(*args)

        return run

    def ops(self) -> list[list[str]]:
        """The operations of every compiled graph (``call_function``/``call_method`` targets)."""
        return [
            [
                n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "?")
                for n in gm.graph.nodes
                if n.op in ("call_function", "call_method")
            ]
            for gm in self.compiled
        ]


@dataclasses.dataclass
class CallCounts:
    runs: int  # compiled graphs executed during the call
    compiles: int  # backend compilations during the call
    misses: int  # cache misses during the call
    hits: int


def run_like_eager(
    fn: Any,
    make_inputs: Callable[[int], tuple[Any, ...]],
    capsys: pytest.CaptureFixture[str],
    *,
    calls: int = 4,
    backend: Counting | None = None,
    **compile_kwargs: Any,
) -> tuple[Any, Counting, list[CallCounts]]:
    """Run ``fn`` eagerly and compiled on ``calls`` fresh inputs; compare outputs, printed text,
    ``LOG`` and module state; check the trace function after every call. Returns the compiled
    callable, the counting backend and per-call counters."""
    counting = backend if backend is not None else Counting()
    is_module = isinstance(fn, nn.Module)
    reference = copy.deepcopy(fn) if is_module else fn
    compiled = magpy.compile(fn, backend=counting, **compile_kwargs)
    per_call: list[CallCounts] = []
    trace_before = sys.gettrace()
    for i in range(calls):
        args = make_inputs(i)
        ref_args = copy.deepcopy(args)
        capsys.readouterr()

        LOG.clear()
        want = reference(*ref_args)
        want_log, want_out = list(LOG), capsys.readouterr().out

        LOG.clear()
        before = (counting.runs, len(counting.compiled), magpy.stats(compiled))
        got = compiled(*args)
        got_log, got_out = list(LOG), capsys.readouterr().out
        after = magpy.stats(compiled)
        assert sys.gettrace() is trace_before, f"call {i} left a trace function"

        where = f"call {i}"
        H.assert_same(got, want, f"{where}: out")
        assert got_out == want_out, f"{where}: printed text differs"
        assert got_log == want_log, f"{where}: outside state differs"
        H.assert_same(args, ref_args, f"{where}: inputs after the call")
        if is_module:
            H.assert_same(fn.state_dict(), reference.state_dict(), f"{where}: module state")
        per_call.append(
            CallCounts(
                runs=counting.runs - before[0],
                compiles=len(counting.compiled) - before[1],
                misses=after.misses - before[2].misses,
                hits=after.hits - before[2].hits,
            )
        )
    LOG.clear()
    return compiled, counting, per_call


def randn(*shape: int) -> Callable[[int], tuple[torch.Tensor]]:
    def make(i: int) -> tuple[torch.Tensor]:
        g = torch.Generator().manual_seed(100 + i)
        return (torch.randn(*shape, generator=g),)

    return make


# ------------------------------------------------------------------------------ programs
def loop_break(x: torch.Tensor) -> torch.Tensor:
    for i in range(3):
        x = x * 2
        print(i)
    return x + 1


def no_grad_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with torch.no_grad():
        z = y * 2
        print("inside no_grad", torch.is_grad_enabled())
        w = z - 3
    return w * y


def try_break(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    try:
        z = y * 2
        print("inside try")
        w = z + 1
    except ValueError:
        w = z
    return w.cos()


def try_break_then_raise(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    try:
        z = y * 2
        print("inside try")
        raise ValueError("handled")
    except ValueError:
        w = z + 1
    return w.cos()


def deep_h(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    s = x.abs().sum().item()
    print(f"h saw {s:.4f}")
    return y + 1


def deep_g(x: torch.Tensor) -> torch.Tensor:
    return deep_h(x + 1) - 1


def deep_f(x: torch.Tensor) -> torch.Tensor:
    return deep_g(x * 3).relu()


def deep_h_math(x: torch.Tensor) -> torch.Tensor:
    s = x.abs().sum().item()
    return x * 2 + s


def deep_g_math(x: torch.Tensor) -> torch.Tensor:
    return deep_h_math(x + 1) - 1


def deep_f_math(x: torch.Tensor) -> torch.Tensor:
    return deep_g_math(x * 3).relu()


def several_breaks(x: torch.Tensor) -> torch.Tensor:
    a = x + 1
    LOG.append("start")
    print("one")
    b = a * 2
    LOG.append(b.shape[0])
    print("two")
    c = b - 3
    print("three")
    LOG.append("end")
    return c.exp()


class PrintBlock(nn.Module):
    """Calls ``.item()``; the value is only printed (Python side), so counts are exact."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.abs().mean().item()
        print(f"block mean {s:.4f}")
        return self.l(x).relu()


class ScaleBlock(nn.Module):
    """Calls ``.item()`` and uses the value in tensor math (a new record per value, bounded)."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.abs().mean().item()
        return self.l(x) * s


class Stack(nn.Module):
    def __init__(self, block: type[nn.Module], n: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([block() for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


def frozen_print_stack() -> nn.Module:
    # frozen parameters: every block's input has the same metadata (requires_grad False), so
    # one record per segment serves all three blocks
    return Stack(PrintBlock).requires_grad_(False)


@dataclasses.dataclass
class Case:
    fn: Callable[[], Any]  # builds the program (a fresh module each time)
    make: Callable[[int], tuple[Any, ...]]
    graphs: int  # graphs compiled once the program has settled
    runs: int  # graphs run by a call that hits every site
    explain_breaks: int
    break_lines: list[tuple[Any, str]]  # (function, source needle) of every reported break
    calls: int = 4


CASES = {
    # (a) entry segment: range(3), first x * 2, ends at print. After the print a segment looks
    # ahead in the loop's (pre-existing) range iterator: one record for the body (x * 2, ends
    # at print; the iterator has a value left) serves iterations 1 and 2, another the exit
    # (the iterator is exhausted: x + 1, return). Four graph runs per call, all compiled.
    "a_loop": Case(
        lambda: loop_break,
        randn(5),
        graphs=3,
        runs=4,
        explain_breaks=3,
        break_lines=[(loop_break, "print(i)")],
    ),
    # (b) the segment ends inside `with torch.no_grad()`: grad mode is modelled
    "b_no_grad": Case(
        lambda: no_grad_break,
        randn(2, 3),
        graphs=2,
        runs=2,
        explain_breaks=1,
        break_lines=[(no_grad_break, "print(")],
    ),
    # (c) the segment ends inside `try:`; the handler is not taken
    "c_try": Case(
        lambda: try_break,
        randn(2, 3),
        graphs=2,
        runs=2,
        explain_breaks=1,
        break_lines=[(try_break, "print(")],
    ),
    # (c') the segment after the break raises inside `try:` and the handler runs
    "c_try_raise": Case(
        lambda: try_break_then_raise,
        randn(2, 3),
        graphs=2,
        runs=2,
        explain_breaks=1,
        break_lines=[(try_break_then_raise, "print(")],
    ),
    # (d) f -> g -> h, h calls .item(): six segments (f before/after the call of g, g
    # before/after the call of h, h before the .item() and after the print); h's item->print
    # segment has no tensor op. One call level is recorded per call, hence 6 calls.
    "d_callee_three_deep": Case(
        lambda: deep_f,
        randn(2, 3),
        graphs=6,
        runs=6,
        explain_breaks=2,
        break_lines=[(deep_h, ".item()"), (deep_h, "print(")],
        calls=6,
    ),
    # (e) three prints in one function: four segments, outside state written in three of them
    "e_several": Case(
        lambda: several_breaks,
        randn(2, 3),
        graphs=4,
        runs=4,
        explain_breaks=3,
        break_lines=[(several_breaks, "print(")],
    ),
    # (f) every block calls .item(): Block.forward is shared by the three instances, so two
    # graphs (abs/mean, linear/relu) serve all of them: six graph runs per call. Stack.forward
    # resumes after each block returns, looking ahead in the ModuleList's iterator, and ends at
    # the call into the next block (whose entry site takes over).
    "f_module_item": Case(
        frozen_print_stack,
        randn(2, 4),
        graphs=2,
        runs=6,
        explain_breaks=3,
        break_lines=[(PrintBlock.forward, ".item()"), (PrintBlock.forward, "print(")],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_program_with_breaks_runs_compiled_like_eager(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name]
    compiled, counting, per_call = run_like_eager(case.fn(), case.make, capsys, calls=case.calls)
    st = magpy.stats(compiled)
    # the first call captures the whole call, meets the break and runs natively: no graph
    assert per_call[0].compiles == 0 and per_call[0].runs == 0, per_call
    assert st.breaks >= 1 and st.fallbacks == 0, st
    assert len(counting.compiled) == case.graphs == st.graphs, (counting.ops(), st)
    # the program has settled: the last call compiles nothing, misses nowhere, and runs its
    # tensor work as compiled graphs
    last = per_call[-1]
    assert (last.compiles, last.misses) == (0, 0), per_call
    assert last.runs == case.runs, per_call
    assert last.hits >= case.runs, per_call


@pytest.mark.parametrize("name", list(CASES))
def test_explain_reports_graphs_and_breaks(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    program = case.fn()
    (x,) = case.make(0)
    out = magpy.explain(program)(x)
    capsys.readouterr()
    assert out.graph_break_count == case.explain_breaks == len(out.break_reasons), str(out)
    want_lines = set().union(*(lines_of(fn, needle) for fn, needle in case.break_lines))
    assert {r.lineno for r in out.break_reasons} == want_lines, str(out)
    for r in out.break_reasons:
        assert r.filename == __file__, r
    assert out.graph_count == case.graphs, str(out)


def test_explain_counts_the_graphs_the_program_runs(capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES["d_callee_three_deep"]
    out = magpy.explain(deep_f)(*case.make(0))
    capsys.readouterr()
    assert out.graph_count == case.graphs, str(out)


def test_explain_counts_the_graphs_of_a_trainable_block_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = Stack(PrintBlock)
    x = torch.randn(2, 4)
    out = magpy.explain(model)(x)
    magpy.reset()
    _, counting, per_call = run_like_eager(model, randn(2, 4), capsys, calls=5)
    assert per_call[-1].misses == 0
    assert out.graph_count == len(counting.compiled), (str(out), counting.ops())


def test_item_used_in_tensor_math_stays_correct_and_bounded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """(f) with the .item() value in tensor math. Without dynamic scalar promotion every new
    value is a new record at the site after the break, so only correctness and the bound are
    asserted: at most ``max_records`` records per site, at most one warning."""
    from magpy_runtime.cache._sites import REGISTRY

    max_records = 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, counting, _ = run_like_eager(
            Stack(ScaleBlock), randn(2, 4), capsys, calls=8, options={"max_records": max_records}
        )
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(ours) <= 1, [str(w.message) for w in ours]
    n_sites = 0
    for cs in REGISTRY.by_code.values():
        for site in cs.sites.values():
            n_sites += 1
            mine = [r for r, _, b in site.records if b is counting]
            assert len(mine) <= max_records, (cs.original.co_qualname, site.offset, len(mine))
    st = magpy.stats(compiled)
    assert st.records <= max_records * n_sites, st


def test_item_used_in_tensor_math_in_a_deep_callee_stays_correct(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, _, _ = run_like_eager(
            deep_f_math, randn(2, 3), capsys, calls=8, options={"max_records": 4}
        )
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) <= 1
    assert magpy.stats(compiled).fallbacks <= 1


# ------------------------------------------------------------------------------ fullgraph
def test_fullgraph_names_the_first_break_and_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    compiled = magpy.compile(several_breaks, backend="eager", fullgraph=True)
    with pytest.raises(magpy.FullGraphError) as info:
        compiled(torch.randn(3))
    capsys.readouterr()
    line = line_of(several_breaks, 'print("one")')
    assert "print()" in str(info.value)
    assert f"{__file__}:{line}" in str(info.value)
    assert info.value.lineno == line and info.value.filename == __file__
    assert sys.gettrace() is None


def test_fullgraph_names_a_break_in_a_deep_callee() -> None:
    compiled = magpy.compile(deep_f, backend="eager", fullgraph=True)
    with pytest.raises(magpy.FullGraphError) as info:
        compiled(torch.randn(3))
    assert "item" in str(info.value)
    assert info.value.lineno == line_of(deep_h, ".item()")
    assert sys.gettrace() is None


# ------------------------------------------------------------------------------ exceptions
class UserError(Exception):
    pass


def raises_after_break(x: torch.Tensor, limit: int) -> torch.Tensor:
    y = x * 2
    print("before the check")
    z = y + 1
    if z.shape[0] > limit:
        raise UserError(f"too long: {z.shape[0]} > {limit}")
    return z


def callee_raises_after_break(x: torch.Tensor) -> torch.Tensor:
    s = x.sum().item()
    if s < 1e9:
        raise UserError(f"callee saw {x.shape[0]} values")
    return x


def calls_a_raising_callee(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return callee_raises_after_break(y) * 2


@pytest.mark.parametrize(
    ("fn", "args", "raiser", "message"),
    [
        (raises_after_break, (torch.randn(5), 3), raises_after_break, "too long: 5 > 3"),
        (
            calls_a_raising_callee,
            (torch.randn(4),),
            callee_raises_after_break,
            "callee saw 4 values",
        ),
    ],
    ids=["same_frame", "callee"],
)
def test_user_exception_after_a_break_propagates_unchanged(
    fn: Any, args: tuple[Any, ...], raiser: Any, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    raise_line = line_of(raiser, "raise UserError")
    with pytest.raises(UserError) as eager:
        fn(*args)
    want = [(t.name, t.lineno, t.line) for t in traceback.extract_tb(eager.value.__traceback__)]
    compiled = magpy.compile(fn, backend="eager")
    for i in range(4):  # the record call, the first split call, and hit calls
        with pytest.raises(UserError) as info:
            compiled(*args)
        assert type(info.value) is UserError and str(info.value) == message
        tb = traceback.extract_tb(info.value.__traceback__)
        assert tb[-1].lineno == raise_line, (i, tb)
        assert tb[-1].name == raiser.__name__
        # the user's frames are the same as eager's (magpy's own frames sit above them)
        got = [(t.name, t.lineno, t.line) for t in tb]
        assert got[-len(want) + 1 :] == want[1:], (i, got, want)
        assert sys.gettrace() is None
    capsys.readouterr()


# ------------------------------------------------------------------------------ code swap
def probe_lines(x: torch.Tensor, probe: Callable[[], None], fail: int) -> torch.Tensor:
    probe()
    y = x * 2
    if fail == 1:
        raise UserError("before the break")
    print("break")
    probe()
    z = y + torch.ones(x.shape[0] + (fail == 2))  # fail == 2: torch raises (size mismatch)
    if fail == 3:
        raise UserError("after the break")
    probe()
    return z


def _outside_observations(fn: Any) -> list[Any]:
    seen: list[Any] = []

    def probe() -> None:
        f = sys._getframe(1)
        seen.append(("line", f.f_lineno, f.f_code.co_name))

    fn(torch.randn(3), probe, 0)
    for fail in (1, 2, 3):
        try:
            fn(torch.randn(3), probe, fail)
        except (UserError, RuntimeError) as exc:
            tb = traceback.extract_tb(exc.__traceback__)
            seen.append(
                (type(exc).__name__, [(t.name, t.lineno, t.line, t.colno, t.end_colno) for t in tb])
            )
    return seen


def _instrumented(fn: Any) -> bool:
    """``fn`` has sites: an instrumented generation, installed while a compiled call runs."""
    from magpy_runtime.cache._sites import REGISTRY

    cs = REGISTRY.by_code.get(fn.__code__)
    return cs is not None and cs.current is not None


def test_instrumented_function_called_outside_is_identical(
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = probe_lines.__code__
    before = _outside_observations(probe_lines)
    compiled = magpy.compile(probe_lines, backend="eager")
    for _ in range(4):
        compiled(torch.randn(3), lambda: None, 0)
    # (its instrumented code is installed only while a compiled call runs: issue 35)
    assert probe_lines.__code__ is original, "the instrumented code shows outside a call"
    assert _instrumented(probe_lines), "the compiled calls did not instrument the function"
    after = _outside_observations(probe_lines)
    assert after == before
    assert probe_lines.__code__.co_firstlineno == original.co_firstlineno
    assert inspect.getsource(probe_lines) == inspect.getsource(original)
    capsys.readouterr()


def test_reset_restores_every_swapped_code(capsys: pytest.CaptureFixture[str]) -> None:
    model = frozen_print_stack()
    functions = [
        deep_f,
        deep_g,
        deep_h,
        several_breaks,
        loop_break,
        Stack.forward,
        PrintBlock.forward,
    ]
    originals = {fn: fn.__code__ for fn in functions}
    compiled = [magpy.compile(fn, backend="eager") for fn in (deep_f, several_breaks, loop_break)]
    compiled_model = magpy.compile(model, backend="eager")
    for _ in range(6):
        x = torch.randn(2, 4)
        for c in compiled:
            c(x)
        compiled_model(x)
    instrumented = [fn.__qualname__ for fn in functions if _instrumented(fn)]
    assert sorted(instrumented) == sorted(fn.__qualname__ for fn in functions)
    # (outside a compiled call every function holds its own code: issue 35)
    assert [fn.__qualname__ for fn in functions if fn.__code__ is not originals[fn]] == []
    magpy.reset()
    for fn in functions:
        assert fn.__code__ is originals[fn], fn.__qualname__
        assert not _instrumented(fn), fn.__qualname__
    # compiled callables still work after a reset (and swap again)
    x = torch.randn(2, 4)
    for c in compiled:
        c(x)
        H.assert_same(c(x), c._magpy_original(x))
    capsys.readouterr()


# ------------------------------------------------------------------------------ threads
def item_break(x: torch.Tensor) -> torch.Tensor:
    y = x.sin() + 1
    n = int(y.sum().item() > 0)
    return y * 2 + n


def _reference_item_break(x: torch.Tensor) -> torch.Tensor:
    y = x.sin() + 1
    return y * 2 + int(y.sum().item() > 0)


def _in_threads(n: int, target: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(t: int) -> None:
        try:
            barrier.wait()
            target(t)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


# MagPy's report of time spent outside compiled graphs (a regex without colons: a pytest filter)
_OUTSIDE_TIME_REPORT = r"magpy. .*of its run time is outside compiled graphs"


def test_function_with_a_break_called_from_four_threads() -> None:
    compiled = magpy.compile(item_break, backend="eager")

    def work(t: int) -> None:
        for i in range(25):
            x = torch.randn(4) + (t - 1.5)
            H.assert_same(compiled(x), _reference_item_break(x), f"thread {t} call {i}")
            assert sys.gettrace() is None, f"thread {t} call {i} left a trace function"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # (the report of time outside graphs depends on the machine's load: four threads on
        # two busy cores can wait past its threshold; it is not what this test is about)
        warnings.filterwarnings("ignore", _OUTSIDE_TIME_REPORT)
        errors = _in_threads(4, work)
    assert not errors, errors
    assert not caught, [str(w.message) for w in caught]
    st = magpy.stats(compiled)
    assert st.fallbacks == 0 and st.hits > 0, st


def test_runtime_is_active_only_on_the_compiling_thread() -> None:
    """One thread runs the compiled callable, others the same (swapped) function natively: the
    native calls never reach a record or start monitoring."""
    compiled = magpy.compile(item_break, backend="eager")
    for _ in range(4):
        compiled(torch.randn(4))
    misses = magpy.stats(compiled).misses

    def work(t: int) -> None:
        for i in range(50):
            x = torch.randn(4)
            got = compiled(x) if t == 0 else item_break(x)
            H.assert_same(got, _reference_item_break(x), f"thread {t} call {i}")
            assert sys.gettrace() is None

    errors = _in_threads(4, work)
    assert not errors, errors
    assert _instrumented(item_break)
    st = magpy.stats(compiled)
    assert st.misses == misses, st  # the native threads added no miss
    assert st.hits >= 50 * 2, st


# ------------------------------------------------------------------------------ re-entrancy
def inner_prints(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("inner")
    return y * 3


compiled_inner = magpy.compile(inner_prints, backend="eager")


def outer_calls_compiled(x: torch.Tensor) -> torch.Tensor:
    a = compiled_inner(x) - 1
    print("outer")
    return compiled_inner(a) * 2


@pytest.mark.filterwarnings(f"ignore:{_OUTSIDE_TIME_REPORT}")  # (load-dependent, as above)
def test_compiled_function_calling_a_compiled_function(
    capsys: pytest.CaptureFixture[str],
) -> None:
    compiled, _, per_call = run_like_eager(outer_calls_compiled, randn(3), capsys, calls=5)
    assert per_call[-1].misses == 0
    assert magpy.stats(compiled).fallbacks == 0
    assert magpy.stats(compiled_inner).fallbacks == 0


def recursive(x: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return x
    y = x * 2
    print("depth", n)
    return recursive(y, n - 1) + 1


def test_recursive_function_with_a_break(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, _, per_call = run_like_eager(recursive, lambda i: (torch.randn(3), 3), capsys, calls=6)
    assert not caught, [str(w.message) for w in caught]
    assert per_call[-1].misses == 0, per_call


def scales_then_prints(t: torch.Tensor) -> torch.Tensor:
    u = t * 3
    print("callee")
    return u


def calls_scaling_callee(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("caller")
    return scales_then_prints(y) + 1


# regression test: the caller's segment after its print ends at the CALL of a callee that
# broke after tensor work on its argument; its record has no op and must return `y` by identity
# (it used to read __magpy_outs[0] of a graph that did not exist: IndexError at the site)
def test_callee_break_after_tensor_work_on_its_argument(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_like_eager(calls_scaling_callee, randn(3), capsys, calls=5)
    assert not caught, [str(w.message) for w in caught]


def test_recursive_function_with_changing_depth(capsys: pytest.CaptureFixture[str]) -> None:
    """Recursion depth changing from call to call (frames of several generations live)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, _, _ = run_like_eager(
            recursive, lambda i: (torch.randn(3), (0, 3, 1, 2)[i % 4]), capsys, calls=8
        )
    assert not caught, [str(w.message) for w in caught]
    assert magpy.stats(compiled).fallbacks == 0


def drops_the_trace_function(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    sys.settrace(None)  # a break: runs eagerly while the finder waits for the next instruction
    return y + 1


def breaks_at_print(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("a break")
    return y.relu() + 1


def test_finders_whose_trace_function_is_dropped_do_not_stop_later_finders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A finder armed at a break needs ``sys.settrace``'s global trace function: a program that
    drops it there (or CPython, when a trace callback raises, e.g. a warning the filters make
    an error) leaves that finder without events, so it never lets go. Later breaks, in any
    function, must still resume in a segment of their own."""
    compiled = magpy.compile(drops_the_trace_function, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), drops_the_trace_function(x))
        sys.settrace(None)
    graphs, reasons = H.graphs(breaks_at_print, torch.randn(3))
    assert graphs == 2 and "print()" in reasons[0], reasons
    capsys.readouterr()


def test_magpy_warning_is_a_runtime_warning() -> None:
    assert issubclass(MagPyWarning, RuntimeWarning)


# ------------------------------------------------------------------------------ limitations
def closure_per_call(x: torch.Tensor) -> torch.Tensor:
    k = 3

    def inner(y: torch.Tensor) -> torch.Tensor:  # a new function object on every call
        z = y * k
        print("inner")
        return z + 1

    return inner(x + 1) * 2


def _generator(x: torch.Tensor) -> Any:
    for i in range(3):
        print("generator", i)
        yield x * i


def consumes_a_generator(x: torch.Tensor) -> torch.Tensor:
    return sum(_generator(x + 1)) * 2


def iterates_a_dict(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
    for k, v in d.items():  # a dict iterator cannot cross a segment end
        x = x * v
        print(k)
    return x


@pytest.mark.parametrize(
    ("fn", "make"),
    [
        (closure_per_call, randn(3)),
        (consumes_a_generator, randn(3)),
        (iterates_a_dict, lambda i: (torch.randn(3), {"a": 2, "b": 3 + i})),
    ],
    ids=["closure_per_call", "generator", "dict_iterator"],
)
def test_documented_limitations_still_run_like_eager(
    fn: Any, make: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled, _, _ = run_like_eager(fn, make, capsys, calls=5)
    assert magpy.stats(compiled).fallbacks == 0


class SiteLoop(BaseException):
    """Raised by the site-loop guard: not an Exception, so site_entry cannot swallow it."""


@pytest.fixture
def site_loop_guard(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make an instrumented frame that keeps re-entering sites fail fast instead of hanging.

    ``site_entry`` asks ``_current()`` for the active cache first; the patched one counts and
    raises ``SiteLoop`` (a BaseException, which ``site_entry`` does not swallow) past 10,000
    calls. Returns ``new_call()``, to be called before each compiled call (resets the count).
    """
    import magpy_runtime.cache._sites as sites

    real = sites._current
    count = 0

    def counting_current() -> Any:
        nonlocal count
        count += 1
        if count > 10_000:
            raise SiteLoop("more than 10000 site entries in one call")
        return real()

    def new_call() -> None:
        nonlocal count
        count = 0

    monkeypatch.setattr(sites, "_current", counting_current)
    return new_call


class UserContext:
    def __enter__(self) -> UserContext:
        LOG.append("enter")
        return self

    def __exit__(self, *exc: Any) -> None:
        LOG.append("exit")


def with_user_context(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with UserContext():
        z = y * 2
    return z - 1


def with_nullcontext(x: torch.Tensor) -> torch.Tensor:
    import contextlib

    y = x + 1
    with contextlib.nullcontext():
        z = y * 2
    return z - 1


def with_open_file(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with open(__file__) as f:
        first = f.readline()
    return y * len(first)


_WITH_LOOP = (
    "the native `CM()` call breaks; the finder resumes at BEFORE_WITH (the first NULL-free pc), "
    "and the segment started there breaks at its very first instruction (`with` on a non-grad "
    "context). Its empty record ends at its own site offset, so a hit jumps back into the same "
    "site block: the 3rd call loops forever. The 2nd call already leaves "
    "sys.gettrace() == _finder_global (the finder armed inside the finder callback is "
    "replaced by the callback's return value, so the thread's finder count stays at 1 and "
    "no finder runs on that thread again)"
)


@pytest.mark.parametrize(
    "fn", [with_user_context, with_nullcontext, with_open_file], ids=["user", "nullcontext", "open"]
)
def test_with_block_of_a_non_grad_context_manager(
    fn: Any, site_loop_guard: Callable[[], None], capsys: pytest.CaptureFixture[str]
) -> None:
    compiled = magpy.compile(fn, backend="eager")
    problems: list[str] = []
    try:
        _run_with_block_calls(fn, compiled, site_loop_guard, problems)
    finally:
        sys.settrace(None)
        LOG.clear()
        capsys.readouterr()
        # the leaked finder also leaves the thread's finder count at 1, after which no finder
        # runs again on this thread (no resume site is ever added): undo it for later tests
        import magpy_monitor.driver.segments as segments

        segments._local.finders = 0
        with warnings.catch_warnings():  # a loop cut short leaves open() files to collect
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    assert not problems, problems


def _run_with_block_calls(
    fn: Any, compiled: Any, site_loop_guard: Callable[[], None], problems: list[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for i in range(4):
            x = torch.randn(3)
            LOG.clear()
            want, want_log = fn(x), list(LOG)
            LOG.clear()
            site_loop_guard()
            try:
                got = compiled(x)
            except SiteLoop as exc:
                problems.append(f"call {i}: {exc}")
                del exc
                break
            finally:
                tracer = sys.gettrace()
                if tracer is not None:
                    problems.append(f"call {i} left sys.gettrace() == {tracer!r}")
                    sys.settrace(None)
            H.assert_same(got, want, f"call {i}")
            assert want_log == LOG, f"call {i}"


# ---------------------------------------------------------------- loops resumed after a break
def list_loop_break(xs: list[torch.Tensor], stop_at: int) -> torch.Tensor:
    acc = xs[0] * 0
    for x in xs:
        acc = acc + x * 2
        print("step")
        if len(LOG) >= stop_at:  # leaves the loop early: the list iterator is not exhausted
            break
        LOG.append("next")
    return acc.relu()


def dict_loop_break(d: dict[str, torch.Tensor]) -> torch.Tensor:
    out = []
    for name, t in d.items():
        print(name)
        out.append(t.sum())
    return torch.stack(out)


@pytest.mark.parametrize(
    ("make", "fn"),
    [
        # lists of 3 and 2 tensors in turn; the calls with 2 leave the loop after 2 steps
        (
            lambda i: ([torch.randn(3) for _ in range(2 if i % 2 else 3)], 2 if i % 2 else 9),
            list_loop_break,
        ),
        (lambda i: ({k: torch.randn(2) for k in "abc"[: 2 + i % 2]},), dict_loop_break),
    ],
    ids=["list", "dict_items"],
)
def test_loop_resumed_after_a_break_looks_ahead_in_its_iterator(
    make: Callable[[int], tuple[Any, ...]], fn: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A segment that starts inside a ``for`` loop takes its values from the (pre-existing)
    iterator: guarded by what the iterator still holds, replayed by advancing it. Results,
    printed text and LOG equal eager on every call, and the loop body hits once settled."""
    _, _, per_call = run_like_eager(fn, make, capsys, calls=6)
    for last in per_call[-2:]:
        assert last.misses == 0 and last.hits >= 2 and last.compiles == 0, per_call


def test_iterator_look_ahead_guards_and_advances() -> None:
    """The guard of a loop segment checks what the iterator has left; the mock advances it."""
    import magpy_runtime.cache._sites as sites

    compiled = magpy.compile(list_loop_break, backend="eager")
    for n in (3, 3):
        LOG.clear()
        compiled([torch.ones(2)] * n, 99)
    sources = [r.guard_source for r in compiled._magpy_state.site_records]
    mocks = [r.mock_source for r in compiled._magpy_state.site_records]
    assert any(">= 1" in g and "len(" in g for g in sources), sources
    assert any("== 0" in g for g in sources), sources  # the exit segment saw exhaustion
    assert any("next(" in m for m in mocks), mocks
    assert sites.REGISTRY.by_code  # the loop's function was instrumented


def _with_graph_break(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    torch._dynamo.graph_break()
    return y + 1


def test_a_users_torch_dynamo_graph_break_is_a_break() -> None:
    """``torch._dynamo.graph_break()`` in the program splits the graph there, as under
    torch.compile (in torch's own code, such as an optimizer's step, it is only a hint for
    TorchDynamo and ignored)."""
    compiled = magpy.compile(_with_graph_break, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), _with_graph_break(x))
    reasons = magpy.explain(_with_graph_break)(torch.randn(3)).break_reasons
    assert [r.reason for r in reasons] == ["torch._dynamo.graph_break()"], reasons
    assert magpy.stats(compiled).graphs == 2
