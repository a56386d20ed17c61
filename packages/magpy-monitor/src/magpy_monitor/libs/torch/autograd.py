"""Backward inside the capture: ``loss.backward()``, ``torch.autograd.backward``/``grad``, and
the ``.grad`` of tensors from outside.

A training step's backward is part of its record. When the program calls ``loss.backward()`` on
a tensor the graph computed, the graph gets one node ``torch.autograd.grad(loss, leaves,
grad_outputs, retain_graph=...)`` over the leaves the real autograd graph reaches (the
parameters: entry tensors, graph inputs), and each leaf's ``.grad`` is then what
``AccumulateGrad`` makes of it in eager:

- ``p.grad`` was None: it becomes the new gradient (with ``p``'s strides, the layout contract),
  a graph output the mock sets with ``p.grad = g``;
- ``p.grad`` was a tensor (gradient accumulation): the gradient is added into it in place
  (``add_``, as eager does with grad mode off during backward).

Which case applies is guarded (``p.grad is None``, or the metadata of ``p.grad``). The
backward runs natively while recording, so the run's values stay eager's; the shadow of each
``p.grad`` is the graph's value from then on: the program reads it (an optimizer step), sets it
(``p.grad = None``, ``zero_grad``) or updates it in place (``p.grad.zero_()``), and the mock
replays what stays. The eager backend runs the node as it is (autograd builds the forward's
graph while the fx graph runs); ``magpy_codegen`` traces it into explicit backward operators
for the compilers (``make_fx`` of the joint, ``_backend``).

What is refused (a graph break, with its reason): ``create_graph=True``, ``inputs=``, a tensor
the graph did not compute, a gradient that reaches a tensor from outside that is not a leaf
(its history is outside the record) or that the program did not read, hooks on a leaf
(``register_hook``, ``register_post_accumulate_grad_hook``), sparse or non-strided leaves.
The leaves' absence of hooks and their being leaves are guarded.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import Attr, GuardKind, Outcome

from ...core.attributes import Read, attr_rule
from ...core.calls import method_self
from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.registry import TENSOR_METHOD_HANDLERS
from ...core.values import Val

__all__ = ["as_grad_layout", "plain_leaf", "store_grad"]

_TENSOR_BACKWARD = torch.Tensor.backward


def plain_leaf(t: torch.Tensor) -> bool:
    """``t`` is a leaf without gradient hooks (what a backward record relies on)."""
    return t.grad_fn is None and not t._backward_hooks and not t._post_accumulate_grad_hooks


def as_grad_layout(g: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The gradient ``g`` of ``p`` as ``AccumulateGrad`` stores a new ``.grad``: with ``p``'s
    strides where ``p`` is dense (the layout contract), else as computed."""
    if g.stride() == p.stride() or not (p.is_contiguous() or _channels_last(p)):
        return g
    return torch.empty_strided(p.size(), p.stride(), dtype=g.dtype, device=g.device).copy_(g)


def _channels_last(p: torch.Tensor) -> bool:
    return p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------------- .grad
def _grad_read(r: Read) -> bool:
    return r.name == "grad" and isinstance(r.obj, torch.Tensor)


@attr_rule("tensor grad", _grad_read)
def _tensor_grad(m: FrameMonitor, r: Read) -> Val:
    """``p.grad`` of a tensor from outside: its entry value (guarded when used), or what the
    run made of it (a backward, ``p.grad = None``)."""
    base = r.base
    if base.attrs is not None and "grad" in base.attrs:
        return base.attrs["grad"]
    if not (base.external and base.node is not None):
        if r.real is None and base.fx is not None and not r.obj.requires_grad:
            return m.cap.const(None)  # (a tensor the graph made that needs no gradient)
        raise m.unsupported("the .grad of a tensor the run made")
    return m.cap.child(base, Attr("grad"), r.real)


def store_grad(m: FrameMonitor, base: Val, value: Val) -> None:
    """``p.grad = value`` (``zero_grad(set_to_none=True)``, a gradient set by hand)."""
    if not (base.external and base.node is not None):
        raise m.unsupported("setting the .grad of a tensor the run made")
    g = value.obj
    p = base.obj
    if g is not None:
        if not isinstance(g, torch.Tensor):
            raise m.unsupported("setting .grad to a non-tensor")  # (eager raises TypeError)
        if (g.shape, g.dtype, g.device) != (p.shape, p.dtype, p.device):
            raise m.unsupported("setting a .grad whose metadata differs from the tensor's")
        if value.external:
            m.cap.guard_meta(value)
    m.cap.guard_meta(base)
    m.cap.set_attr(base, "grad", value)


# ---------------------------------------------------------------------- backward
def _is_backward(c: Call) -> bool:
    fn = c.fn
    if getattr(fn, "__func__", None) is _TENSOR_BACKWARD:
        return isinstance(getattr(fn, "__self__", None), torch.Tensor)
    return fn is _TENSOR_BACKWARD or fn is torch.autograd.backward


@call_rule("autograd backward", _is_backward)
def _backward(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """``loss.backward(gradient=None, retain_graph=None, create_graph=False, inputs=None)``
    and ``torch.autograd.backward(tensors, grad_tensors=None, ...)``."""
    names: tuple[str, ...]
    if c.fn is torch.autograd.backward:
        names = (
            "tensors",
            "grad_tensors",
            "retain_graph",
            "create_graph",
            "grad_variables",
            "inputs",
        )
    else:
        names = ("self", "gradient", "retain_graph", "create_graph", "inputs")
    bound = getattr(c.fn, "__func__", None) is _TENSOR_BACKWARD
    pos = [method_self(m, c.fn_val), *c.pos] if bound else list(c.pos)
    if len(pos) > len(names) or set(c.kwargs) - set(names):
        raise m.unsupported("backward() with arguments it does not take")
    args: dict[str, Val] = dict(zip(names, pos, strict=False)) | c.kwargs
    loss = args.get("tensors", args.get("self"))
    assert loss is not None
    gradient = args.get("grad_tensors", args.get("gradient"))
    for name in ("retain_graph", "create_graph", "inputs", "grad_variables"):
        if name in args:
            m.cap.observe(args[name])
    if _truthy(args.get("create_graph")) or not _none(args.get("inputs")):
        raise m.unsupported("backward with create_graph or inputs")
    if not _none(args.get("grad_variables")):
        raise m.unsupported("backward with the removed grad_variables argument")
    loss, gradient = _single(m, loss), _single(m, gradient) if gradient is not None else None
    retain = _truthy(args.get("retain_graph"))
    accumulate(m, inst, loss, gradient, retain)


_GRAD_ARGS = (
    "outputs", "inputs", "grad_outputs", "retain_graph", "create_graph", "only_inputs",
    "allow_unused", "is_grads_batched", "materialize_grads",
)  # fmt: skip


@call_rule("autograd grad", lambda c: c.fn is torch.autograd.grad)
def _grad(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """``torch.autograd.grad(outputs, inputs, ...)``: one node; the gradients are graph values
    (no ``.grad`` changes)."""
    cap = m.cap
    if len(c.pos) > len(_GRAD_ARGS) or set(c.kwargs) - set(_GRAD_ARGS):
        raise m.unsupported("torch.autograd.grad() with arguments it does not take")
    args: dict[str, Val] = dict(zip(_GRAD_ARGS, c.pos, strict=False)) | c.kwargs
    for name in _GRAD_ARGS[3:]:
        if name in args:
            cap.observe(args[name])
    if _truthy(args.get("create_graph")) or _truthy(args.get("is_grads_batched")):
        raise m.unsupported("torch.autograd.grad with create_graph or batched gradients")
    out = _single(m, args["outputs"])
    if out.fx is None or out.external or not out.obj.requires_grad:
        raise m.unsupported("torch.autograd.grad of a tensor the graph did not compute")
    inputs = args["inputs"]
    many = not isinstance(inputs.obj, torch.Tensor)
    wrt = inputs.items if many and type(inputs.obj) in (list, tuple) else [inputs]
    if not isinstance(wrt, list) or not all(isinstance(v.obj, torch.Tensor) for v in wrt):
        raise m.unsupported("torch.autograd.grad with inputs the monitor does not know")
    _inputs_are_leaves(m)
    kw = {k: args[k].obj for k in _GRAD_ARGS[3:] if k in args}
    if "grad_outputs" in args and args["grad_outputs"].obj is not None:
        kw["grad_outputs"] = cap.to_arg(_single(m, args["grad_outputs"]))
    nodes = [cap.tensor_node(v) for v in wrt]
    call = cap.rec.call("call_function", torch.autograd.grad, (cap.tensor_node(out), nodes), kw)

    def make(real: list[Any]) -> list[Val]:
        items = []
        for i, g in enumerate(real[0]):
            if g is None:
                items.append(cap.const(None))
            else:
                items.append(
                    cap.op_result(g, cap.rec.call("call_function", _getitem, (call, i), {}))
                )
        return [cap.new(real[0], items=items)]

    m.expect_outputs(inst, 1, make)


def _none(v: Val | None) -> bool:
    return v is None or v.obj is None


def _truthy(v: Val | None) -> bool:
    return v is not None and bool(v.obj)


def _single(m: FrameMonitor, v: Val) -> Val:
    """The one tensor of ``tensors``/``grad_tensors`` (a tensor, or a sequence of one)."""
    if isinstance(v.obj, torch.Tensor):
        return v
    items = v.items if type(v.obj) in (list, tuple) else None
    if isinstance(items, list) and len(items) == 1 and isinstance(items[0].obj, torch.Tensor):
        return items[0]
    raise m.unsupported("backward of several tensors at once")


def accumulate(m: FrameMonitor, inst: Inst, loss: Val, gradient: Val | None, retain: bool) -> None:
    """The graph's part of ``loss.backward(gradient)``: gradients into the leaves' ``.grad``."""
    cap = m.cap
    t = loss.obj
    if loss.fx is None or loss.external:
        raise m.unsupported("backward of a tensor the graph did not compute")
    if not t.requires_grad or t.grad_fn is None:
        raise m.unsupported("backward of a tensor that does not require grad")  # (eager raises)
    leaves = []
    reached: set[int] = set()  # the autograd nodes of the graph from t
    for leaf in _leaves(m, t.grad_fn, reached):
        val = cap.known(leaf)
        if val is None or not (val.external and val.node is not None):
            raise m.unsupported("a gradient flows to a tensor the program did not read")
        if not plain_leaf(leaf) or leaf.layout is not torch.strided:
            raise m.unsupported("a gradient flows to a leaf with hooks, or not strided")
        cap.graph.observe(cap.node_of(val), GuardKind.CUSTOM, Outcome(plain_leaf, True))
        leaves.append(val)
    _inputs_are_leaves(m)
    old = [_tensor_grad(m, Read(cap, v, "grad", v.obj.grad)) for v in leaves]
    kw: dict[str, Any] = {"retain_graph": retain, "allow_unused": True}
    if gradient is not None:
        kw["grad_outputs"] = cap.to_arg(gradient)
    retained = [v for v in cap.retained if id(v.obj.grad_fn) in reached]
    nodes = [cap.tensor_node(v) for v in (*leaves, *retained)]
    grads = cap.rec.call("call_function", torch.autograd.grad, (cap.tensor_node(loss), nodes), kw)
    kept = _retained_grads(m, retained, grads, len(leaves))
    pieces: list[tuple[Val, Val | None, Any]] = []
    for i, (v, before) in enumerate(zip(leaves, old, strict=True)):
        g = cap.rec.call("call_function", _getitem, (grads, i), {})
        if before.obj is None:
            cap.observe(before)
            g = cap.rec.call("call_function", as_grad_layout, (g, nodes[i]), {})
            pieces.append((v, None, g))
        else:
            if before.obj.layout is not torch.strided or before.obj.requires_grad:
                raise m.unsupported("accumulating into a .grad that is sparse or requires grad")
            add = cap.rec.call("call_method", "add_", (cap.tensor_node(before), g), {})
            pieces.append((v, before, add))

    def make(real: list[Any]) -> list[Val]:
        kept(real)
        for v, before, node in pieces:
            if before is None:
                cap.set_attr(v, "grad", cap.op_result(v.obj.grad, node))
            else:
                if v.obj.grad is not before.obj:
                    raise m.unsupported("backward replaced a .grad it should have updated")
                cap.mutate_tensor(before, node)
        return [cap.const(None)]

    m.expect_outputs(inst, 1, make)


def _inputs_are_leaves(m: FrameMonitor) -> None:
    """Every graph input that requires grad is a leaf (guarded): the gradients the record
    computes stop at its inputs, as eager's do only where the inputs have no history."""
    cap = m.cap
    for t in cap.rec.example_inputs:
        if not (isinstance(t, torch.Tensor) and t.requires_grad):
            continue
        val = cap.known(t)
        if t.grad_fn is not None or val is None or val.node is None:
            raise m.unsupported("backward through a tensor from outside that has a history")
        cap.graph.observe(val.node, GuardKind.CUSTOM, Outcome(_is_leaf, True))


def _is_leaf(t: torch.Tensor) -> bool:
    return t.grad_fn is None


def _getitem(seq: Any, i: int) -> Any:
    return seq[i]


def _leaves(m: FrameMonitor, root: Any, seen: set[int]) -> list[torch.Tensor]:
    """The leaf tensors whose ``AccumulateGrad`` the autograd graph from ``root`` reaches, in a
    fixed order (depth first); ``seen`` gets the ids of the nodes it went through."""
    found: list[torch.Tensor] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(variable)
        stack.extend(reversed([f for f, _ in node.next_functions]))
    return found


# ---------------------------------------------------------------------- retain_grad
def _retain_grad(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``h.retain_grad()`` of a tensor the graph computes: a backward in the run gives it its
    ``.grad`` (a graph value), and the mock hands ``h`` out with ``retain_grad()`` called and
    that ``.grad`` set (``tensorattrs.with_attributes``). (A leaf: nothing to do, as in eager.)"""
    cap = m.cap
    (h,) = pos
    t = h.obj
    if kw or h.external or h.fx is None:
        raise m.unsupported("retain_grad() of a tensor from outside")
    if not t.requires_grad:
        raise m.unsupported("retain_grad() of a tensor that does not require grad")  # (raises)
    if t.grad_fn is not None and all(v is not h for v in cap.retained):
        cap.retained.append(h)
        h.attrs = h.attrs if h.attrs is not None else {}
        h.attrs.setdefault("grad", cap.const(None))
    m.expect_outputs(inst, 1, lambda real: [cap.const(None)])


TENSOR_METHOD_HANDLERS["retain_grad"] = _retain_grad


def _retained_grads(
    m: FrameMonitor, retained: list[Val], grads: Any, first: int
) -> Callable[[list[Any]], None]:
    """The ``.grad`` a backward gives each tensor of ``retained`` (outputs ``first``... of the
    ``torch.autograd.grad`` node ``grads``): set when None, else added to (out of place, as
    torch's retain_grad hook does); applied by the returned function once the backward ran."""
    cap = m.cap
    nodes = []
    for i, v in enumerate(retained):
        g = cap.rec.call("call_function", _getitem, (grads, first + i), {})
        before = v.attrs["grad"] if v.attrs is not None else cap.const(None)
        if before.obj is not None:
            g = cap.rec.call("call_function", operator.add, (cap.tensor_node(before), g), {})
        nodes.append(g)

    def apply(real: list[Any]) -> None:
        for v, node in zip(retained, nodes, strict=True):
            if v.obj.grad is None:
                raise m.unsupported("a retained gradient the backward did not set")
            assert v.attrs is not None
            v.attrs["grad"] = cap.op_result(v.obj.grad, node)

    return apply
