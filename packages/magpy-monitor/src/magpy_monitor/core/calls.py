"""Calls, attribute reads and subscripts: how the monitor decides what a call means.

Dynamic detection follows the paper's section 5.3.1: unannotated Python code is inlined (the
callee frame is monitored with its arguments bound to the caller's shadow values); AS_OP calls
become graph nodes; PURE native calls run natively and their results become constants guarded by
their inputs; unannotated native code, VALUE_READ on tensors and EFFECT calls stop capture.
"""

from __future__ import annotations

import collections
import types
from typing import Any, cast

import torch

from magpy_refgraph import Attr, Const, Item

from .annotations import Annotation, Kind, classify, tensor_attr_kind
from .capture import FROZEN_MODULE_ROOTS, is_value_type
from .frame import CellBox, FrameMonitor, Inst, initial_fast
from .registry import FUNCTION_APPLY_MODELS, TENSOR_METHOD_HANDLERS
from .speculation import read_list, read_value, truth_of_tensor
from .values import UNBOUND, Val, plain_container

__all__ = ["dispatch_call", "inline", "load_attr", "method_self", "subscr", "truthiness"]

CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR = 0x20, 0x80, 0x100, 0x200
_FUNCTION_APPLY = cast(Any, torch.autograd.Function.apply).__func__
# ``MyFn.apply(...)`` of autograd Functions whose forward pass is modelled (``_checkpoint``);
# any other Function is one node of the graph
_MODULE_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)


def dispatch_call(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """Model ``fn(*pos, **kwargs)`` at a CALL instruction."""
    from ..bytecode.exceptions import GRAD_MODE_CLASSES, grad_context, grad_exit
    from ..libs.torch.tensorctors import forward_call, forwards
    from ..pyobj.builtins import BUILTIN_HANDLERS, METHOD_HANDLERS
    from ..pyobj.contexts import context_exit, is_python_context_class
    from ..pyobj.instances import construct_object, is_plain_class, python_meta_call
    from ..pyobj.instances import lookup as vars_lookup

    fn = fn_val.obj
    cap = m.cap
    if isinstance(fn_val.extra, dict) and "grad_exit" in fn_val.extra:
        grad_exit(m, inst, fn_val, pos)
        return
    if context_exit(m, inst, fn_val, pos):
        return
    if any(fn is c for c in GRAD_MODE_CLASSES):  # (`in` would run a user class's __eq__)
        grad_context(m, inst, fn, pos, kwargs)
        return
    if isinstance(fn, type) and issubclass(fn, BaseException):
        pure_call(m, inst, pos, kwargs)
        return
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        # a layer built inside forward (torch.nn's, or a library's stateless activation): a
        # constant of the record if it holds no state; the mock never returns it
        from ..libs.torch.modctor import construct_module

        construct_module(m, inst, fn, pos, kwargs)
        return
    from ..pyobj.objects import (
        construct,
        construct_namedtuple,
        follow_tuple_new,
        is_namedtuple_class,
        is_namedtuple_replace,
        is_replayable_class,
        namedtuple_replace,
        python_tuple_new,
    )

    if is_replayable_class(fn):
        construct(m, inst, fn_val, pos, kwargs)
        return
    if is_namedtuple_class(fn):
        construct_namedtuple(m, inst, fn_val, pos, kwargs)
        return
    if is_namedtuple_replace(fn):
        cap.observe_identity(fn_val)
        namedtuple_replace(m, inst, pos, kwargs)  # nt._replace(x=...): native map(kwds.pop, ...)
        return
    if python_tuple_new(fn) is not None:
        follow_tuple_new(m, inst, fn_val, pos, kwargs)  # PackedSequence(data, batch_sizes)
        return
    special = BUILTIN_HANDLERS.get(id(fn))
    if special is not None and special[0] is fn:
        cap.observe_identity(fn_val)
        special[1](m, inst, pos, kwargs)
        return
    if isinstance(fn, type) and (meta_call := python_meta_call(fn)) is not None:
        cap.observe_identity(fn_val)  # a metaclass's Python __call__ (a registry, a singleton)
        inline(m, inst, cap.const(meta_call), [fn_val, *pos], kwargs)
        return
    if isinstance(fn, type) and (is_python_context_class(fn) or is_plain_class(fn)):
        construct_object(m, inst, fn_val, pos, kwargs)  # `with Timer():`, `ModelOutput()`
        return
    if (
        isinstance(fn, torch.nn.Module)
        and isinstance(call := vars_lookup(type(fn), "__call__"), types.FunctionType)
        and call is not torch.nn.Module.__call__
    ):
        cap.observe_type(fn_val)  # a module class with its own __call__ (CartoonGAN's norm)
        inline(m, inst, cap.const(call), [fn_val, *pos], kwargs)
        return
    if isinstance(fn, torch.nn.Module):
        from ..libs.torch.hooks import module_call

        module_call(m, inst, fn_val, pos, kwargs)
        return
    if type(fn) is types.MethodType and _modelled_function(fn.__self__):
        pos, fn = [method_self(m, fn_val), *pos], fn.__func__  # MyFn.apply(...), bound
    if fn is _FUNCTION_APPLY and pos and _modelled_function(pos[0].obj):
        cap.observe_identity(pos[0])  # an autograd Function whose forward is modelled
        FUNCTION_APPLY_MODELS[pos[0].obj](m, inst, pos[1:], kwargs)
        return
    if type(fn) is types.MethodType:
        early = classify(fn)
        if early.kind in (Kind.VALUE_READ, Kind.EFFECT):
            raise m.unsupported(early.reason or f"{_name(fn)} is dynamic")
        if early.kind is Kind.AS_OP:
            cap.observe_identity(fn_val)
            _as_op(m, inst, fn, early, pos, kwargs)
            return
        self_val = method_self(m, fn_val)
        dispatch_call(m, inst, cap.const(fn.__func__), [self_val, *pos], kwargs)
        return
    if fn is _FUNCTION_APPLY and pos and isinstance(pos[0].obj, type):
        # MyFn.apply(x): PRECALL unbound the classmethod; record the bound call as one node
        bound = cast(Any, pos[0].obj).apply
        _as_op(m, inst, bound, classify(bound), pos[1:], kwargs)
        return
    if isinstance(fn, types.BuiltinMethodType) and isinstance(fn.__self__, torch.Tensor):
        pos = [method_self(m, fn_val), *pos]
    ann = classify(fn)
    if ann.kind is Kind.AS_OP and ann.method in TENSOR_METHOD_HANDLERS:
        TENSOR_METHOD_HANDLERS[ann.method](m, inst, pos, kwargs)  # x.type(T), x.new(...)
    elif ann.kind is Kind.AS_OP:
        cap.observe_identity(fn_val)
        _as_op(m, inst, fn, ann, pos, kwargs)
    elif ann.kind is Kind.META:
        _meta_call(m, inst, pos, kwargs, getattr(fn, "__name__", ""))
    elif ann.kind is Kind.PURE:
        cap.observe_identity(fn_val)
        pure_call(m, inst, pos, kwargs)
    elif ann.kind is Kind.VALUE_READ and _scalar_read(fn, pos, kwargs):
        reason = ann.reason or f"{_name(fn)} reads a tensor's value"
        read = read_list if fn.__name__ == "tolist" else read_value
        m.expect_outputs(inst, 1, lambda real: [read(cap, pos[0], real[0], reason)])
    elif ann.kind in (Kind.VALUE_READ, Kind.EFFECT):
        raise m.unsupported(ann.reason or f"{_name(fn)} is dynamic")
    elif isinstance(fn, types.FunctionType) and _opaque_forward(fn, pos):
        from ..pyobj.special import opaque_module_call

        cap.observe_identity(fn_val)  # super().forward(x) in a subclass of nn.LSTM...
        opaque_module_call(m, inst, pos[0], pos[1:], kwargs, forward=fn)
    elif isinstance(fn, types.FunctionType):
        cap.observe_identity(fn_val)
        inline(m, inst, fn_val, pos, kwargs)
    elif forwards(fn):
        forward_call(m, inst, fn_val, pos, kwargs)  # functools.partial, a scripted function
    elif isinstance(fn, type) is False and _is_compiled_callable(fn):
        # another magpy.compile'd callable: it runs natively, through its own cache
        raise m.unsupported(f"call to the compiled {_name(fn)} (runs through its own cache)")
    elif not isinstance(fn, type) and (call := _python_call(fn)) is not None:
        # an instance of a class whose ``__call__`` is Python (diffusers' attention
        # processors): follow ``type(fn).__call__(fn, ...)``; the type is guarded
        cap.observe_type(fn_val)
        inline(m, inst, cap.const(call), [fn_val, *pos], kwargs)
    else:
        owner = getattr(fn, "__objclass__", None)
        if type(fn) is types.MethodWrapperType:  # super().__setitem__: bound, owner known
            pos = [method_self(m, fn_val), *pos]
        elif owner is None and isinstance(fn, types.BuiltinMethodType):
            owner = _native_owner(fn)
            pos = [method_self(m, fn_val), *pos]
        handler = METHOD_HANDLERS.get((owner, getattr(fn, "__name__", None)))
        if handler is None:
            raise m.unsupported(f"call to {_name(fn)}: native code without an annotation")
        handler(m, inst, pos, kwargs)


def _opaque_forward(fn: Any, pos: list[Val]) -> bool:
    """``fn`` is the forward of an RNN (or another module recorded as one node), called on a
    module from outside without hooks of its own."""
    from ..pyobj.special import OPAQUE_FORWARDS

    if type(fn) is not types.FunctionType or fn not in OPAQUE_FORWARDS:  # (no user __hash__)
        return False
    if not pos or not pos[0].external:
        return False
    mod = pos[0].obj
    return isinstance(mod, torch.nn.Module) and not (mod._forward_hooks or mod._forward_pre_hooks)


def _modelled_function(cls: Any) -> bool:
    return isinstance(cls, type) and cls in FUNCTION_APPLY_MODELS


def _is_compiled_callable(obj: Any) -> bool:
    """A ``magpy.compile`` wrapper (it keeps the callable it compiles in ``_magpy_original``)."""
    try:
        return "_magpy_original" in vars(obj) or "_magpy_original" in getattr(obj, "__dict__", {})
    except TypeError:  # no __dict__
        return False


def _python_call(obj: Any) -> types.FunctionType | None:
    """The Python function ``type(obj).__call__`` when it is one (found without running
    descriptors), else None."""
    for cls in type(obj).__mro__:
        call = vars(cls).get("__call__")
        if call is not None:
            return call if isinstance(call, types.FunctionType) else None
    return None


def _native_owner(fn: Any) -> Any:
    """The class that defines bound native method ``fn``: ``dict`` for ``dict.get`` bound to a
    dict subclass (``super().get``), so the builtin's handler models it."""
    self, name = fn.__self__, fn.__name__
    for cls in type(self).__mro__:
        desc = vars(cls).get(name)
        if desc is None or isinstance(desc, types.FunctionType) or not hasattr(desc, "__get__"):
            continue
        try:
            if desc.__get__(self, type(self)) == fn:
                return cls
        except Exception:  # an exotic descriptor: not this one
            continue
    return type(self)


def _name(fn: Any) -> str:
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{qual}" if module else str(qual)


def method_self(m: FrameMonitor, fn_val: Val) -> Val:
    """The shadow of a bound method's ``__self__``."""
    if isinstance(fn_val.extra, dict) and "self" in fn_val.extra:
        self_val: Val = fn_val.extra["self"]
        return self_val
    owner = fn_val.obj.__self__
    known = m.cap.known(owner)
    if known is not None:
        return known
    if fn_val.external:
        return m.cap.child(fn_val, Attr("__self__"), owner)
    if isinstance(owner, type | types.ModuleType):
        return m.cap.const(owner)
    raise m.unsupported(f"bound method of an object of unknown origin ({type(owner).__name__})")


# ---------------------------------------------------------------------- operators in the graph
def _callable_target(fn: Any) -> Any:
    """An fx-friendly target: fx names call targets by qualified name, bound methods have none."""
    if not isinstance(fn, types.MethodType):
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    owner = getattr(fn.__self__, "__name__", type(fn.__self__).__name__)
    call.__name__ = call.__qualname__ = f"{owner}_{fn.__name__}".replace(".", "_")
    return call


def _as_op(
    m: FrameMonitor, inst: Inst, fn: Any, ann: Annotation, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    fn = _callable_target(fn)
    cap = m.cap

    def make(real: list[Any]) -> list[Val]:
        args = tuple(cap.to_arg(a) for a in pos)
        kw = {k: cap.to_arg(v) for k, v in kwargs.items()}
        if ann.method is not None:
            node = cap.rec.call("call_method", ann.method, args, kw)
        else:
            node = cap.rec.call("call_function", fn, args, kw)
        target = None
        if ann.inplace and len(pos) > ann.inplace[0]:
            cand = pos[ann.inplace[0]]
            if isinstance(cand.obj, torch.Tensor):
                target = cand
                node.meta["effect"] = True
        if target is not None and real[0] is not target.obj:
            cap.mutate_tensor(target, node)
            return [cap.op_result(real[0], node)]
        return [cap.op_result(real[0], node, inplace_of=target)]

    m.expect_outputs(inst, 1, make)


def _meta_call(
    m: FrameMonitor, inst: Inst, pos: list[Val], kwargs: dict[str, Val], name: str = ""
) -> None:
    from .shapes import SIZE_FREE_READS

    if (
        pos
        and isinstance(pos[0].obj, torch.Tensor)
        and _symbolic_size_call(m, inst, name, pos, kwargs)
    ):
        return
    for v in (*pos, *kwargs.values()):
        if isinstance(v.obj, torch.Tensor):
            m.cap.guard_meta(v, sizes=name not in SIZE_FREE_READS)
        else:
            m.cap.observe(v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], const=True)])


def _symbolic_size_call(
    m: FrameMonitor, inst: Inst, name: str, pos: list[Val], kwargs: dict[str, Val]
) -> bool:
    """``x.size()``, ``x.size(d)``, ``x.numel()``, ``len(x)`` of a tensor with symbolic sizes."""
    from .shapes import numel_val, size_vals

    cap = m.cap
    base = pos[0]
    args = [*pos[1:], *kwargs.values()]
    if name in ("numel", "nelement") and not args:
        n = numel_val(cap, base)
        if n is None:
            return False
        m.expect_outputs(inst, 1, lambda real: [n])
        return True
    if name not in ("size", "__len__") or len(args) > 1 or (kwargs and "dim" not in kwargs):
        return False
    if args and type(args[0].obj) is not int:
        return False
    for a in args:
        cap.observe(a)
    dims = size_vals(cap, base)
    if dims is None:
        return False
    if name == "__len__":
        m.expect_outputs(inst, 1, lambda real: [dims[0]])
    elif args:
        d = args[0].obj
        m.expect_outputs(inst, 1, lambda real: [dims[d]])
    else:
        m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=dims)])
    return True


def pure_call(m: FrameMonitor, inst: Inst, pos: list[Val], kwargs: dict[str, Val]) -> None:
    """A pure native call: its inputs are guarded, its result is a constant."""
    from ..libs.numpy.ndarrays import outside_array

    for v in (*pos, *kwargs.values()):
        if isinstance(v.obj, torch.Tensor):
            m.cap.guard_meta(v)
        else:
            opaque = _opaque_input(v)
            if opaque is None and not isinstance(array := outside_array(m.cap, v), torch.Tensor):
                opaque = array  # a constant array not made by the run (a function's default)
            if opaque is not None:
                # guarding it checks only its type: a result computed from its contents (a
                # numpy array updated in place) must not become a constant of the record
                raise m.unsupported(
                    f"pure call over a {type(opaque).__name__} read from outside "
                    "(its contents are not guarded)"
                )
            m.cap.observe(v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], const=True)])


_BY_IDENTITY = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    types.CodeType,
    type,
)


def _opaque_input(v: Val) -> Any:
    """An object from outside, inside ``v``, that guarding would check by type alone."""
    if v.const:
        return None
    if isinstance(v.items, list):
        return next((o for o in map(_opaque_input, v.items) if o is not None), None)
    if isinstance(v.items, dict):
        for k, x in v.items.values():
            o = _opaque_input(k) if _opaque_input(k) is not None else _opaque_input(x)
            if o is not None:
                return o
        return None
    return opaque_object(v.obj) if v.external else None


def opaque_object(obj: Any) -> Any:
    """An object in ``obj`` (itself, or inside a plain container) that ``observe()`` would
    guard by type alone, so that a value computed from its contents could go stale; None if
    there is none."""
    if obj is None or is_value_type(obj) or isinstance(obj, (torch.Tensor, *_BY_IDENTITY)):
        return None
    kind = plain_container(obj)
    if kind is dict:
        return next(
            (o for kv in obj.items() for o in map(opaque_object, kv) if o is not None), None
        )
    if kind is not None:
        return next((o for o in map(opaque_object, obj) if o is not None), None)
    return obj


# ---------------------------------------------------------------------- inlining
def inline(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """Follow a Python function into its frame, with arguments bound to shadow values."""
    cap = m.cap
    func = fn_val.obj
    code = func.__code__
    if code.co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR):
        raise m.unsupported(f"coroutine {func.__qualname__}")
    bound = bind_args(m, fn_val, pos, kwargs)
    closure = _closure(m, fn_val)
    if code.co_flags & CO_GENERATOR:

        def make_gen(real: list[Any]) -> list[Val]:
            gen = real[0]
            v = cap.new(gen, extra={"gen": (bound, closure), "monitor": None})
            cap.gen_frames[id(gen.gi_frame)] = v
            return [v]

        m.expect_outputs(inst, 1, make_gen)
        return

    def make(real: list[Any]) -> list[Val]:
        if p.result is None:
            raise m.unsupported(f"{func.__qualname__} was called but its frame was not seen")
        return [p.result]

    p = m.expect_outputs(inst, 1, make, opaque=True)

    def start(frame: types.FrameType) -> FrameMonitor:
        mon = FrameMonitor(cap, frame, initial_fast(cap, frame, _fresh(frame, bound), closure))
        mon.func = func
        return mon

    p.expect = (code, start)


def _fresh(frame: types.FrameType, bound: dict[str, Val]) -> dict[str, Val]:
    """Give ``*args``/``**kwargs`` shadows the real objects CPython built for the frame."""
    for name, v in bound.items():
        if isinstance(v.extra, dict) and v.extra.get("fresh"):
            v.obj = frame.f_locals[name]
            v.extra = None
    return bound


def _closure(m: FrameMonitor, fn_val: Val) -> list[Val] | None:
    func = fn_val.obj
    if not func.__closure__:
        return None
    if isinstance(fn_val.extra, dict) and fn_val.extra.get("closure") is not None:
        cells: list[Val] = fn_val.extra["closure"]
        return cells
    out = []
    for name, cell in zip(func.__code__.co_freevars, func.__closure__, strict=True):
        known = m.cap.known(cell)
        out.append(
            known if known is not None else m.cap.new(cell, extra=CellBox(UNBOUND, name, func))
        )
    return out


def bind_args(
    m: FrameMonitor, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> dict[str, Val]:
    """Bind shadow arguments to ``func``'s parameters (like CPython's frame setup)."""
    cap = m.cap
    func = fn_val.obj
    code = func.__code__
    names = code.co_varnames
    argc, kwonly, posonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    has_varargs, has_varkw = bool(code.co_flags & 0x04), bool(code.co_flags & 0x08)
    positional = names[:argc]
    bound: dict[str, Val] = dict(zip(positional, pos[:argc], strict=False))
    extra_pos = pos[argc:]
    if extra_pos and not has_varargs:
        raise m.unsupported(f"too many arguments for {func.__qualname__}")
    extra_kw: dict[str, Val] = {}
    kwonly_names = names[argc : argc + kwonly]
    for k, v in kwargs.items():
        if (k in positional[posonly:] or k in kwonly_names) and k not in bound:
            bound[k] = v
        elif has_varkw:
            extra_kw[k] = v
        else:
            raise m.unsupported(f"bad keyword argument {k!r} for {func.__qualname__}")
    defaults = _defaults(m, fn_val)
    first_default = argc - len(defaults)
    for i, name in enumerate(positional):
        if name not in bound:
            if i < first_default:
                raise m.unsupported(f"missing argument {name!r} for {func.__qualname__}")
            bound[name] = defaults[i - first_default]
    kwdefaults = func.__kwdefaults__ or {}
    for name in kwonly_names:
        if name not in bound:
            if name not in kwdefaults:
                raise m.unsupported(f"missing argument {name!r} for {func.__qualname__}")
            bound[name] = cap.const(kwdefaults[name])
    idx = argc + kwonly
    if has_varargs:
        bound[names[idx]] = Val(
            tuple(v.obj for v in extra_pos), items=list(extra_pos), extra={"fresh": True}
        )
        idx += 1
    if has_varkw:
        bound[names[idx]] = Val(
            {}, items={k: (cap.const(k), v) for k, v in extra_kw.items()}, extra={"fresh": True}
        )
    return bound


def _defaults(m: FrameMonitor, fn_val: Val) -> list[Val]:
    if isinstance(fn_val.extra, dict) and fn_val.extra.get("defaults") is not None:
        d: Val = fn_val.extra["defaults"]
        if isinstance(d.items, list):
            return list(d.items)
        return [m.cap.const(x) for x in d.obj]
    return [m.cap.const(x) for x in (fn_val.obj.__defaults__ or ())]


# ---------------------------------------------------------------------- attributes, items, truth
def load_attr(m: FrameMonitor, base: Val, name: str, real: Any) -> Val:
    """The shadow of ``base.name`` whose real value is ``real``."""
    cap = m.cap
    obj = base.obj
    if isinstance(obj, torch.Tensor):
        kind = tensor_attr_kind(name)
        if kind is Kind.META:
            from .shapes import SIZE_FREE_READS, size_vals

            if name == "shape":
                dims = size_vals(cap, base)
                if dims is not None:
                    return cap.new(real, items=dims)
            cap.guard_meta(base, sizes=name not in SIZE_FREE_READS)
            return cap.new(real, const=True)
        if kind is Kind.AS_OP:
            node = cap.rec.call("call_function", getattr, (cap.tensor_node(base), name), {})
            return cap.op_result(real, node)
        if callable(real) and getattr(real, "__self__", None) is obj:
            return Val(real, extra={"self": base})
        if name == "volatile" and real is False:  # removed: always False, with a warning
            from ..libs.stdlib.warn import record_warning

            record_warning(m, _VOLATILE_REMOVED, UserWarning, m.frame)
            return cap.const(False)
        raise m.unsupported(f"tensor attribute {name!r} is not supported")
    if isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] in FROZEN_MODULE_ROOTS:
        cap.observe_identity(base)
        return cap.new(real, const=True)
    if base.attrs is not None and name in base.attrs:
        found = base.attrs[name]
        if found.obj is not real and not (is_value_type(real) and found.obj == real):
            raise m.unsupported(f"attribute {name!r} changed where the monitor did not see it")
        return found
    if isinstance(base.extra, dict) and "super" in base.extra:
        from ..pyobj.special import super_attr

        return super_attr(m, base, name, real)
    if base.const:
        from ..libs.numpy.ndarrays import array_attr, is_array

        if is_array(obj):
            return array_attr(m, base, name, real)  # a.T, a.shape of an array made by the run
        if (
            isinstance(obj, type)
            and is_value_type(real)
            and any(name in vars(k) for k in obj.__mro__)
        ):
            # a setting kept on a library class (``Distribution._validate_args``, changed by
            # ``set_default_validate_args``): guarded where it lives, not frozen
            return cap.child(cap.root(Const(obj), obj), Attr(name), real)
        return cap.new(real, const=True)
    if base.external:
        cap.observe_type(base)
        if isinstance(obj, type):
            cap.observe_identity(base)  # class attributes depend on which class this is
        if (
            type(real) is types.MethodType
            and real.__self__ is obj
            and name not in getattr(obj, "__dict__", {})
        ):
            # a method of the (guarded) type, bound anew on every read: no reference to record
            return Val(real, extra={"self": base})
        if type(real) is types.MethodType and isinstance(obj, type) and real.__self__ is obj:
            return Val(real, extra={"self": base})  # a classmethod read from a guarded class
        return cap.child(base, Attr(name), real)
    if base.expr is not None or is_value_type(obj):
        return Val(real, expr=(getattr, (base, cap.const(name))))
    fields = getattr(type(obj), "_fields", None) or getattr(type(obj), "n_fields", None)
    if isinstance(base.items, list) and isinstance(fields, tuple) and name in fields:
        item: Val = base.items[fields.index(name)]
        return item
    if type(real) in (types.MethodType, types.BuiltinMethodType) and real.__self__ is obj:
        return Val(real, extra={"self": base})  # (``kwds.pop`` of a dict the run built)
    if type(real) is types.MethodType and real.__self__ is type(obj) and not base.external:
        # a classmethod read through an object the run built (``qt._make``): bound to its class
        return Val(real, extra={"self": cap.const(type(obj))})
    known = cap.known(real)
    if known is not None:
        return known
    if is_value_type(real) and type(obj) in _STRUCTSEQ_LIKE:
        return cap.new(real, const=True)
    from ..pyobj.objects import ctor_of, item_shadow

    if ctor_of(base) is not None:
        return item_shadow(m, real, f"{type(obj).__name__}.{name}")
    from ..pyobj.instances import is_pyobj, lookup

    if is_pyobj(base) and name not in vars(obj) and lookup(type(obj), name) is real:
        return load_attr(m, base.extra["pyobj"], name, real)  # a class attribute
    if is_pyobj(base) and name == "__dict__":
        from ..pyobj.instances import instance_dict

        return instance_dict(m, base, real)
    if isinstance(base.extra, dict) and "made_class" in base.extra:
        from ..pyobj.classes import class_attr

        return class_attr(m, base, name, real)
    raise m.unsupported(f"attribute {name!r} of a {type(obj).__name__} created during the run")


_STRUCTSEQ_LIKE: tuple[type, ...] = (torch.finfo, torch.iinfo)
_VOLATILE_REMOVED = "volatile was removed (Variable.volatile is always False)"


def subscr(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """Model ``container[key]`` (BINARY_SUBSCR)."""
    cap = m.cap
    obj = container.obj
    if isinstance(obj, torch.Tensor):
        import operator

        from ..bytecode.handlers import _tensor_op  # shared helper

        _tensor_op(m, inst, operator.getitem, [container, key])
        return
    from ..pyobj.instances import is_pyobj
    from ..pyobj.objects import ctor_of

    getitem = getattr(type(obj), "__getitem__", None)
    replayed = ctor_of(container) is not None or is_pyobj(container)
    if replayed and isinstance(getitem, types.FunctionType):
        inline(m, inst, cap.const(getitem), [container, key], {})  # ModelOutput.__getitem__
        return
    if isinstance(container.items, list) and (
        type(obj) in (list, tuple) or isinstance(obj, (tuple, *_MODULE_CONTAINERS))
    ):
        cap.observe(key)
        k = key.obj
        if isinstance(k, slice):
            items = container.items[k]
            m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=items)])
        else:
            m.push(container.items[k])
        return
    if isinstance(container.items, dict):
        cap.observe(key)
        if key.obj not in container.items:
            from ..pyobj.collections import missing_item

            missing_item(m, inst, container, key)  # defaultdict, Counter; else KeyError
            return
        m.push(container.items[key.obj][1])
        return
    if type(obj) is collections.deque and isinstance(container.items, list):
        cap.observe(key)
        if type(key.obj) is not int or not -len(container.items) <= key.obj < len(container.items):
            raise m.unsupported("deque index that is not an int in range")
        m.push(container.items[key.obj])
        return
    if container.external and (
        type(obj) in (list, tuple, dict, *_DICT_LIKE)
        or isinstance(obj, (*_MODULE_CONTAINERS, torch.nn.ModuleDict, torch.nn.ParameterDict))
    ):
        cap.observe(key)
        cap.observe_type(container)
        if type(obj) in _DICT_LIKE:
            # a defaultdict would insert a missing key even while a guard reads it: its keys
            # are checked first (and a missing key is a break)
            cap.observe_keys(container)
            if key.obj not in obj:
                raise m.unsupported(f"a missing key of a {type(obj).__name__} from outside")
        if isinstance(key.obj, slice):
            if type(obj) not in (list, tuple) and not isinstance(obj, _MODULE_CONTAINERS):
                raise m.unsupported(f"slicing a {type(obj).__name__} from outside")
            # a slice of an entry list/tuple/ModuleList (``self.resnets[1:]``): its length is
            # guarded, each item an entry path; the new container's shadow knows its items
            from ..bytecode.iteration import iter_items

            whole = iter_items(m, container)
            assert whole is not None
            part = whole[key.obj]
            m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=part)])
            return
        m.expect_outputs(inst, 1, lambda real: [cap.child(container, Item(key.obj), real[0])])
        return
    if is_value_type(obj) or container.const or container.expr is not None:
        import operator

        from ..bytecode.handlers import _scalar_op

        _scalar_op(m, inst, operator.getitem, [container, key])
        return
    getitem = getattr(type(obj), "__getitem__", None)
    if isinstance(getitem, types.FunctionType):
        cap.observe_type(container)
        inline(m, inst, cap.const(getitem), [container, key], {})
        return
    raise m.unsupported(f"subscript of a {type(obj).__name__}")


_DICT_LIKE = (collections.OrderedDict, collections.defaultdict, collections.Counter)
_SIZED = (
    list,
    tuple,
    dict,
    set,
    frozenset,
    collections.OrderedDict,
    collections.defaultdict,
    collections.Counter,
    collections.deque,
)


_SCALAR_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__"})


def _scalar_read(fn: Any, pos: list[Val], kwargs: dict[str, Val]) -> bool:
    """``t.item()`` and the like: one tensor's value as a Python number (see _speculation)."""
    return (
        getattr(fn, "__name__", None) in _SCALAR_READS
        and len(pos) == 1
        and not kwargs
        and isinstance(pos[0].obj, torch.Tensor)
    )


def truthiness(m: FrameMonitor, v: Val) -> bool:
    """The program branches on ``bool(v)``: guard what that depends on; return the outcome."""
    cap = m.cap
    obj = v.obj
    if isinstance(obj, torch.Tensor):
        return truth_of_tensor(cap, v, "branch on a tensor's value (data-dependent control flow)")
    if obj is None or is_value_type(obj):
        if not cap.guard_outcome(v):
            cap.observe(v)
    elif type(obj) in _SIZED or isinstance(obj, _MODULE_CONTAINERS):
        if v.external:
            cap.observe_len(v)
        elif type(obj) in (set, frozenset) and isinstance(v.items, list):
            pass  # its size is fixed by the guards on its elements (see _sets)
        elif type(obj) in (list, tuple, dict) and isinstance(v.items, list | dict):
            pass  # built by the run with known items: its length follows the program's path
        else:
            cap.observe(v)
    elif _pyobj_truth(v):
        pass  # an object built in the run, truthy by its known items (or always)
    elif getattr(type(obj), "__bool__", None) is not None:
        raise m.unsupported(f"truth value of a {type(obj).__name__} with __bool__")
    elif hasattr(type(obj), "__len__"):
        raise m.unsupported(f"truth value of a {type(obj).__name__} with __len__")
    else:
        cap.observe_type(v)
    return bool(obj)


def _pyobj_truth(v: Val) -> bool:
    """``bool(v)`` of an object built in the run follows from its shadow: no Python
    ``__bool__``/``__len__``, and its items (if a mapping) are known."""
    from ..pyobj.instances import is_pyobj, lookup

    if not is_pyobj(v):
        return False
    cls = type(v.obj)
    python = (types.FunctionType, types.MethodType)
    if isinstance(lookup(cls, "__bool__"), python) or isinstance(lookup(cls, "__len__"), python):
        return False
    return isinstance(v.items, dict) or not hasattr(cls, "__len__")
