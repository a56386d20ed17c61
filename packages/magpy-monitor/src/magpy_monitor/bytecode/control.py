"""Control flow and the stack: no-ops, shuffles, conditional jumps, loops and ``yield from``.

Handlers never execute the instruction (CPython does); they pop the shadow inputs and push, or
leave pending, the shadow outputs. A conditional jump depends on its operand's truth, which is
guarded (``truthiness``); iteration itself is modelled in ``iteration.py``.
"""

from __future__ import annotations

import dis
import types
from typing import Any

import torch

from ..core import registry
from ..core.attributes import MISSING, guard_class_attr, static_lookup
from ..core.calls import truthiness
from ..core.frame import FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import Val
from ..core.valuetypes import is_value_type
from .iteration import for_iter, get_iter, send

__all__: list[str] = []


# ---------------------------------------------------------------------- no-ops and shuffles
@opcode(
    "NOP",
    "RESUME",
    "NOT_TAKEN",
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
    "RETURN_VALUE",
    "YIELD_VALUE",
)
def _nop(m: FrameMonitor, inst: Inst) -> None:
    """Nothing to model (returns and yields are handled at the ``return`` event)."""


@opcode("RETURN_CONST")
def _return_const(m: FrameMonitor, inst: Inst) -> None:
    """``return <constant>`` in one instruction (3.12): the value the return event pops."""
    m.push(Val(inst.argval, const=True))


@opcode("POP_TOP")
def _pop_top(m: FrameMonitor, inst: Inst) -> None:
    m.pop()


@opcode("END_FOR")
def _end_for(m: FrameMonitor, inst: Inst) -> None:
    """The end of a loop reached without its ``FOR_ITER`` (a generator's ``StopIteration``):
    drops what it drops (3.12: the value and the iterator; 3.13: the value)."""
    m.pop(-dis.stack_effect(dis.opmap["END_FOR"]))


@opcode("END_SEND")
def _end_send(m: FrameMonitor, inst: Inst) -> None:
    """``[receiver, value] -> [value]`` after a ``yield from`` or ``await`` finished."""
    _receiver, value = m.pop(2)
    m.push(value)


@opcode("TO_BOOL")
def _to_bool(m: FrameMonitor, inst: Inst) -> None:
    """``bool(v)`` before a conditional jump or ``not`` (3.13): the outcome is guarded here, as
    3.11's jumps do themselves; the jump then reads a constant bool."""
    (v,) = m.pop()
    if python_truth(m, inst, v, 1):
        return
    truthiness(m, v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("COPY")
def _copy(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.stack[-inst.arg])


@opcode("SWAP")
def _swap(m: FrameMonitor, inst: Inst) -> None:
    s, i = m.stack, inst.arg
    s[-1], s[-i] = s[-i], s[-1]


# ---------------------------------------------------------------------- conditional jumps
@opcode(
    "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_FALSE",
)
def _pop_jump_if(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    if not python_truth(m, inst, v, 0):
        truthiness(m, v)


def python_truth(m: FrameMonitor, inst: Inst, v: Val, n_out: int) -> bool:
    """``bool(v)`` where ``v``'s class answers in Python (``__bool__``, else ``__len__``: a
    cache's ``if past_key_values:``): the method is followed (True) and the truth of what
    it returned is guarded; ``n_out`` (0 or 1) is what the instruction pushes, its result."""
    cls = type(v.obj)
    if isinstance(v.obj, torch.Tensor) or is_value_type(v.obj) or v.obj is None:
        return False
    method = static_lookup(cls, "__bool__")
    if method is MISSING:
        method = static_lookup(cls, "__len__")
    if not isinstance(method, types.FunctionType):
        return False
    cap = m.cap
    if v.external:
        cap.observe_type(v)
    guard_class_attr(cap, cls, method.__name__)

    def outputs(real: list[Any], got: Val) -> list[Val]:
        truthiness(m, got)
        return [cap.const(real[0])] if n_out else []

    registry.FOLLOW.impl(m, inst, method, [v], n_out, outputs)
    return True


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


# ---------------------------------------------------------------------- loops
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
    send(m, inst)


@opcode("FOR_ITER")
def _for_iter(m: FrameMonitor, inst: Inst) -> None:
    for_iter(m, inst)


# ---------------------------------------------------------------------- not modelled
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
