"""Calls of ``nn.Module`` instances, forward hooks included.

``module(x)`` runs ``Module.__call__`` -> ``_call_impl``, which runs the forward pre-hooks, then
``forward``, then the forward hooks. The monitor does not follow ``_call_impl`` itself: it guards
that no backward or global hooks exist and that the module's forward-hook dicts hold exactly the
hooks seen now, and follows each hook and ``forward`` in turn, with the arguments
``_call_impl`` passes them (pre-hooks may replace the arguments, forward hooks the result; a
hook registered ``with_kwargs=True`` also gets the kwargs, and its pre-hook may replace them).
Hooks that are always called (they run when forward raises) and torch.distributed's (FSDP2) are
breaks. torch's own lazy module's initialising pre-hook runs natively, and the call is followed
as the module is after it (``_initialise_lazy``); any other lazy initialisation is a break.
"""

from __future__ import annotations

import types
from typing import Any, cast

import torch
from torch.nn.modules import module as mm
from torch.nn.modules.lazy import LazyModuleMixin

from magpy_refgraph import Attr, GuardKind, Item, ModuleCall, ModuleNoHooks

from ...core.attributes import guard_class_attr
from ...core.calls import (
    _closure,
    _fresh,
    _python_call,
    bind_args,
    inline,
    method_self,
)
from ...core.dispatch import dispatch_call
from ...core.frame import FrameMonitor, Inst, Pending, initial_fast
from ...core.values import PackedArgs, Val
from ...core.valuetypes import is_value_type
from ...pyobj.special import OPAQUE_FORWARDS, OPAQUE_MODULES, opaque_module_call
from .modctor import MODULE_INTERNALS

__all__ = ["module_call"]


def _unsupported_hooks(mod: torch.nn.Module, grad_off: bool = False) -> str | None:
    if (mod._backward_hooks or mod._backward_pre_hooks) and not grad_off:
        # with gradients on, _call_impl ties them to this call's autograd nodes (a full hook
        # wraps the inputs and outputs in BackwardHookFunction nodes; a non-full one hooks the
        # grad_fn of the result's last operation): a compiled graph has other nodes, so what
        # the hooks see and when they fire could not be eager's; the call runs natively
        return "backward hooks (with gradients on they hook this call's own autograd nodes)"
    if (
        mm._global_backward_pre_hooks
        or mm._global_backward_hooks
        or mm._global_forward_hooks
        or mm._global_forward_pre_hooks
    ):
        return "global module hooks"
    if mod._forward_hooks_always_called:  # (they run even when forward raises)
        return "forward hooks that are always called"
    # torch.distributed's hooks that take the call's kwargs: FSDP2's (tensor parallelism's
    # input and output hooks take none, and are followed)
    hooks = [
        h for k, h in mod._forward_pre_hooks.items() if k in mod._forward_pre_hooks_with_kwargs
    ]
    hooks += [h for k, h in mod._forward_hooks.items() if k in mod._forward_hooks_with_kwargs]
    if any(str(getattr(h, "__module__", "")).startswith("torch.distributed") for h in hooks):
        # (FSDP2's fully_shard: its hooks gather and free the parameters around each call;
        # compiling the module's forward leaves them to run as in eager)
        return (
            "torch.distributed forward hooks (fully_shard's: compile the module's forward "
            "instead, m.forward = magpy.compile(m.forward))"
        )
    return None


def _lazy_state(mod: torch.nn.Module) -> bool:
    """The module holds an uninitialized parameter or buffer of its own."""
    own = (*mod._parameters.values(), *mod._buffers.values())
    return any(torch.nn.parameter.is_lazy(t) for t in own if t is not None)


def _initialise_lazy(m: FrameMonitor, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]) -> bool:
    """Run the initialising pre-hook of torch's own lazy module (``nn.LazyLinear``,
    ``LazyConv2d``, ``LazyBatchNorm1d``...) natively, now, as ``_call_impl`` would: its
    parameters are materialized from the inputs' sizes (and drawn from torch's generator), the
    hook removes itself and the module becomes its ``cls_to_become``. The record then follows
    the call of the module as it is from now on, which is what every later call finds (eager
    never initialises twice): the first call records, the second hits. Only where nothing of
    the module's lazy state was seen by the capture yet (no guard was taken on what the hook
    changes) and the hook is the module's only pre-hook (no other hook runs before it); else
    the call stays a break (True: initialised)."""
    mod: torch.nn.Module = fn_val.obj
    cls: Any = type(mod)
    if not (
        fn_val.external
        and issubclass(cls, LazyModuleMixin)
        and cls.__module__.startswith("torch.nn.")
        and cls.initialize_parameters.__module__.startswith("torch.nn.")
        and not mod._forward_hooks_always_called
    ):
        return False
    hook = getattr(mod, "_initialize_hook", None)
    pre = mod._forward_pre_hooks
    if hook is None or list(pre) != [hook.id] or hook.id not in mod._forward_pre_hooks_with_kwargs:
        return False
    fn = pre[hook.id]
    if getattr(fn, "__func__", None) is not LazyModuleMixin._infer_parameters:
        return False
    if getattr(fn, "__self__", None) is not fn_val.obj:
        return False
    own = (*mod._parameters.values(), *mod._buffers.values())
    if any(m.cap.known(t) is not None for t in own if t is not None):
        return False
    args = tuple(v.obj for v in pos)
    fn(mod, args, {k: v.obj for k, v in kwargs.items()})
    return True


def _stateless_torch_module(mod: torch.nn.Module, kept: dict[str, Val]) -> bool:
    """A module without parameters, buffers or submodules: torch.nn's (ReLU, Upsample,
    MaxPool), or one whose other attributes are plain values (``ScaledDotProductAttention()``
    built and called inside forward, its constructor's arguments guarded) or tensors its
    construction made (``kept``, see ``_modctor``)."""
    if mod._parameters or mod._modules:
        return False
    if any(b is not None for b in mod._buffers.values()):  # BCEWithLogitsLoss's weight=None
        return False
    if type(mod).__module__.startswith("torch.nn."):
        return True
    return all(
        is_value_type(v) or k in kept for k, v in vars(mod).items() if k not in MODULE_INTERNALS
    )


def _hook_vals(m: FrameMonitor, mod_val: Val, attr: str) -> list[Val]:
    cap = m.cap
    hooks = getattr(mod_val.obj, attr)
    d = cap.child(mod_val, Attr(attr), hooks)
    cap.observe_keys(d)
    out = []
    for k, h in hooks.items():
        hv = cap.child(d, Item(k), h)
        cap.observe_identity(hv)
        out.append(hv)
    return out


def module_call(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """Model ``module(*pos, **kwargs)``."""
    mod: torch.nn.Module = fn_val.obj
    cap = m.cap
    if (
        isinstance(mod, OPAQUE_MODULES)
        and type(mod).forward in OPAQUE_FORWARDS  # (a subclass's own forward is followed)
        and not (mod._forward_hooks or mod._forward_pre_hooks)
        and _unsupported_hooks(mod) is None
        and fn_val.external
    ):
        opaque_module_call(m, inst, fn_val, pos, kwargs)
        return
    # with gradients off, the module's backward hooks cannot run (``_call_impl`` sets them up
    # on tensors that need no grad: nothing happens), so long as the result is one they leave
    # alone (see ``_HookedCall``): a call under ``torch.no_grad()`` is followed regardless
    grad_off = not torch.is_grad_enabled() and bool(mod._backward_hooks or mod._backward_pre_hooks)
    why = _unsupported_hooks(mod, grad_off)
    if why is not None:
        raise m.unsupported(f"{type(mod).__name__} has {why}")
    if _lazy_state(mod) and not _initialise_lazy(m, fn_val, pos, kwargs):
        # (``LazyModuleMixin``'s pre-hook materializes them: ``UninitializedParameter.
        # materialize`` swaps the parameter's data and class in place, then the hook removes
        # itself and the module changes class; the next call is captured whole again)
        raise m.unsupported(f"{type(mod).__name__} initialises its lazy parameters")
    if "forward" in mod.__dict__:
        if grad_off:
            raise m.unsupported(f"{type(mod).__name__} has backward hooks and its own forward")
        _own_forward_call(m, inst, fn_val, pos, kwargs)
        return
    forward = type(mod).forward
    if not isinstance(forward, types.FunctionType):
        raise m.unsupported(f"{type(mod).__name__}.forward is not a Python function")
    guard_class_attr(m.cap, type(mod), "forward")  # (replaced on the class: a miss)
    # a @staticmethod forward (yolov5's SiLU, Mish) is called without the module
    self_args = [] if _static_forward(type(mod)) else [fn_val]
    if not fn_val.external or fn_val.node is None:
        if (
            fn_val.const
            and _stateless_torch_module(mod, fn_val.attrs or {})
            and not (mod._forward_hooks or mod._forward_pre_hooks)
        ):
            # e.g. nn.ReLU(inplace=True)(x) built inside forward: its forward is all there is
            inline(m, inst, cap.const(forward), [*self_args, *pos], kwargs)
            return
        raise m.unsupported("calling a module created during the run")
    cap.observe_type(fn_val)
    cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleCall(grad_off=grad_off))
    if not (mod._forward_pre_hooks or mod._forward_hooks) and not grad_off:
        cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleNoHooks())
        inline(m, inst, cap.const(forward), [*self_args, *pos], kwargs)
        return
    pre = _hook_vals(m, fn_val, "_forward_pre_hooks")
    post = _hook_vals(m, fn_val, "_forward_hooks")
    for table in ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs"):
        # which hooks take the call's kwargs (``with_kwargs=True``): guarded by their ids
        cap.observe_keys(cap.child(fn_val, Attr(table), getattr(mod, table)))
    _HookedCall(m, inst, fn_val, forward, pre, post, pos, kwargs, grad_off).start()


def _own_forward_call(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``module(x)`` of a module whose instance holds its own ``forward`` (a function or a
    bound method stored by ``module.forward = f``): ``_call_impl`` calls ``module.forward(x)``,
    which finds the stored callable, so it is called without the module. The stored callable
    is guarded by identity (a bound method by what it binds)."""
    mod: torch.nn.Module = fn_val.obj
    cap = m.cap
    fwd = mod.__dict__["forward"]
    if not fn_val.external or fn_val.node is None:
        raise m.unsupported(f"{type(mod).__name__} built during the run overrides forward")
    if mod._forward_pre_hooks or mod._forward_hooks:
        raise m.unsupported(f"{type(mod).__name__} overrides forward and has forward hooks")
    if not isinstance(fwd, types.FunctionType | types.MethodType):
        raise m.unsupported(f"{type(mod).__name__}.forward is a {type(fwd).__name__}")
    cap.observe_type(fn_val)
    cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleCall(own_forward=True))
    cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleNoHooks())
    fwd_val = cap.child(fn_val, Attr("forward"), fwd)
    cap.observe(fwd_val)
    dispatch_call(m, inst, fwd_val, pos, kwargs)


def _inert_result(result: Any) -> bool:
    """A module result that ``_call_impl``'s backward-hook handling leaves alone with gradients
    off: a tensor, or a tuple whose first item is one (no warning, and the non-full hooks'
    search for a tensor stops at once)."""
    if isinstance(result, torch.Tensor):
        return True
    return isinstance(result, tuple) and bool(result) and isinstance(result[0], torch.Tensor)


def _static_forward(cls: type) -> bool:
    for klass in cls.__mro__:
        if "forward" in klass.__dict__:
            return isinstance(klass.__dict__["forward"], staticmethod)
    return False


class _HookedCall:
    """The sequence pre-hooks -> forward -> hooks inside one CALL instruction."""

    def __init__(
        self,
        m: FrameMonitor,
        inst: Inst,
        mod_val: Val,
        forward: Any,
        pre: list[Val],
        post: list[Val],
        pos: list[Val],
        kwargs: dict[str, Val],
        grad_off: bool = False,
    ) -> None:
        self.m, self.mod_val, self.grad_off = m, mod_val, grad_off
        self.steps: list[tuple[str, Val]] = [("pre", h) for h in pre]
        self.steps.append(("forward", m.cap.const(forward)))
        self.steps += [("post", h) for h in post]
        # which steps get the kwargs (registered ``with_kwargs=True``), as the hook dicts are
        # now (``_call_impl`` iterates over a copy of them; their ids and these tables are
        # guarded)
        mod = mod_val.obj
        self.with_kwargs = [k in mod._forward_pre_hooks_with_kwargs for k in mod._forward_pre_hooks]
        self.with_kwargs.append(False)
        self.with_kwargs += [k in mod._forward_hooks_with_kwargs for k in mod._forward_hooks]
        self.args, self.kwargs = list(pos), kwargs
        self.result: Val | None = None
        self.kwargs_val: Val | None = None
        self.i = 0

        def make(real: list[Any]) -> list[Val]:
            if self.i != len(self.steps) or self.result is None:
                raise m.unsupported("module hooks ran in an order the monitor did not expect")
            return [self.result]

        self.pending: Pending = m.expect_outputs(inst, 1, make)
        self.pending.on_result = self.on_result

    def _args_tuple(self) -> Val:
        return Val(tuple(v.obj for v in self.args), items=list(self.args), payload=PackedArgs())

    def _kwargs_dict(self) -> Val:
        """The ``kwargs`` dict a ``with_kwargs`` hook gets (the one forward gets after it: a
        hook's changes to it are read back in ``on_result``)."""
        items = {k: (self.m.cap.const(k), v) for k, v in self.kwargs.items()}
        self.kwargs_val = Val({k: v.obj for k, v in self.kwargs.items()}, items=items)
        self.kwargs_val.set_payload(PackedArgs())
        return self.kwargs_val

    def start(self) -> None:
        self.arm()

    def arm(self) -> None:
        m = self.m
        kind, hv = self.steps[self.i]
        fn = hv.obj
        pos: list[Val]
        kw: dict[str, Val] = {}
        self.kwargs_val = None  # (set below for a hook that gets the kwargs)
        if kind == "forward":
            own = [] if _static_forward(type(self.mod_val.obj)) else [self.mod_val]
            fn_val, pos, kw = hv, [*own, *self.args], self.kwargs
        else:
            # a post hook runs after forward, whose on_result set self.result; a hook
            # registered with_kwargs gets the call's kwargs after its args
            more = [self._args_tuple()]
            if self.with_kwargs[self.i]:
                more.append(self._kwargs_dict())
            if kind == "post":
                more.append(cast(Val, self.result))
            if type(fn) is types.MethodType:
                fn_val, pos = m.cap.const(fn.__func__), [method_self(m, hv), self.mod_val, *more]
            elif isinstance(fn, types.FunctionType):
                fn_val, pos = hv, [self.mod_val, *more]
            elif (call := _python_call(fn)) is not None:
                # an object whose class defines __call__ in Python (weight_norm's WeightNorm)
                m.cap.observe_type(hv)
                fn_val, pos = m.cap.const(call), [hv, self.mod_val, *more]
            else:
                raise m.unsupported(f"module hook {fn!r} is not a Python function")
        bound = bind_args(m, fn_val, pos, kw)
        closure = _closure(m, fn_val)
        cap = m.cap

        def start(frame: types.FrameType) -> FrameMonitor:
            mon = FrameMonitor(cap, frame, initial_fast(cap, frame, _fresh(frame, bound), closure))
            mon.func = fn_val.obj
            return mon

        self.pending.expect = (fn_val.obj.__code__, start)

    def on_result(self, val: Val) -> None:
        kind, _ = self.steps[self.i]
        if self.kwargs_val is not None:
            self._read_kwargs(self.kwargs_val)
        if kind == "pre" and val.obj is not None and self.kwargs_val is not None:
            self._pre_result_with_kwargs(val)
        elif kind == "pre" and val.obj is not None:
            self.args = list(val.items) if isinstance(val.obj, tuple) and val.items else [val]
            if isinstance(val.obj, tuple) and not val.items:
                raise self.m.unsupported("forward pre-hook returned a tuple of unknown origin")
        elif kind == "forward" or (kind == "post" and val.obj is not None):
            self.result = val
        self.i += 1
        if self.i < len(self.steps):
            self.arm()
        elif self.grad_off and not _inert_result(cast(Val, self.result).obj):
            # (``_call_impl`` warns about such a result of a module with backward hooks, and
            # its handling of non-full hooks may fail on it: eager's behaviour, run natively)
            raise self.m.unsupported("a module with backward hooks returned a result they read")

    def _read_kwargs(self, kw: Val) -> None:
        """The kwargs after a hook that got them (it may have changed the dict)."""
        if not isinstance(kw.items, dict) or any(type(k) is not str for k in kw.items):
            raise self.m.unsupported("a forward hook's kwargs the monitor could not follow")
        self.kwargs = {k: v for k, (_, v) in kw.items.items()}

    def _pre_result_with_kwargs(self, val: Val) -> None:
        """A ``with_kwargs`` pre-hook's result other than None: ``(args, kwargs)`` replace the
        call's (anything else: ``_call_impl`` raises, left to eager)."""
        parts = val.items if isinstance(val.obj, tuple) and len(val.obj) == 2 else None
        args, kw = parts if isinstance(parts, list) else (None, None)
        if args is None or kw is None or not isinstance(args.items, list):
            raise self.m.unsupported("forward pre-hook's (args, kwargs) of unknown origin")
        if not isinstance(args.obj, tuple):
            raise self.m.unsupported("forward pre-hook returned args that are no tuple")
        self.args = list(args.items)
        self._read_kwargs(kw)
