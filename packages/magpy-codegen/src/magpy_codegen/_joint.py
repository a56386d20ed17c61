"""Graphs that run a backward (``torch.autograd.grad`` nodes, ``magpy_monitor.libs.torch.autograd``)
for torch's compilers: forward, backward and what follows (an optimizer's update) as one graph.

AOTAutograd, behind Inductor, would trace such a graph more than once and run its backward
twice on one autograd graph. Instead the graph is traced once with ``make_fx`` on fake
tensors: autograd runs the backward under the tracer, so its operators land in the traced
graph next to the forward's (the joint graph, as AOTAutograd builds it, here with the program's
own use of the gradients after it). That graph needs no autograd: it is compiled for
inference (grad mode off) and run with grad mode off.

Tensor subclasses that flatten into plain tensors (DTensor: its local shard) enter the trace as
those tensors and are rebuilt inside it (``__tensor_unflatten__``, as AOTAutograd does): the
traced graph then works on the shards themselves, with the collectives of the subclass's
dispatch in it, and every shard it reads or updates in place is one of its inputs. Traced
whole, the wrapper's dispatch would read each shard outside the tracer and bake it into the
graph as a constant. Outputs of such a subclass come back flattened and are rebuilt.

Outputs that required grad in eager (the loss a step returns) come back with a ``grad_fn``
whose backward raises as eager does once the graph was freed (``_Freed``): the backward
already ran, inside the record. A ``retain_graph=True`` backward whose outputs keep requiring
grad cannot be given back that way, and is refused (``BackendError``: the region runs eagerly
with a warning).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from magpy_refgraph import BackendError

__all__ = ["compile_joint", "runs_backward"]

_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


def runs_backward(gm: fx.GraphModule) -> bool:
    """``gm`` computes gradients with ``torch.autograd.grad``."""
    return any(n.op == "call_function" and n.target is torch.autograd.grad for n in gm.graph.nodes)


def compile_joint(
    compiler: Callable[[fx.GraphModule, list[Any]], Callable[..., Any]],
    gm: fx.GraphModule,
    inputs: list[Any],
) -> Callable[..., Any]:
    """``gm`` traced into its joint graph and compiled by ``compiler`` for inference."""
    if any(_retains(n) for n in gm.graph.nodes):
        raise BackendError("a backward with retain_graph=True in a compiled graph")
    needs_grad: list[bool] = []
    flat_inputs: list[Any] = []
    layouts = [_unwrap(t, flat_inputs) for t in inputs]
    out_layouts: list[_Wrapped | None] = []

    def step(*flat: Any) -> Any:
        out = gm(*_rewrap_all(layouts, flat))
        needs_grad[:] = [isinstance(t, torch.Tensor) and t.requires_grad for t in out]
        flat_out: list[Any] = []
        out_layouts[:] = [_unwrap(t, flat_out) for t in out]
        return tuple(flat_out)

    _tensor_scalars(gm)
    _functional_modules(gm, inputs)
    joint = make_fx(step, tracing_mode="fake")(*flat_inputs)
    plain = [t.detach() if isinstance(t, torch.Tensor) else t for t in flat_inputs]
    with torch.no_grad():
        compiled = compiler(joint, plain)
    flags = tuple(needs_grad)
    wrapped = any(w is not None for w in (*layouts, *out_layouts))

    def run(*args: Any) -> Any:
        if wrapped:
            flat: list[Any] = []
            for t in args:
                _unwrap(t, flat)
            with torch.no_grad():
                out = _rewrap_all(out_layouts, compiled(*flat))
        else:
            with torch.no_grad():
                out = compiled(*args)
        if not any(flags):
            return out
        return type(out)(_Freed.apply(t) if f else t for t, f in zip(out, flags, strict=True))

    return run


class _Wrapped(NamedTuple):
    """How a tensor subclass flattens (``__tensor_flatten__``) and is built again."""

    cls: type
    names: list[str]
    inner: list[_Wrapped | _Held | None]
    ctx: Any
    size: torch.Size
    stride: tuple[int, ...]
    requires_grad: bool


class _Held(NamedTuple):
    """An inner part of a subclass that is no tensor (DTensor's ``device_mesh``): kept as is."""

    value: Any


def _unwrap(t: Any, flat: list[Any]) -> _Wrapped | None:
    """Append to ``flat`` ``t``'s plain tensors (``t`` itself unless it is a traceable
    wrapper subclass, whose inner tensors are taken apart recursively, detached); its
    layout (None for a plain value)."""
    wrapper: Any = t  # (typed Any: torch types the protocol as a class no Tensor is)
    if not (isinstance(t, torch.Tensor) and is_traceable_wrapper_subclass(wrapper)):
        flat.append(t)
        return None
    names, ctx = wrapper.__tensor_flatten__()
    inner: list[_Wrapped | _Held | None] = []
    for name in names:
        part = getattr(t, name)
        held = not isinstance(part, torch.Tensor)
        inner.append(_Held(part) if held else _unwrap(part.detach(), flat))
    return _Wrapped(type(t), list(names), inner, ctx, t.size(), t.stride(), t.requires_grad)


def _rewrap_all(layouts: list[_Wrapped | None], flat: Any) -> tuple[Any, ...]:
    values = iter(flat)
    return tuple(_rewrap(w, values) for w in layouts)


def _rewrap(w: _Wrapped | _Held | None, values: Any) -> Any:
    if w is None:
        return next(values)
    if isinstance(w, _Held):
        return w.value
    inner = {name: _rewrap(i, values) for name, i in zip(w.names, w.inner, strict=True)}
    t = w.cls.__tensor_unflatten__(inner, w.ctx, w.size, w.stride)  # type: ignore[attr-defined]
    if w.requires_grad and not t.requires_grad:
        t.requires_grad_()  # (a leaf, as the input was to the trace)
    return t


# ``x.op(a, b, value=s)`` computes ``x + s * (a OP b)``: OP of each method taking a Scalar
_SCALED = {"addcdiv": operator.truediv, "addcdiv_": operator.truediv,
           "addcmul": operator.mul, "addcmul_": operator.mul}  # fmt: skip
_ALPHA = frozenset({"add", "add_", "sub", "sub_"})


def _tensor_scalars(gm: fx.GraphModule) -> None:
    """Scalar arguments the graph computes (a ``value=``/``alpha=`` from a tensor, e.g. the
    step size of an optimizer whose step count is a tensor) as tensor arithmetic: a traced
    Scalar argument would have to read the tensor's value (``.item()``), which cannot be
    traced. ``x.addcdiv_(a, b, value=s)`` becomes ``x.add_(a / b * s)``; ``x.add_(y, alpha=s)``
    becomes ``x.add_(y * s)`` (the same values, up to the rounding of one more product)."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _FOREACH_SCALED:
            _foreach_scaled(graph, node)
            continue
        if node.op != "call_method" or not isinstance(node.target, str):
            continue
        name, scale = node.target, node.kwargs.get("value", node.kwargs.get("alpha"))
        if not isinstance(scale, fx.Node) or len(node.args) != (3 if name in _SCALED else 2):
            continue
        if name not in _SCALED and name not in _ALPHA:
            continue
        with graph.inserting_before(node):
            if name in _SCALED:
                both = graph.call_function(_SCALED[name], (node.args[1], node.args[2]))
                term = graph.call_function(operator.mul, (both, scale))
                method = "add_" if name.endswith("_") else "add"
            else:
                term = graph.call_function(operator.mul, (node.args[1], scale))
                method = name
            new = graph.call_method(method, (node.args[0], term))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
    gm.recompile()


# ``torch._foreach_addcdiv_(xs, as, bs, scalars)`` with its scalars as one tensor
_FOREACH_SCALED: dict[Any, Any] = {torch._foreach_addcdiv_: torch._foreach_div,
                                   torch._foreach_addcmul_: torch._foreach_mul}  # fmt: skip


def _foreach_scaled(graph: fx.Graph, node: fx.Node) -> None:
    """``_foreach_addcdiv_(xs, as, bs, s)`` with a tensor ``s`` of scalars (fake tensors refuse
    it) as ``_foreach_add_(xs, _foreach_mul(_foreach_div(as, bs), s.unbind()))``."""
    if len(node.args) != 4 or node.kwargs or not isinstance(node.args[3], fx.Node):
        return
    xs, first, second, scalars = node.args
    with graph.inserting_before(node):
        both = graph.call_function(_FOREACH_SCALED[node.target], (first, second))
        parts = graph.call_method("unbind", (scalars,))
        terms = graph.call_function(torch._foreach_mul, (both, parts))
        new = graph.call_function(torch._foreach_add_, (xs, terms))
    node.replace_all_uses_with(new)
    graph.erase_node(node)


def _functional_modules(gm: fx.GraphModule, inputs: list[Any]) -> None:
    """A module the graph calls as one node (an RNN, an RNN cell) holds its parameters itself;
    traced on fake tensors, it would meet the real ones. Where each of its parameters and
    buffers is also a graph input (the backward's leaves are), the call runs with the module
    reparametrized by those inputs (what ``torch.func.functional_call`` does): the traced graph
    reads them from its inputs, as the gradients and updates do."""
    graph = gm.graph
    holders = [n for n in graph.nodes if n.op == "placeholder"]
    by_id = {id(t): node for node, t in zip(holders, inputs, strict=False)}
    for node in list(graph.nodes):
        if node.op == "call_module":
            module, call = gm.get_submodule(str(node.target)), None
        elif node.op == "call_function" and hasattr(node.target, "_magpy_module"):
            module, call = node.target._magpy_module, node.target
        else:
            continue
        tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        if not tensors or not all(id(t) in by_id for t in tensors.values()):
            continue  # (then tracing fails, and the graph runs uncompiled)
        run = _reparametrized(module, call or module, tuple(tensors), _kernels_of(module))
        with graph.inserting_before(node):
            held = [by_id[id(t)] for t in tensors.values()]
            new = graph.call_function(run, (held, *node.args), dict(node.kwargs))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
    gm.recompile()


def _kernels_of(module: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """The kernels a module's call is traced with. An RNN (``nn.LSTM``) on CPU runs oneDNN's
    fused layer kernel (``mkldnn_rnn_layer``) whose fake-tensor output signature is not the
    one the real kernel returns, so that a compiled graph calling it fails at run time (its
    workspace output). Traced with oneDNN off, the RNN comes out as its cell arithmetic, step
    by step (matrix products, sigmoid, tanh: what ``aten::lstm`` runs without oneDNN), which
    Inductor compiles and differentiates like any other operation; the same values as eager,
    up to rounding."""
    return _without_onednn if isinstance(module, torch.nn.RNNBase) else contextlib.nullcontext


@contextlib.contextmanager
def _without_onednn() -> Iterator[None]:
    was = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(was)


def _reparametrized(
    module: Any,
    call: Any,
    names: tuple[str, ...],
    kernels: Callable[[], contextlib.AbstractContextManager[None]],
) -> Callable[..., Any]:
    def run(tensors: list[Any], *args: Any, **kwargs: Any) -> Any:
        with _reparametrize_module(module, dict(zip(names, tensors, strict=True))), kernels():
            return call(*args, **kwargs)

    run.__name__ = f"reparametrized_{type(module).__name__}"
    return run


def _retains(node: fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target is torch.autograd.grad
        and bool(node.kwargs.get("retain_graph"))
    )


class _Freed(torch.autograd.Function):
    """The identity, with a backward that raises what eager raises on a freed graph."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError(_FREED)

    @classmethod
    def apply(cls, t: torch.Tensor) -> Any:
        with torch.enable_grad():
            return super().apply(t.detach().requires_grad_())
