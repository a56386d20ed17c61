"""Mock generation: reproduce a monitored run's results and effects without running its Python.

The generated ``__magpy_mock(fn, args, kwargs, inputs)`` reads the entry values it needs (before
anything is written), calls the compiled graph, builds each new object once (so aliasing between
outputs, and with inputs, is the same as in the monitored run), applies the write-backs in
program order, and returns the result.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import (
    AdvanceIter,
    AppendItem,
    Apply,
    Build,
    BuildKind,
    CallMethod,
    Constant,
    DelAttr,
    DelItem,
    FromPath,
    GraphOut,
    InternalError,
    Plan,
    Recipe,
    ReplaceContents,
    SetAttr,
    SetItem,
    SpeculationMiss,
    literal_expr,
)

from ._cbuild import load_disjoint
from ._generated import GeneratedCode, NameAllocator, comment
from ._guard import PathVars

__all__ = ["PROGRAM_FAILED", "generate_mock"]


class _MockWriter:
    def __init__(self, names: NameAllocator, roots: str) -> None:
        self.names = names
        self.reads: list[str] = []
        self.builds: list[str] = []
        self.paths = PathVars(names, self.reads, "    ", roots)
        self.built: dict[int, str] = {}

    def c(self, obj: Any) -> str:
        lit = literal_expr(obj)
        return lit if lit is not None else self.names.const(obj)

    def expr(self, r: Recipe) -> str:
        if isinstance(r, FromPath):
            return self.paths.var(r.path)
        if isinstance(r, Constant):
            return self.c(r.value)
        if isinstance(r, GraphOut):
            return f"__magpy_outs[{r.index}]"
        if isinstance(r, Apply):
            args = ", ".join(self.expr(a) for a in r.args)
            return f"{self.expr(r.fn)}({args})"
        if isinstance(r, Build):
            return self.build(r)
        raise InternalError(f"unknown recipe {r!r}")

    def build(self, b: Build) -> str:
        name = self.built.get(b.key)
        if name is not None:
            return name
        parts = [self.expr(p) for p in b.parts]
        kind = b.kind
        if kind == BuildKind.TUPLE:
            text = f"({', '.join(parts)},)" if parts else "()"
        elif kind == BuildKind.LIST:
            text = f"[{', '.join(parts)}]"
        elif kind == BuildKind.SET:
            # set((a, b)) adds one element after another, as the program did; a display
            # {1, 2, 3} of constants compiles to a frozenset merge, with another layout
            text = f"set(({', '.join(parts)},))" if parts else "set()"
        elif kind == BuildKind.SLICE:
            text = f"slice({', '.join(parts)})"
        elif kind == BuildKind.DICT:
            pairs = ", ".join(f"{parts[i]}: {parts[i + 1]}" for i in range(0, len(parts), 2))
            text = f"{{{pairs}}}"
            if b.extra and b.extra[0] is not dict:
                text = f"{self.names.const(b.extra[0])}({text})"
        elif kind == BuildKind.NAMEDTUPLE:
            text = f"{self.names.const(b.extra[0])}({', '.join(parts)})"
        elif kind == BuildKind.CALL:
            text = f"{parts[0]}({', '.join(parts[1:])})"
        elif kind == BuildKind.ITER:
            name = self.names.fresh("b")
            self.builds.append(f"    {name} = iter({parts[0]}); {name}.__setstate__({b.extra[0]})")
            self.built[b.key] = name
            return name
        else:
            raise InternalError(f"cannot build {kind!r} yet")
        name = self.names.fresh("b")
        self.builds.append(f"    {name} = {text}")
        self.built[b.key] = name
        return name

    def writeback(self, w: Any) -> str:
        if isinstance(w, SetAttr):
            value = self.expr(w.value)
            return f"    {self.c(set_attribute)}({self.expr(w.target)}, {w.name!r}, {value})"
        if isinstance(w, DelAttr):
            return f"    delattr({self.expr(w.target)}, {w.name!r})"
        if isinstance(w, SetItem):
            return f"    {self.expr(w.target)}[{self.expr(w.key)}] = {self.expr(w.value)}"
        if isinstance(w, DelItem):
            return f"    del {self.expr(w.target)}[{self.expr(w.key)}]"
        if isinstance(w, AppendItem):
            return f"    {self.expr(w.target)}.append({self.expr(w.value)})"
        if isinstance(w, CallMethod):
            if not w.name.isidentifier():
                raise InternalError(f"bad method name {w.name!r} in a write-back")
            args = ", ".join(self.expr(a) for a in w.args)
            return f"    {self.expr(w.target)}.{w.name}({args})"
        if isinstance(w, AdvanceIter):
            return f"    for _ in range({int(w.count)}): next({self.expr(w.target)}, None)"
        if isinstance(w, ReplaceContents):
            target = self.expr(w.target)
            parts = [self.expr(p) for p in w.parts]
            if w.kind == BuildKind.DICT:
                pairs = ", ".join(f"{parts[i]}: {parts[i + 1]}" for i in range(0, len(parts), 2))
                return f"    {target}.clear(); {target}.update({{{pairs}}})"
            return f"    {target}[:] = [{', '.join(parts)}]"
        raise InternalError(f"unknown write-back {w!r}")


def generate_mock(
    plan: Plan,
    names: NameAllocator,
    *,
    has_graph: bool,
    qualname: str = "",
    roots: str = "call",
    fresh_outputs: bool = False,
    restore_rng: bool = False,
    restore_inputs: tuple[int, ...] = (),
    undo_inputs: tuple[int, ...] | None = None,
) -> GeneratedCode:
    """The mock of ``plan`` as generated source (function ``__magpy_mock``).

    ``restore_rng``: the graph draws random numbers; a miss of a check puts the generators'
    state back (the program then runs again and draws what eager draws). ``restore_inputs``:
    the inputs (indices) the graph updates in place; a miss puts their values back.
    ``undo_inputs``: without checks, the ones of them the graph may have changed when it
    raises (``magpy_monitor.core.undo``); all are copied on a record's first runs all the same,
    where a backend's own failure shows.

    ``fresh_outputs``: the backend may return an input tensor object as an output; copy it.
    """
    w = _MockWriter(names, roots)
    undo = "__magpy_undo" if has_graph and (restore_rng or restore_inputs) else "None"
    checks = _checks(plan, names, undo)
    writes = [w.writeback(x) for x in plan.writebacks]
    result = w.expr(plan.result)
    call = "    __magpy_outs = ()"
    if has_graph:
        saver = None
        if undo != "None":  # what the graph changes that a miss must put back
            needed = restore_inputs if plan.checks or undo_inputs is None else undo_inputs
            saver = Saver(tuple(restore_inputs), tuple(needed), restore_rng)
        call = _graph_call(plan, names, saver, tuple(restore_inputs))
    if has_graph and fresh_outputs and plan.num_outputs and plan.inputs:
        # a compiler may hand back an input tensor itself as an output (x + 0 * r -> x);
        # eager made a new tensor there, so give the caller a copy
        helper = names.const(fresh_outputs_of)
        call += f"\n    __magpy_outs = {helper}(__magpy_outs, inputs)"
    draws, run = _with_draws(plan, names, [call, *checks])
    src = [
        comment(f"mock of {qualname}"),
        "def __magpy_mock(fn, args, kwargs, inputs):"
        if roots == "call"
        else "def __magpy_mock(L, S, inputs):",
        *w.reads,
        *draws,
        *run,
        *w.builds,
        *writes,
        f"    return {result}",
        "",
    ]
    return GeneratedCode("\n".join(src), dict(names.consts), "mock")


def _with_draws(plan: Plan, names: NameAllocator, run: list[str]) -> tuple[list[str], list[str]]:
    """The record's draws (``Plan.draws``), made again before the graph, and ``run`` (the
    graph and its checks) putting their generators back when it misses."""
    if not plan.draws:
        return [], run
    draws = [f"    __magpy_drawn = {names.const(replay_draws)}({names.const(plan.draws)})"]
    body = textwrap.indent("\n".join(run), "    ")
    undo = names.const(restore_draws)
    return draws, [
        f"    try:\n{body}\n    except BaseException:\n        {undo}(__magpy_drawn)\n        raise"
    ]


def _graph_call(
    plan: Plan, names: NameAllocator, saver: Saver | None, restore_inputs: tuple[int, ...]
) -> str:
    """The lines that run the graph, and what they do when it raises."""
    # an operation of the graph may fail where an assumption does not hold (a size read from a
    # mask, used by ``arange``): nothing was written yet, so that is a miss too. Without
    # assumptions the error is the program's (an index out of range, shapes that do not
    # broadcast): what the graph changed is put back and the program runs again, natively, for
    # this call only; it raises the error itself, with eager's effects
    failed = names.const(graph_failed if plan.checks else program_failed)
    call = "    __magpy_outs = __magpy_graph(*inputs)"
    undo = "None"
    if saver is not None:
        undo = "__magpy_undo"
        call = f"    {undo} = {names.const(saver)}(inputs)\n{call}"
    call = call.replace("\n", "\n    ")
    extra = "" if plan.checks else ", __magpy_reference, inputs"
    if restore_inputs and not plan.checks:
        extra += f", {restore_inputs!r}"
    handler = f"{failed}(exc, {undo}{extra})"
    return f"    try:\n    {call}\n    except Exception as exc:\n        {handler}"


def _checks(plan: Plan, names: NameAllocator, rng: str) -> list[str]:
    """Lines comparing the graph's outputs with the values the capture assumed; they run
    before anything is built or written, so a miss leaves no trace."""
    if not plan.checks:
        return []
    miss = names.const(speculation_miss)
    same = names.const(same_scalar)
    lines = []
    for i, c in enumerate(plan.checks):
        out = f"__magpy_outs[{c.output}]"
        if c.truth:
            cond = f"bool({out}) is not {bool(c.expected)!r}"
        else:
            cond = f"not {same}({out}.item(), {names.const(c.expected)})"
        where = comment(" ".join(c.where.split()))
        lines.append(f"    if {cond}: {miss}({i}, {rng})  {where}")
    return lines


DRAW_MISSED = -3  # ``SpeculationMiss.check`` of a draw that gave another value this time


def replay_draws(draws: tuple[Any, ...]) -> list[tuple[Any, Any]]:
    """Make the record's draws again, in program order (``Plan.draws``); the states of their
    generators before them, for a later miss to put back. A draw that gives another value
    than the recorded one puts them back at once and misses: the program runs again (or
    another record is tried) from the very state eager would draw from."""
    saved: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    try:
        for d in draws:
            if id(d.generator) not in seen:
                seen.add(id(d.generator))
                saved.append((d, d.state()))
            if not d.again():
                raise SpeculationMiss(DRAW_MISSED)
    except BaseException:
        restore_draws(saved)
        raise
    return saved


def restore_draws(saved: list[tuple[Any, Any]]) -> None:
    """Put the generators back as they were before the draws (the first generator last)."""
    for d, state in reversed(saved):
        d.restore(state)


def speculation_miss(check: int, undo: Any = None) -> None:
    if undo is not None:
        restore_state(undo)
    raise SpeculationMiss(check)


def graph_failed(exc: Exception, undo: Any = None) -> None:
    if undo is not None:
        restore_state(undo)
    raise SpeculationMiss(-1) from exc


PROGRAM_FAILED = -2  # ``SpeculationMiss.check`` of a graph that raised the program's error


def program_failed(
    exc: Exception,
    undo: Any = None,
    reference: Any = None,
    inputs: Any = (),
    updated: tuple[int, ...] = (),
) -> None:
    """The graph raised without any assumption of the record failing: put back what it
    changed; the caller runs the program natively for this call (which raises as eager).

    ``reference`` is the graph uncompiled (None when the backend ran it as it is): when it does
    not raise on the same inputs, the compiled graph's error is the backend's, not the
    program's: an ``InternalError`` (the cache falls back to eager, with a warning). What the
    reference run changes (any of the ``updated`` inputs) is put back after it."""
    if undo is not None:
        restore_state(undo)
    if reference is not None:
        before = save_state(inputs, updated, undo is not None and undo[1] is not None)
        try:
            reference(*inputs)
        except Exception:
            pass  # the program's own error: eager raises it too
        else:
            raise InternalError(
                f"the compiled graph raised {type(exc).__name__}: {exc}; the graph does not"
            ) from exc
        finally:
            restore_state(before)
    raise SpeculationMiss(PROGRAM_FAILED) from exc


class Saver:
    """``save_state`` of a record's mock: every updated input on the record's first
    ``FULL_RUNS`` runs, then only those a failed run may have changed (``needed``)."""

    FULL_RUNS = 2

    def __init__(self, updated: tuple[int, ...], needed: tuple[int, ...], rng: bool) -> None:
        self.updated, self.needed, self.rng = updated, needed, rng
        self.full_runs = self.FULL_RUNS if needed != updated else 0

    def __call__(self, inputs: Any) -> Any:
        if self.full_runs:
            self.full_runs -= 1
            return save_state(inputs, self.updated, self.rng)
        return save_state(inputs, self.needed, self.rng)


def save_state(inputs: Any, updated: tuple[int, ...], rng: bool) -> Any:
    """What the graph is about to change, for a miss to put back: copies of the inputs it
    updates in place, and the state of torch's default generators (CPU, and every CUDA
    device once CUDA is up) when it draws random numbers."""
    copies = [(inputs[i], inputs[i].detach().clone()) for i in updated]
    if not rng:
        return copies, None
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return copies, (torch.get_rng_state(), cuda)


def restore_state(state: Any) -> None:
    copies, rng = state
    with torch.no_grad():
        for t, saved in copies:
            t.copy_(saved)
    if rng is not None:
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state_all(rng[1])


def same_scalar(now: Any, assumed: Any) -> bool:
    """``now`` is the very Python value ``assumed`` (type, sign of zero; NaN never is)."""
    if type(now) is not type(assumed) or now != assumed:
        return False
    return type(now) is not float or math.copysign(1.0, now) == math.copysign(1.0, assumed)


def _disjoint_python(outs: Any, inputs: tuple[Any, ...]) -> bool:
    return set(map(id, inputs)).isdisjoint(map(id, outs))  # (C loops)


def _disjoint_first(outs: Any, inputs: tuple[Any, ...]) -> bool:
    """The test ``fresh_outputs_of`` makes, chosen on its first use: a pointer comparison in
    C (``_snapcheck.c``; a model's hundreds of parameters are inputs, its outputs few), else a
    set of ids."""
    found = load_disjoint()
    _DISJOINT[0] = found if found is not None else _disjoint_python
    return _DISJOINT[0](outs, inputs)


_DISJOINT: list[Callable[[Any, tuple[Any, ...]], bool]] = [_disjoint_first]


def fresh_outputs_of(outs: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """``outs`` with every output that *is* an input tensor replaced by a copy."""
    if type(outs) not in (tuple, list) or type(inputs) is not tuple:
        outs, inputs = tuple(outs), tuple(inputs)
    if _DISJOINT[0](outs, inputs):
        return tuple(outs)
    ids = set(map(id, inputs))
    return tuple(o.clone() if id(o) in ids else o for o in outs)


_MODULE = torch.nn.Module
_MODULE_SETATTR: Any = torch.nn.Module.__setattr__
_OBJECT_SETATTR = object.__setattr__
# values ``Module.__setattr__`` stores as plain attributes (not None: it unregisters)
_PLAIN_VALUES = frozenset({int, float, bool, str, bytes, complex})


def set_attribute(obj: Any, name: str, value: Any) -> None:
    """``setattr(obj, name, value)``. A plain value stored on a module whose class has
    ``Module.__setattr__`` (and nothing but ``object`` after ``Module`` in its MRO) where the
    module registers nothing of that name is what ``Module.__setattr__`` ends in:
    ``object.__setattr__``, without its Python (a model setting ``self.shift_size = 0`` on
    every call); everything else goes through ``setattr``."""
    cls: Any = type(obj)
    if (
        cls.__setattr__ is _MODULE_SETATTR
        and type(value) in _PLAIN_VALUES
        and cls.__mro__[-2] is _MODULE
    ):
        d = obj.__dict__
        if (
            name not in d.get("_parameters", ())
            and name not in d.get("_modules", ())
            and name not in d.get("_buffers", ())
        ):
            _OBJECT_SETATTR(obj, name, value)
            return
    setattr(obj, name, value)
