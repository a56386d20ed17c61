"""Operators: BINARY_OP, COMPARE_OP, the UNARY_* instructions, IS_OP and CONTAINS_OP.

An operator with a tensor operand is a graph node (``core.operators.tensor_op``); one of values
is a value or a guarded constant (``core.operators.scalar_op``). Sets are modelled by the
object model (``pyobj.sets``), found by the operands' types in the registry's type-keyed
tables; numpy arrays made during the run are constants (``libs.numpy``).
"""

from __future__ import annotations

import dis
import operator
from typing import Any

import torch

from magpy_refgraph import GuardKind, InternalError, Outcome

from ..core import registry
from ..core.calls import truthiness
from ..core.frame import FrameMonitor, Inst
from ..core.operators import guard_identity, scalar_op, tensor_op
from ..core.programcode import program_frames
from ..core.registry import opcode
from ..core.scalars import tensor_operands
from ..core.values import Val, plain_container
from ..core.valuetypes import hashed_by_python, is_value_type
from ..cpython.current import INTERP
from .control import python_truth
from .iteration import DictView, iter_items, unpack

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
_UNARY_OPS = {
    "UNARY_NEGATIVE": operator.neg,
    "UNARY_POSITIVE": operator.pos,
    "UNARY_INVERT": operator.invert,
}
_BINARY_OP_NAMES = [s for _, s in dis._nb_ops]  # type: ignore[attr-defined]


def _tensor_involved(*vals: Val) -> bool:
    return any(isinstance(v.obj, torch.Tensor) for v in vals)


def _modelled_by_types(table: dict[type, Any], args: list[Val]) -> Any:
    """The model in type-keyed ``table`` of an operator whose operands all have types there."""
    if all(type(a.obj) in table for a in args):
        return table[type(args[0].obj)]
    return None


def _list_inplace(m: FrameMonitor, inst: Inst, args: list[Val], symbol: str) -> None:
    """``lst += iterable`` / ``lst *= n``: the list itself changes (materialized first)."""
    a, b = args
    registry.MATERIALIZE.impl(m.cap, a, f"list {symbol}")
    if symbol == "+=":
        added = unpack(m, b, None)
        a.items.extend(added)
    else:
        m.cap.observe(b)
        a.items[:] = a.items * b.obj
    m.expect_outputs(inst, 1, lambda real: [a])


@opcode("BINARY_OP")
def _binary_op(m: FrameMonitor, inst: Inst) -> None:
    args = m.pop(2)
    symbol = _BINARY_OP_NAMES[inst.arg]
    fn = _BINARY_OPS[symbol]
    inplace = symbol.endswith("=") and symbol != "=="
    model = _modelled_by_types(registry.BINARY_OP_MODELS, args)
    if symbol.rstrip("=") in "|&-^" and model is not None:
        model(m, inst, args[0], args[1], symbol)  # sets
        return
    if symbol in ("+=", "*=") and type(args[0].obj) is list:
        _list_inplace(m, inst, args, symbol)
        return
    if inplace and not isinstance(args[0].obj, torch.Tensor):
        # `score = 0; score += t`: a scalar has no in-place form, Python computes `0 + t`
        fn, inplace = _BINARY_OPS[symbol[:-1]], False
    if _tensor_involved(*args):
        tensor_op(m, inst, fn, args, inplace=inplace)
    else:
        scalar_op(m, inst, fn, args)


@opcode("COMPARE_OP")
def _compare_op(m: FrameMonitor, inst: Inst) -> None:
    args = m.pop(2)
    fn = _COMPARE_OPS[inst.argval]
    model = _modelled_by_types(registry.COMPARE_MODELS, args)
    if model is not None:
        model(m, inst, args[0], args[1], inst.argval)  # sets
        return
    if inst.arg & INTERP.compare_bool_bit:
        _compare_truth(m, inst, fn, args)
    elif _tensor_involved(*args):
        tensor_op(m, inst, fn, args)
    else:
        scalar_op(m, inst, fn, args)


def _compare_truth(m: FrameMonitor, inst: Inst, fn: Any, args: list[Val]) -> None:
    """A comparison that pushes its truth (3.13 folds ``TO_BOOL`` into ``COMPARE_OP``): the
    comparison as the graph would have it, then its truth as a branch takes it."""
    cap = m.cap
    if not _tensor_involved(*args):
        # (a comparison of Python values is its truth already; symbolic sizes keep their
        # relation guarded, as without the bit)
        scalar_op(m, inst, fn, args)
        return

    def make(real: list[Any]) -> list[Val]:
        result = fn(args[0].obj, args[1].obj)  # (what the instruction compared, before bool())
        node = cap.rec.call("call_function", fn, tensor_operands(cap, fn, args), {})
        if truthiness(m, cap.op_result(result, node)) is not real[0]:
            raise InternalError(f"{inst}: the comparison's truth is not {real[0]!r}")
        return [cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


@opcode("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def _unary(m: FrameMonitor, inst: Inst) -> None:
    args = m.pop()
    fn = _UNARY_OPS[inst.opname]
    if _tensor_involved(*args):
        tensor_op(m, inst, fn, args)
    else:
        scalar_op(m, inst, fn, args)


@opcode("UNARY_NOT")
def _unary_not(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    if python_truth(m, inst, v, 1):
        return  # (``not cache``: its Python __len__, followed)
    truthiness(m, v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("IS_OP")
def _is_op(m: FrameMonitor, inst: Inst) -> None:
    a, b = m.pop(2)
    guard_identity(m, a, b)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


# ---------------------------------------------------------------------- ``in``
@opcode("CONTAINS_OP")
def _contains_op(m: FrameMonitor, inst: Inst) -> None:
    item, container = m.pop(2)
    if isinstance(container.obj, torch.Tensor):
        raise m.unsupported("`in` on a tensor reads tensor values")
    hook = registry.PYTHON_DUNDER.impl(container.obj, "__contains__")
    if hook is not None:  # ``name in self.heads`` (nn.ModuleDict), a user class's own test
        if container.external:
            m.cap.observe_type(container)

        def outputs(real: list[Any], got: Val) -> list[Val]:
            m.cap.observe(got)  # (the instruction pushes its truth value)
            return [m.cap.const(real[0])]

        registry.FOLLOW.impl(m, inst, hook, [container, item], 1, outputs)
        return
    model = registry.CONTAINS_MODELS.get(type(container.obj))
    if model is not None:
        model(m, inst, item, container)  # sets
        return
    if registry.INVOLVES_ARRAY.impl([container, item], None):  # `v in a` reads the array
        op = operator.contains
        array_op = registry.ARRAY_OP.impl
        m.expect_outputs(inst, 1, lambda real: [array_op(m, op, [container, item], real[0])])
        return
    _native_contains(m, inst, item, container)


class Holds:
    """``key in d`` asked again by the guard (a key hashed or compared by Python code)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __call__(self, d: Any) -> bool:
        return self.key in d

    def __eq__(self, other: object) -> bool:
        return type(other) is Holds and other.key is self.key

    def __hash__(self) -> int:
        return id(self.key)

    def __repr__(self) -> str:
        return f"holds({type(self.key).__name__})"


def _contains_again(m: FrameMonitor, inst: Inst, item: Val, container: Val) -> None:
    """``key in d`` where the key's hash or equality is Python: CPython runs it natively, and
    its answer may change while neither the key nor the dict does (a hash over mutable state);
    the guard asks again (the key is a guarded object from outside, so the same one)."""
    cap = m.cap
    if not (container.external and container.node is not None and item.external):
        raise m.unsupported(
            f"`in` through the Python __hash__/__eq__ of a {type(item.obj).__name__}"
        )
    node = container.node
    check = Holds(item.obj)

    def make(real: list[Any]) -> list[Val]:
        cap.graph.observe(node, GuardKind.CUSTOM, Outcome(check, real[0]))
        return [cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


def _native_contains(m: FrameMonitor, inst: Inst, item: Val, container: Val) -> None:
    """``item in container`` of a native container: guarded by what decides it."""
    m.cap.observe(item)
    found = container.payload(DictView)
    view = found.kind if found is not None else None
    if found is not None and view == "keys":  # `k in d.keys()`: `k in d`
        container = found.base
    if isinstance(container.obj, dict) and hashed_by_python(item.obj):
        _contains_again(m, inst, item, container)
        return
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
    p = m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])
    # (``in`` compares the items natively: a Python ``__eq__`` of theirs runs unseen)
    p.calls_back = program_frames()
