"""Calls, attribute reads and subscripts: how the monitor decides what a call means.

Dynamic detection follows the paper's section 5.3.1: unannotated Python code is inlined (the
callee frame is monitored with its arguments bound to the caller's shadow values); AS_OP calls
become graph nodes; PURE native calls run natively and their results become constants guarded by
their inputs; unannotated native code, VALUE_READ on tensors and EFFECT calls stop capture.
"""

from __future__ import annotations

import collections
import functools
import types
import weakref
from typing import Any

import torch

from magpy_refgraph import Attr, Const, GuardKind, Item, Outcome

from ..cpython.code import CO_VARARGS, CO_VARKEYWORDS
from .annotations import Annotation
from .attributes import Read, attr_rule
from .binding import expect_type_error, signature_mismatch
from .foreach import foreach_scalars
from .frame import CellBox, FrameMonitor, Inst, Pending, initial_fast
from .hidden import hidden_updates
from .joined import JOINING, joined_entry
from .operators import opaque_object
from .registry import BUILT_OBJECT_TRUTH, GENERATOR_CLASSES, IMMUTABLE_CLASSES, OUTSIDE_ARRAY
from .shapes import SIZE_FREE_READS, numel_val, read_offsets, size_vals
from .speculation import predicate_read, truth_of_tensor
from .values import UNBOUND, BoundMethod, MadeFunction, PackedArgs, Payload, Val
from .valuetypes import FROZEN_MODULE_ROOTS, is_value_type, library_module

__all__ = [
    "ORIGINAL_CODE",
    "CodeOf",
    "GeneratorState",
    "guard_code",
    "inline",
    "method_self",
    "truthiness",
]

CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR = 0x20, 0x80, 0x100, 0x200
_MODULE_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)


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
    if (bound := fn_val.payload(BoundMethod)) is not None:
        return bound.self_val
    owner = fn_val.obj.__self__
    known = m.cap.known(owner)
    if known is not None:
        return known
    if fn_val.external:
        return m.cap.child(fn_val, Attr("__self__"), owner)
    if isinstance(owner, type | types.ModuleType) or (
        fn_val.const
        and (isinstance(owner, tuple(IMMUTABLE_CLASSES)) or type(owner) in GENERATOR_CLASSES)
    ):
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
        joined = joined_entry(cap, fn, pos, kwargs, real[0]) if fn in JOINING else None
        if joined is not None:
            return [joined]
        name = str(ann.method or getattr(fn, "__name__", ""))
        read = predicate_read(cap, name, pos, kwargs, real[0])
        if read is not None:
            return [read]
        operand = 1 if name in _ARITHMETIC else -1  # (x.mul_(1 - lr * wd): an operand)
        args = tuple(
            _arg(cap, name, i, a, promote=i == operand) for i, a in enumerate(pos)
        )  # fmt: skip
        kw = {k: cap.to_arg(v, promote=k in _SCALAR_FACTORS) for k, v in kwargs.items()}
        if ann.method is not None:
            node = cap.rec.call("call_method", ann.method, args, kw, effect=ann.effect)
        else:
            node = cap.rec.call("call_function", fn, args, kw, effect=ann.effect)
        target = None
        if ann.inplace and len(pos) > ann.inplace[0]:
            cand = pos[ann.inplace[0]]
            if isinstance(cand.obj, torch.Tensor):
                target = cand
                node.meta["effect"] = True
        for i in ann.inplace:
            if i >= len(pos) or pos[i] is target:
                continue
            written = [pos[i]] if isinstance(pos[i].obj, torch.Tensor) else _listed(cap, pos[i])
            for item in written:  # (a _foreach_*_ op's list; another tensor it writes)
                if isinstance(item.obj, torch.Tensor):
                    cap.mutate_tensor(item, node, result=False)
        for hidden in hidden_updates(fn, pos, kwargs):  # F.batch_norm's running statistics
            cap.mutate_tensor(hidden, node, result=False)
        if target is not None and real[0] is not target.obj:
            cap.mutate_tensor(target, node)
            return [cap.op_result(real[0], node)]
        return [cap.op_result(real[0], node, inplace_of=target)]

    m.expect_outputs(inst, 1, make)


# Scalar arguments that scale an operand (``x.add_(g, alpha=-lr)``, ``addcdiv_(..., value=s)``):
# a Python number that changes from call to call (a learning rate an LR scheduler sets) may be
# a promoted 0-d tensor there, which torch takes for a Scalar
_SCALAR_FACTORS = frozenset({"alpha", "value"})
# tensor arithmetic whose second argument is an operand like those of ``+ - * / **``
_ARITHMETIC = frozenset(
    "add add_ sub sub_ mul mul_ div div_ true_divide true_divide_ pow pow_ multiply multiply_"
    " subtract subtract_ divide divide_ _foreach_add _foreach_add_ _foreach_sub _foreach_sub_"
    " _foreach_mul _foreach_mul_ _foreach_div _foreach_div_".split()
)


def _arg(cap: Any, name: str, index: int, v: Val, *, promote: bool) -> Any:
    stacked = foreach_scalars(cap, name, index, v)
    return stacked if stacked is not None else cap.to_arg(v, promote=promote)


def _listed(cap: Any, v: Val) -> list[Val]:
    """The shadows of the items of list (or tuple) ``v``: known, or read from outside as
    ``Capture.to_arg`` read them."""
    items = v.items
    if isinstance(items, list):
        return items
    if v.external and type(v.obj) in (list, tuple):
        return [cap.child(v, Item(k), x) for k, x in enumerate(v.obj)]
    return []


# metadata reads whose result depends on where a tensor starts in its storage
_OFFSET_READS = frozenset({"storage_offset", "is_set_to"})


def _meta_call(
    m: FrameMonitor, inst: Inst, pos: list[Val], kwargs: dict[str, Val], name: str = ""
) -> None:
    if (
        pos
        and isinstance(pos[0].obj, torch.Tensor)
        and _symbolic_size_call(m, inst, name, pos, kwargs)
    ):
        return
    if name in _OFFSET_READS:
        read_offsets(m.cap)
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


def pure_call(m: FrameMonitor, inst: Inst, pos: list[Val], kwargs: dict[str, Val]) -> Pending:
    """A pure native call: its inputs are guarded, its result is a constant. A Python frame
    it starts (a callback) is a break. Returns the call's ``Pending``."""
    for v in (*pos, *kwargs.values()):
        if isinstance(v.obj, torch.Tensor):
            m.cap.guard_meta(v)
        else:
            opaque = _opaque_input(v)
            if opaque is None and not isinstance(
                array := OUTSIDE_ARRAY.impl(m.cap, v), torch.Tensor
            ):
                opaque = array  # a constant array not made by the run (a function's default)
            if opaque is not None:
                # guarding it checks only its type: a result computed from its contents (a
                # numpy array updated in place) must not become a constant of the record
                raise m.unsupported(
                    f"pure call over a {type(opaque).__name__} read from outside "
                    "(its contents are not guarded)"
                )
            m.cap.observe(v)
    # (native code that calls back into the program's Python, ``re.sub(p, fn, s)`` or a
    # ``__repr__``, runs code whose reads the guard would not see: a break, at the call)
    p = m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], const=True)])
    p.calls_back = _callback_test([v.obj for v in (*pos, *kwargs.values())])
    return p


def _callback_test(args: list[Any]) -> Any:
    """Whether a Python frame started by a native call over ``args`` is the program's code
    called back: a Python function among them, or a method of one of them (``__repr__``,
    ``__lt__``) that is not a library's. A gc callback or a finalizer is neither."""
    ids = {id(a) for a in args}
    codes = set()
    for a in args:
        fn = a.func if type(a) is functools.partial else getattr(a, "__func__", a)
        if isinstance(fn, types.FunctionType):
            codes.add(fn.__code__)

    def calls_back(frame: types.FrameType) -> bool:
        code = frame.f_code
        if code in codes:
            return True
        if not code.co_argcount or library_module(frame.f_globals):
            return False
        return id(frame.f_locals.get(code.co_varnames[0])) in ids

    return calls_back


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


# ---------------------------------------------------------------------- inlining
class GeneratorState(Payload):
    """A generator the monitor follows: the shadows its frame starts with (bound arguments,
    closure cells) and, once the frame first runs, the frame's monitor."""

    __slots__ = ("bound", "closure", "monitor")

    def __init__(self, bound: dict[str, Val], closure: list[Val] | None) -> None:
        self.bound, self.closure = bound, closure
        self.monitor: FrameMonitor | None = None


def disabled_function(func: Any) -> bool:
    """``func`` is ``magpy.disable(f)``, or a program's ``torch.compiler.disable(f)`` (torch's
    own disabled functions are followed through: ``libs/torch/optim``)."""
    marks = getattr(func, "__dict__", None) or {}
    if marks.get("_magpy_disable") is True:
        return True
    module = getattr(func, "__module__", None) or ""
    return marks.get("_torchdynamo_disable") is True and module.split(".")[0] != "torch"


def inline(
    m: FrameMonitor, inst: Inst, fn_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """Follow a Python function into its frame, with arguments bound to shadow values."""
    cap = m.cap
    func = fn_val.obj
    code = func.__code__
    if disabled_function(func):
        raise m.unsupported(f"{func.__qualname__} is disabled (it runs natively, uncompiled)")
    if code.co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR):
        raise m.unsupported(f"coroutine {func.__qualname__}")
    src = function_source(m, fn_val)
    if src is not None:  # CPython runs the function's current code object
        guard_code(cap, src, code)
    mismatch = signature_mismatch(code, len(pos), kwargs)
    if mismatch is not None:
        expect_type_error(m, inst, f"{mismatch} for {func.__qualname__}")
        return
    bound = bind_args(m, fn_val, pos, kwargs)
    closure = _closure(m, fn_val)
    if code.co_flags & CO_GENERATOR:

        def make_gen(real: list[Any]) -> list[Val]:
            gen = real[0]
            v = cap.new(gen, payload=GeneratorState(bound, closure))
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
        if v.payload(PackedArgs) is not None:
            v.obj = frame.f_locals[name]
            v.set_payload(None)
    return bound


def _closure(m: FrameMonitor, fn_val: Val) -> list[Val] | None:
    func = fn_val.obj
    if not func.__closure__:
        return None
    made = fn_val.payload(MadeFunction)
    if made is not None and made.cells is not None:
        return made.cells
    out = []
    for name, cell in zip(func.__code__.co_freevars, func.__closure__, strict=True):
        known = m.cap.known(cell)
        out.append(
            known if known is not None else m.cap.new(cell, payload=CellBox(UNBOUND, name, func))
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
    has_varargs, has_varkw = bool(code.co_flags & CO_VARARGS), bool(code.co_flags & CO_VARKEYWORDS)
    positional = names[:argc]
    bound: dict[str, Val] = dict(zip(positional, pos[:argc], strict=False))
    more_pos = pos[argc:]
    if more_pos and not has_varargs:
        raise m.unsupported(f"too many arguments for {func.__qualname__}")
    more_kw: dict[str, Val] = {}
    kwonly_names = names[argc : argc + kwonly]
    for k, v in kwargs.items():
        if (k in positional[posonly:] or k in kwonly_names) and k not in bound:
            bound[k] = v
        elif has_varkw:
            more_kw[k] = v
        else:
            raise m.unsupported(f"bad keyword argument {k!r} for {func.__qualname__}")
    if any(name not in bound for name in positional):
        defaults = _defaults(m, fn_val)
        first_default = argc - len(defaults)
        for i, name in enumerate(positional):
            if name not in bound:
                if i < first_default:
                    raise m.unsupported(f"missing argument {name!r} for {func.__qualname__}")
                bound[name] = defaults[i - first_default]
    if any(name not in bound for name in kwonly_names):
        bound.update(_kwdefaults(m, fn_val, [n for n in kwonly_names if n not in bound]))
    idx = argc + kwonly
    if has_varargs:
        bound[names[idx]] = Val(
            tuple(v.obj for v in more_pos), items=list(more_pos), payload=PackedArgs()
        )
        idx += 1
    if has_varkw:
        bound[names[idx]] = Val(
            {}, items={k: (cap.const(k), v) for k, v in more_kw.items()}, payload=PackedArgs()
        )
    return bound


def _defaults(m: FrameMonitor, fn_val: Val) -> list[Val]:
    made = fn_val.payload(MadeFunction)
    if made is not None and made.defaults is not None:
        d = made.defaults
        if isinstance(d.items, list):
            return list(d.items)
        return [m.cap.const(x) for x in d.obj]
    defaults = fn_val.obj.__defaults__
    src = function_source(m, fn_val)
    if src is None:
        return [m.cap.const(x) for x in (defaults or ())]
    # CPython reads the function's current ``__defaults__`` on every call: guard the tuple's
    # length and read each default through it (a mutable default stays the same object)
    cap = m.cap
    d_val = cap.child(src, Attr("__defaults__"), defaults)
    if defaults is None:
        cap.observe(d_val)
        return []
    cap.observe_len(d_val)
    return [cap.child(d_val, Item(i), x) for i, x in enumerate(defaults)]


def _kwdefaults(m: FrameMonitor, fn_val: Val, names: list[str]) -> dict[str, Val]:
    """The shadows of the keyword-only defaults ``names`` (read from ``__kwdefaults__``)."""
    func, cap = fn_val.obj, m.cap
    kwdefaults = func.__kwdefaults__ or {}
    for name in names:
        if name not in kwdefaults:
            raise m.unsupported(f"missing argument {name!r} for {func.__qualname__}")
    src = function_source(m, fn_val)
    if src is None:
        return {name: cap.const(kwdefaults[name]) for name in names}
    kd = cap.child(src, Attr("__kwdefaults__"), func.__kwdefaults__)
    cap.observe_type(kd)
    return {name: cap.child(kd, Item(name), kwdefaults[name]) for name in names}


# instrumented code object -> the program's own (the runtime's split mode installs the first in
# a function's ``__code__``; a guard on the code must accept every generation of it)
ORIGINAL_CODE: weakref.WeakKeyDictionary[types.CodeType, types.CodeType] = (
    weakref.WeakKeyDictionary()
)


class CodeOf:
    """A guard's read: does the function still run ``original`` (or an instrumented copy)?"""

    __slots__ = ("original",)

    def __init__(self, original: types.CodeType) -> None:
        self.original = original

    def __call__(self, fn: Any) -> bool:
        code = fn.__code__
        return code is self.original or ORIGINAL_CODE.get(code) is self.original

    def __eq__(self, other: object) -> bool:
        return type(other) is CodeOf and other.original is self.original

    def __hash__(self) -> int:
        return id(self.original)

    def __repr__(self) -> str:
        return f"code_of({self.original.co_qualname})"


def guard_code(cap: Any, src: Val, code: types.CodeType) -> None:
    """Guard that the function ``src`` still runs ``code`` (instrumented or not)."""
    if src.node is not None:
        original = ORIGINAL_CODE.get(code, code)
        cap.graph.observe(src.node, GuardKind.CUSTOM, Outcome(CodeOf(original), True))


@attr_rule("function code", lambda r: r.name == "__code__" and type(r.obj) is types.FunctionType)
def _function_code(m: FrameMonitor, r: Read) -> Val:
    """``f.__code__``: the function's own code object, never one MagPy instrumented.

    While a compiled call runs, a function with sites holds an instrumented copy of its code
    (the runtime's ``_codes``); the program must not see it. The read already ran natively, so
    the original takes the copy's place on the frame's stack, and the record holds the original
    as a constant, guarded by the function running it (instrumented or not: ``CodeOf``)."""
    real = r.real
    original = ORIGINAL_CODE.get(real, real)
    if original is not real:
        for i in range(min(2, m.view.depth())):  # (the attribute, or the attribute and a NULL)
            if m.view.peek(i) is real:
                m.view.replace(i, original)
                break
        else:
            raise m.unsupported("an instrumented code object the monitor cannot hand back")
    src = function_source(m, r.base)
    if src is not None:
        guard_code(m.cap, src, original)
    return m.cap.new(original, const=True)


def function_source(m: FrameMonitor, fn_val: Val) -> Val | None:
    """An external shadow of the Python function ``fn_val`` to read its ``__code__``,
    ``__defaults__``, ``__kwdefaults__`` through: the function itself when it came from
    outside, else the function as a constant root; None for a function made by the run."""
    if fn_val.payload(MadeFunction) is not None or not isinstance(fn_val.obj, types.FunctionType):
        return None
    if str(getattr(fn_val.obj, "__module__", "")).split(".")[0] in FROZEN_MODULE_ROOTS:
        return None  # torch's, numpy's and the stdlib's functions are taken as they are
    if fn_val.external and fn_val.node is not None:
        return fn_val
    known = m.cap.known(fn_val.obj)
    if known is not None and not known.const and not known.external:
        return None  # a function the run made
    return m.cap.root(Const(fn_val.obj), fn_val.obj)


# ---------------------------------------------------------------------- items, truth
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
    elif BUILT_OBJECT_TRUTH.impl(v):
        pass  # an object built in the run, truthy by its known items (or always)
    elif getattr(type(obj), "__bool__", None) is not None:
        raise m.unsupported(f"truth value of a {type(obj).__name__} with __bool__")
    elif hasattr(type(obj), "__len__"):
        raise m.unsupported(f"truth value of a {type(obj).__name__} with __len__")
    else:
        cap.observe_type(v)
    return bool(obj)
