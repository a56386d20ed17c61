"""``magpy.explain``: run one call and report what MagPy captures from it.

``explain(fn)(*args, **kwargs)`` runs the call once, in split mode from its start, with a
backend that compiles nothing, and returns an ``ExplainOutput``: graphs, graph breaks (with
``file:line``), records (guard and mock source), assumptions and the RefGraph of the last
record. ``ExplainOutput.save(dir)`` writes the same as an HTML page (``_html``).

The call leaves nothing behind: the records it made are dropped, and the functions it gave
sites to (the target's entry, the callees of a broken chain, the places after a break) get
their code back (``_instrumentation_undone``), so the explained function runs afterwards
exactly as before (see docs/frame-hook.md, "What explain leaves behind").
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import torch

from magpy_codegen import BACKENDS
from magpy_refgraph import MagPyError, NotCompiledError

from ._html import write_report
from ._settings import Settings
from .cache._cache import BreakReason, CacheState
from .cache._codes import REGISTRY
from .cache._sites import ensure_entry_site, forget_backend

__all__ = [
    "ExplainOutput",
    "explain",
    "outside_share_of",
    "python_function",
    "state_of",
    "step_parts",
]


def state_of(compiled: Any) -> CacheState:
    """The record cache of a compiled callable; ``NotCompiledError`` for anything else."""
    state = getattr(compiled, "_magpy_state", None)
    if not isinstance(state, CacheState):
        raise NotCompiledError(f"{compiled!r} is not a magpy function; wrap it with magpy.compile")
    return state


def outside_share_of(state: CacheState) -> float:
    """The share of the served calls' run time spent outside compiled graphs."""
    stats = state.stats
    return stats.time_outside / stats.time_total if stats.time_total else 0.0


@attrs.define
class ExplainOutput:
    """What MagPy captured from one call (shaped like ``torch._dynamo.explain``'s output).

    ``graphs`` are fx ``GraphModule``s (``ops_per_graph[i]`` names the calls of ``graphs[i]``);
    ``records`` the records the call made (``guard_source``, ``mock_source``,
    ``graph_module``); ``refgraph`` the text dump of the last record's RefGraph;
    ``outside_share`` the share of run time outside compiled graphs where it was measured
    (``outside_note`` says how; None when not: one call cannot measure it).
    ``save(dir)`` writes all of it as ``dir/index.html``.
    """

    graphs: list[Any]
    graph_count: int
    graph_break_count: int
    break_reasons: list[BreakReason]
    op_count: int
    ops_per_graph: list[list[str]]
    guards: list[str]
    out_guards: list[str]
    refgraph: str
    # tensor values read into Python that the graphs assume, checked after each run
    # (``file:line (the value assumed)``, see docs/dynamic.md)
    assumptions: list[str] = attrs.field(factory=list)
    records: list[Any] = attrs.field(factory=list, repr=False)
    qualname: str = ""
    # the Python function the call entered first (its source goes into the report)
    function: types.FunctionType | None = attrs.field(default=None, repr=False)
    outside_share: float | None = None
    outside_note: str = ""

    def __str__(self) -> str:
        lines = [
            f"Graph Count: {self.graph_count}",
            f"Graph Break Count: {self.graph_break_count}",
            f"Op Count: {self.op_count}",
        ]
        if self.break_reasons:
            lines.append("Break Reasons:")
            lines += [f"  {i + 1}. {r}" for i, r in enumerate(self.break_reasons)]
        if self.assumptions:
            lines.append("Assumed Values (checked after each graph run):")
            lines += [f"  {i + 1}. {a}" for i, a in enumerate(self.assumptions)]
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(f"  Graph {i + 1}: {', '.join(ops)}")
            parts = step_parts(self.graphs[i]) if i < len(self.graphs) else []
            if len(parts) > 1:  # a training step: its forward, backward and update
                lines += [f"    {name}: {len(part)} ops" for name, part in parts]
        return "\n".join(lines)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write this explanation as one self-contained HTML page, ``directory/index.html``
        (created with its parents), and return its path: the function's source with the
        graph breaks marked, each graph's code and ops, each record's guard and mock, and
        the RefGraph (an SVG picture where Graphviz's ``dot`` is on PATH)."""
        if not isinstance(directory, str | os.PathLike):
            raise TypeError(f"save(directory): expected a path, got {type(directory).__name__}")
        return write_report(Path(directory), [self])

    @classmethod
    def of_compiled(cls, compiled: Any) -> ExplainOutput:
        """What a ``magpy.compile``d callable captured over all its calls so far, with its
        ``outside_share`` (``magpy.stats``)."""
        state = state_of(compiled)
        original = getattr(compiled, "_magpy_original", compiled)
        out = _explain_output(state, python_function(original))
        if state.stats.native_calls or state.stats.time_total:
            out.outside_share = outside_share_of(state)
            timed = state.stats.native_calls
            out.outside_note = (
                f"over the program's own calls, {timed} of them timed in split mode"
                if timed
                else "over the program's own calls, each one graph"
            )
        return out


def explain(fn: Any) -> Callable[..., ExplainOutput]:
    """``magpy.explain(fn)(*args, **kwargs)``: capture one call and report graphs and breaks.

    The call runs for real, exactly once (with the eager backend, so nothing is compiled). It
    runs in split mode from its start (the entry of the Python function it enters first is
    a site: a function's, a method's, a module's ``forward``, a ``functools.partial``'s or an
    object's ``__call__``), so a graph break ends one segment and the next begins after it in
    the same call. Where a break lies inside a chain of callees, the callees' own entry
    graphs, which the compiled program runs from its next call on, are reported from the
    operations this call recorded for them. Afterwards every function explain instrumented
    has its code back, and explain's records are gone.
    """
    if not callable(fn):
        raise TypeError(f"explain needs a function or nn.Module, got {type(fn).__name__}")
    target = getattr(fn, "_magpy_original", fn)

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        def explain_backend(gm: Any, example_inputs: list[Any]) -> Any:
            return BACKENDS["eager"](gm, example_inputs)

        qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
        state = CacheState(qualname, Settings(explain_backend))
        func = python_function(target)
        with _instrumentation_undone():
            try:
                _split_from_the_start(state, func)
                state.call(target, args, kwargs)
            finally:
                forget_backend(explain_backend)
        return _explain_output(state, func)

    return run


def _explain_output(state: CacheState, function: types.FunctionType | None) -> ExplainOutput:
    """What ``state`` captured, as ``magpy.explain`` reports it."""
    records = [*state.records, *state.site_records]
    graphs = [r.graph_module for r in records if r.graph_module is not None]
    graphs += [gm for _code, gm, _locals in state.pending_graphs]
    ops = [_op_names(g) for g in graphs]
    guards = [
        line.strip()
        for r in records
        for line in r.guard_source.splitlines()
        if line.strip().startswith("if ")
    ]
    return ExplainOutput(
        graphs=graphs,
        graph_count=len(graphs),
        graph_break_count=state.stats.breaks,
        break_reasons=list(state.break_reasons),
        op_count=sum(len(o) for o in ops),
        ops_per_graph=ops,
        guards=guards,
        out_guards=guards,
        refgraph=state.last_refgraph,
        assumptions=[
            f"{c.where} ({'truth value ' if c.truth else ''}{c.expected!r})"
            for r in records
            for c in r.plan.checks
        ],
        records=records,
        qualname=state.qualname,
        function=function,
    )


def step_parts(gm: Any) -> list[tuple[str, list[str]]]:
    """The parts of a graph that runs a backward (``torch.autograd.grad``): ``forward``
    before each backward, ``backward`` (the gradients and their ``.grad`` layout), and
    ``update`` after the last one (an optimizer's step); one ``forward`` part otherwise."""
    parts: list[tuple[str, list[str]]] = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = _op_names_of(node)
        if node.target is torch.autograd.grad or (
            parts and parts[-1][0] == "backward" and _grad_helper(node, name)
        ):
            part = "backward"
        else:
            part = "update" if any(p == "backward" for p, _ in parts) else "forward"
        if not parts or parts[-1][0] != part:
            parts.append((part, []))
        parts[-1][1].append(name)
    if any(p == "backward" for p, _ in parts):  # (a forward again: accumulation)
        last = max(i for i, (p, _) in enumerate(parts) if p == "backward")
        parts = [
            ("forward" if p == "update" and i < last else p, ops)
            for i, (p, ops) in enumerate(parts)
        ]
    return parts


def _grad_helper(node: Any, name: str) -> bool:
    """A node of the backward's own: a gradient taken out, laid out, or accumulated into an
    existing ``.grad`` (``add_`` of a gradient)."""
    if name in ("_getitem", "as_grad_layout"):
        return True
    args = node.args
    return name == "add_" and len(args) > 1 and _op_names_of(args[1]) == "_getitem"


def _op_names_of(n: Any) -> str:
    target = getattr(n, "target", None)
    return str(target if isinstance(target, str) else getattr(target, "__name__", target))


def _op_names(gm: Any) -> list[str]:
    """The names of the functions and methods ``gm``'s graph calls, in order."""
    return [_op_names_of(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method")]


def python_function(target: Any) -> types.FunctionType | None:
    """The Python function a call of ``target`` enters first: a function itself, a method's,
    an ``nn.Module``'s ``forward``, a ``functools.partial``'s function, an object's
    ``__call__``; None for native callables and classes."""
    for _ in range(8):  # (a partial of a bound method of a module ... is a short chain)
        if isinstance(target, types.FunctionType):
            return target
        if isinstance(target, torch.nn.Module):
            target = target.forward
        elif isinstance(target, functools.partial):
            target = target.func
        elif isinstance(target, types.MethodType):
            target = target.__func__
        elif not isinstance(target, type) and isinstance(
            call := _own_call(target), types.FunctionType
        ):
            target = call
        else:
            return None
    return None


def _own_call(obj: Any) -> Any:
    """The ``__call__`` the class of ``obj`` defines (looked up along its MRO), or None."""
    return next((vars(k)["__call__"] for k in type(obj).__mro__ if "__call__" in vars(k)), None)


def _split_from_the_start(state: CacheState, func: types.FunctionType | None) -> None:
    """Give ``func`` (the Python function the call enters first) an entry site and put
    ``state`` in split mode.

    Without one (builtins, classes, objects whose ``__call__`` is native) and for generator
    functions, the call keeps the whole-call mode: a break there is reported, but the
    segments after it are not recorded.
    """
    if func is None:
        return
    try:
        ensure_entry_site(func)
    except MagPyError:
        return
    state.split = True


@contextmanager
def _instrumentation_undone() -> Iterator[None]:
    """Give back, after the block, the code objects the block instrumented.

    Sites the block added that hold no records (explain's own were dropped with its backend)
    go; a function none of whose sites is left gets its original ``__code__`` back and leaves
    the registry, one that keeps sites from before gets a generation without the new ones.
    Sites where another thread's compiled call recorded meanwhile stay. A ``reset()`` inside
    the block already restored everything.
    """
    with REGISTRY.lock:
        before = {code: set(cs.sites) for code, cs in REGISTRY.by_code.items()}
        epoch = REGISTRY.epoch
    try:
        yield
    finally:
        with REGISTRY.lock:
            if REGISTRY.epoch == epoch:
                _drop_new_sites(before)


def _drop_new_sites(before: dict[types.CodeType, set[int]]) -> None:
    """The registry as in ``before`` ({original code: its sites}), but for sites with records
    (called with ``REGISTRY.lock`` held)."""
    for code, cs in list(REGISTRY.by_code.items()):
        kept = before.get(code, set())
        dropped = [off for off, site in cs.sites.items() if off not in kept and not site.records]
        for off in dropped:
            del cs.sites[off]
        if not cs.sites:
            cs.restore()
            if code not in before:
                del REGISTRY.by_code[code]
                REGISTRY.by_key.pop(cs.key, None)
        elif dropped:
            cs.reinstrument()  # (the sites from before stay)
