"""Never differs from eager: threads (issue 17).

Eight worker threads call the same compiled function at once, with different shapes and values,
each comparing what it got with the original function's answer; ``torch.compiler.is_compiling()``
read in another thread while one thread records (False there, as in eager: MagPy's flag is per
thread, ``magpy_monitor/libs/torch/globalstate.py``). Every scenario returns deterministic
observations (ordered by worker id, never by finishing order).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import _integration_differential as D
import torch

case = D.case

WORKERS = 8


def _run_workers(work: Callable[[int], Any], n: int = WORKERS) -> list[Any]:
    """``[work(0), ..., work(n - 1)]``, each in its own thread, started together."""
    results: dict[int, Any] = {}
    start = threading.Barrier(n)

    def body(i: int) -> None:
        start.wait(timeout=30)
        try:
            results[i] = work(i)
        except Exception as exc:  # observed, not lost with the thread
            results[i] = ("raised", type(exc).__name__, str(exc))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return [results.get(i, "no result") for i in range(n)]


def _poly(x: torch.Tensor, k: float) -> torch.Tensor:
    return (x * k).sin() + x.pow(2) - k


@case("threads", inductor=True)
def workers_same_shapes_different_values(w: D.World) -> object:
    cf = w.compile(_poly)
    first = cf(torch.arange(4.0), 1.5)  # recorded before the workers start (a slow compile)

    def work(i: int) -> object:
        outs = []
        for j in range(4):
            x = torch.arange(4.0) + i + j
            got = cf(x, 1.5)
            outs.append((got, torch.equal(got, _poly(x, 1.5))))
        return outs

    return first, _run_workers(work)


@case("threads", inductor=True)
def workers_different_shapes(w: D.World) -> object:
    cf = w.compile(_poly)
    first = [cf(torch.linspace(-1, 1, n), 0.5) for n in (2, 3)]  # recorded before the workers

    def work(i: int) -> object:
        outs = []
        for j in range(3):
            x = torch.linspace(-1, 1, 2 + i % 4) * (j + 1)
            got = cf(x, 0.5)
            outs.append((got, torch.equal(got, _poly(x, 0.5))))
        return outs

    return first, _run_workers(work)


def _two_rounds(work: Callable[[int], Any]) -> Callable[[int], Any]:
    """``work`` twice per worker, every worker finishing the first round before any starts the
    second: one thread records at a time and the others run natively meanwhile, so in the first
    round the workers may all finish before a record exists; the second round meets the
    records the first one made (a cache hit the test can count on)."""
    between = threading.Barrier(WORKERS)

    def both(i: int) -> object:
        first = work(i)
        between.wait(timeout=60)
        return first, work(i)

    return both


@case("threads")
def workers_python_scalars_vary(w: D.World) -> object:
    cf = w.compile(_poly)

    def work(i: int) -> object:
        outs = []
        for k in (1.0, 2.0, 1.0, float(i % 3)):
            x = torch.ones(3) * i
            got = cf(x, k)
            outs.append((got, torch.equal(got, _poly(x, k))))
        return outs

    return _run_workers(_two_rounds(work))


@case("threads")
def workers_compiled_module(w: D.World) -> object:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    cm = w.compile(m)

    def work(i: int) -> object:
        outs = []
        with torch.no_grad():
            for j in range(3):
                x = torch.arange(4.0 * (1 + i % 2)).reshape(-1, 4) + j
                got = cm(x)
                outs.append((got, torch.equal(got, m(x))))
        return outs

    return _run_workers(work)


@case("threads")
def workers_own_lists_mutated(w: D.World) -> object:
    def f(acc: list[torch.Tensor], x: torch.Tensor) -> int:
        acc.append(x * 2)
        return len(acc)

    cf = w.compile(f)

    def work(i: int) -> object:
        acc: list[torch.Tensor] = []
        lens = [cf(acc, torch.full((2,), float(i + j))) for j in range(4)]
        return lens, acc

    return _run_workers(_two_rounds(work))


@case("threads")
def is_compiling_seen_from_other_thread(w: D.World) -> object:
    recording = threading.Event()
    seen = threading.Event()
    observed: list[bool] = []

    def rendezvous() -> None:
        if not recording.is_set():
            recording.set()
            seen.wait(timeout=30)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        rendezvous()
        return y * 2

    cf = w.compile(f)

    def watcher() -> None:
        recording.wait(timeout=30)
        observed.append(torch.compiler.is_compiling())
        seen.set()

    t = threading.Thread(target=watcher)
    t.start()
    outs = [cf(torch.ones(2))]
    t.join(timeout=60)
    outs += [cf(torch.ones(2) * k) for k in range(3)]
    return outs, observed, torch.compiler.is_compiling()


@case("threads")
def is_compiling_in_workers_outside_calls(w: D.World) -> object:
    cf = w.compile(_poly)

    def work(i: int) -> object:
        flags = []
        for j in range(3):
            cf(torch.ones(2) * (i + j), 1.0)
            flags.append(torch.compiler.is_compiling())
        return flags

    return _run_workers(work)


@case("threads")
def workers_read_shared_global_config(w: D.World) -> object:
    config = {"scale": 2.0}

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * config["scale"]

    cf = w.compile(f)

    def work(i: int) -> object:
        x = torch.ones(2) * i
        return [cf(x) for _ in range(3)]

    first = _run_workers(work)
    config["scale"] = 3.0  # between rounds: every worker must see it
    second = _run_workers(work)
    return first, second


@case("threads")
def workers_grad_mode_per_thread(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * x

    cf = w.compile(f)

    def work(i: int) -> object:
        outs = []
        with torch.set_grad_enabled(i % 2 == 0):
            for _ in range(3):
                x = torch.ones(2, requires_grad=True)
                y = cf(x)
                outs.append((y.detach(), y.requires_grad))
        return outs

    return _run_workers(work)


@case("threads")
def workers_raise_on_some_inputs(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        if n < 0:
            raise ValueError(f"negative {n}")
        return x + n

    cf = w.compile(f)

    def work(i: int) -> object:
        return [w.attempt(lambda n=n: cf(torch.ones(2), n)) for n in (i, -i - 1, i, i)]

    return _run_workers(work)


@case("threads")
def workers_dtypes_vary(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).sum(0)

    cf = w.compile(f)
    dtypes = (torch.float32, torch.float64, torch.int64, torch.int32)

    def work(i: int) -> object:
        dt = dtypes[i % 4]
        return [cf(torch.arange(6, dtype=dt).reshape(2, 3) + j) for j in range(3)]

    return _run_workers(work)


@case("threads")
def workers_each_compile_their_own(w: D.World) -> object:
    def work(i: int) -> object:
        def f(x: torch.Tensor) -> torch.Tensor:
            return x * i + 1

        cf = w.compile(f)
        return [cf(torch.ones(2) * j) for j in range(3)]

    return _run_workers(work)


test_eager, test_inductor = D.tests(__name__)
