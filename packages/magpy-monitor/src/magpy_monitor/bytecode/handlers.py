"""Opcode handlers: each models one CPython 3.11 instruction's effect on provenance.

Handlers never execute the instruction (CPython does); they pop the shadow inputs and push, or
leave pending, the shadow outputs. Calls are dispatched by ``_calls.py``.
"""

from __future__ import annotations

import operator
import types
from typing import Any

import torch

from magpy_refgraph import Builtin, Cell, Const, Global, Item

from ..core.calls import dispatch_call, load_attr, opaque_object, subscr, truthiness
from ..core.capture import FROZEN_MODULE_ROOTS, is_value_type
from ..core.frame import LAZY, FrameMonitor, Inst
from ..core.registry import opcode
from ..core.shapes import index_by_promoted_int
from ..core.values import UNBOUND, Val, plain_container
from ..cpython.frameio import NULL
from ..libs.numpy.ndarrays import array_op, involves_array, store_array_item
from ..pyobj.highorder import call_with_lazy_star
from ..pyobj.instances import (
    external_attr_followed,
    follow,
    getattr_followed,
    is_pyobj,
    load_attr_followed,
    plain_store,
    python_dunder,
    store_attr_followed,
    store_item_followed,
)
from .identity import guard_identity, identity_compare
from .iteration import consume_generator, get_iter, is_generator, iter_items, unpack

__all__: list[str] = []

_BINARY_OPS = {
    "+": operator.add,
    "&": operator.and_,
    "//": operator.floordiv,
    "<<": operator.lshift,
    "@": operator.matmul,
    "*": operator.mul,
    "%": operator.mod,
    "|": operator.or_,
    "**": operator.pow,
    ">>": operator.rshift,
    "-": operator.sub,
    "/": operator.truediv,
    "^": operator.xor,
    "+=": operator.iadd,
    "&=": operator.iand,
    "//=": operator.ifloordiv,
    "<<=": operator.ilshift,
    "@=": operator.imatmul,
    "*=": operator.imul,
    "%=": operator.imod,
    "|=": operator.ior,
    "**=": operator.ipow,
    ">>=": operator.irshift,
    "-=": operator.isub,
    "/=": operator.itruediv,
    "^=": operator.ixor,
}
_COMPARE_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}
_MUTABLE = (list, dict, set, bytearray)
_BINARY_OP_NAMES = [s for _, s in __import__("dis")._nb_ops]


# ---------------------------------------------------------------------- no-ops and shuffles
@opcode(
    "NOP",
    "RESUME",
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
    "RETURN_VALUE",
    "YIELD_VALUE",
)
def _nop(m: FrameMonitor, inst: Inst) -> None:
    """Nothing to model (returns and yields are handled at the ``return`` event)."""


@opcode("POP_TOP")
def _pop_top(m: FrameMonitor, inst: Inst) -> None:
    m.pop()


@opcode("PUSH_NULL")
def _push_null(m: FrameMonitor, inst: Inst) -> None:
    m.push(Val(NULL, const=True))


@opcode("COPY")
def _copy(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.stack[-inst.arg])


@opcode("SWAP")
def _swap(m: FrameMonitor, inst: Inst) -> None:
    s, i = m.stack, inst.arg
    s[-1], s[-i] = s[-i], s[-1]


@opcode("KW_NAMES")
def _kw_names(m: FrameMonitor, inst: Inst) -> None:
    m.kwnames = inst.argval


# ---------------------------------------------------------------------- loads and stores
@opcode("LOAD_CONST")
def _load_const(m: FrameMonitor, inst: Inst) -> None:
    m.push(Val(m.code.co_consts[inst.arg], const=True))


@opcode("LOAD_FAST")
def _load_fast(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.load_fast(inst.arg))


@opcode("STORE_FAST")
def _store_fast(m: FrameMonitor, inst: Inst) -> None:
    m.fast[inst.arg] = m.pop()[0]
    m.stored.add(inst.arg)


@opcode("DELETE_FAST")
def _delete_fast(m: FrameMonitor, inst: Inst) -> None:
    m.fast[inst.arg] = UNBOUND
    m.stored.add(inst.arg)


@opcode("LOAD_DEREF")
def load_deref(m: FrameMonitor, inst: Inst) -> None:
    box = m.cell(inst.arg)
    if box.content is LAZY:
        box.content = m.lazy_local(box.name)
    if box.content is not UNBOUND:
        m.push(box.content)
        return

    def make(real: list[Any]) -> list[Val]:
        if box.scope is None:
            raise m.unsupported(f"free variable {box.name!r} of unknown origin")
        box.content = m.cap.root(Cell(box.name, scope=box.scope), real[0])
        return [box.content]

    m.expect_outputs(inst, 1, make)


@opcode("STORE_DEREF")
def _store_deref(m: FrameMonitor, inst: Inst) -> None:
    box = m.cell(inst.arg)
    if box.scope is not None:
        raise m.unsupported(f"assignment to an outer function's variable {box.name!r}")
    box.content = m.pop()[0]
    m.stored.add(inst.arg)


@opcode("LOAD_CLOSURE")
def _load_closure(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.fast[inst.arg])


@opcode("LOAD_GLOBAL")
def _load_global(m: FrameMonitor, inst: Inst) -> None:
    name = m.code.co_names[inst.arg >> 1]
    null = inst.arg & 1
    globals_ = m.frame.f_globals

    def make(real: list[Any]) -> list[Val]:
        val = global_value(m, globals_, name, real[-1])
        return [Val(NULL, const=True), val] if null else [val]

    m.expect_outputs(inst, 1 + null, make)


def global_value(m: FrameMonitor, globals_: dict[str, Any], name: str, obj: Any) -> Val:
    """The shadow of global (or builtin) ``name``, whose real value is ``obj``."""
    module = str(globals_.get("__name__", ""))
    if module.split(".")[0] in FROZEN_MODULE_ROOTS and not isinstance(obj, _MUTABLE):
        return m.cap.const(obj)  # torch's (and the stdlib's) own globals are stable
    if name in globals_:
        return m.cap.root(Global(name, scope=globals_), obj)
    return m.cap.root(Builtin(name), obj)


@opcode("STORE_GLOBAL")
def _store_global(m: FrameMonitor, inst: Inst) -> None:
    """``global g; g = value``: a write into the module's globals, replayed by the mock."""
    (value,) = m.pop()
    m.cap.set_global(m.frame.f_globals, m.code.co_names[inst.arg], value)
    m.expect_outputs(inst, 0, lambda real: [])


@opcode("IMPORT_STAR")
def _unsupported_scope(m: FrameMonitor, inst: Inst) -> None:
    raise m.unsupported(f"{inst.opname} is not supported yet")


@opcode("IMPORT_NAME")
def _import_name(m: FrameMonitor, inst: Inst) -> None:
    """``import x`` inside a function: the module object from ``sys.modules``.

    torch's and the stdlib's modules are constants; any other module is an entry object reached
    through a constant root, so what the program reads from it is guarded like a global.
    """
    m.pop(2)

    def make(real: list[Any]) -> list[Val]:
        mod = real[0]
        if not isinstance(mod, types.ModuleType):
            raise m.unsupported(f"import gave a {type(mod).__name__}, not a module")
        if mod.__name__.split(".")[0] in FROZEN_MODULE_ROOTS:
            return [m.cap.const(mod)]
        return [m.cap.root(Const(mod), mod)]

    m.expect_outputs(inst, 1, make)


@opcode("IMPORT_FROM")
def _import_from(m: FrameMonitor, inst: Inst) -> None:
    """``from x import name``: an attribute read of the module (which stays on the stack)."""
    base = m.stack[-1]
    name = m.code.co_names[inst.arg]
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name, real[-1])])


@opcode("LOAD_ATTR")
def _load_attr(m: FrameMonitor, inst: Inst) -> None:
    (base,) = m.pop()
    name = m.code.co_names[inst.arg]
    if is_pyobj(base) and load_attr_followed(m, inst, base, name):
        return  # a property of an object built in the run: its getter is followed
    if external_attr_followed(m, inst, base, name, method=False):
        return  # a property of an object from outside: likewise
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name, real[0])])


@opcode("LOAD_METHOD")
def _load_method(m: FrameMonitor, inst: Inst) -> None:
    (base,) = m.pop()
    name = m.code.co_names[inst.arg]
    if is_pyobj(base) and getattr_followed(m, inst, base, name, method=True):
        return  # a Python __getattr__ of an object built in the run
    if external_attr_followed(m, inst, base, name, method=True):
        return  # ``self.prop(x)``: a property of an object from outside giving a callable

    def make(real: list[Any]) -> list[Val]:
        if real[0] is NULL:
            return [Val(NULL, const=True), load_attr(m, base, name, real[1])]
        if base.external:
            m.cap.observe_type(base)
        return [m.cap.const(real[0]), base]

    m.expect_outputs(inst, 2, make)


@opcode("STORE_ATTR")
def _store_attr(m: FrameMonitor, inst: Inst) -> None:
    base, value = m.pop(2)[::-1]
    name = m.code.co_names[inst.arg]
    if is_pyobj(base) and store_attr_followed(m, inst, base, name, value):
        return  # a Python __setattr__ or property setter of an object built in the run
    store_attr(m, base, name, value)
    m.expect_outputs(inst, 0, lambda real: [])


def store_attr(m: FrameMonitor, base: Val, name: str, value: Val) -> None:
    """``base.name = value`` (STORE_ATTR or ``setattr``), about to run natively."""
    if isinstance(base.obj, torch.Tensor):
        from ..libs.torch.tensorattrs import store_tensor_attr

        store_tensor_attr(m, base, name, value)  # p.data = new, t.requires_grad = flag
        return
    if isinstance(base.extra, dict) and "ctor" in base.extra:
        raise m.unsupported(f"setting attribute {name!r} of a dataclass built during the run")
    if is_pyobj(base) and not plain_store(type(base.obj), name):
        raise m.unsupported(f"setattr on a {type(base.obj).__name__} runs Python code")
    m.cap.set_attr(base, name, value)


@opcode("DELETE_ATTR")
def _delete_attr(m: FrameMonitor, inst: Inst) -> None:
    (base,) = m.pop()
    m.cap.del_attr(base, m.code.co_names[inst.arg])
    m.expect_outputs(inst, 0, lambda real: [])


# ---------------------------------------------------------------------- operators
def _tensor_involved(*vals: Val) -> bool:
    return any(isinstance(v.obj, torch.Tensor) for v in vals)


def _scalar_op(m: FrameMonitor, inst: Inst, fn: Any, args: list[Val]) -> None:
    cap = m.cap
    if identity_compare(m, inst, fn, args):
        return

    def make(real: list[Any]) -> list[Val]:
        if involves_array(args, real[0]):  # numpy arrays made during the run: constants
            return [array_op(m, fn, args, real[0])]
        if all(a.const for a in args):
            return [cap.const(real[0])]
        if is_value_type(real[0]) and all(is_value_type(a.obj) for a in args):
            for a in args:
                if a.external:
                    cap.observe_type(a)
            return [Val(real[0], expr=(fn, tuple(args)))]
        sequence = _sequence_op(m, fn, args, real[0])
        if sequence is not None:
            return [sequence]
        if not is_value_type(real[0]) and type(real[0]) in (tuple, list, dict, set):
            # a container of objects the shadow cannot name (a constant would keep stale ones)
            raise m.unsupported(f"{fn.__name__} giving a {type(real[0]).__name__} of objects")
        for a in args:
            if not (a.const or type(a.obj) in (set, frozenset) or opaque_object(a.obj) is None):
                # an opaque object (a numpy array...): observing it guards only its type, so a
                # result computed from its contents must not become a constant of the record
                raise m.unsupported(
                    f"{getattr(fn, '__name__', fn)} of a {type(a.obj).__name__} "
                    "(its contents are not guarded)"
                )
            cap.observe(a)
        return [cap.new(real[0], const=True)]

    m.expect_outputs(inst, 1, make)


def _sequence_op(m: FrameMonitor, fn: Any, args: list[Val], result: Any) -> Val | None:
    """``a + b`` of tuples/lists and ``seq * n``: a new sequence whose items are followed."""
    if type(result) not in (tuple, list):
        return None
    a, b = args
    if fn in (operator.add, operator.iadd) and type(a.obj) is type(b.obj) is type(result):
        items = unpack(m, a, None) + unpack(m, b, None)
    elif fn in (operator.mul, operator.imul) and type(b.obj) is int and type(a.obj) is type(result):
        m.cap.observe(b)
        items = unpack(m, a, None) * b.obj
    elif fn in (operator.mul, operator.imul) and type(a.obj) is int and type(b.obj) is type(result):
        m.cap.observe(a)
        items = unpack(m, b, None) * a.obj
    else:
        return None
    if result is a.obj and type(result) is list:  # an in-place list operation (_list_inplace)
        return None
    if result is a.obj or result is b.obj:  # `t + ()` is t itself: keep its shadow
        return a if result is a.obj else b
    if len(items) != len(result) or any(x.obj is not y for x, y in zip(items, result, strict=True)):
        return None
    return m.cap.new(result, items=items)


def _list_inplace(m: FrameMonitor, inst: Inst, args: list[Val], symbol: str) -> None:
    """``lst += iterable`` / ``lst *= n``: the list itself changes (materialized first)."""
    from ..pyobj.containers import materialize

    a, b = args
    materialize(m.cap, a, f"list {symbol}")
    if symbol == "+=":
        extra = unpack(m, b, None)
        a.items.extend(extra)
    else:
        m.cap.observe(b)
        a.items[:] = a.items * b.obj
    m.expect_outputs(inst, 1, lambda real: [a])


def _tensor_op(
    m: FrameMonitor, inst: Inst, fn: Any, args: list[Val], *, inplace: bool = False
) -> None:
    cap = m.cap

    def make(real: list[Any]) -> list[Val]:
        if fn is operator.getitem and isinstance(args[0].obj, torch.Tensor):
            node = index_by_promoted_int(cap, args[0], args[1])
            if node is not None:
                return [cap.op_result(real[0], node)]
        node = cap.rec.call(
            "call_function", fn, tuple(cap.to_arg(a, promote=True) for a in args), {}
        )
        target = args[0] if inplace and isinstance(args[0].obj, torch.Tensor) else None
        return [cap.op_result(real[0], node, inplace_of=target)]

    m.expect_outputs(inst, 1, make)


@opcode("BINARY_OP")
def _binary_op(m: FrameMonitor, inst: Inst) -> None:
    args = m.pop(2)
    symbol = _BINARY_OP_NAMES[inst.arg]
    fn = _BINARY_OPS[symbol]
    inplace = symbol.endswith("=") and symbol != "=="
    if symbol.rstrip("=") in "|&-^" and all(type(a.obj) in (set, frozenset) for a in args):
        from ..pyobj.sets import binary_set_op

        binary_set_op(m, inst, args[0], args[1], symbol)
        return
    if symbol in ("+=", "*=") and type(args[0].obj) is list:
        _list_inplace(m, inst, args, symbol)
        return
    if inplace and not isinstance(args[0].obj, torch.Tensor):
        # `score = 0; score += t`: a scalar has no in-place form, Python computes `0 + t`
        fn, inplace = _BINARY_OPS[symbol[:-1]], False
    if _tensor_involved(*args):
        _tensor_op(m, inst, fn, args, inplace=inplace)
    else:
        _scalar_op(m, inst, fn, args)


@opcode("COMPARE_OP")
def _compare_op(m: FrameMonitor, inst: Inst) -> None:
    args = m.pop(2)
    fn = _COMPARE_OPS[inst.argval]
    if all(type(a.obj) in (set, frozenset) for a in args):
        from ..pyobj.sets import compare_sets

        compare_sets(m, inst, args[0], args[1], inst.argval)
        return
    if _tensor_involved(*args):
        _tensor_op(m, inst, fn, args)
    else:
        _scalar_op(m, inst, fn, args)


@opcode("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def _unary(m: FrameMonitor, inst: Inst) -> None:
    args = m.pop()
    fn = {
        "UNARY_NEGATIVE": operator.neg,
        "UNARY_POSITIVE": operator.pos,
        "UNARY_INVERT": operator.invert,
    }[inst.opname]
    if _tensor_involved(*args):
        _tensor_op(m, inst, fn, args)
    else:
        _scalar_op(m, inst, fn, args)


@opcode("UNARY_NOT")
def _unary_not(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    truthiness(m, v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("IS_OP")
def _is_op(m: FrameMonitor, inst: Inst) -> None:
    a, b = m.pop(2)
    guard_identity(m, a, b)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("CONTAINS_OP")
def _contains_op(m: FrameMonitor, inst: Inst) -> None:
    item, container = m.pop(2)
    if isinstance(container.obj, torch.Tensor):
        raise m.unsupported("`in` on a tensor reads tensor values")
    hook = python_dunder(container.obj, "__contains__")
    if hook is not None:  # ``name in self.heads`` (nn.ModuleDict), a user class's own test
        if container.external:
            m.cap.observe_type(container)

        def outputs(real: list[Any], got: Val) -> list[Val]:
            m.cap.observe(got)  # (the instruction pushes its truth value)
            return [m.cap.const(real[0])]

        follow(m, inst, hook, [container, item], 1, outputs)
        return
    if type(container.obj) in (set, frozenset):
        from ..pyobj.sets import set_contains

        set_contains(m, inst, item, container)
        return
    if involves_array([container, item], None):  # `v in a` reads the array's contents
        op = operator.contains
        m.expect_outputs(inst, 1, lambda real: [array_op(m, op, [container, item], real[0])])
        return
    m.cap.observe(item)
    view = container.extra.get("view") if isinstance(container.extra, dict) else None
    if view == "keys":  # `k in d.keys()`: `k in d`
        container = container.extra["base"]
    elif view is not None:  # `v in d.values()`, `(k, v) in d.items()`: by their values
        values = iter_items(m, container)
        if values is None:
            raise m.unsupported(f"`in` on dict.{view}() of unknown contents")
        for v in values:
            if isinstance(v.obj, torch.Tensor):
                raise m.unsupported(f"`in` on dict.{view}() holding tensors")
            m.cap.observe(v)
        m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])
        return
    if isinstance(container.obj, dict) and isinstance(container.items, dict):
        for k, _ in container.items.values():  # `key in d` depends on the keys only
            m.cap.observe(k)
    elif isinstance(container.obj, dict) and container.external:
        m.cap.observe_keys(container)
    elif plain_container(container.obj) is None and not (
        is_value_type(container.obj) or type(container.obj) in (set, frozenset)
    ):  # (observing it would guard its type alone: the answer could go stale)
        raise m.unsupported(f"`in` on a {type(container.obj).__name__}")
    else:
        m.cap.observe(container)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("BINARY_SUBSCR")
def _binary_subscr(m: FrameMonitor, inst: Inst) -> None:
    container, key = m.pop(2)
    subscr(m, inst, container, key)


@opcode("STORE_SUBSCR")
def _store_subscr(m: FrameMonitor, inst: Inst) -> None:
    value, container, key = m.pop(3)
    cap = m.cap
    if isinstance(container.obj, torch.Tensor):
        node = cap.rec.call(
            "call_function",
            operator.setitem,
            (cap.tensor_node(container), cap.to_arg(key), cap.to_arg(value)),
            {},
            effect=True,
        )
        cap.mutate_tensor(container, node)
    elif is_pyobj(container) and store_item_followed(m, inst, container, key, value):
        return  # an object built in the run: its Python __setitem__, or its own items
    else:
        cap.observe(key)
        _store_item(m, container, key, value)
    m.expect_outputs(inst, 0, lambda real: [])


def _store_item(m: FrameMonitor, container: Val, key: Val, value: Val) -> None:
    cap = m.cap
    obj = container.obj
    from ..pyobj.collections import DICT_TYPES, deque, put_item

    if type(obj) is list and isinstance(key.obj, slice) and isinstance(container.items, list):
        items = list(container.items)
        try:  # x[::2] = a: the same assignment on the shadow items (or the same error)
            items[key.obj] = unpack(m, value, None)
        except (TypeError, ValueError) as exc:
            raise m.unsupported(f"slice assignment that raises ({exc})") from None
        container.items[:] = items
    elif type(obj) in (list, deque) and isinstance(container.items, list):
        container.items[key.obj] = value
    elif type(obj) in DICT_TYPES and isinstance(container.items, dict):
        put_item(container.items, key, value)
    elif container.external and type(obj) in (list, dict):
        from ..pyobj.containers import materialize

        materialize(cap, container, "setitem")
        _store_item(m, container, key, value)
    elif involves_array([container], None):
        store_array_item(m, container, key, value)
    else:
        raise m.unsupported(f"item assignment on {type(obj).__name__}")


@opcode("BUILD_SLICE")
def _build_slice(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg)
    m.expect_outputs(inst, 1, lambda real: [_new_with_items(m, real[0], list(parts))])


def _new_with_items(m: FrameMonitor, obj: Any, items: Any) -> Val:
    if all(isinstance(i, Val) and i.const for i in items):
        return m.cap.const(obj)
    return m.cap.new(obj, items=items)


# ---------------------------------------------------------------------- builders
@opcode("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET")
def _build_seq(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg)

    def make(real: list[Any]) -> list[Val]:
        if inst.opname == "BUILD_TUPLE":
            return [_new_with_items(m, real[0], list(parts))]
        return [m.cap.new(real[0], items=list(parts))]

    if inst.opname == "BUILD_SET":
        from ..pyobj.sets import build_set

        build_set(m, inst, list(parts))
        return
    m.expect_outputs(inst, 1, make)


@opcode("BUILD_MAP")
def _build_map(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(2 * inst.arg)
    pairs = [(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
    for k, _ in pairs:
        m.cap.observe(k)
    m.expect_outputs(
        inst, 1, lambda real: [m.cap.new(real[0], items={k.obj: (k, v) for k, v in pairs})]
    )


@opcode("BUILD_CONST_KEY_MAP")
def _build_const_key_map(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg + 1)
    keys, values = parts[-1], parts[:-1]
    m.cap.observe(keys)
    m.expect_outputs(
        inst,
        1,
        lambda real: [
            m.cap.new(
                real[0],
                items={k: (m.cap.const(k), v) for k, v in zip(keys.obj, values, strict=True)},
            )
        ],
    )


@opcode("LIST_APPEND", "SET_ADD")
def _list_append(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    target = m.stack[-inst.arg]
    if inst.opname == "SET_ADD":
        from ..pyobj.sets import set_add_inst

        set_add_inst(m, inst, target, v)
        return
    if not isinstance(target.items, list):
        raise m.unsupported(f"{inst.opname} on a container of unknown contents")
    target.items.append(v)


@opcode("MAP_ADD")
def _map_add(m: FrameMonitor, inst: Inst) -> None:
    k, v = m.pop(2)
    target = m.stack[-inst.arg]
    m.cap.observe(k)
    if not isinstance(target.items, dict):
        raise m.unsupported("MAP_ADD on a dict of unknown contents")
    target.items[k.obj] = (k, v)


@opcode("LIST_EXTEND", "SET_UPDATE")
def _list_extend(m: FrameMonitor, inst: Inst) -> None:
    (it,) = m.pop()
    target = m.stack[-inst.arg]
    if inst.opname == "SET_UPDATE":
        from ..pyobj.sets import set_update_inst

        set_update_inst(m, inst, target, it)
        return
    if not isinstance(target.items, list):
        raise m.unsupported(f"{inst.opname} on a container of unknown contents")
    items = target.items
    if is_generator(it):  # [*gen], (*self.parameters(),)

        def finish(yielded: list[Val], real: list[Any]) -> list[Val]:
            items.extend(yielded)
            return []

        consume_generator(m, inst, it, 0, finish)
        return
    items.extend(unpack(m, it, None))


@opcode("DICT_MERGE", "DICT_UPDATE")
def _dict_merge(m: FrameMonitor, inst: Inst) -> None:
    (other,) = m.pop()
    target = m.stack[-inst.arg]
    cap = m.cap
    if not isinstance(target.items, dict):
        raise m.unsupported(f"{inst.opname} into a dict of unknown contents")
    if isinstance(other.items, dict):
        target.items.update(other.items)
    elif other.external and type(other.obj) is dict:
        cap.observe_keys(other)
        for k, v in other.obj.items():
            target.items[k] = (cap.const(k), cap.child(other, Item(k), v))
    else:
        raise m.unsupported(f"{inst.opname} from a {type(other.obj).__name__}")


@opcode("LIST_TO_TUPLE")
def _list_to_tuple(m: FrameMonitor, inst: Inst) -> None:
    (lst,) = m.pop()
    items = iter_items(m, lst)  # (a list from before the segment: read from outside)
    if items is None:
        raise m.unsupported("a tuple of a list of unknown contents")
    m.expect_outputs(inst, 1, lambda real: [_new_with_items(m, real[0], items)])


@opcode("FORMAT_VALUE")
def _format_value(m: FrameMonitor, inst: Inst) -> None:
    has_spec = (inst.arg & 0x04) == 0x04
    parts = m.pop(1 + has_spec)
    conv = inst.arg & 0x03
    m.cap.observe(parts[0]) if isinstance(parts[0].obj, torch.Tensor) else None
    fn = _FORMATTERS[conv]
    _scalar_op(m, inst, fn, list(parts))


def _fmt_plain(v: Any, spec: str = "") -> str:
    return format(v, spec)


def _fmt_str(v: Any, spec: str = "") -> str:
    return format(str(v), spec)


def _fmt_repr(v: Any, spec: str = "") -> str:
    return format(repr(v), spec)


def _fmt_ascii(v: Any, spec: str = "") -> str:
    return format(ascii(v), spec)


_FORMATTERS = {0: _fmt_plain, 1: _fmt_str, 2: _fmt_repr, 3: _fmt_ascii}


def _join_strings(*parts: str) -> str:
    return "".join(parts)


@opcode("BUILD_STRING")
def _build_string(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg)
    _scalar_op(m, inst, _join_strings, list(parts))


# ---------------------------------------------------------------------- control flow
@opcode(
    "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_FALSE",
)
def _pop_jump_if(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    truthiness(m, v)


@opcode(
    "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE",
)
def _pop_jump_if_none(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    if v.obj is None or is_value_type(v.obj):
        m.cap.observe(v)
    elif isinstance(v.obj, torch.Tensor):
        if v.external:
            m.cap.tensor_node(v)
    else:
        m.cap.observe_type(v)


@opcode("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
def _jump_or_pop(m: FrameMonitor, inst: Inst) -> None:
    v = m.stack[-1]
    truth = truthiness(m, v)
    jumps = truth if inst.opname == "JUMP_IF_TRUE_OR_POP" else not truth
    if not jumps:
        m.pop()


@opcode("GET_ITER")
def _get_iter(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    get_iter(m, inst, v)


@opcode("GET_YIELD_FROM_ITER")
def _get_yield_from_iter(m: FrameMonitor, inst: Inst) -> None:
    """``yield from x`` in a generator: ``iter(x)`` (a generator delegates as itself)."""
    (v,) = m.pop()
    if isinstance(v.obj, types.CoroutineType):
        raise m.unsupported("`yield from` a coroutine")
    get_iter(m, inst, v)


@opcode("SEND")
def _send(m: FrameMonitor, inst: Inst) -> None:
    from .iteration import send

    send(m, inst)


@opcode("FOR_ITER")
def _for_iter(m: FrameMonitor, inst: Inst) -> None:
    from .iteration import for_iter

    for_iter(m, inst)


@opcode("UNPACK_SEQUENCE")
def _unpack_sequence(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    from .iteration import unpack_pending

    unpack_pending(m, inst, v, inst.arg)


# ---------------------------------------------------------------------- functions and calls
@opcode("PRECALL")
def _precall(m: FrameMonitor, inst: Inst) -> None:
    import types

    n = inst.arg
    below, fn = m.stack[-n - 2], m.stack[-n - 1]
    if below.obj is NULL and type(fn.obj) is types.MethodType:
        from ..core.calls import method_self

        self_val = method_self(m, fn)
        m.stack[-n - 2] = m.cap.const(fn.obj.__func__)
        m.stack[-n - 1] = self_val


@opcode("CALL")
def _call(m: FrameMonitor, inst: Inst) -> None:
    n = inst.arg
    kwnames, m.kwnames = m.kwnames, ()
    parts = m.pop(n + 2)
    head, fn, args = parts[0], parts[1], parts[2:]
    if head.obj is not NULL:
        fn, args = head, [parts[1], *args]
    n_kw = len(kwnames)
    pos = list(args[: len(args) - n_kw])
    kwargs = dict(zip(kwnames, args[len(args) - n_kw :], strict=True))
    dispatch_call(m, inst, fn, pos, kwargs)


@opcode("CALL_FUNCTION_EX")
def _call_function_ex(m: FrameMonitor, inst: Inst) -> None:
    has_kw = inst.arg & 1
    parts = m.pop(3 + has_kw)
    fn, star = parts[1], parts[2]
    kw = parts[3] if has_kw else None
    kwargs: dict[str, Val] = {}
    if kw is not None:
        if isinstance(kw.items, dict):
            kwargs = {k: v for k, (_, v) in kw.items.items()}
        elif kw.external and type(kw.obj) is dict:
            m.cap.observe_keys(kw)
            kwargs = {k: m.cap.child(kw, Item(k), v) for k, v in kw.obj.items()}
        else:
            raise m.unsupported("**kwargs from a mapping of unknown contents")
    if not call_with_lazy_star(m, inst, fn, star, kwargs):
        dispatch_call(m, inst, fn, unpack(m, star, None), kwargs)


@opcode(
    "GET_AWAITABLE",
    "RETURN_GENERATOR",
    "ASYNC_GEN_WRAP",
    "GET_AITER",
    "GET_ANEXT",
    "BEFORE_ASYNC_WITH",
    "END_ASYNC_FOR",
    "PREP_RERAISE_STAR",
    "CHECK_EG_MATCH",
    "COPY_FREE_VARS",
    "MAKE_CELL",
    "PRINT_EXPR",
    "LOAD_METHOD_UNSUPPORTED",
)
def _not_yet(m: FrameMonitor, inst: Inst) -> None:
    raise m.unsupported(f"{inst.opname} is not supported yet")
