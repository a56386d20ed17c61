"""Background compiles (``config.background_compile``, ``options={"magpy.background_compile":
True}``): a new record runs its fx graph as is while the backend compiles it on MagPy's worker
thread, then switches to the compiled graph once.

Most cases use a callable backend (any callable backend compiles) that blocks on a
``threading.Event`` until the test lets it finish, so that "pending" is deterministic, and
that counts the calls of the callable it returns; one case goes through Inductor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx
from torch import nn

import magpy
from magpy_runtime._config import Config

BACKGROUND = {"magpy.background_compile": True}
THREAD = "magpy-compile"


class Backend:
    """``(gm, example_inputs) -> callable``: waits for ``release`` (when given), then returns
    ``gm`` wrapped in a counter of its calls; ``fail=True`` raises instead."""

    def __init__(self, *, blocked: bool = False, fail: bool = False) -> None:
        self.release = threading.Event()
        if not blocked:
            self.release.set()
        self.fail = fail
        self.compiles = 0
        self.calls = 0
        self.seen: list[tuple[bool, str]] = []  # grad mode and thread of each compile

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.seen.append((torch.is_grad_enabled(), threading.current_thread().name))
        assert self.release.wait(30), "the test never released the compile"
        self.compiles += 1
        if self.fail:
            raise RuntimeError("this backend cannot compile anything")

        def compiled(*args: Any) -> Any:
            self.calls += 1
            return gm(*args)

        return compiled


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + y).relu().sum(0)


def inputs(i: int, rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    return torch.randn(rows, 3, generator=g), torch.randn(rows, 3, generator=g)


def calls_equal_eager(compiled: Any, first: int, n: int, rows: int = 4) -> None:
    for i in range(first, first + n):
        x, y = inputs(i, rows)
        assert torch.equal(compiled(x, y), fn(x, y)), f"call {i}"


def magpy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD and t.is_alive()]


def test_runs_as_is_while_pending_then_switches_once() -> None:
    """While the compile is pending, fresh inputs give eager's results through the graph run
    as is; after it, the compiled callable serves every call; one record, one swap."""
    backend = Backend(blocked=True)
    compiled = magpy.compile(fn, backend=backend, options=BACKGROUND)
    calls_equal_eager(compiled, 0, 3)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.pending_compiles, st.background_swaps) == (1, 2, 1, 0)
    assert backend.calls == 0 and backend.compiles == 0
    assert len(magpy_threads()) == 1
    backend.release.set()
    assert magpy.wait_compiles(30)
    calls_equal_eager(compiled, 3, 4)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses, st.fallbacks) == (1, 6, 1, 0), st
    assert (st.pending_compiles, st.background_swaps) == (0, 1), st
    assert backend.compiles == 1 and backend.calls == 4
    assert backend.seen == [(True, THREAD)]
    job = compiled._magpy_state.records[0].background
    assert job.status == "swapped" and job.steps is None  # (graph and inputs let go)


def test_a_swap_during_calls_on_another_thread_keeps_results_equal() -> None:
    """Calls in flight on another thread while the record switches: every one is right."""
    backend = Backend(blocked=True)
    compiled = magpy.compile(fn, backend=backend, options=BACKGROUND)
    calls_equal_eager(compiled, 0, 1)
    failures: list[BaseException] = []

    def hammer() -> None:
        try:
            calls_equal_eager(compiled, 100, 300)
        except BaseException as exc:  # (reported by the main thread)
            failures.append(exc)

    worker = threading.Thread(target=hammer)
    worker.start()
    backend.release.set()
    worker.join(60)
    assert not failures and not worker.is_alive()
    assert magpy.wait_compiles(30)
    calls_equal_eager(compiled, 1, 2)
    st = magpy.stats(compiled)
    assert (st.records, st.background_swaps, st.fallbacks) == (1, 1, 0), st
    assert backend.calls >= 2


def test_the_compile_runs_under_the_recording_grad_mode() -> None:
    """A call recorded under ``no_grad`` is compiled with grad mode off on the worker."""
    backend = Backend()
    compiled = magpy.compile(fn, backend=backend, options=BACKGROUND)
    with torch.no_grad():
        calls_equal_eager(compiled, 0, 1)
        assert magpy.wait_compiles(30)
        calls_equal_eager(compiled, 1, 2)
    assert backend.seen == [(False, THREAD)] and backend.calls == 2


def test_a_failing_background_compile_keeps_results_and_warns_once() -> None:
    """The backend raises on the worker: the record keeps running the graph as is, one
    warning says why, the reason is kept; a second failing graph of the callable is quiet."""
    backend = Backend(fail=True)
    compiled = magpy.compile(fn, backend=backend, dynamic=False, options=BACKGROUND)
    with pytest.warns(magpy.MagPyWarning, match="runs uncompiled.*cannot compile anything"):
        calls_equal_eager(compiled, 0, 1)
        assert magpy.wait_compiles(30)
    calls_equal_eager(compiled, 1, 3)
    calls_equal_eager(compiled, 5, 2, rows=6)  # (a new shape: a second record, same fate)
    assert magpy.wait_compiles(30)
    calls_equal_eager(compiled, 7, 2, rows=6)
    st = magpy.stats(compiled)
    assert (st.records, st.fallbacks, st.pending_compiles, st.background_swaps) == (2, 0, 0, 0)
    state = compiled._magpy_state
    assert len(state.uncompiled_reasons) == 2
    assert all("RuntimeError: this backend cannot" in r for r in state.uncompiled_reasons)
    assert all(r.uncompiled is not None for r in state.records)
    assert backend.compiles == 2 and backend.calls == 0


def test_reset_cancels_compiles_and_ends_the_worker() -> None:
    """``magpy.reset()`` drops a queued compile, discards the running one (its record is
    never switched) and returns with no MagPy thread left."""
    first, second = Backend(blocked=True), Backend()
    f1 = magpy.compile(fn, backend=first, options=BACKGROUND)

    def g(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x - y

    f2 = magpy.compile(g, backend=second, options=BACKGROUND)
    calls_equal_eager(f1, 0, 1)
    f2(*inputs(0))  # (queued behind f1's compile)
    assert magpy.stats(f2).pending_compiles == 1
    dropped = f1._magpy_state.records[0]
    assert magpy_threads()
    timer = threading.Timer(0.5, first.release.set)  # (the running compile ends after reset)
    timer.start()
    magpy.reset()
    timer.join()
    assert not magpy_threads()
    assert dropped.background.status == "cancelled" and first.compiles == 1
    assert second.compiles == 0 and first.calls == 0
    as_is = dropped.graph_module.forward  # (the record still runs its graph as is)
    assert dropped.mock_code.globals["__magpy_graph"] == as_is
    calls_equal_eager(f1, 10, 2)  # (records again: a fresh compile, a fresh worker)
    assert magpy.wait_compiles(30) and magpy.stats(f1).background_swaps == 1


def test_switch_off_compiles_while_recording() -> None:
    """Without the switch (the default) the backend compiles during the recording call and
    its callable serves every hit; no worker thread is started."""
    assert magpy.config.background_compile is False
    backend = Backend()
    compiled = magpy.compile(fn, backend=backend)
    calls_equal_eager(compiled, 0, 3)
    assert backend.seen == [(True, "MainThread")] and backend.calls == 2
    st = magpy.stats(compiled)
    assert (st.pending_compiles, st.background_swaps) == (0, 0)
    assert not magpy_threads()


def test_config_flag_and_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``config.background_compile`` turns it on for every callable, the option per callable
    (False wins over the config); ``MAGPY_BACKGROUND_COMPILE=1`` sets the config."""
    monkeypatch.setenv("MAGPY_BACKGROUND_COMPILE", "1")
    assert Config.from_env().background_compile is True
    monkeypatch.setenv("MAGPY_BACKGROUND_COMPILE", "0")
    assert Config.from_env().background_compile is False
    on, off = Backend(), Backend()
    with magpy.config.patch(background_compile=True):
        compiled = magpy.compile(fn, backend=on)
        calls_equal_eager(compiled, 0, 1)
        kept = magpy.compile(fn, backend=off, options={"magpy.background_compile": False})
        calls_equal_eager(kept, 0, 1)
    assert magpy.wait_compiles(30)
    assert on.seen == [(True, THREAD)] and off.seen == [(True, "MainThread")]
    with pytest.raises(TypeError, match="background_compile"):
        magpy.compile(fn, options={"magpy.background_compile": "yes"})


def test_symbolic_sizes_and_eager_backend_compile_while_recording() -> None:
    """A graph with symbolic sizes (its guard depends on what the compiler specialised)
    compiles during the recording call; so does nothing for ``backend="eager"``."""
    backend = Backend()
    compiled = magpy.compile(fn, backend=backend, dynamic=True, options=BACKGROUND)
    calls_equal_eager(compiled, 0, 2, rows=5)
    calls_equal_eager(compiled, 2, 2, rows=7)
    assert backend.seen == [(True, "MainThread")]
    assert magpy.stats(compiled).records == 1
    eager = magpy.compile(fn, backend="eager", options=BACKGROUND)
    calls_equal_eager(eager, 0, 2)
    assert magpy.stats(eager).pending_compiles == 0 and not magpy_threads()


def test_a_training_step_compiles_while_recording() -> None:
    """A training step (``torch.autograd.grad`` in the graph) compiles during the recording
    call: its joint graph is traced from the parameters the step updates."""
    torch.manual_seed(0)
    model, reference = nn.Linear(3, 2), nn.Linear(3, 2)
    reference.load_state_dict(model.state_dict())

    def make(m: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        def step(x: torch.Tensor) -> torch.Tensor:
            loss = m(x).square().mean()
            grads = torch.autograd.grad(loss, list(m.parameters()))
            with torch.no_grad():
                for p, g in zip(m.parameters(), grads, strict=True):
                    p.sub_(0.1 * g)
            return loss

        return step

    backend = Backend()
    compiled, eager = (
        magpy.compile(make(model), backend=backend, options=BACKGROUND),
        make(reference),
    )
    for i in range(3):
        x = inputs(i)[0]
        assert torch.equal(compiled(x), eager(x))
        assert torch.equal(model.weight, reference.weight)
    assert backend.seen and all(name == "MainThread" for _, name in backend.seen)
    assert magpy.stats(compiled).pending_compiles == 0 and not magpy_threads()


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


@pytest.mark.inductor
@pytest.mark.slow
def test_inductor_compiles_in_the_background() -> None:
    """Through Inductor: equal to eager before and after the switch, one record, one swap."""
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = magpy.compile(model, options=BACKGROUND)
    with torch.no_grad():
        for i in range(3):
            x = inputs(i, rows=5)[0].repeat(1, 2)
            torch.testing.assert_close(compiled(x), model(x))
        assert magpy.wait_compiles(600)
        for i in range(3, 6):
            x = inputs(i, rows=5)[0].repeat(1, 2)
            torch.testing.assert_close(compiled(x), model(x))
    st = magpy.stats(compiled)
    assert (st.records, st.misses, st.fallbacks, st.background_swaps) == (1, 1, 0, 1), st
    rec = compiled._magpy_state.records[0]
    assert rec.background.status == "swapped" and rec.uncompiled is None
    assert "__magpy_reference" in rec.mock_code.globals
    assert rec.mock_code.globals["__magpy_reference"] is rec.graph_module


def branchy(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:  # a tensor value read into Python: assumed by the record, checked after
        return x * 2 + 1
    return x - 1


def test_a_record_that_assumes_values_compiles_on_its_first_confirmed_hit() -> None:
    """Without the switch too: a record whose graph assumes a tensor value the program read
    into Python runs its graph as is until calls confirm the assumption (more of them than
    calls missed an assumption); the last of them compiles it. A record whose assumption never
    holds again is never compiled."""
    backend = Backend()
    compiled = magpy.compile(branchy, backend=backend)

    def check(sign: float, i: int) -> None:
        x = sign * (torch.rand(4, 3, generator=torch.Generator().manual_seed(i)) + 0.1)
        assert torch.equal(compiled(x), branchy(x)), f"call {i}"

    check(1.0, 0)  # records; nothing compiled yet
    st = magpy.stats(compiled)
    assert (st.records, backend.compiles, st.pending_compiles) == (1, 0, 1)
    check(1.0, 1)  # hits (as is), then compiles
    st = magpy.stats(compiled)
    assert (backend.compiles, backend.calls, st.pending_compiles, st.background_swaps) == (
        1, 0, 0, 1,
    )  # fmt: skip
    check(1.0, 2)  # the compiled graph
    assert backend.calls == 1
    check(-1.0, 3)  # the compiled graph runs, its assumption fails: a second record
    check(1.0, 4)
    st = magpy.stats(compiled)
    assert (st.records, backend.compiles, backend.calls, st.pending_compiles) == (2, 1, 3, 1)
    # one call missed an assumption: a record compiles once it served more calls than that
    check(-1.0, 5)
    assert (backend.compiles, magpy.stats(compiled).pending_compiles) == (1, 1)
    check(-1.0, 6)  # the second confirmed call: compiled now
    st = magpy.stats(compiled)
    assert (backend.compiles, st.pending_compiles, st.background_swaps) == (2, 0, 2)
    assert st.assumption_misses == 1
    assert not magpy_threads()  # compiled in the program's thread, not on the worker
