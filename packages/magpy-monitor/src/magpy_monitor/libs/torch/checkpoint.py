"""``torch.utils.checkpoint.checkpoint``: the forward pass of a checkpointed function.

Activation checkpointing changes what autograd keeps for the backward pass (it recomputes the
function there); the forward pass computes ``function(*args)``. The recorded graph is
differentiated directly, which gives the gradients the recomputation gives (the RNG state is
restored for it: ``preserve_rng_state=False`` is a break). What else eager does in the forward
pass is modelled too:

- ``use_reentrant=False``: ``checkpoint`` returns ``function(*args, **kwargs)`` (saved-tensor hooks
  only act in the backward pass). The call is given a Python function that does just that (its
  stack slot is swapped, as for scripted functions), followed like any other code.
- ``use_reentrant=True`` or not given: torch's own ``checkpoint`` code is followed (past its
  ``torch._dynamo`` disabling wrapper, which only switches an evaluation-frame callback MagPy
  does not use), so its warning about ``use_reentrant`` is replayed as issued there. Its
  ``CheckpointFunction.apply(function, preserve, *args)`` runs natively; the monitor follows the
  two Python calls its forward makes: ``check_backward_validity(args)`` (whose warning "None of
  the inputs have requires_grad=True" is replayed) and ``function(*args)``, which runs under
  ``torch.no_grad()`` (the graph switches grad mode around it). An autograd Function attaches
  its outputs to the inputs that require grad, which a graph of the function's operations does
  not reproduce: with grad enabled and such an input, the call is a break.

``checkpoint_sequential`` is plain Python that calls ``checkpoint``: it is followed.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.utils.checkpoint as _ckpt
from torch.utils._pytree import tree_leaves

from magpy_refgraph import Global, GuardKind, ModuleCall, ModuleNoHooks

from ...core.calls import (
    _closure,
    _fresh,
    bind_args,
    inline,
    method_self,
)
from ...core.dispatch import dispatch_call
from ...core.frame import FrameMonitor, Inst, Pending, initial_fast
from ...core.registry import BUILTIN_HANDLERS, FUNCTION_APPLY_MODELS
from ...core.values import PackedArgs, Val
from ..stdlib.warn import SYNTHETIC_CODES
from .hooks import _static_forward, _unsupported_hooks
from .tensorctors import _can_swap, _swap_callable

__all__ = ["checkpoint_forward"]

_CHECKPOINT = _ckpt.checkpoint
_INNER = getattr(_CHECKPOINT, "__wrapped__", None)  # torch's code under the dynamo wrapper
_OPTIONS = ("use_reentrant", "context_fn", "determinism_check", "debug", "early_stop")


def checkpoint_forward(
    function: Any,
    *args: Any,
    use_reentrant: Any = None,
    context_fn: Any = None,
    determinism_check: Any = None,
    debug: Any = None,
    early_stop: Any = None,
    preserve_rng_state: Any = True,
    **kwargs: Any,
) -> Any:
    """What ``checkpoint(function, *args, use_reentrant=False, ...)`` computes in the forward
    pass (a non-reentrant checkpoint runs ``function`` as is)."""
    return function(*args, **kwargs)


def _checkpoint(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    options = {k: v for k, v in kw.items() if k in _OPTIONS}
    fn_kwargs = {k: v for k, v in kw.items() if k not in _OPTIONS}
    for v in options.values():
        cap.observe(v)
    reentrant = "use_reentrant" not in options or bool(options["use_reentrant"].obj)
    context_fn = options.get("context_fn")
    if context_fn is not None and context_fn.obj is not _ckpt.noop_context_fn:
        raise m.unsupported("checkpoint with a context_fn")
    if "debug" in options and options["debug"].obj is not False:
        raise m.unsupported("checkpoint(debug=True)")
    preserve = fn_kwargs.pop("preserve_rng_state", None)
    if preserve is not None:
        cap.observe(preserve)
        if not preserve.obj:
            # the backward pass would recompute with other random numbers than the forward
            raise m.unsupported("checkpoint(preserve_rng_state=False)")
    args = pos[1:] if pos else []
    _guard_devices(m, args)
    if reentrant:
        if fn_kwargs or _INNER is None:
            raise m.unsupported("reentrant checkpoint with keyword arguments for the function")
        inline(m, inst, cap.const(_INNER), pos, kw)  # torch's code, past the dynamo wrapper
        return
    debug = cap.root(Global("_checkpoint_debug_enabled", scope=vars(_ckpt)), _debug_enabled())
    cap.observe(debug)
    if debug.obj:
        raise m.unsupported("checkpoint debugging is enabled")
    check = options.get("determinism_check")
    if check is not None and check.obj not in _ckpt._allowed_determinism_checks_to_fns:
        raise m.unsupported("checkpoint with an unknown determinism_check")
    if not _can_swap(m, inst, _CHECKPOINT):
        raise m.unsupported("checkpoint called from native code")
    dispatch_call(m, inst, cap.const(checkpoint_forward), pos, kw)
    _swap_callable(m, inst, _CHECKPOINT, checkpoint_forward)  # last: nothing after it may break


def _debug_enabled() -> Any:
    return vars(_ckpt).get("_checkpoint_debug_enabled")


def _guard_devices(m: FrameMonitor, args: list[Val]) -> None:
    """The devices of the tensor arguments (checkpoint warns when they span two device types)."""
    types_seen: set[str] = set()
    stack = list(args)
    while stack:
        v = stack.pop()
        if isinstance(v.obj, torch.Tensor):
            m.cap.guard_meta(v, sizes=False)
            if v.obj.device.type != "cpu":
                types_seen.add(v.obj.device.type)
        elif isinstance(v.items, list):
            stack.extend(v.items)
        elif type(v.obj) in (list, tuple, dict) and any(
            isinstance(x, torch.Tensor) for x in tree_leaves(v.obj)
        ):
            raise m.unsupported("checkpoint of tensors inside a container from outside")
    if len(types_seen) > 1:
        raise m.unsupported("checkpoint of tensors on two device types (torch warns)")


# ---------------------------------------------------------------------- CheckpointFunction.apply
def _reentrant_apply(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``CheckpointFunction.apply(function, preserve, *args)``, about to run natively."""
    if kw or len(pos) < 2:
        raise m.unsupported("CheckpointFunction.apply with unusual arguments")
    function, preserve, args = pos[0], pos[1], pos[2:]
    m.cap.observe(preserve)
    if not preserve.obj:
        raise m.unsupported("checkpoint(preserve_rng_state=False)")
    _guard_devices(m, args)
    grad = any(isinstance(a.obj, torch.Tensor) and a.obj.requires_grad for a in args)
    if grad and torch.is_grad_enabled():
        raise m.unsupported(
            "reentrant checkpoint of inputs that require grad (its autograd Function's outputs)"
        )
    _ReentrantForward(m, inst, function, args).start()


class _ReentrantForward:
    """The Python calls of ``CheckpointFunction.forward``, in order, inside one CALL."""

    def __init__(self, m: FrameMonitor, inst: Inst, function: Val, args: list[Val]) -> None:
        self.m, self.function, self.args = m, function, args
        self.grad = torch.is_grad_enabled()  # (switched off around the function)
        self.step = 0
        self.result: Val | None = None
        self.pending: Pending = m.expect_outputs(inst, 1, self.make)
        self.pending.on_result = self.on_result

    def start(self) -> None:
        """Follow ``check_backward_validity(args)`` first."""
        args = self.args
        inputs = Val(tuple(a.obj for a in args), items=list(args), payload=PackedArgs())
        bound = {"inputs": inputs}
        self._expect(_ckpt.check_backward_validity, bound, None)

    def _expect(self, func: Any, bound: dict[str, Val], closure: list[Val] | None) -> None:
        cap = self.m.cap

        def start(frame: types.FrameType) -> FrameMonitor:
            mon = FrameMonitor(cap, frame, initial_fast(cap, frame, _fresh(frame, bound), closure))
            mon.func = func
            return mon

        self.pending.expect = (func.__code__, start)

    def on_result(self, val: Val) -> None:
        self.step += 1
        if self.step == 1:  # check_backward_validity returned: the function runs next
            if self.grad:
                self._set_grad(False)
            func, bound, closure = _callee(self.m, self.function, self.args)
            self._expect(func, bound, closure)
        elif self.step == 2:
            if self.grad:
                self._set_grad(True)
            self.result = val

    def _set_grad(self, mode: bool) -> None:
        self.m.cap.rec.call("call_function", torch._C._set_grad_enabled, (mode,), {}, effect=True)

    def make(self, real: list[Any]) -> list[Val]:
        m, res = self.m, self.result
        if self.step != 2 or res is None:
            raise m.unsupported("checkpoint's forward ran otherwise than the monitor expected")
        out = real[0]
        if out is res.obj:
            return [res]
        items = res.items
        if (
            type(out) is tuple
            and isinstance(items, list)
            and len(items) == len(out)
            and all(a.obj is b for a, b in zip(items, out, strict=True))
        ):
            return [m.cap.new(out, items=list(items))]
        raise m.unsupported("checkpoint's autograd Function returned other objects")


def _callee(
    m: FrameMonitor, fn_val: Val, args: list[Val]
) -> tuple[Any, dict[str, Val], list[Val] | None]:
    """The Python function a call of ``fn_val(*args)`` from native code runs, with its bound
    arguments and closure: a module's ``forward``, a function, a bound method."""
    cap = m.cap
    fn = fn_val.obj
    if isinstance(fn, torch.nn.Module):
        forward = type(fn).forward
        why = _unsupported_hooks(fn)
        if why is None and (fn._forward_hooks or fn._forward_pre_hooks):
            why = "forward hooks"
        if why is None and "forward" in fn.__dict__:
            why = "its own forward"
        if why is None and not (fn_val.external and fn_val.node is not None):
            why = "no entry path"
        if why is not None or not isinstance(forward, types.FunctionType):
            raise m.unsupported(f"checkpoint of a {type(fn).__name__} with {why or 'no forward'}")
        assert fn_val.node is not None
        cap.observe_type(fn_val)
        cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleCall())
        cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleNoHooks())
        own = [] if _static_forward(type(fn)) else [fn_val]
        fv = cap.const(forward)
        return forward, bind_args(m, fv, [*own, *args], {}), None
    if isinstance(fn, types.FunctionType):
        cap.observe_identity(fn_val)
        return fn, bind_args(m, fn_val, args, {}), _closure(m, fn_val)
    if type(fn) is types.MethodType and isinstance(fn.__func__, types.FunctionType):
        if fn_val.external:
            cap.observe(fn_val)  # what it binds
        self_val = method_self(m, fn_val)
        fv = cap.const(fn.__func__)
        return fn.__func__, bind_args(m, fv, [self_val, *args], {}), _closure(m, fv)
    raise m.unsupported(f"checkpoint of a {type(fn).__name__}")


SYNTHETIC_CODES.add(checkpoint_forward.__code__)  # (a warning naming its frame is a break)
BUILTIN_HANDLERS[id(_CHECKPOINT)] = (_CHECKPOINT, _checkpoint)
FUNCTION_APPLY_MODELS[_ckpt.CheckpointFunction] = _reentrant_apply
