"""What a CALL means: the call rules, tried in ``registry.CALL_RULE_ORDER``.

Dynamic detection follows the paper's section 5.3.1: unannotated Python code is inlined (the
callee frame is monitored with its arguments bound to the caller's shadow values); AS_OP calls
become graph nodes; PURE native calls run natively and their results become constants guarded by
their inputs; unannotated native code, VALUE_READ on tensors and EFFECT calls stop capture.

Each case is a rule: a name (its place in the declared order), a predicate over the ``Call`` and
a handler. This module registers the rules that need only the core; ``pyobj/rules.py`` and
``libs/torch/rules.py`` register the ones that need the object model and torch.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from . import registry
from .annotations import Annotation, Kind, classify
from .calls import _as_op as as_op
from .calls import _meta_call as meta_call
from .calls import _name as qualified_name
from .calls import _native_owner as native_owner
from .calls import _python_call as python_call
from .calls import inline, method_self, pure_call
from .frame import FrameMonitor, Inst
from .programcode import program_frames
from .registry import (
    BUILTIN_HANDLERS,
    CALL_RULES,
    METHOD_HANDLERS,
    TENSOR_METHOD_HANDLERS,
)
from .speculation import read_list, read_value
from .values import Val

__all__ = ["Call", "call_rule", "dispatch_call"]


class Call:
    """One call being modelled.

    ``fn_val``: the callable's shadow as the program holds it. ``fn``: the callable the rules
    model, which differs from ``fn_val.obj`` once a rule has unbound a method. ``pos`` and
    ``kwargs``: the shadow arguments (a bound ``self`` made explicit by a rule is ``pos[0]``).
    ``ann`` is the annotation of ``fn``, computed once when a rule first asks.
    """

    __slots__ = ("_ann", "fn", "fn_val", "kwargs", "pos")

    def __init__(self, fn_val: Val, fn: Any, pos: list[Val], kwargs: dict[str, Val]) -> None:
        self.fn_val = fn_val
        self.fn = fn
        self.pos = pos
        self.kwargs = kwargs
        self._ann: Annotation | None = None

    @property
    def ann(self) -> Annotation:
        if self._ann is None:
            self._ann = classify(self.fn)
        return self._ann

    def with_args(self, fn: Any, pos: list[Val]) -> Call:
        """The same call of ``fn_val``, modelled as ``fn(*pos)``, for the rules after this one."""
        return Call(self.fn_val, fn, pos, self.kwargs)

    def __repr__(self) -> str:
        return f"Call({qualified_name(self.fn)}, {len(self.pos)} args, {sorted(self.kwargs)})"


CallHandler = Any  # Callable[[FrameMonitor, Inst, Call], Call | None]


def call_rule(name: str, applies: Any) -> Any:
    """Register the decorated handler as the call rule ``name``.

    ``applies(call)`` decides whether the rule handles the call. The handler returns None when
    it modelled the call, or a ``Call`` for the rules after it to go on with.
    """
    return CALL_RULES.register(name, applies)


def dispatch_call(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """Model ``fn(*pos, **kwargs)`` at a CALL instruction: the first rule that applies."""
    call = Call(fn_val, fn_val.obj, pos, kwargs)
    for rule in CALL_RULES:
        if rule.applies(call):
            following = rule.handle(m, inst, call)
            if following is None:
                return
            call = following
    raise m.unsupported(f"no call rule for {qualified_name(call.fn)}")  # pragma: no cover


# ---------------------------------------------------------------------- classes and builtins
@call_rule("exception class", lambda c: isinstance(c.fn, type) and issubclass(c.fn, BaseException))
def _exception_class(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    p = pure_call(m, inst, c.pos, c.kwargs)
    # (an exception class of the program's with a Python __init__ or __new__ would run it
    # natively, unseen: a break)
    p.calls_back = program_frames(also=p.calls_back)


def _builtin_handler(c: Call) -> Any:
    special = BUILTIN_HANDLERS.get(id(c.fn))
    return special is not None and special[0] is c.fn


@call_rule("builtin", _builtin_handler)
def _builtin(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    BUILTIN_HANDLERS[id(c.fn)][1](m, inst, c.pos, c.kwargs)


# ---------------------------------------------------------------------- bound methods
@call_rule("bound method", lambda c: type(c.fn) is types.MethodType)
def _bound_method(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """Annotated as a whole (``dist.sample``), or unbound: ``f(self, *args)`` dispatched anew."""
    early = c.ann
    if early.kind in (Kind.VALUE_READ, Kind.EFFECT):
        raise m.unsupported(early.reason or f"{qualified_name(c.fn)} is dynamic")
    if early.kind is Kind.AS_OP:
        m.cap.observe_identity(c.fn_val)
        as_op(m, inst, c.fn, early, c.pos, c.kwargs)
        return
    self_val = method_self(m, c.fn_val)
    func = m.cap.known(c.fn.__func__)  # (a function the run made: its shadow, closure and all)
    func = func if func is not None else m.cap.const(c.fn.__func__)
    dispatch_call(m, inst, func, [self_val, *c.pos], c.kwargs)


def _bound_tensor_method(c: Call) -> bool:
    return isinstance(c.fn, types.BuiltinMethodType) and isinstance(c.fn.__self__, torch.Tensor)


@call_rule("tensor method self", _bound_tensor_method)
def _tensor_method_self(m: FrameMonitor, inst: Inst, c: Call) -> Call:
    """``x.add(y)``: the tensor becomes the first argument; the rules below model the call."""
    return c.with_args(c.fn, [method_self(m, c.fn_val), *c.pos])


# ---------------------------------------------------------------------- by annotation
@call_rule(
    "tensor method handler",
    lambda c: c.ann.kind is Kind.AS_OP and c.ann.method in TENSOR_METHOD_HANDLERS,
)
def _tensor_method_handler(m: FrameMonitor, inst: Inst, c: Call) -> None:
    method = c.ann.method
    assert method is not None
    TENSOR_METHOD_HANDLERS[method](m, inst, c.pos, c.kwargs)  # x.type(T), x.new(...)


@call_rule("graph operator", lambda c: c.ann.kind is Kind.AS_OP)
def _graph_operator(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    as_op(m, inst, c.fn, c.ann, c.pos, c.kwargs)


@call_rule("shape read", lambda c: c.ann.kind is Kind.META)
def _shape_read(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    meta_call(m, inst, c.pos, c.kwargs, getattr(c.fn, "__name__", ""))


@call_rule("pure", lambda c: c.ann.kind is Kind.PURE)
def _pure(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    pure_call(m, inst, c.pos, c.kwargs)


_SCALAR_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__"})


def _scalar_read(c: Call) -> bool:
    """``t.item()`` and the like: one tensor's value as a Python number (see speculation)."""
    return (
        c.ann.kind is Kind.VALUE_READ
        and getattr(c.fn, "__name__", None) in _SCALAR_READS
        and len(c.pos) == 1
        and not c.kwargs
        and isinstance(c.pos[0].obj, torch.Tensor)
    )


@call_rule("tensor value read", _scalar_read)
def _tensor_value_read(m: FrameMonitor, inst: Inst, c: Call) -> None:
    cap, fn, pos = m.cap, c.fn, c.pos
    reason = c.ann.reason or f"{qualified_name(fn)} reads a tensor's value"
    read = read_list if fn.__name__ == "tolist" else read_value
    m.expect_outputs(inst, 1, lambda real: [read(cap, pos[0], real[0], reason)])


def _array_read(c: Call) -> bool:
    """``t.numpy()``: an ndarray over the tensor's values (see libs.numpy.tensorarrays)."""
    return (
        c.ann.kind is Kind.VALUE_READ
        and getattr(c.fn, "__name__", None) == "numpy"
        and len(c.pos) == 1
        and isinstance(c.pos[0].obj, torch.Tensor)
    )


@call_rule("tensor to ndarray", _array_read)
def _tensor_to_array(m: FrameMonitor, inst: Inst, c: Call) -> None:
    for v in c.kwargs.values():
        m.cap.observe(v)  # force=...
    registry.ARRAY_OF_TENSOR.impl(m, inst, c.pos[0], "Tensor.numpy")


@call_rule("dynamic", lambda c: c.ann.kind in (Kind.VALUE_READ, Kind.EFFECT))
def _dynamic(m: FrameMonitor, inst: Inst, c: Call) -> None:
    raise m.unsupported(c.ann.reason or f"{qualified_name(c.fn)} is dynamic")


# ---------------------------------------------------------------------- Python code
@call_rule("python function", lambda c: isinstance(c.fn, types.FunctionType))
def _python_function(m: FrameMonitor, inst: Inst, c: Call) -> None:
    m.cap.observe_identity(c.fn_val)
    inline(m, inst, c.fn_val, c.pos, c.kwargs)


def _is_compiled_callable(obj: Any) -> bool:
    """A ``magpy.compile`` wrapper (it keeps the callable it compiles in ``_magpy_original``)."""
    try:
        return "_magpy_original" in vars(obj) or "_magpy_original" in getattr(obj, "__dict__", {})
    except TypeError:  # no __dict__
        return False


@call_rule(
    "compiled callable",
    lambda c: isinstance(c.fn, type) is False and _is_compiled_callable(c.fn),
)
def _compiled_callable(m: FrameMonitor, inst: Inst, c: Call) -> None:
    # another magpy.compile'd callable: it runs natively, through its own cache
    raise m.unsupported(f"call to the compiled {qualified_name(c.fn)} (runs through its own cache)")


@call_rule(
    "python __call__",
    lambda c: not isinstance(c.fn, type) and python_call(c.fn) is not None,
)
def _python_dunder_call(m: FrameMonitor, inst: Inst, c: Call) -> None:
    # an instance of a class whose ``__call__`` is Python (diffusers' attention processors):
    # follow ``type(fn).__call__(fn, ...)``; the type is guarded
    m.cap.observe_type(c.fn_val)
    call = python_call(c.fn)
    inline(m, inst, m.cap.const(call), [c.fn_val, *c.pos], c.kwargs)


@call_rule("native method", lambda c: True)
def _native_method(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """A native method (``list.append``, ``super().__setitem__``): METHOD_HANDLERS by owner."""
    fn, pos = c.fn, c.pos
    owner = getattr(fn, "__objclass__", None)
    if type(fn) is types.MethodWrapperType:  # super().__setitem__: bound, owner known
        pos = [method_self(m, c.fn_val), *pos]
    elif owner is None and isinstance(fn, types.BuiltinMethodType):
        owner = native_owner(fn)
        pos = [method_self(m, c.fn_val), *pos]
    handler = METHOD_HANDLERS.get((owner, getattr(fn, "__name__", None)))
    if handler is None:
        raise m.unsupported(f"call to {qualified_name(fn)}: native code without an annotation")
    handler(m, inst, pos, c.kwargs)
