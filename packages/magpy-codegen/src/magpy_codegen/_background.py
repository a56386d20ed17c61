"""Background compiles: one worker thread compiles records' graphs while they run as is.

``build_record(..., background=True)`` gives a new record the fx graph run as is (eager
speed, eager results) and hands the backend's compile to the worker here; when it finishes,
the record switches to the compiled graph once (``_record._compile_later``). The worker:

- is one daemon thread named ``magpy-compile``, started on the first job: compiles are
  serialized, and every compile MagPy makes, on this thread or in a recording call, holds
  ``COMPILE_LOCK`` (Inductor's config patches are process-global);
- compiles under the recording thread's grad mode, inference mode, autocast state and CUDA
  device (thread-local in torch: the backend traces what the synchronous compile would);
- puts a compiled graph in place under its lock, and only if no ``cancel_compiles`` (what
  ``magpy.reset`` calls) came since the job was submitted: a record dropped by a reset is never
  switched. ``cancel_compiles`` drops the jobs not started and waits for the thread to end
  (a compile in progress cannot be interrupted: it finishes, and its result is discarded).

The same job can instead be held (``hold``) and run later in a thread of the program
(``compile_now``): what ``build_record`` does for a record that assumes tensor values, compiled
once calls confirmed them (``_record._OnReuse``).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

import torch
import torch.fx as fx

from magpy_monitor import FAKE

from ._backend import BACKENDS, Backend, gains_nothing, resolve_backend

__all__ = [
    "COMPILE_LOCK",
    "CompileJob",
    "cancel_compiles",
    "compile_now",
    "compiles_later",
    "hold",
    "pending_compiles",
    "submit",
    "wait_compiles",
]

THREAD_NAME = "magpy-compile"

# held by every compile MagPy makes (re-entrant: a backend may compile a nested graph)
COMPILE_LOCK = threading.RLock()


def compiles_later(graph: fx.Graph, backend: str | Backend) -> bool:
    """Whether ``graph`` may run as is while ``backend`` compiles it on the worker.

    Not when there is nothing to compile (``"eager"``, or a graph the backend would gain
    nothing on: ``_fusable``); not when a placeholder has symbolic
    sizes (the record's guard checks what the compiler specialised, ``shape_guard(gm)``, so the
    guard is only known after the compile); not for a training step (a ``torch.autograd.grad``
    node: its joint graph is traced from the live parameters and optimizer state, which the
    step run as is updates in place meanwhile); not under a torch-function or dispatch mode
    (thread state the worker cannot take along). Those compile while the call records, as
    without the switch."""
    compiler = resolve_backend(backend)
    if compiler is BACKENDS["eager"] or gains_nothing(compiler, graph):
        return False
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.autograd.grad:
            return False
        fake = node.meta.get(FAKE) if node.op == "placeholder" else None
        if isinstance(fake, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in fake.shape):
            return False
    return True


class _ThreadState:
    """The recording thread's torch state that changes what a backend traces."""

    __slots__ = ("autocast", "device", "grad", "inference")

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.inference = torch.is_inference_mode_enabled()
        self.autocast = [
            (kind, torch.get_autocast_dtype(kind))
            for kind in ("cpu", "cuda")
            if torch.is_autocast_enabled(kind)
        ]
        self.device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if self.inference:
                stack.enter_context(torch.inference_mode())
            stack.enter_context(torch.set_grad_enabled(self.grad))
            for kind, dtype in self.autocast:
                stack.enter_context(torch.autocast(kind, dtype=dtype))
            if self.device is not None:
                stack.enter_context(torch.cuda.device(self.device))
            yield


_Steps = tuple[
    Callable[[], Callable[[], None] | str | None],
    Callable[[str], None],
    Callable[[], None] | None,
]


class CompileJob:
    """One graph to compile on the worker.

    ``compile()`` compiles and returns what puts the result in place (called under the
    worker's lock), or why the graph stays as is (a str: the backend could not compile it),
    or None when there is nothing to switch (the record is gone); ``failed(reason)`` records
    that reason; ``done()`` is told once either happened (not after a cancel). The three are
    dropped once the job ended: they hold the graph and its example inputs.

    ``status``: "pending", then "swapped", "uncompiled" or "cancelled"; ``seconds``: how long
    the compile took."""

    __slots__ = ("epoch", "label", "seconds", "state", "status", "steps")

    def __init__(
        self,
        label: str,
        compile: Callable[[], Callable[[], None] | str | None],
        failed: Callable[[str], None],
        done: Callable[[], None] | None,
    ) -> None:
        self.label = label
        self.steps: _Steps | None = (compile, failed, done)
        self.status = "pending"
        self.seconds = 0.0
        self.epoch = -1
        self.state = _ThreadState()

    def __repr__(self) -> str:
        return f"<CompileJob {self.label} {self.status}>"


class _Worker:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[CompileJob] = deque()
        self._thread: threading.Thread | None = None
        self._running: CompileJob | None = None
        self._epoch = 0

    def submit(self, job: CompileJob) -> None:
        with self._cond:
            job.epoch = self._epoch
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, args=(self._epoch,), name=THREAD_NAME, daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def hold(self, job: CompileJob) -> None:
        with self._cond:
            job.epoch = self._epoch

    def run_here(self, job: CompileJob) -> None:
        steps, job.steps = job.steps, None
        if steps is not None:
            self._run(job, *steps)

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (self._running is not None)

    def wait(self, timeout: float | None) -> bool:
        if threading.current_thread() is self._thread:
            return False  # (a backend waiting for itself)
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and self._running is None, timeout)

    def cancel(self, *, join: bool) -> None:
        with self._cond:
            self._epoch += 1
            for job in self._queue:
                job.status, job.steps = "cancelled", None
            self._queue.clear()
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if join and thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self, epoch: int) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._epoch != epoch)
                if self._epoch != epoch:
                    return
                job = self._running = self._queue.popleft()
            try:
                if job.steps is not None:
                    self._run(job, *job.steps)
            finally:
                with self._cond:
                    job.steps = None
                    self._running = None
                    self._cond.notify_all()

    def _run(
        self,
        job: CompileJob,
        compile: Callable[[], Callable[[], None] | str | None],
        failed: Callable[[str], None],
        done: Callable[[], None] | None,
    ) -> None:
        start = time.perf_counter()
        outcome: Callable[[], None] | str | None
        try:
            with COMPILE_LOCK, job.state.entered():
                outcome = compile()
        except BaseException as exc:  # the backend's failure: the graph keeps running as is
            # (BaseException too: a backend's SystemExit would end the worker, jobs queued)
            outcome = f"the background compile failed: {type(exc).__name__}: {exc}"
        job.seconds = time.perf_counter() - start
        with self._cond:
            if job.epoch != self._epoch or outcome is None:
                job.status = "cancelled"  # (a reset came meanwhile, or the record is gone)
                return
            if isinstance(outcome, str):
                failed(outcome)
                job.status = "uncompiled"
            else:
                outcome()
                job.status = "swapped"
            if done is not None:
                # (a filter that makes warnings errors: no frame of the program to raise in)
                with contextlib.suppress(Warning):
                    done()


_WORKER = _Worker()


def submit(job: CompileJob) -> None:
    """Queue ``job`` on the worker (started on first use)."""
    _WORKER.submit(job)


def hold(job: CompileJob) -> None:
    """Keep ``job`` for ``compile_now`` in a thread of the program (a record compiled once it
    proved it is used again), dropped like a queued job by a ``cancel_compiles`` meanwhile."""
    _WORKER.hold(job)


def compile_now(job: CompileJob) -> None:
    """Run a held ``job`` in this thread (once: a second call does nothing)."""
    _WORKER.run_here(job)


def pending_compiles() -> int:
    """Jobs queued or compiling now."""
    return _WORKER.pending()


def wait_compiles(timeout: float | None = None) -> bool:
    """Wait until no compile is queued or running (at most ``timeout`` seconds); whether none
    is."""
    return _WORKER.wait(timeout)


def cancel_compiles() -> None:
    """Drop the queued jobs, discard the result of the one compiling, and wait for the worker
    thread to end (``magpy.reset``)."""
    _WORKER.cancel(join=True)


def _at_exit() -> None:
    # nothing is put in place while the interpreter shuts down; the daemon thread is not
    # waited for (its compile may take long)
    _WORKER.cancel(join=False)


atexit.register(_at_exit)
