"""The public API: ``compile``, ``explain``, ``stats``, ``reset``, ``annotate``."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import attrs
import torch

from magpy_codegen import BACKENDS, configured_backend, forget_generated, resolve_backend
from magpy_monitor import TABLE, Annotation, Kind, disabled_function
from magpy_refgraph import MagPyError, NotCompiledError, UnknownOptionError

from ._cache import BreakReason, CacheState, all_states
from ._sites import ensure_entry_site, forget_backend, restore_all
from ._wrappers import CompiledFunction, CompiledModule, wrap

__all__ = [
    "CacheStats",
    "CompiledFunction",
    "CompiledModule",
    "ExplainOutput",
    "annotate",
    "compile",
    "explain",
    "reset",
    "stats",
]

# MagPy's own options: "magpy.<name>" (the bare name is accepted too); any other key of
# ``options`` is an Inductor setting, as in torch.compile
_OPTIONS = frozenset({"max_records"})
_PREFIX = "magpy."


def _split_options(options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` as (MagPy's own, by bare name; Inductor's), each checked."""
    if options is None:
        return {}, {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    own: dict[str, Any] = {}
    inductor: dict[str, Any] = {}
    for key, value in options.items():
        name = key.removeprefix(_PREFIX) if isinstance(key, str) else key
        if name in _OPTIONS:
            own[name] = value
        elif isinstance(key, str) and key.startswith(_PREFIX):
            raise UnknownOptionError(
                f"options: unknown MagPy option {key!r}; known: "
                f"{sorted(_PREFIX + k for k in _OPTIONS)}"
            )
        else:
            inductor[key] = value
    if "max_records" in own:
        n = own["max_records"]
        if type(n) is not int or n < 1:
            raise ValueError(f"options['magpy.max_records'] must be an int >= 1, got {n!r}")
    return own, inductor


def _check_args(backend: Any, fullgraph: Any, dynamic: Any, mode: Any, disable: Any) -> None:
    """Refuse bad arguments to ``magpy.compile`` with a message naming the parameter."""
    resolve_backend(backend)
    if type(fullgraph) is not bool:
        raise TypeError(f"fullgraph must be True or False, got {fullgraph!r}")
    if dynamic is not None and type(dynamic) is not bool:
        raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"mode must be None or a str, got {mode!r}")
    if type(disable) is not bool:
        raise TypeError(f"disable must be True or False, got {disable!r}")


def compile(
    model: Any = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: Any = "inductor",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile a function or ``nn.Module`` with MagPy (``torch.compile``'s signature).

    Usable as ``magpy.compile(fn)``, ``@magpy.compile`` or ``@magpy.compile(backend="eager")``.
    ``backend``: ``"inductor"`` (default), ``"eager"``, ``"aot_eager"`` or a callable
    ``(gm, example_inputs) -> callable``. ``fullgraph=True`` raises if the program cannot be
    captured as one graph. ``dynamic``: ``None`` recompiles once with the sizes and scalars that
    changed made dynamic, ``True`` is dynamic from the first call, ``False`` never (one record
    per shape); see docs/dynamic.md. ``mode`` (``"default"``, ``"reduce-overhead"``,
    ``"max-autotune"``, ``"max-autotune-no-cudagraphs"``) and ``options`` (Inductor settings,
    e.g. ``{"triton.cudagraphs": True}``) reach Inductor as torch.compile passes them; MagPy's
    own options are ``"magpy.max_records"``. ``disable=True`` returns ``model`` itself.
    """
    _check_args(backend, fullgraph, dynamic, mode, disable)
    own, inductor = _split_options(options)
    own_names = tuple(sorted(_PREFIX + k for k in _OPTIONS))
    configured = configured_backend(backend, mode, inductor, own=own_names)
    if model is None:
        return lambda m: compile(
            m,
            backend=backend,
            fullgraph=fullgraph,
            dynamic=dynamic,
            mode=mode,
            options=options,
            disable=disable,
        )
    if disable or disabled_function(model):
        # (torch.compile(disable=True) returns the model as it is; a function the program
        # disabled, torch.compiler.disable(fn) or magpy.disable(fn), stays uncompiled)
        return model
    if isinstance(model, CompiledFunction | CompiledModule):
        model = model._magpy_original
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return _compile_wrapped(model, fullgraph, dynamic, backend, mode, options)
    if not callable(model):
        raise TypeError(f"magpy.compile needs a function or nn.Module, got {type(model).__name__}")
    qualname = getattr(model, "__qualname__", None) or type(model).__qualname__
    state = CacheState(qualname, configured, fullgraph=fullgraph)
    state.dynamic = dynamic
    if "max_records" in own:
        state.max_records = int(own["max_records"])
    return wrap(model, state)


def _compile_wrapped(
    ddp: Any, fullgraph: bool, dynamic: bool | None, backend: Any, mode: Any, options: Any
) -> Any:
    """``magpy.compile(DDP(m))``: DDP's forward (its buffers' broadcast, its reducer's
    bookkeeping, its gradient hooks) runs as in eager, and the module it wraps is compiled in
    place, as ``m.compile()`` does for torch.compile (``m._compiled_call_impl``: the call
    DDP makes of ``m`` goes through MagPy's cache). Returns the DDP module; ``magpy.stats``
    of it are those of the compiled module."""
    inner = ddp.module
    compiled = compile(
        inner._call_impl,
        fullgraph=fullgraph,
        dynamic=dynamic,
        backend=backend,
        mode=mode,
        options=options,
    )
    inner._compiled_call_impl = compiled
    ddp.__dict__["_magpy_state"] = compiled._magpy_state
    return ddp


def _state_of(compiled: Any) -> CacheState:
    state = getattr(compiled, "_magpy_state", None)
    if not isinstance(state, CacheState):
        raise NotCompiledError(f"{compiled!r} is not a magpy function; wrap it with magpy.compile")
    return state


@attrs.define
class CacheStats:
    """Counters of one compiled callable."""

    hits: int
    misses: int
    records: int
    graphs: int
    breaks: int
    fallbacks: int
    # calls no record served because a tensor value read into Python differed from the value a
    # record assumed (the graph ran, then the program ran again)
    assumption_misses: int = 0
    # calls that ran natively while another thread was recording a call of the same callable
    busy: int = 0
    # the share of the run time of the calls served (monitored calls left out) in which the
    # program's own code ran outside compiled graphs (graph breaks, split mode, eager), and
    # how many calls ran the program's code at all
    outside_share: float = 0.0
    native_calls: int = 0
    # places in the program where no record could start (a segment that cannot be replayed):
    # the code from there to the next site always runs uncompiled
    eager_sites: int = 0


def stats(compiled: Any) -> CacheStats:
    """Cache statistics of a compiled function or module."""
    s = _state_of(compiled)
    records = [*s.records, *s.site_records]
    graphs = sum(1 for r in records if r.graph_module is not None)
    return CacheStats(
        hits=s.hits,
        misses=s.misses,
        records=len(records),
        graphs=graphs,
        breaks=s.breaks,
        fallbacks=s.fallbacks,
        assumption_misses=s.assumption_misses,
        busy=s.busy,
        outside_share=s.time_outside / s.time_total if s.time_total else 0.0,
        native_calls=s.native_calls,
        eager_sites=s.eager_sites,
    )


@attrs.define
class ExplainOutput:
    """What MagPy captured from one call (shaped like ``torch._dynamo.explain``'s output)."""

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


def explain(fn: Any) -> Callable[..., ExplainOutput]:
    """``magpy.explain(fn)(*args, **kwargs)``: capture one call and report graphs and breaks.

    The call runs for real, exactly once (with the eager backend, so nothing is compiled). It
    runs in split mode from its start (the function's entry is a site), so a graph break ends
    one segment and the next begins after it in the same call. Where a break lies inside a
    chain of callees, the callees' own entry graphs, which the compiled program runs from its
    next call on, are reported from the operations this call recorded for them.
    """
    if not callable(fn):
        raise TypeError(f"explain needs a function or nn.Module, got {type(fn).__name__}")
    target = getattr(fn, "_magpy_original", fn)

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        def explain_backend(gm: Any, example_inputs: list[Any]) -> Any:
            return BACKENDS["eager"](gm, example_inputs)

        state = CacheState(
            getattr(target, "__qualname__", type(target).__qualname__), explain_backend
        )
        try:
            _split_from_the_start(state, target)
            state.call(target, args, kwargs)
        finally:
            forget_backend(explain_backend)
        return _explain_output(state)

    return run


def _explain_output(state: CacheState) -> ExplainOutput:
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
        graph_break_count=state.breaks,
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
    return [
        str(n.target if isinstance(n.target, str) else getattr(n.target, "__name__", n.target))
        for n in gm.graph.nodes
        if n.op in ("call_function", "call_method")
    ]


def _split_from_the_start(state: CacheState, target: Any) -> None:
    """Give ``target``'s Python function an entry site and put ``state`` in split mode.

    Callables without a plain Python function (builtins, generator functions, objects whose
    ``__call__`` is native) keep the whole-call mode: a break there is reported, but the
    segments after it are not recorded.
    """
    if isinstance(target, torch.nn.Module):
        func = getattr(target.forward, "__func__", target.forward)
    else:
        func = getattr(target, "__func__", target)
    if not isinstance(func, types.FunctionType):
        return
    try:
        ensure_entry_site(func)
    except MagPyError:
        return
    state.split = True


def reset() -> None:
    """Drop every record of every compiled callable and restore every instrumented function."""
    for state in all_states():
        state.reset()
    restore_all()
    forget_generated()
    TABLE.clear_memo()  # (the annotations given with ``magpy.annotate`` stay)


def annotate(
    fn: Any,
    *,
    pure: bool = False,
    as_op: bool = False,
    effect: bool = False,
    inplace: tuple[int, ...] = (),
) -> Any:
    """Tell MagPy what a (native or third-party) callable does.

    ``pure=True``: no side effects and a result determined by the arguments (evaluated at record
    time, guarded by its inputs). ``as_op=True``: a tensor operation recorded as one graph node
    (``inplace`` lists the arguments it mutates). ``effect=True``: has effects outside the
    program (capture stops there). Returns ``fn`` so it can be used as a decorator.
    """
    if sum((pure, as_op, effect)) != 1:
        raise ValueError("annotate() needs exactly one of pure=True, as_op=True, effect=True")
    if not callable(fn):
        raise TypeError(f"annotate() needs a callable, got {type(fn).__name__}")
    if inplace and not as_op:
        raise ValueError("inplace= only makes sense with as_op=True")
    kind = Kind.PURE if pure else Kind.AS_OP if as_op else Kind.EFFECT
    TABLE.register(
        fn,
        Annotation(
            kind,
            inplace=tuple(inplace),
            reason=f"{getattr(fn, '__qualname__', fn)} is annotated as having effects",
        ),
    )
    return fn


# MagPy's own API called inside a compiled function runs natively, at a graph break: it reads
# or changes MagPy's state, which no record may replay and no monitor may follow
for _own in (compile, explain, stats, reset, annotate):
    TABLE.register(
        _own, Annotation(Kind.EFFECT, reason=f"magpy.{_own.__name__}() is MagPy's own API")
    )
