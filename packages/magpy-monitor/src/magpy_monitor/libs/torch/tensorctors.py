"""Legacy tensor constructors, ``nn.Parameter``, tensortype conversions, and callables that
forward to Python code (``torch.jit.script`` functions, ``functools.partial``).

- ``torch.Tensor(data)``/``torch.FloatTensor(data)`` (and the other CPU tensortypes) equal
  ``torch.tensor(data, dtype=<the type's dtype>)`` (of a numpy array made during the run: a
  constant of the graph, see ``_ndarrays``); ``torch.Tensor(3, 4)`` allocates
  uninitialised memory: an ``empty`` node the program must fill completely (``fill_``,
  ``zero_``, ``copy_``...) before anything reads it or it escapes. ``x.new(...)`` is the same
  with ``x``'s dtype and device. A tensor argument (an alias of its storage) is a break.
- ``nn.Parameter(t, requires_grad=False)`` inside a run is ``t.detach()`` while only tensor
  operations consume it; a Parameter that escapes the graph (returned, stored) is a break, as is
  ``requires_grad=True`` (a new autograd leaf).
- ``x.type(T)`` with a tensortype, a dtype or a type name is ``x.to(dtype)`` (on the CPU for a
  tensortype); ``x.type()`` reads metadata only.
- ``torch._C._has_torch_function*`` depend on the types of their arguments only;
  ``torch.jit.isinstance(x, T)`` outside TorchScript is ``isinstance`` with typing-refined
  containers (``List[int]``): a pure function of ``x``'s type and (for containers) contents.
- A scripted function is followed into the Python function it was compiled from (kept on it as
  ``_torchdynamo_inline``, as TorchDynamo does) when its arguments match its TorchScript
  signature; a traced one replays a recorded trace, which the Python function need not match,
  so it is a break. ``functools.partial(f, *a, **k)(*b, **j)`` is followed as
  ``f(*a, *b, **{**k, **j})``.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.jit._state import _jit_caching_layer  # (torch is pinned: this layout holds)

from magpy_refgraph import Attr, Item

from ...bytecode.iteration import iter_items
from ...core import registry
from ...core.annotations import classify
from ...core.calls import _as_op as as_op
from ...core.calls import pure_call
from ...core.dispatch import dispatch_call
from ...core.frame import FrameMonitor, Inst
from ...core.registry import BUILTIN_HANDLERS, TENSOR_METHOD_HANDLERS, BuiltinHandler
from ...core.values import Val
from ...core.valuetypes import is_value_type
from ...pyobj.objects import PartialCall
from ..numpy.ndarrays import array_to_tensor, is_array

__all__ = ["forward_call", "forwards"]

_UNINIT = "a tensor allocated by a legacy constructor escapes before it was filled"


def _tensor_classes() -> list[Any]:
    classes = getattr(torch, "_tensor_classes", None)
    if classes is not None:
        return list(classes)
    return [getattr(torch, n) for n in dir(torch) if n.endswith("Tensor") and n != "Tensor"]


def _type_name(tt: Any) -> str:
    return f"{tt.__module__}.{tt.__name__}"


_TENSORTYPES: dict[str, Any] = {_type_name(tt): tt for tt in _tensor_classes()}


# ---------------------------------------------------------------------- legacy constructors
def _plain_data(obj: Any) -> bool:
    """Nested lists/tuples of Python or numpy numbers (what ``torch.tensor`` reads without
    tensors: ``torch.Tensor([np.exp(-x * x / s) for x in range(n)])``)."""
    if type(obj) in (bool, int, float, complex) or _numpy_number(obj):
        return True
    return type(obj) in (list, tuple) and all(_plain_data(x) for x in obj)


def _numpy_number(obj: Any) -> bool:
    np = sys.modules.get("numpy")  # (numpy is optional: without it there are no such numbers)
    return np is not None and isinstance(obj, np.floating | np.integer | np.bool_)


def _copy_data(arg: Any) -> Any:
    """A private copy of constructor data (the graph must not hold the program's list), with
    numpy numbers as the Python numbers of the same value."""
    if type(arg) in (list, tuple):
        return [_copy_data(x) for x in arg]
    if _numpy_number(arg):
        return arg.item()
    return arg


def _construct(m: FrameMonitor, inst: Inst, args: list[Val], kw: dict[str, Val], what: str) -> None:
    """``<legacy ctor>(*args, device=...)``: data, sizes, or nothing; the result's dtype and
    device are the real result's (fixed by the constructor, the guarded ``self`` of
    ``x.new``)."""
    cap = m.cap
    if set(kw) - {"device"}:
        raise m.unsupported(f"{what} with keyword arguments {sorted(kw)}")
    for v in kw.values():
        cap.observe(v)
    objs = [a.obj for a in args]
    if len(objs) == 1 and isinstance(objs[0], torch.Tensor):
        raise m.unsupported(f"{what} of a tensor (an alias of its storage)")
    if len(objs) == 1 and type(objs[0]) in (list, tuple):
        if not _plain_data(objs[0]):
            raise m.unsupported(f"{what} of data that is not Python numbers")
        data: Any = args[0]
        sizes = None
    elif not objs:
        data, sizes = None, None
    elif len(objs) == 1 and type(objs[0]) is range:
        _range_data(m, inst, args[0], what)
        return
    elif len(objs) == 1 and type(objs[0]) is torch.Size:
        data, sizes = None, args[0]
    elif all(type(o) is int for o in objs):
        data, sizes = None, None
    else:
        raise m.unsupported(f"{what} of a {type(objs[0]).__name__}")

    def make(real: list[Any]) -> list[Val]:
        out = real[0]
        opts = {"dtype": out.dtype, "device": out.device}
        if data is not None or not objs:
            values = _copy_data(cap.to_arg(data)) if data is not None else []
            node = cap.rec.call("call_function", torch.tensor, (values,), opts)
        else:
            shape = cap.to_arg(sizes) if sizes is not None else [cap.to_arg(a) for a in args]
            node = cap.rec.call("call_function", torch.empty, (tuple(shape),), opts)
            node.meta["uninit"] = True
            node.meta["uninit_shape"] = tuple(out.shape)
            node.meta["no_output"] = _UNINIT
        return [cap.op_result(out, node)]

    m.expect_outputs(inst, 1, make)


def _range_data(m: FrameMonitor, inst: Inst, r: Val, what: str) -> None:
    """``torch.LongTensor(range(n))``: the integers of the range, converted to the type's dtype
    as ``torch.tensor`` converts Python ints (an ``arange`` of int64, then ``to``). The bounds
    stay what they are: a dynamic size, a guarded int."""
    cap = m.cap
    if r.expr is not None and r.expr[0] is range:
        bounds = list(r.expr[1])
    else:
        cap.observe(r)
        rng = r.obj
        bounds = [cap.const(rng.start), cap.const(rng.stop), cap.const(rng.step)]
    if len(bounds) == 1:
        bounds = [cap.const(0), *bounds]

    def make(real: list[Any]) -> list[Val]:
        out = real[0]
        if not isinstance(out, torch.Tensor) or out.dim() != 1:
            raise m.unsupported(f"{what} of a range gave a {type(out).__name__}")
        args = tuple(cap.to_arg(b) for b in bounds)
        node = cap.rec.call(
            "call_function", torch.arange, args, {"dtype": torch.int64, "device": out.device}
        )
        if out.dtype != torch.int64:
            node = cap.rec.call("call_method", "to", (node, out.dtype), {})
        return [cap.op_result(out, node)]

    m.expect_outputs(inst, 1, make)


def _legacy_ctor(tt: Any) -> BuiltinHandler:
    name = "torch.Tensor" if tt is torch.Tensor else _type_name(tt)

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if tt is not torch.Tensor and tt.is_cuda:
            raise m.unsupported(f"{name} allocates on a CUDA device")
        if len(pos) == 1 and not kw and is_array(pos[0].obj):
            # torch.FloatTensor(a): shares a's memory if the dtype fits
            array_to_tensor(m, inst, pos[0], [], name, shares=True)
            return
        _construct(m, inst, pos, kw, name)

    return handle


def _register_legacy_ctors() -> None:
    BUILTIN_HANDLERS[id(torch.Tensor)] = (torch.Tensor, _legacy_ctor(torch.Tensor))
    for tt in _TENSORTYPES.values():
        if not tt.is_sparse:
            BUILTIN_HANDLERS[id(tt)] = (tt, _legacy_ctor(tt))


_register_legacy_ctors()


def _tensor_new(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``x.new(...)``: a legacy constructor with ``x``'s dtype and device."""
    m.cap.guard_meta(pos[0], sizes=False)
    _construct(m, inst, pos[1:], kw, "Tensor.new")


TENSOR_METHOD_HANDLERS["new"] = _tensor_new

_SCATTER = torch.Tensor.scatter_


def _tensor_scatter(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``x.scatter_(dim, index, src)``; into a tensor a legacy constructor left uninitialised
    it writes every element when ``index`` is an ``argsort`` along ``dim`` of ``x``'s shape
    (a permutation of each row: Reformer's ``undo_sorted_bucket_idx``), so ``x`` counts as
    filled. The shapes are guarded to stay equal."""
    dst = pos[0]
    if dst.fx is not None and dst.fx.meta.get("uninit") is True and _permutes(m, pos, kw):
        del dst.fx.meta["uninit"]  # (the scatter node, which fills it, replaces it)
    as_op(m, inst, _SCATTER, classify(_SCATTER), pos, kw)


def _permutes(m: FrameMonitor, pos: list[Val], kw: dict[str, Val]) -> bool:
    """``pos[0].scatter_(*pos[1:], **kw)`` writes every element of ``pos[0]``."""
    if len(pos) != 4 or set(kw) or not isinstance(pos[2].obj, torch.Tensor):
        return False
    dst, dim, index = pos[0].obj, pos[1].obj, pos[2]
    node = index.fx
    if type(dim) is not int or node is None or index.obj.shape != dst.shape:
        return False
    is_argsort = (node.op, node.target) in (
        ("call_function", torch.argsort),
        ("call_method", "argsort"),
    )
    if not is_argsort:
        return False
    sort_dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else -1)
    if type(sort_dim) is not int or sort_dim % dst.dim() != dim % dst.dim():
        return False
    m.cap.observe(pos[1])
    m.cap.guard_meta(pos[0])
    m.cap.guard_meta(index)
    return True


TENSOR_METHOD_HANDLERS["scatter_"] = _tensor_scatter


# ---------------------------------------------------------------------- nn.Parameter
def _parameter(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if set(kw) - {"data", "requires_grad"} or len(pos) > 2:
        raise m.unsupported("nn.Parameter() with unusual arguments")
    data = pos[0] if pos else kw.get("data")
    grad = pos[1] if len(pos) > 1 else kw.get("requires_grad")
    if data is None or not isinstance(data.obj, torch.Tensor):
        raise m.unsupported("nn.Parameter() without a tensor")
    if grad is None or grad.obj:
        # a new autograd leaf made on every call: leave it to eager
        raise m.unsupported("nn.Parameter(requires_grad=True) made during the run")
    cap.observe(grad)
    if type(data.obj) not in (torch.Tensor, torch.nn.Parameter):
        raise m.unsupported(f"nn.Parameter() of a {type(data.obj).__name__}")

    def make(real: list[Any]) -> list[Val]:
        node = cap.rec.call("call_method", "detach", (cap.tensor_node(data),), {})
        # the graph holds a plain tensor: the Parameter object itself must never be handed out
        node.meta["no_output"] = "an nn.Parameter made during the run escapes"
        return [cap.op_result(real[0], node)]

    m.expect_outputs(inst, 1, make)


BUILTIN_HANDLERS[id(torch.nn.Parameter)] = (torch.nn.Parameter, _parameter)


# ---------------------------------------------------------------------- Tensor.type
def _target_type(m: FrameMonitor, t: Any) -> tuple[torch.dtype, bool]:
    """``(dtype, to_cpu)`` of a ``Tensor.type`` argument."""
    if isinstance(t, torch.dtype):
        return t, False
    if isinstance(t, str):
        tt = _TENSORTYPES.get(t)
        if tt is None:
            raise m.unsupported(f"Tensor.type({t!r}): unknown tensor type")
        t = tt
    if _type_name(t) not in _TENSORTYPES or _TENSORTYPES[_type_name(t)] is not t:
        raise m.unsupported(f"Tensor.type() of a {type(t).__name__}")
    if t.is_sparse or t.is_cuda:
        raise m.unsupported(f"Tensor.type({_type_name(t)}) changes layout or device")
    return t.dtype, True


def _tensor_type(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    base = pos[0]
    if set(kw) - {"dtype", "non_blocking"} or len(pos) > 3:
        raise m.unsupported("Tensor.type() with unusual arguments")
    cap.guard_meta(base, sizes=False)  # which of dtype/device change decides the result
    target = pos[1] if len(pos) > 1 else kw.get("dtype")
    for v in (*pos[1:], *kw.values()):
        cap.observe(v)
    if target is None or target.obj is None:
        m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], const=True)])
        return
    dtype, to_cpu = _target_type(m, target.obj)

    def make(real: list[Any]) -> list[Val]:
        if real[0] is base.obj:
            return [base]  # already of that type: the tensor itself
        opts: dict[str, Any] = {"dtype": dtype}
        if to_cpu:
            opts["device"] = torch.device("cpu")
        node = cap.rec.call("call_method", "to", (cap.tensor_node(base),), opts)
        return [cap.op_result(real[0], node)]

    m.expect_outputs(inst, 1, make)


TENSOR_METHOD_HANDLERS["type"] = _tensor_type


# ---------------------------------------------------------------------- has_torch_function
def _observe_types(m: FrameMonitor, v: Val) -> None:
    """The program depends on the types of ``v`` (and of its items, for a tuple or list)."""
    cap = m.cap
    obj = v.obj
    if isinstance(obj, torch.Tensor):
        if v.fx is None:
            cap.guard_meta(v, sizes=False)  # (the guard checks the exact class)
        return  # a computed tensor's class follows from the guarded inputs
    if type(obj) in (list, tuple):
        if isinstance(v.items, list):
            items = v.items
        elif v.external and v.node is not None:
            cap.observe_len(v)
            items = [cap.child(v, Item(i), x) for i, x in enumerate(obj)]
        else:
            cap.observe(v)
            return
        for item in items:
            _observe_types(m, item)
        return
    cap.observe_type(v)  # (a value made during the run has a type the program fixed)


def _has_torch_function(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    if kw:
        raise m.unsupported("has_torch_function() with keyword arguments")
    for v in pos:
        _observe_types(m, v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


for _fn in (
    torch._C._has_torch_function,
    torch._C._has_torch_function_unary,
    torch._C._has_torch_function_variadic,
):
    BUILTIN_HANDLERS[id(_fn)] = (_fn, _has_torch_function)


def _jit_isinstance(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``torch.jit.isinstance(x, T)``: guard ``x``'s type (and a container's contents)."""
    if len(pos) != 2 or kw:
        raise m.unsupported("torch.jit.isinstance with unusual arguments")
    target, cls = pos
    m.cap.observe(cls)
    flat = [target]
    if not isinstance(target.obj, torch.Tensor) and not is_value_type(target.obj):
        items = iter_items(m, target) if isinstance(target.obj, list | tuple | dict) else None
        flat = [target, *(items or [])]
    for v in flat:
        if isinstance(v.obj, torch.Tensor):
            m.cap.guard_meta(v)
        elif v.external:
            m.cap.observe_type(v)
        else:
            m.cap.observe(v)
    pure_call(m, inst, [], {})


BUILTIN_HANDLERS[id(torch.jit.isinstance)] = (torch.jit.isinstance, _jit_isinstance)


# ---------------------------------------------------------------------- forwarding callables
Forward = tuple[Val, list[Val], dict[str, Val]]


def forwards(fn: Any) -> bool:
    """``fn`` only wraps another callable (a ``functools.partial``, a scripted function)."""
    return type(fn) is functools.partial or isinstance(fn, torch.jit.ScriptFunction)


def forward_call(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """Model ``fn(*pos, **kwargs)`` as the call ``fn`` forwards to."""
    fn = fn_val.obj
    if type(fn) is functools.partial:
        dispatch_call(m, inst, *_partial(m, fn_val, pos, kwargs))
        return
    source, pos, kwargs = _script_function(m, fn_val, pos, kwargs)
    if not _can_swap(m, inst, fn):
        raise m.unsupported(f"TorchScript {fn.qualified_name} called from native code")
    dispatch_call(m, inst, source, pos, kwargs)
    _swap_callable(m, inst, fn, source.obj)  # last: nothing after it may break


def _part(m: FrameMonitor, base: Val, name: str) -> Val:
    """Attribute ``name`` of an immutable wrapper object ``base``."""
    real = getattr(base.obj, name)
    if base.const:
        return m.cap.new(real, const=True) if not is_value_type(real) else m.cap.const(real)
    if base.external and base.node is not None:
        return m.cap.child(base, Attr(name), real)
    raise m.unsupported(f"a {type(base.obj).__name__} created during the run")


def _new_partial(m: FrameMonitor, inst: Inst, pos: list[Val], kwargs: dict[str, Val]) -> None:
    """``functools.partial(func, *args, **keywords)`` built during the run: its shadow keeps
    the parts' shadows (a call is followed as ``func(*args, *more, **keywords, **kw)``); the
    mock builds it again from them."""
    if not pos or type(pos[0].obj) is functools.partial:
        raise m.unsupported("functools.partial of a partial (its parts are merged)")
    cap = m.cap

    def make(real: list[Any]) -> list[Val]:
        return [cap.new(real[0], payload=PartialCall(pos[0], pos[1:], dict(kwargs)))]

    m.expect_outputs(inst, 1, make)


BUILTIN_HANDLERS[id(functools.partial)] = (functools.partial, _new_partial)


@registry.PARTIAL_CALL.provide
def _partial(m: FrameMonitor, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]) -> Forward:
    cap = m.cap
    if (made := fn_val.payload(PartialCall)) is not None:
        return made.func, [*made.args, *pos], {**made.keywords, **kwargs}
    cap.observe_type(fn_val)
    func = _part(m, fn_val, "func")
    args = _part(m, fn_val, "args")
    keywords = _part(m, fn_val, "keywords")
    if args.const:
        arg_vals = [cap.const(a) for a in args.obj]
        kw_vals = {k: cap.const(v) for k, v in keywords.obj.items()}
    else:
        cap.observe_len(args)
        cap.observe_keys(keywords)
        arg_vals = [cap.child(args, Item(i), a) for i, a in enumerate(args.obj)]
        kw_vals = {k: cap.child(keywords, Item(k), v) for k, v in keywords.obj.items()}
    return func, [*arg_vals, *pos], {**kw_vals, **kwargs}


def _script_function(
    m: FrameMonitor, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> Forward:
    """Follow the Python function ``fn`` was scripted from. A scripted function runs no Python
    frame to watch, so the CALL about to run is given the Python function instead (its
    callable's stack slot is swapped): the two compute the same when the arguments match
    the TorchScript signature exactly (no conversions)."""
    fn = fn_val.obj
    orig = getattr(fn, "_torchdynamo_inline", None)
    if not isinstance(orig, types.FunctionType):
        raise m.unsupported("a TorchScript function without its Python source function")
    if _scripted_name(orig) != fn.qualified_name:
        raise m.unsupported(
            "call to a traced function (it replays its trace, which its Python source need "
            "not match)"
        )
    bad = _signature_mismatch(fn.schema, pos, kwargs)
    if bad is not None:
        raise m.unsupported(f"call to TorchScript {fn.qualified_name}: {bad}")
    m.cap.observe_identity(fn_val)
    return _part(m, fn_val, "_torchdynamo_inline"), pos, kwargs


def _callable_slots(inst: Inst) -> tuple[int, ...]:
    """Stack slots (from the top) that may hold the callable of the call ``inst``."""
    if inst.opname == "CALL":
        return (inst.arg, inst.arg + 1)  # the two call slots below the arguments
    if inst.opname == "CALL_KW":
        return (inst.arg + 1, inst.arg + 2)  # the same, below the keyword names too
    if inst.opname == "CALL_FUNCTION_EX":
        return (1 + (inst.arg & 1), 2 + (inst.arg & 1))  # the call slots below *args, **kw
    return ()


def _can_swap(m: FrameMonitor, inst: Inst, fn: Any) -> bool:
    view = m.view
    return any(i < view.depth() and view.peek(i) is fn for i in _callable_slots(inst))


def _swap_callable(m: FrameMonitor, inst: Inst, fn: Any, new: Any) -> None:
    """Make the CALL ``inst`` (not yet run) call ``new`` instead of ``fn``."""
    view = m.view
    for i in _callable_slots(inst):
        if i < view.depth() and view.peek(i) is fn:
            view.replace(i, new)
            return


def _scripted_name(orig: Any) -> str | None:
    """The qualified name ``torch.jit.script`` compiled ``orig`` under (its cache of scripted
    functions; a traced function is not in it)."""
    try:
        name = _jit_caching_layer.get(orig, None)
    except TypeError:  # pragma: no cover - unhashable/unweakrefable function
        return None
    return name if isinstance(name, str) else None


def _signature_mismatch(schema: Any, pos: list[Val], kwargs: dict[str, Val]) -> str | None:
    """Why TorchScript would reject (or convert) these arguments, or None when it takes them
    as the Python function would."""
    params = list(schema.arguments)
    if len(pos) > len(params):
        return "too many arguments"
    named = {p.name: p for p in params}
    given = [(params[i], v) for i, v in enumerate(pos)]
    for k, v in kwargs.items():
        if k not in named:
            return f"unknown argument {k!r}"
        given.append((named[k], v))
    for p, v in given:
        if not _fits(p.type, v.obj):
            return f"argument {p.name!r} is a {type(v.obj).__name__}, not {p.type}"
    return None


_SCALAR_KINDS: dict[str, Callable[[Any], bool]] = {
    "IntType": lambda o: type(o) is int,
    "FloatType": lambda o: type(o) is float,
    "BoolType": lambda o: type(o) is bool,
    "StringType": lambda o: type(o) is str,
    "NoneType": lambda o: o is None,
    "TensorType": lambda o: isinstance(o, torch.Tensor),
}


def _fits(t: Any, obj: Any) -> bool:
    """``obj`` is passed to a TorchScript parameter of type ``t`` without conversion."""
    kind = t.kind()
    check = _SCALAR_KINDS.get(kind)
    if check is not None:
        return check(obj)
    if kind == "OptionalType":
        return obj is None or _fits(t.getElementType(), obj)
    if kind == "ListType":
        return type(obj) is list and all(_fits(t.getElementType(), x) for x in obj)
    if kind == "TupleType":
        elems = t.elements()
        return (
            type(obj) is tuple
            and len(obj) == len(elems)
            and all(_fits(e, x) for e, x in zip(elems, obj, strict=True))
        )
    return False
