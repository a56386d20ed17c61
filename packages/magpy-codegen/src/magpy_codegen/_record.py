"""A record: guard + compiled graph + mock, generated from one capture."""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch
import torch.fx as fx

from magpy_refgraph import BackendError, InternalError, MagPyError, Plan, SpeculationMiss

from ._backend import UNCOMPILED, Backend, compile_graph, shape_guard, update_rule
from ._background import COMPILE_LOCK, CompileJob, compile_now, compiles_later, hold, submit
from ._generated import GeneratedCode, NameAllocator
from ._guard import generate_guard
from ._guards import Guard, MemoGuard, PythonGuard
from ._memo import classify
from ._mock import PROGRAM_FAILED, generate_mock

__all__ = ["Record", "build_record", "record_guard"]


@attrs.define(eq=False)
class Record:
    """One cache entry: ``guard.check(fn, args, kwargs) -> inputs | None`` (a ``Guard``) and
    ``mock(fn, args, kwargs, inputs) -> result``; plus what produced them, for inspection."""

    guard: Guard
    mock: Callable[..., Any]
    plan: Plan
    guard_code: GeneratedCode
    mock_code: GeneratedCode
    graph_module: fx.GraphModule | None
    op_count: int
    hits: int = 0
    # why the graph runs uncompiled, operation by operation (``_backend._compile_or_run``)
    uncompiled: str | None = None
    # ``memoize(fn, args, kwargs)`` on a call the guard passed: puts a new guard in place, one
    # skips its stable part while nothing it depends on changed (``_memo``); None once tried
    memoize: Callable[[Any, Any, Any], None] | None = None
    # ``fork()``: a twin for another compiled callable of the same code (``magpy_runtime``'s
    # ``_pool``): the same plan, mock and compiled graph, a guard (and memo) of its own
    fork: Callable[[], Record] | None = None
    # the record this one was forked from (itself when it was recorded)
    origin: Record | None = None
    # its graph's compile on MagPy's worker thread (``build_record(background=True)``) or on
    # a confirmed hit (a record that assumes tensor values, ``_OnReuse``): its ``status`` says
    # whether the record still runs the graph as is; None: compiled when built
    background: CompileJob | None = None

    @staticmethod
    def program_failed(miss: SpeculationMiss) -> bool:
        """``miss`` says the graph raised the program's own error (what it changed was put
        back): the call runs the program natively, which raises it as eager does."""
        return miss.check == PROGRAM_FAILED

    @property
    def memo_guard_code(self) -> GeneratedCode | None:
        """The generated source of the memoizing guard, once it is in place."""
        guard = self.guard
        return guard.code if isinstance(guard, MemoGuard) else None

    @property
    def guard_source(self) -> str:
        return self.guard_code.source

    @property
    def mock_source(self) -> str:
        return self.mock_code.source


def build_record(
    plan: Plan,
    graph: fx.Graph,
    example_inputs: list[Any],
    backend: str | Backend,
    *,
    qualname: str = "",
    roots: str = "call",
    grad_enabled: bool | None = None,
    ambient: tuple[Any, Any] | None = None,
    restore_rng: bool = False,
    restore_inputs: tuple[int, ...] = (),
    undo_inputs: Callable[[str], tuple[int, ...]] | None = None,
    anchor: str | None = None,
    background: bool = False,
    on_compiled: Callable[[Record], None] | None = None,
    confirmed_enough: Callable[[int], bool] | None = None,
    guard: PythonGuard | None = None,
) -> Record:
    """Generate the guard and mock of ``plan`` and compile ``graph`` with ``backend``.

    ``background``: where ``compiles_later`` allows, the graph runs as is while ``backend``
    compiles a copy on MagPy's worker thread, then switches once (``_compile_later``; then
    ``on_compiled(rec)``). A record that assumes tensor values (``plan.checks``) compiles so
    on the first confirmed hit whose count ``confirmed_enough(n)`` accepts (default: 1).

    ``anchor``: for a site (``roots="frame"``), the local its guard's memo is kept for (the
    frame's first argument; ``rec.memoize(L[anchor], None, None)`` on a hit). Calls: ``fn``.
    ``restore_inputs``: the inputs the graph updates in place; ``undo_inputs(rule)``: those a
    failed run puts back when the compiled graph applies its updates by ``rule`` (default: all;
    ``magpy_monitor``'s ``UPDATE_RULES``, ``generate_mock``). ``guard``: ``record_guard``'s."""
    op_count = sum(1 for n in graph.nodes if n.op in ("call_function", "call_method"))
    has_graph = op_count > 0 or plan.num_outputs > 0
    later = has_graph and (background or bool(plan.checks)) and compiles_later(graph, backend)
    gm, compiled, updated = None, None, (restore_inputs, undo_inputs)
    if later:
        copied = copy.deepcopy(graph)  # the worker's own: a backend may rewrite what it compiles
        gm, compiled = _compiled_graph(graph, example_inputs, "eager", qualname)
    elif has_graph:
        with COMPILE_LOCK:
            gm, compiled = _compiled_graph(graph, example_inputs, backend, qualname)
    try:
        rec = _assemble(
            plan, graph, gm, compiled, "eager" if later else backend, qualname, roots,
            grad_enabled, ambient, op_count, restore_rng, updated, anchor, guard,
        )  # fmt: skip
    except MagPyError:
        raise
    except Exception as exc:  # a fault of ours, not of the backend: say which
        raise InternalError(
            f"generating the guard or mock of {qualname} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if later:
        mock_of = functools.partial(
            _mock_code, plan, backend=backend, qualname=qualname, roots=roots,
            restore_rng=restore_rng, updated=updated,
        )  # fmt: skip
        job = (copied, list(example_inputs), backend, qualname, mock_of, on_compiled)
        _compile_later(rec, *job, on_reuse=None if background else confirmed_enough or bool)
    return rec


def _compiled_graph(
    graph: fx.Graph, example_inputs: list[Any], backend: str | Backend, qualname: str
) -> tuple[fx.GraphModule, Callable[..., Any]]:
    """``compile_graph``, with what the backend did wrong said as a ``BackendError``."""
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    try:
        gm, compiled = compile_graph(graph, example_inputs, backend)
    except MagPyError:
        raise
    except Exception as exc:
        raise BackendError(
            f"backend {name!r} failed on the graph of {qualname}: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(compiled):
        raise BackendError(
            f"backend {name!r} returned {compiled!r} for the graph of {qualname}; a backend "
            "(gm, example_inputs) -> callable must return a callable"
        )
    return gm, compiled


def _no_torch_function(fn: Any) -> Any:
    """``fn`` run with torch function hooks off: the tensors it makes and reads are MagPy's."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return fn(*args, **kwargs)

    return run


@_no_torch_function
def _assemble(
    plan: Plan,
    graph: fx.Graph,
    gm: fx.GraphModule | None,
    compiled: Callable[..., Any] | None,
    backend: str | Backend,
    qualname: str,
    roots: str,
    grad_enabled: bool | None,
    ambient: tuple[Any, Any] | None,
    op_count: int,
    restore_rng: bool,
    updated: tuple[tuple[int, ...], Callable[[str], tuple[int, ...]] | None],
    anchor: str | None,
    guard: PythonGuard | None,
) -> Record:
    shape_check = shape_guard(gm if gm is not None else graph)
    guard_options = _guard_options(grad_enabled, qualname, roots, shape_check, ambient)
    if guard is None or shape_check is not None:
        guard = PythonGuard.load(generate_guard(plan, NameAllocator(), **guard_options))
    guard_code = guard.code
    mock_code = _mock_code(
        plan, gm, compiled, backend=backend, qualname=qualname, roots=roots,
        restore_rng=restore_rng, updated=updated,
    )  # fmt: skip
    mock = mock_code.load()["__magpy_mock"]
    rec = Record(
        guard=guard,
        mock=mock,
        plan=plan,
        guard_code=guard_code,
        mock_code=mock_code,
        graph_module=gm,
        op_count=op_count,
        uncompiled=gm.meta.get(UNCOMPILED) if gm is not None else None,
    )
    _arm(rec, guard_options, "fn" if roots == "call" else anchor)
    rec.fork = functools.partial(_fork, rec, guard_options, "fn" if roots == "call" else anchor)
    return rec


def _guard_options(
    grad_enabled: bool | None, qualname: str, roots: str, shape_check: Any, ambient: Any
) -> dict[str, Any]:
    return {
        "grad_enabled": torch.is_grad_enabled() if grad_enabled is None else grad_enabled,
        "qualname": qualname,
        "roots": roots,
        "shape_check": shape_check,
        "ambient": ambient,
    }


@_no_torch_function
def record_guard(
    plan: Plan,
    *,
    qualname: str = "",
    roots: str = "call",
    grad_enabled: bool | None = None,
    ambient: tuple[Any, Any] | None = None,
) -> PythonGuard:
    """The guard ``build_record`` generates for ``plan`` with these options, alone: to try a
    stored record before building it. Given to ``build_record(guard=...)`` with the same
    options, the record takes it as is rather than generating and loading it again (not for a
    graph with symbolic sizes, whose guard has a shape check: that one is generated)."""
    options = _guard_options(grad_enabled, qualname, roots, None, ambient)
    return PythonGuard.load(generate_guard(plan, NameAllocator(), **options))


def _mock_code(
    plan: Plan,
    gm: fx.GraphModule | None,
    compiled: Callable[..., Any] | None,
    *,
    backend: str | Backend,
    qualname: str,
    roots: str,
    restore_rng: bool,
    updated: tuple[tuple[int, ...], Callable[[str], tuple[int, ...]] | None],
) -> GeneratedCode:
    """The mock of ``plan`` around ``compiled`` (``gm`` compiled by ``backend``): all it needs
    of the compiled graph (the callable, the graph as is, the inputs a failed run puts back)
    is in its own source and globals, so that switching mocks switches all of it at once."""
    undo = updated[1]  # (asked once the compiled graph tells how it applies its updates)
    mock_code = generate_mock(
        plan,
        NameAllocator(),
        has_graph=compiled is not None,
        qualname=qualname,
        roots=roots,
        fresh_outputs=backend != "eager",
        restore_rng=restore_rng,
        restore_inputs=updated[0],
        undo_inputs=None if undo is None else undo(update_rule(backend, gm, compiled)),
    )
    if compiled is not None:
        mock_code.globals["__magpy_graph"] = compiled
        # the graph as it is, to tell the program's errors from the backend's (program_failed)
        reference = gm if gm is not None and compiled != gm.forward else None
        mock_code.globals["__magpy_reference"] = reference
    return mock_code


class _Switch:
    """A record's mock while its graph compiles on the worker: calls the mock in ``mock``,
    read once per call, so that a call in flight runs one mock from start to end. Twins of the
    record (``fork``) share it, and switch with it."""

    __slots__ = ("mock",)

    def __init__(self, mock: Callable[..., Any]) -> None:
        self.mock = mock

    def __call__(self, *args: Any) -> Any:
        return self.mock(*args)


class _OnReuse(_Switch):
    """A ``_Switch`` whose compile is held (``hold``) until calls confirmed it: their mock
    returned (the guard passed and the assumed tensor values held), as many as ``enough(n)``
    accepts. The call that makes them enough compiles the graph, in its own thread, before it
    returns (``compile_now``, once). For a record whose graph assumes the values of tensors
    its program read into Python (``plan.checks``): such assumptions often fail on the next
    call (a data-dependent branch that goes the other way), and a record whose assumptions
    never hold again then costs no compile."""

    __slots__ = ("confirmed", "enough", "job")

    def __init__(self, mock: Callable[..., Any], enough: Callable[[int], bool]) -> None:
        super().__init__(mock)
        self.job: CompileJob | None = None
        self.enough = enough
        self.confirmed = 0

    def __call__(self, *args: Any) -> Any:
        out = self.mock(*args)
        if self.job is not None:
            self.confirmed += 1
            if self.enough(self.confirmed):
                job, self.job = self.job, None
                if job is not None:
                    compile_now(job)
        return out


def _compile_later(
    rec: Record,
    graph: fx.Graph,
    example_inputs: list[Any],
    backend: str | Backend,
    qualname: str,
    mock_of: Callable[[fx.GraphModule, Callable[..., Any]], GeneratedCode],
    on_compiled: Callable[[Record], None] | None,
    *,
    on_reuse: Callable[[int], bool] | None,
) -> None:
    """Queue the compile of ``graph`` (``rec``'s graph, which runs as is meanwhile) on the
    worker. Once it is compiled, the mock around the compiled graph (``mock_of``) is generated
    there, then put in place with one store each (in ``rec`` and in the ``_Switch`` its twins
    call): a hit reads ``rec.mock`` once, so every call runs either the mock around the graph
    as is or the one around the compiled graph, with the callable, the reference graph and
    the undo rule that belong to it. The guard does not change (``compiles_later``). The job
    holds ``rec`` weakly: a record dropped meanwhile is not compiled. ``on_reuse``: the job is
    held for a confirmed hit instead, the first whose count it accepts (``_OnReuse``)."""
    switch = _Switch(rec.mock) if on_reuse is None else _OnReuse(rec.mock, on_reuse)
    rec.mock = switch
    ref = weakref.ref(rec)

    def compile() -> Callable[[], None] | str | None:
        if ref() is None:
            return None
        gm, compiled = _compiled_graph(graph, example_inputs, backend, qualname)
        if gm.meta.get(UNCOMPILED) is not None:
            return str(gm.meta[UNCOMPILED])  # (the backend runs it as is too)
        code = mock_of(gm, compiled)
        mock = code.load()["__magpy_mock"]

        def install() -> None:
            target = ref()
            if target is not None:
                target.graph_module, target.mock_code = gm, code
                target.mock = mock
            switch.mock = mock

        return install

    def failed(reason: str) -> None:
        target = ref()
        if target is not None:
            target.uncompiled = reason

    def done() -> None:
        target = ref()
        if target is not None and on_compiled is not None:
            on_compiled(target)

    rec.background = CompileJob(qualname, compile, failed, done)
    if isinstance(switch, _OnReuse):
        switch.job = rec.background
        hold(rec.background)
    else:
        submit(rec.background)


def _arm(rec: Record, guard_options: dict[str, Any], anchor: str | None) -> None:
    """Give ``rec`` its guard's memo for root ``anchor``."""
    if anchor is not None:
        rec.memoize = _memoizer(rec, guard_options, anchor)


def _fork(rec: Record, guard_options: dict[str, Any], anchor: str | None) -> Record:
    """``rec.fork()``: a twin of ``rec`` with a fresh guard from its generated code (a memo is
    armed on one compiled object; twins called with different ones would re-arm it on every
    call and turn it off), sharing the plan, the mock and its compiled graph."""
    twin = attrs.evolve(
        rec,
        guard=PythonGuard.load(rec.guard_code),
        hits=0,
        memoize=None,
        origin=rec.origin or rec,
    )
    _arm(twin, guard_options, anchor)
    return twin


def _memoizer(
    rec: Record, guard_options: dict[str, Any], anchor: str
) -> Callable[[Any, Any, Any], None]:
    """``rec.memoize``: find the stable part of ``rec``'s guard on a call it passed (``fn``:
    the object at root local ``anchor``), and put the guard with the memo in place, armed."""

    def memoize(fn: Any, args: Any, kwargs: Any) -> None:
        rec.memoize = None
        with collection_paused():
            _memoize(fn)

    def _memoize(fn: Any) -> None:
        found = classify(rec.plan, fn, anchor)
        if found is None:
            return
        split, values = found
        code = generate_guard(rec.plan, NameAllocator(), memo=split, **guard_options)
        memo = code.memo
        if memo is None:
            return
        memo.arm_first(fn, values)
        rec.guard = MemoGuard.load(code)

    return memoize


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while MagPy's own code generation allocates (a big
    model's guard is tens of thousands of paths and lines; a full collection over the
    program's heap in their midst costs more than the work). No program code runs inside, and
    nothing it made is kept from collection for longer than the pause."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
