"""The public API: ``compile``, ``explain``, ``stats``, ``reset``, ``annotate``,
``wait_compiles``."""

from __future__ import annotations

from typing import Any

import attrs
import torch

from magpy_codegen import (
    cancel_compiles,
    configured_backend,
    forget_generated,
    resolve_backend,
)
from magpy_codegen import wait_compiles as _wait_compiles
from magpy_monitor import TABLE, Annotation, Kind, disabled_function
from magpy_refgraph import UnknownOptionError

from ._explain import ExplainOutput, explain, outside_share_of, state_of
from ._settings import Settings
from ._wrappers import CompiledFunction, CompiledModule, wrap
from .cache._cache import CacheState, all_states
from .cache._pool import join
from .cache._sites import restore_all
from .cache._stance import set_stance
from .store._store import clear_stored, from_disk

__all__ = [
    "CacheStats",
    "CompiledFunction",
    "CompiledModule",
    "ExplainOutput",
    "annotate",
    "check_compile_args",
    "compile",
    "explain",
    "reset",
    "set_stance",
    "stats",
    "wait_compiles",
]

# MagPy's own options: "magpy.<name>" (the bare name is accepted too); any other key of
# ``options`` is an Inductor setting, as in torch.compile
_OPTIONS = frozenset({"background_compile", "max_records"})
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
    if "background_compile" in own and type(own["background_compile"]) is not bool:
        raise TypeError(
            "options['magpy.background_compile'] must be True or False, got "
            f"{own['background_compile']!r}"
        )
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


def check_compile_args(
    *, fullgraph: Any, dynamic: Any, backend: Any, mode: Any, options: Any, disable: Any
) -> None:
    """Raise what ``magpy.compile`` raises for these arguments, compiling nothing."""
    _check_args(backend, fullgraph, dynamic, mode, disable)
    _own, inductor = _split_options(options)
    configured_backend(backend, mode, inductor, own=tuple(sorted(_PREFIX + k for k in _OPTIONS)))


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
    own options are ``"magpy.max_records"`` and ``"magpy.background_compile"`` (see
    ``magpy.config``). ``disable=True`` returns ``model`` itself.
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
    max_records = int(own["max_records"]) if "max_records" in own else None
    state = CacheState(qualname, Settings(configured, fullgraph, dynamic, max_records))
    if "background_compile" in own:
        state.background_compile = bool(own["background_compile"])
    join(state, model)
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
    # records whose graph runs as is until the backend compiled it: in the background
    # (``config.background_compile``), or once calls confirmed the tensor values the record
    # assumes; and those that switched to the compiled graph
    pending_compiles: int = 0
    background_swaps: int = 0
    # records taken from the store of an earlier process (``magpy.config.records_dir``)
    from_disk: int = 0


def stats(compiled: Any) -> CacheStats:
    """Cache statistics of a compiled function or module (with its calls under stances that
    forced a backend: ``set_stance(force_backend=)``)."""
    s = state_of(compiled)
    own = _stats_of(s)
    for forced in s.forced_states.values():
        more = _stats_of(forced)
        for field in attrs.fields(CacheStats):
            if field.type in (int, "int"):
                setattr(own, field.name, getattr(own, field.name) + getattr(more, field.name))
    return own


def _stats_of(s: CacheState) -> CacheStats:
    records = [*s.records, *s.site_records]
    graphs = sum(1 for r in records if r.graph_module is not None)
    return CacheStats(
        hits=s.stats.hits,
        misses=s.stats.misses,
        records=len(records),
        graphs=graphs,
        breaks=s.stats.breaks,
        fallbacks=s.stats.fallbacks,
        assumption_misses=s.stats.assumption_misses,
        busy=s.stats.busy,
        outside_share=outside_share_of(s),
        native_calls=s.stats.native_calls,
        eager_sites=s.stats.eager_sites,
        pending_compiles=_with_status(records, "pending"),
        background_swaps=_with_status(records, "swapped"),
        from_disk=from_disk(s),
    )


def _with_status(records: list[Any], status: str) -> int:
    return sum(1 for r in records if r.background is not None and r.background.status == status)


def wait_compiles(timeout: float | None = None) -> bool:
    """Wait until no background compile is queued or running (``config.background_compile``),
    at most ``timeout`` seconds; returns whether none is. Every record whose compile finished
    runs its compiled graph from its next call on."""
    if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
        raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
    return _wait_compiles(timeout)


def reset() -> None:
    """Drop every record of every compiled callable and restore every instrumented function.

    Background compiles are cancelled first: the queued ones are dropped, the one running is
    waited for and its result discarded, and the worker thread ends. Records stored on disk
    (``magpy.config.records_dir``) are deleted too."""
    cancel_compiles()
    for state in all_states():
        state.reset()
    restore_all()
    forget_generated()
    TABLE.clear_memo()  # (the annotations given with ``magpy.annotate`` stay)
    clear_stored()


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
for _own in (compile, explain, stats, reset, annotate, wait_compiles, set_stance):
    TABLE.register(
        _own, Annotation(Kind.EFFECT, reason=f"magpy.{_own.__name__}() is MagPy's own API")
    )
# (the stance changes how compiled calls run: set inside one, natively, at a graph break)
TABLE.register(
    torch.compiler.set_stance,
    Annotation(Kind.EFFECT, reason="torch.compiler.set_stance() changes the compiler's stance"),
)
