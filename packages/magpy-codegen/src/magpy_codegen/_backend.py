"""The one adapter to torch's compilers (every private torch API MagPy uses lives here).

Backends: ``"inductor"`` (``torch._inductor.compile_fx.compile_fx``: C++ kernels on CPU, Triton
kernels for CUDA tensors), ``"eager"`` (run the fx graph as is), ``"aot_eager"`` (AOTAutograd with
no compiler: checks functionalization), or any callable with ``torch.compile``'s backend
signature ``(gm, example_inputs) -> callable``.

Randomness: ``"inductor"`` compiles with ``torch._inductor.config.fallback_random`` set (for
MagPy's compiles only, patched around ``compile_fx``), so ``rand``/``randn``/``dropout`` in a
compiled graph draw from the global generator exactly as eager does (same values, same RNG
state afterwards) instead of from Inductor's own seeded kernels. ``"inductor_fast_random"`` is
Inductor with its own random kernels (faster, fused; random values and the RNG state after a
call differ from eager).

Dynamic shapes: when the monitor gave some placeholders fake tensors with symbolic sizes (node
meta ``"magpy_fake"``, see ``magpy_monitor.core.shapes``), ``"inductor"`` and ``"aot_eager"``
compile for those symbolic inputs (one kernel for every size), a callable backend is called
inside a ``TracingContext`` holding their fake mode (what ``torch.compile`` does), and
``"eager"`` just runs the graph, which computes every size from its inputs. Afterwards the
ShapeEnv's guards (relations between sizes the monitor or the compiler relied on) become a
``ShapeGuard`` over the graph inputs (``shape_guard(gm)``), which the record's guard calls.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import torch
import torch.fx as fx
from torch._guards import TracingContext, tracing
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from magpy_monitor import FAKE, quiet_nodes, symbolic_shapes
from magpy_refgraph import UnknownOptionError

from ._fusable import nothing_to_fuse
from ._fxsource import tie_fx_source
from ._inductor_passes import with_passes
from ._joint import compile_joint, runs_backward
from ._regions import OUTLINED, compile_outlined

__all__ = [
    "BACKENDS",
    "UNCOMPILED",
    "ConfiguredInductor",
    "ShapeGuard",
    "compile_graph",
    "configured_backend",
    "gains_nothing",
    "resolve_backend",
    "shape_guard",
]


Backend = Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]


def _eager(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return gm.forward


def _torch_compiler(name: str) -> Backend:
    """torch's compiler behind backend ``name`` ("inductor" or "aot_eager")."""
    # Imported on first use: importing torch._inductor or torch._dynamo takes seconds, and a
    # program compiled with the eager backend (or not compiled at all) needs neither. The
    # import's own DeprecationWarnings (torch's modules using torch.jit.script_method) are
    # torch's business, not the program's: eager, which never imports them, shows none.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if name == "inductor":
            from torch._inductor.compile_fx import compile_fx

            # without AOT-Inductor options compile_fx returns the compiled callable
            return cast(Backend, compile_fx)
        from torch._dynamo.backends.registry import lookup_backend

        return cast(Backend, lookup_backend(name))


def _inductor(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return _run_inductor(gm, example_inputs, {"fallback_random": True})


def _inductor_fast_random(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return _run_inductor(gm, example_inputs, {})


def _run_inductor(gm: fx.GraphModule, inputs: list[Any], patch: dict[str, Any]) -> Any:
    compiler = _torch_compiler("inductor")  # (imports torch._inductor)
    return with_passes(compiler, patch)(gm, inputs)  # (MagPy's passes in every compile)


def _aot_eager(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return _torch_compiler("aot_eager")(gm, example_inputs)


BACKENDS: dict[str, Backend] = {
    "eager": _eager,
    "inductor": _inductor,
    "inductor_fast_random": _inductor_fast_random,
    "aot_eager": _aot_eager,
}
_TORCH_COMPILERS = (_inductor, _inductor_fast_random, _aot_eager)  # compile fake inputs


class ConfiguredInductor:
    """Inductor with a configuration patch, as ``torch.compile(mode=..., options=...)`` gives
    it: ``mode``'s settings (``torch._inductor.list_mode_options``), then ``options``."""

    __slots__ = ("fast_random", "mode", "patch")

    def __init__(self, mode: str | None, patch: dict[str, Any], *, fast_random: bool) -> None:
        self.mode, self.patch, self.fast_random = mode, patch, fast_random

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        random = {} if self.fast_random else {"fallback_random": True}  # (module docstring)
        return _run_inductor(gm, example_inputs, {**random, **self.patch})

    def __repr__(self) -> str:
        return f"ConfiguredInductor(mode={self.mode!r}, patch={self.patch!r})"


def update_rule(
    backend: str | Backend, gm: fx.GraphModule | None, compiled: Callable[..., Any] | None
) -> str:
    """How the ``compiled`` graph ``gm`` applies its in-place updates to its inputs: "order"
    (the fx graph run as is), "final" (Inductor, AOTAutograd: each input's final value), or
    "flow" (a backend of the user's: in any order its data flow allows)."""
    if gm is None or compiled is None or compiled == gm.forward:
        return "order"
    return "final" if _is_torch_compiler(resolve_backend(backend)) else "flow"


def _is_torch_compiler(compiler: Any) -> bool:
    """Inductor or AOTAutograd (they compile fake inputs, and a training step jointly)."""
    return compiler in _TORCH_COMPILERS or isinstance(compiler, ConfiguredInductor)


def gains_nothing(compiler: Backend, graph: fx.Graph) -> bool:
    """Inductor (without CUDA graphs) on a graph it has nothing to fuse in
    (``_fusable``): the graph runs as is."""
    if isinstance(compiler, ConfiguredInductor):
        inductor = not compiler.patch.get("triton.cudagraphs")
    else:
        inductor = compiler is _inductor or compiler is _inductor_fast_random
    return inductor and nothing_to_fuse(graph)


_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def configured_backend(
    backend: str | Backend,
    mode: str | None,
    options: dict[str, Any],
    *,
    own: tuple[str, ...] = (),
) -> str | Backend:
    """``backend`` with ``torch.compile``'s ``mode`` and Inductor ``options`` applied: an
    Inductor backend gets a :class:`ConfiguredInductor`. An unknown mode or option (``own``:
    the caller's own option names, listed in the message beside the closest Inductor ones), a
    value of the wrong type, both ``mode`` and ``options``, or either with a backend that is
    not Inductor, is a clear error naming the parameter."""
    if mode is not None and options:
        raise ValueError("mode and options cannot both be given (as in torch.compile)")
    if mode in (None, "default") and not options:
        return backend
    if mode is not None and mode not in _MODES:
        raise UnknownOptionError(f"mode {mode!r} unknown; choose one of {list(_MODES)}")
    patch = _inductor_settings(mode, options, own)
    if backend not in ("inductor", "inductor_fast_random"):
        which = "mode" if mode is not None else f"options {sorted(options)}"
        raise ValueError(f"{which}: Inductor settings, but backend is {backend!r}")
    return ConfiguredInductor(mode, patch, fast_random=backend == "inductor_fast_random")


def _inductor_settings(
    mode: str | None, options: dict[str, Any], own: tuple[str, ...]
) -> dict[str, Any]:
    """The Inductor config patch of ``mode`` (Inductor's own table), or ``options`` checked
    against Inductor's config: known keys (else the closest ones are named), values of the
    type the setting has."""
    import torch._inductor
    import torch._inductor.config

    if mode is not None:
        return dict(torch._inductor.list_mode_options(mode))
    known = torch._inductor.config.get_config_copy()
    for key, value in options.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), [*own, *known], n=3)
            hint = f"; did you mean {close}?" if close else ""
            raise UnknownOptionError(
                f"options: {key!r} is no Inductor option nor one of {list(own)}{hint}"
            )
        want = type(known[key])
        if known[key] is not None and value is not None and not isinstance(value, want):
            raise TypeError(
                f"options[{key!r}] must be a {want.__name__}, got {type(value).__name__}"
            )
    return dict(options)


def resolve_backend(backend: str | Backend) -> Backend:
    """The backend callable for a name or callable; a clear error for anything else."""
    if callable(backend):
        return backend
    if isinstance(backend, str):
        try:
            return BACKENDS[backend]
        except KeyError:
            raise UnknownOptionError(
                f"backend {backend!r} unknown; choose one of {sorted(BACKENDS)} or pass a "
                "callable (gm, example_inputs) -> callable"
            ) from None
    raise TypeError(f"backend must be a str or a callable, got {type(backend).__name__}")


def compile_graph(
    graph: fx.Graph, example_inputs: list[Any], backend: str | Backend
) -> tuple[fx.GraphModule, Callable[..., Any]]:
    """Build the GraphModule of ``graph`` and compile it; returns (gm, callable).

    A graph with symbolic input sizes is compiled for them, and ``shape_guard(gm)`` then gives
    the check its inputs must pass.
    """
    quiet_nodes(graph)  # (operations whose warnings the mock replays)
    gm = fx.GraphModule(torch.nn.Module(), graph)
    compiler = resolve_backend(backend)
    tie_fx_source(gm)
    outline = _is_torch_compiler(compiler)  # (marked calls, once; a training step's too)
    built, compiled = compile_outlined(gm, example_inputs, partial(_compile, compiler), outline)
    if built is not gm and UNCOMPILED in built.meta:  # (outlined, it could only run as is)
        gm.meta[OUTLINED] = [f"all inlined (outlined: {built.meta[UNCOMPILED]})"[:300]]
        built, compiled = gm, _compile(compiler, gm, example_inputs)
    gm = built
    tie_fx_source(gm)  # (a backend may have recompiled it)
    drop_example_values(gm)
    return gm, compiled


def _compile(
    compiler: Backend, gm: fx.GraphModule, example_inputs: list[Any]
) -> Callable[..., Any]:
    if gains_nothing(compiler, gm.graph):
        compiler = _eager
    fakes = _symbolic_inputs(gm.graph)
    if fakes is None:
        return _compile_or_run(compiler, gm, list(example_inputs))
    if compiler is _eager:
        compiled = gm.forward
    elif _is_torch_compiler(compiler):
        compiled = _compile_or_run(compiler, gm, fakes)
    else:
        for node, fake in zip(_placeholders(gm.graph), fakes, strict=True):
            node.meta["val"] = fake
        with tracing(TracingContext(fakes[0].fake_mode)):
            compiled = compiler(gm, list(example_inputs))
    gm.meta["magpy_shape_guard"] = ShapeGuard.of(fakes)
    return compiled


def drop_example_values(gm: fx.GraphModule) -> None:
    """Take the recording call's tensors off ``gm``'s nodes once it is compiled.

    The monitor hangs each graph input's real tensor on its placeholder (``example_value``); a
    record keeps its GraphModule, which would keep those tensors (and their memory) alive for as
    long as the record is cached. Their metadata stays (``tensor_meta``, as fx's ``ShapeProp``
    writes it); fake tensors stay (they hold no data).
    """
    for node in gm.graph.nodes:
        for key, value in list(node.meta.items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
                del node.meta[key]
                if key == "example_value" and "tensor_meta" not in node.meta:
                    node.meta["tensor_meta"] = _tensor_meta(value)


def _tensor_meta(t: torch.Tensor) -> Any:
    try:
        return _extract_tensor_metadata(t)
    except Exception:  # (a tensor whose layout has no strides or memory format)
        return None


UNCOMPILED = "magpy_uncompiled"  # GraphModule meta: why the graph runs as is (see below)
# what torch's compilers raise for operations whose output shape depends on tensor values
_DATA_DEPENDENT_ERRORS = frozenset(
    {"DynamicOutputShapeException", "DataDependentOutputException", "GuardOnDataDependentSymNode"}
)


def _compile_or_run(compiler: Backend, gm: fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
    """``compiler(gm, inputs)``; a graph that Inductor (or AOTAutograd) cannot compile because
    an operation's output shape depends on tensor values (``nonzero``, ``x[mask]``) runs as is
    instead, its operations one by one as in eager (``gm.meta[UNCOMPILED]`` says why)."""
    grad_mode = torch.is_grad_enabled()
    joint = _is_torch_compiler(compiler) and runs_backward(gm)
    try:
        if joint:  # (a training step's backward)
            return compile_joint(_in_tracing_context(_joint_compiler(compiler, inputs)), gm, inputs)
        if _is_torch_compiler(compiler):
            return _in_tracing_context(compiler)(gm, inputs)
        return compiler(gm, inputs)
    except Exception as exc:
        # a trace that failed between a graph's grad-mode nodes left the mode it set
        torch._C._set_grad_enabled(grad_mode)
        if joint:  # (the graph as it is runs the step as eager does: forward, then backward)
            gm.meta[UNCOMPILED] = f"the training step could not be traced: {_first_line(exc)}"
            return gm.forward
        if not _is_torch_compiler(compiler) or not _data_dependent_failure(exc):
            raise
        ops = sorted(
            {
                getattr(n.target, "__name__", str(n.target))
                for n in gm.graph.nodes
                if n.meta.get("dyn_shape")
                and not any(a.meta.get("dyn_shape") for a in n.all_input_nodes)
            }
        )
        gm.meta[UNCOMPILED] = (
            f"{type(exc).__name__}: an operation's output shape depends on tensor values"
            + (f" ({', '.join(ops[:3])})" if ops else "")
        )
        return gm.forward


def _in_tracing_context(compiler: Backend) -> Backend:
    """``compiler`` (Inductor or AOTAutograd) called as ``torch.compile`` calls it: inside a
    ``TracingContext`` whose fake mode has a ``ShapeEnv``. Without one, Inductor's FX graph
    cache and AOTAutograd's cache are bypassed ("No shape env") and every new process compiles
    every graph again. Inputs already fake (a graph with symbolic sizes) keep their fake mode;
    real ones are faked with static sizes (what Dynamo gives a graph it compiles for static
    shapes: the ShapeEnv holds no symbol, so no guard comes out of it) in a mode that, as
    Dynamo's own does, refuses data-dependent output shapes and ``.item()``, so those still
    raise and the graph runs as is (``_compile_or_run``). Whether the caches are used is left
    to ``torch._inductor.config.fx_graph_cache`` and ``torch._functorch.config``."""

    def compile_traced(gm: fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        mode = next((t.fake_mode for t in inputs if isinstance(t, FakeTensor)), None)
        if mode is not None:
            with tracing(TracingContext(mode)):
                return _compile_with_sizes(compiler, gm, inputs)
        marked = _mark_method_receivers(gm, inputs)
        mode = _static_fake_mode()
        fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
        try:
            with tracing(TracingContext(mode)):
                return compiler(gm, fakes)
        finally:
            for node in marked:
                node.meta.pop("example_value", None)

    return compile_traced


def _compile_with_sizes(
    compiler: Backend, gm: fx.GraphModule, fakes: list[Any]
) -> Callable[..., Any]:
    """``compiler`` on a copy of ``gm`` that also takes each symbolic size as an int input
    (Dynamo's form of a graph with symbolic sizes), called with those sizes read from the
    tensors. Inductor's and AOTAutograd's caches save with a compiled graph the guards it
    needs over its *int* inputs, and a hit puts them back into the ShapeEnv; over tensors
    alone nothing is saved, so after a hit the shape guard would lack, say, the ``size == 8``
    a ``Linear(8, ...)`` specialised. A symbol that is no input's size (only a product of
    them) cannot be passed: that graph is compiled without the FX graph cache."""
    sizes = _symbol_sizes(fakes)
    if sizes is None:
        _torch_compiler("inductor")  # (imports torch._inductor)
        with torch._inductor.config.patch(fx_graph_cache=False):
            return compiler(gm, fakes)
    if not sizes:
        return compiler(gm, fakes)
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    last = next(n for n in reversed(graph.nodes) if n.op == "placeholder")
    for i, d in sizes:
        with graph.inserting_after(last):
            last = graph.placeholder(f"magpy_size_{i}_{d}")
    graph.output(out)
    copy = fx.GraphModule(gm, graph)
    try:
        compiled = compiler(copy, [*fakes, *(fakes[i].size(d) for i, d in sizes)])
    finally:
        drop_example_values(copy)  # (as compile_graph does for gm)

    def run(*args: Any) -> Any:
        return compiled(*args, *(args[i].size(d) for i, d in sizes))

    return run


def _symbol_sizes(fakes: list[Any]) -> list[tuple[int, int]] | None:
    """(input, dim) of a size that is each symbol of the inputs' sizes, strides and offsets
    (None: some symbol is none of them)."""
    found: dict[Any, tuple[int, int]] = {}
    symbols: set[Any] = set()
    for i, fake in enumerate(fakes):
        if not isinstance(fake, torch.Tensor):
            continue
        shape: tuple[Any, ...] = tuple(fake.shape)  # (ints and SymInts)
        for value in (*shape, *fake.stride(), fake.storage_offset()):
            if isinstance(value, torch.SymInt):
                symbols |= value.node.expr.free_symbols
        for d, size in enumerate(shape):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                found.setdefault(size.node.expr, (i, d))
    return None if symbols - found.keys() else list(found.values())


def _static_fake_mode() -> FakeTensorMode:
    env = symbolic_shapes().ShapeEnv(
        allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False
    )
    return FakeTensorMode(shape_env=env, static_shapes=True, allow_non_fake_inputs=True)


def _mark_method_receivers(gm: fx.GraphModule, inputs: list[Any]) -> list[fx.Node]:
    """Give each node that a ``call_method`` node calls a method of its value (computed on
    fake tensors of a mode of its own) as ``example_value``, as Dynamo's nodes all have one;
    returns the nodes marked (the caller takes the values off after the compile).

    AOTAutograd caches a graph only if every ``call_method`` is called on a node with an
    ``example_value`` (its sign of a tensor: a method of anything else might read state the
    cache key does not hold). A receiver in MagPy's graph is always a value the graph
    computes from its inputs; without the mark, graphs with ``x.flatten(1)`` or ``x.view(n)``
    would bypass that cache. If the graph cannot run on fake tensors (an output shape that
    depends on values), nothing is marked and AOTAutograd compiles it without its cache."""
    wanted = {
        n.args[0]
        for n in gm.graph.nodes
        if n.op == "call_method" and isinstance(n.args[0], fx.Node)
        and "example_value" not in n.args[0].meta
    }  # fmt: skip
    if not wanted:
        return []
    mode = _static_fake_mode()
    values = _ValuesOf(gm, wanted)
    grad_mode = torch.is_grad_enabled()
    try:
        with mode:
            values.run(*[mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs])
    except Exception:  # (then AOTAutograd bypasses its cache, as it would have)
        return []
    finally:
        torch._C._set_grad_enabled(grad_mode)
    for node, value in values.seen.items():
        node.meta["example_value"] = value
    return list(values.seen)


class _ValuesOf(fx.Interpreter):
    """Runs a graph, keeping the values of the nodes ``wanted``."""

    def __init__(self, gm: fx.GraphModule, wanted: set[fx.Node]) -> None:
        super().__init__(gm)
        self.wanted, self.seen = wanted, dict[fx.Node, Any]()

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        if n in self.wanted:
            self.seen[n] = out
        return out


def _joint_compiler(compiler: Backend, inputs: list[Any]) -> Backend:
    """``compiler`` for a training step's joint graph. On CPU, Inductor compiles it without its
    layout optimization (unless ``options`` set it): with it, convolutions run channels-last
    and so do the weight gradients convolution_backward gives, and the optimizer's update,
    fused in after them, reads each gradient transposed, tile by tile, to write the
    parameter it updates in its own (contiguous) layout; measured on ResNet-18 (widths 16 and
    64, one thread), the step is 10-25% faster without. (``torch.compile`` updates in a graph
    of its own, after the backward's outputs were laid out as the parameters.)"""
    if isinstance(compiler, ConfiguredInductor):
        if "layout_optimization" in compiler.patch:
            return compiler
    elif compiler not in (_inductor, _inductor_fast_random):
        return compiler
    if any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in inputs):
        return compiler

    def compile_without_layout_optimization(
        gm: fx.GraphModule, example_inputs: list[Any]
    ) -> Callable[..., Any]:
        _torch_compiler("inductor")  # (imports torch._inductor)
        with torch._inductor.config.patch(layout_optimization=False):
            return compiler(gm, example_inputs)

    return compile_without_layout_optimization


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def _data_dependent_failure(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if type(exc).__name__ in _DATA_DEPENDENT_ERRORS:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def shape_guard(graph: fx.GraphModule | fx.Graph) -> ShapeGuard | None:
    """The check on the inputs of a graph compiled with symbolic sizes (None: nothing to check).

    For a bare ``fx.Graph`` (a record with no graph to compile), the relations the monitor
    assumed while reading sizes.
    """
    if isinstance(graph, fx.Graph):
        fakes = _symbolic_inputs(graph)
        return ShapeGuard.of(fakes) if fakes is not None else None
    guard = graph.meta.get("magpy_shape_guard")
    return guard if isinstance(guard, ShapeGuard) else None


class ShapeGuard:
    """``guard(*inputs) -> bool``: the relations between dynamic sizes a graph relies on.

    Built once, after compilation, from the ShapeEnv's guards as Python source over the graph
    inputs that have symbolic sizes (``L['t0']`` is the first of them): ``2 <= t0.size()[0]``,
    ``t1.size()[0] == t0.size()[0]``, and every size of those inputs that a guard fixed
    (``t0.size()[0] == 4`` when the compiler specialised it), which is why their static sizes
    are not left out.
    """

    def __init__(self, source: str, indices: tuple[int, ...]) -> None:
        # symbolic_shapes (with sympy) takes about a second to import: loaded on first use
        sympy_interp = symbolic_shapes().SYMPY_INTERP
        self.source = source
        self.indices = indices
        self._check = eval(f"lambda L: ({source})", dict(sympy_interp))

    @classmethod
    def of(cls, fakes: list[Any]) -> ShapeGuard | None:
        indices = tuple(i for i, f in enumerate(fakes) if _is_symbolic(f))
        if not indices:
            return None
        env = fakes[indices[0]].fake_mode.shape_env
        source = env.produce_guards_expression([fakes[i] for i in indices], ignore_static=False)
        return cls(source, indices) if source else None

    def __call__(self, *inputs: Any) -> bool:
        return bool(self._check({f"t{k}": inputs[i] for k, i in enumerate(self.indices)}))

    def __repr__(self) -> str:
        return f"<shape guard {self.source}>"


def _is_symbolic(fake: Any) -> bool:
    return isinstance(fake, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in fake.shape)


def _placeholders(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def _symbolic_inputs(graph: fx.Graph) -> list[Any] | None:
    """Fake tensors for every placeholder when some has symbolic sizes, else None."""
    nodes = _placeholders(graph)
    fakes = [n.meta.get(FAKE) for n in nodes]
    symbolic: list[Any] = [f for f in fakes if _is_symbolic(f)]
    if not symbolic:
        return None
    mode = symbolic[0].fake_mode
    out = []
    for node, fake in zip(nodes, fakes, strict=True):
        if fake is None or fake.fake_mode is not mode:
            fake = mode.from_tensor(node.meta["example_value"], static_shapes=True)
            node.meta[FAKE] = fake
        out.append(fake)
    return out
