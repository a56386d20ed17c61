"""The call rules that need torch: grad mode, modules, autograd Functions (see ``core.registry``).

Their place in the order is declared in ``core.registry``; this module says when each applies
and what it does.
"""

from __future__ import annotations

import types
from typing import Any, cast

import torch

from magpy_refgraph import Attr

from ...bytecode.exceptions import GRAD_MODE_CLASSES, GradExit, grad_context, grad_exit
from ...bytecode.subscripts import UINT8_INDEX_WARNING, uint8_mask_index
from ...core.annotations import Kind, classify, tensor_attr_kind
from ...core.attributes import Read, attr_rule, load_attr, static_lookup
from ...core.calls import _as_op, inline, method_self
from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.programcode import program_frames, program_function
from ...core.registry import FUNCTION_APPLY_MODELS
from ...core.shapes import SIZE_FREE_READS, size_vals
from ...core.values import BoundMethod, Val
from ...core.valuetypes import is_value_type
from ...pyobj.instances import lookup
from ...pyobj.special import OPAQUE_FORWARDS, opaque_module_call
from ..stdlib import warnspy
from ..stdlib.warn import record_warning
from .dtensor import checked_from_local, layout_attribute, local_tensor_attribute
from .functions import apply_forward, follows_forward
from .hooks import module_call
from .modctor import ModuleBuild, construct_module
from .tensorattrs import python_attribute
from .tensorctors import forward_call, forwards

__all__: list[str] = []

_FUNCTION_APPLY = cast(Any, torch.autograd.Function.apply).__func__


# ---------------------------------------------------------------------- grad mode
@call_rule(
    "grad-mode exit",
    lambda c: c.fn_val.payload(GradExit) is not None,
)
def _grad_mode_exit(m: FrameMonitor, inst: Inst, c: Call) -> None:
    grad_exit(m, inst, c.fn_val, c.pos)


@call_rule(
    "grad-mode class",
    lambda c: any(c.fn is cls for cls in GRAD_MODE_CLASSES),  # (`in` runs a user __eq__)
)
def _grad_mode_class(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)  # (the class may come from outside: `self.ctx = no_grad`)
    grad_context(m, inst, c.fn, c.pos, c.kwargs)


# ---------------------------------------------------------------------- modules
@call_rule(
    "module class",
    lambda c: isinstance(c.fn, type) and issubclass(c.fn, torch.nn.Module),
)
def _module_class(m: FrameMonitor, inst: Inst, c: Call) -> None:
    # a layer built inside forward (torch.nn's, or a library's stateless activation): a
    # constant of the record if it holds no state; the mock never returns it. The class is
    # guarded by identity (`ACT2FN[name]`, `self.act_cls()`: another class is another layer)
    m.cap.observe_identity(c.fn_val)
    construct_module(m, inst, c.fn_val, c.pos, c.kwargs)


def _library_call_on_module_built(c: Call) -> bool:
    fn: Any = c.fn
    if not isinstance(fn, types.FunctionType) or not c.pos:
        return False
    build = c.pos[0].payload(ModuleBuild)
    return build is not None and build.building and not program_function(fn)


@call_rule("library call on a module being built", _library_call_on_module_built)
def _library_call_on_module(m: FrameMonitor, inst: Inst, c: Call) -> None:
    # ``super().__init__()`` in the followed ``__init__`` of a module class built inside
    # forward: torch's own Python, run natively (what it leaves is checked once the module is
    # built, see modctor); the program's Python it would call back is a break
    built = c.pos[0]
    for v in (*c.pos[1:], *c.kwargs.values()):
        if not isinstance(v.obj, torch.Tensor):  # (one it keeps: checked once built)
            m.cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        if real[0] is built.obj:
            return [built]
        if real[0] is None or is_value_type(real[0]):
            return [m.cap.const(real[0])]
        raise m.unsupported(f"{c.fn.__qualname__} on a module being built gave an object")

    p = m.expect_outputs(inst, 1, make)
    p.calls_back = program_frames()


def _class_attribute_of_built(r: Read) -> bool:
    obj = r.obj
    return (
        r.base.payload(ModuleBuild) is not None
        and r.name not in vars(obj)
        and static_lookup(type(obj), r.name) is r.real  # (MISSING: never the value read)
    )


@attr_rule("class attribute of a built module", _class_attribute_of_built)
def _class_attribute_of_built_module(m: FrameMonitor, r: Read) -> Val:
    # ``self.k`` of a module built inside forward, held by its class: read through the class
    # as the program named it (guarded there: ``Layer.k = 3`` between calls misses)
    return load_attr(m, r.base.require(ModuleBuild).cls_val, r.name, r.real)


def _own_module_call(c: Call) -> bool:
    return (
        isinstance(c.fn, torch.nn.Module)
        and isinstance(call := lookup(type(c.fn), "__call__"), types.FunctionType)
        and call is not torch.nn.Module.__call__
    )


@call_rule("module with own __call__", _own_module_call)
def _module_with_own_call(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_type(c.fn_val)  # a module class with its own __call__ (CartoonGAN's norm)
    call = lookup(type(c.fn), "__call__")
    inline(m, inst, m.cap.const(call), [c.fn_val, *c.pos], c.kwargs)


@call_rule("module call", lambda c: isinstance(c.fn, torch.nn.Module))
def _module_call(m: FrameMonitor, inst: Inst, c: Call) -> None:
    module_call(m, inst, c.fn_val, c.pos, c.kwargs)


def _opaque_forward(fn: Any, pos: list[Val]) -> bool:
    """``fn`` is the forward of an RNN (or another module recorded as one node), called on a
    module from outside without hooks of its own."""
    if type(fn) is not types.FunctionType or fn not in OPAQUE_FORWARDS:  # (no user __hash__)
        return False
    if not pos or not pos[0].external:
        return False
    mod = pos[0].obj
    return isinstance(mod, torch.nn.Module) and not (mod._forward_hooks or mod._forward_pre_hooks)


@call_rule(
    "opaque forward",
    lambda c: isinstance(c.fn, types.FunctionType) and _opaque_forward(c.fn, c.pos),
)
def _opaque_forward_call(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)  # super().forward(x) in a subclass of nn.LSTM...
    opaque_module_call(m, inst, c.pos[0], c.pos[1:], c.kwargs, forward=c.fn)


@call_rule("forwarding callable", lambda c: forwards(c.fn))
def _forwarding_callable(m: FrameMonitor, inst: Inst, c: Call) -> None:
    forward_call(m, inst, c.fn_val, c.pos, c.kwargs)  # functools.partial, a scripted function


# ---------------------------------------------------------------------- autograd Functions
def _modelled_function(cls: Any) -> bool:
    return isinstance(cls, type) and cls in FUNCTION_APPLY_MODELS


@call_rule(
    "modelled Function.apply, bound",
    lambda c: type(c.fn) is types.MethodType and _modelled_function(c.fn.__self__),
)
def _unbind_modelled_apply(m: FrameMonitor, inst: Inst, c: Call) -> Call:
    return c.with_args(c.fn.__func__, [method_self(m, c.fn_val), *c.pos])  # MyFn.apply(...)


@call_rule(
    "modelled Function.apply",
    lambda c: c.fn is _FUNCTION_APPLY and c.pos and _modelled_function(c.pos[0].obj),
)
def _modelled_apply(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.pos[0])  # an autograd Function whose forward is modelled
    FUNCTION_APPLY_MODELS[c.pos[0].obj](m, inst, c.pos[1:], c.kwargs)


@call_rule(
    "Function.apply",
    lambda c: c.fn is _FUNCTION_APPLY and c.pos and isinstance(c.pos[0].obj, type),
)
def _function_apply(m: FrameMonitor, inst: Inst, c: Call) -> None:
    if follows_forward(c.pos[0].obj, c.kwargs):  # grad mode off: apply computes forward
        apply_forward(m, inst, c.pos[0], c.pos[1:])
        return
    if checked_from_local(c.pos[0].obj, c.pos[1:]):
        raise m.unsupported(
            "DTensor.from_local(..., run_check=True): a check across ranks with Python objects "
            "and an in-place broadcast, which no compiled graph can hold (run_check=False is "
            "one node)"
        )
    # MyFn.apply(x): PRECALL unbound the classmethod; record the bound call as one node
    bound = cast(Any, c.pos[0].obj).apply
    _as_op(m, inst, bound, classify(bound), c.pos[1:], c.kwargs)


# ---------------------------------------------------------------------- tensor attributes
_VOLATILE_REMOVED = "volatile was removed (Variable.volatile is always False)"


def _reads_volatile(opname: str, argval: Any, operands: list[Any]) -> bool:
    """The instruction reads ``volatile`` of a plain tensor: ``_tensor_attribute`` replays its
    warning (torch's getter warns on every read, from the reading frame)."""
    return (
        opname in ("LOAD_ATTR", "LOAD_METHOD")
        and argval == "volatile"
        and len(operands) == 1
        and type(operands[0]) in (torch.Tensor, torch.nn.Parameter)
    )


warnspy.NATIVE_REPLAYED[_VOLATILE_REMOVED] = _reads_volatile


def _indexes_by_uint8(opname: str, argval: Any, operands: list[Any]) -> bool:
    """``t[mask]`` with a uint8 mask: ``bytecode.subscripts`` replays its warning."""
    return opname == "BINARY_SUBSCR" and len(operands) == 2 and uint8_mask_index(*operands)


warnspy.NATIVE_REPLAYED[UINT8_INDEX_WARNING] = _indexes_by_uint8


@attr_rule("tensor attribute", lambda r: isinstance(r.obj, torch.Tensor))
def _tensor_attribute(m: FrameMonitor, r: Read) -> Val:
    """``x.shape``, ``x.T``, ``x.grad``, ``x.add`` (bound), ``x.volatile`` of a tensor."""
    cap, base, name, real = m.cap, r.base, r.name, r.real
    if base.attrs is not None and name in base.attrs:
        return base.attrs[name]  # a Python attribute the run set on it
    if python_attribute(r.obj, name) and name in vars(r.obj):
        if not (base.external and base.node is not None):
            raise m.unsupported(f"tensor attribute {name!r} of unknown origin")
        cap.observe_type(base)
        return cap.child(base, Attr(name), real)  # one it had before the call
    kind = tensor_attr_kind(name)
    if kind is Kind.META:
        if name == "shape":
            dims = size_vals(cap, base)
            if dims is not None:
                return cap.new(real, items=dims)
        cap.guard_meta(base, sizes=name not in SIZE_FREE_READS)
        return cap.new(real, const=True)
    if kind is Kind.AS_OP or local_tensor_attribute(r.obj, name):
        node = cap.rec.call("call_function", getattr, (cap.tensor_node(base), name), {})
        return cap.op_result(real, node)
    if callable(real) and getattr(real, "__self__", None) is r.obj:
        return Val(real, payload=BoundMethod(base))
    if layout_attribute(r.obj, name):
        # a DTensor's mesh/placements: an entry one's are guarded with its metadata, a result's
        # follow from its inputs' (as its shape does)
        cap.guard_meta(base, sizes=False)
        return cap.new(real, const=True)
    if name == "volatile" and real is False:  # removed: always False, with a warning
        record_warning(m, _VOLATILE_REMOVED, UserWarning, m.frame, ran=True)
        return cap.const(False)
    raise m.unsupported(f"tensor attribute {name!r} is not supported")
