"""``MyFunction.apply(*args)`` of a ``torch.autograd.Function`` with grad mode off: its forward.

With grad mode off no backward can be needed, and ``apply`` computes ``forward(ctx, *args)``:
it makes a context object, runs ``forward`` (with grad mode off, as it already is) and hands
its outputs back, an input returned as it is coming back as a new view of it (``view_as``).
So the monitor follows ``forward`` like any Python call: its operations land in the graph, and
what it does to the objects it is given (Reformer's reversible layers get the ``ModuleList``
of layers, and lists to append hidden states to) is modelled as anywhere else. The context is
a local object of the run: what ``forward`` stores on it (``save_for_backward``,
``ctx.layers = ...``) stays in its shadow and is dropped with it; ``ctx.needs_input_grad`` is
the constant apply computes from the arguments' ``requires_grad`` (guarded with their
metadata). A context that leaves the run cannot be rebuilt: a break.

Elsewhere the call stays one graph node (``libs/torch/rules``): grad mode on (the graph would
need the Function's backward), a Function with ``setup_context`` (a ``forward`` without
``ctx``), keyword arguments, functorch transforms active, and DTensor's own Functions
(``from_local``, ``to_local``, ``redistribute``: their forwards compute layouts in native
helpers, and as one node each, with grad mode on or off, they hold their mesh and placements
as graph constants, ``libs/torch/dtensor``).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ...core.attributes import guard_class_attr
from ...core.calls import _closure, _fresh, bind_args
from ...core.frame import FrameMonitor, Inst, initial_fast
from ...core.values import Val
from .dtensor import dtensor_function

__all__ = ["apply_forward", "follows_forward"]

_SETUP_CONTEXT = torch.autograd.Function.setup_context


def follows_forward(cls: Any, kwargs: dict[str, Val]) -> bool:
    """``cls.apply(...)`` computes its classic ``forward`` with no backward to prepare."""
    return (
        not torch.is_grad_enabled()
        and not kwargs
        and isinstance(cls, type)
        and issubclass(cls, torch.autograd.Function)
        and isinstance(getattr(cls, "forward", None), types.FunctionType)
        and getattr(cls, "setup_context", None) is _SETUP_CONTEXT
        and not torch._C._are_functorch_transforms_active()
        and not dtensor_function(cls)
    )


def apply_forward(m: FrameMonitor, inst: Inst, cls_val: Val, args: list[Val]) -> None:
    """``cls.apply(*args)``, about to run natively: its ``forward`` frame is followed with
    ``ctx`` bound to a shadow of the context apply makes."""
    cap, cls = m.cap, cls_val.obj
    cap.observe_identity(cls_val)
    for name in ("forward", "setup_context"):
        guard_class_attr(cap, cls, name)
    forward = cls.forward
    for a in args:
        if isinstance(a.obj, torch.Tensor):
            cap.guard_meta(a, sizes=False)  # (requires_grad: ctx.needs_input_grad)
    needs = tuple(isinstance(a.obj, torch.Tensor) and a.obj.requires_grad for a in args)
    ctx_arg = Val(None)  # the context exists once forward's frame starts
    fn_val = cap.const(forward)
    bound = bind_args(m, fn_val, [ctx_arg, *args], {})
    closure = _closure(m, fn_val)
    results: list[Val] = []

    def start(frame: types.FrameType) -> FrameMonitor:
        ctx = cap.new(frame.f_locals[forward.__code__.co_varnames[0]])
        ctx.attrs = {"needs_input_grad": cap.const(needs)}
        fresh = {k: ctx if v is ctx_arg else v for k, v in _fresh(frame, bound).items()}
        mon = FrameMonitor(cap, frame, initial_fast(cap, frame, fresh, closure))
        mon.func = forward
        return mon

    def make(real: list[Any]) -> list[Val]:
        if not results:
            raise m.unsupported(f"{cls.__name__}.forward was not seen running")
        return [_outputs(m, cls, results[0], real[0])]

    p = m.expect_outputs(inst, 1, make, opaque=True)
    p.expect = (forward.__code__, start)
    p.on_result = results.append


def _outputs(m: FrameMonitor, cls: type, res: Val, out: Any) -> Val:
    """The shadow of what ``apply`` returned, from what ``forward`` returned (``res``)."""
    if out is res.obj:
        return res
    items = res.items
    if type(out) is tuple and type(res.obj) is tuple and isinstance(items, list):
        if len(out) != len(items):
            raise m.unsupported(f"{cls.__name__}.apply returned other objects than its forward")
        return m.cap.new(
            out, items=[_output(m, cls, v, x) for v, x in zip(items, out, strict=True)]
        )
    return _output(m, cls, res, out)


def _output(m: FrameMonitor, cls: type, v: Val, x: Any) -> Val:
    """One output: the object ``forward`` returned, or a tensor it returned as apply's view."""
    if x is v.obj:
        return v
    t = v.obj
    if (
        isinstance(t, torch.Tensor)
        and isinstance(x, torch.Tensor)
        and x._base is (t if t._base is None else t._base)
    ):
        cap = m.cap
        node = cap.rec.call("call_method", "view_as", (cap.tensor_node(v), cap.tensor_node(v)), {})
        return cap.op_result(x, node)
    raise m.unsupported(f"{cls.__name__}.apply returned other objects than its forward")
