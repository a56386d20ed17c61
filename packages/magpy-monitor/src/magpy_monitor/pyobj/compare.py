"""``==``/``!=`` of lists and tuples that hold tensors (or immutable objects guarded by value, such
as DTensor placements), element by element as Python runs it.

``assert list(scores.size()) == [b * h, n_global, seq]`` where ``n_global`` is a 0-d tensor
(Longformer's count of global tokens) compares ``int == tensor`` and takes ``bool()`` of the
resulting tensor: a tensor's value read into Python. Observing the two lists as values would
end the graph there; modelled element by element, each tensor comparison is a node of the
graph whose outcome is assumed (``speculation.truth_of_tensor``) and checked after the graph,
and the other elements are guarded by value as before.

Python's order is kept: lengths first (different lengths: unequal, no element compared), then
the pairs in order, each ``x is y or bool(x == y)``, up to the first unequal pair.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from ..core import registry
from ..core.frame import FrameMonitor, Inst
from ..core.operators import scalar_op
from ..core.scalars import tensor_operands
from ..core.speculation import truth_of_tensor
from ..core.values import Val
from ..core.valuetypes import is_value_type

__all__ = ["compare_sequences"]

_SEQUENCES = (list, tuple, torch.Size)
_REASON = "a comparison of sequences that hold tensors reads a tensor's value"


def _plain_item(v: Val) -> bool:
    """An element this model compares: a plain tensor, a value or an immutable object guarded by
    its value (``registry.VALUE_OBSERVERS``: a DTensor placement)."""
    return (
        type(v.obj) is torch.Tensor
        or v.obj is None
        or is_value_type(v.obj)
        or type(v.obj) in registry.VALUE_OBSERVERS
    )


def _holds_tensor(m: FrameMonitor, a: Val, b: Val) -> list[tuple[Val, Val]] | None:
    """The pairs to compare when both are sequences of one kind, of one length, of plain
    elements, with a tensor among them (None: the generic model decides)."""
    if (type(a.obj) is list) != (type(b.obj) is list) or len(a.obj) != len(b.obj):
        return None
    special = (torch.Tensor, *registry.VALUE_OBSERVERS)
    if not any(type(x) in special for s in (a.obj, b.obj) for x in s):
        return None
    unpack = registry.UNPACK.impl
    xs, ys = unpack(m, a, len(a.obj)), unpack(m, b, len(b.obj))
    if not all(_plain_item(v) for v in (*xs, *ys)):
        return None
    if any(x.obj is y.obj and type(x.obj) is torch.Tensor for x, y in zip(xs, ys, strict=True)):
        return None  # (``is`` decides without reading a value: left to the generic model)
    return list(zip(xs, ys, strict=True))


def _pair_equal(m: FrameMonitor, x: Val, y: Val) -> bool:
    """``x is y or bool(x == y)`` of one pair, what decides it guarded or assumed."""
    cap = m.cap
    if type(x.obj) is not torch.Tensor and type(y.obj) is not torch.Tensor:
        for v in (x, y):
            registry.VALUE_OBSERVERS.get(type(v.obj), type(cap).observe)(cap, v)
        return bool(x.obj is y.obj or x.obj == y.obj)
    real = x.obj == y.obj
    if not isinstance(real, torch.Tensor):
        raise m.unsupported(_REASON)  # (a tensor never answers NotImplemented to a value)
    node = cap.rec.call("call_function", operator.eq, tensor_operands(cap, operator.eq, [x, y]), {})
    return truth_of_tensor(cap, cap.op_result(real, node), _REASON)


@registry.register_types(registry.COMPARE_MODELS, *_SEQUENCES)
def compare_sequences(m: FrameMonitor, inst: Inst, a: Val, b: Val, symbol: str) -> None:
    """COMPARE_OP between two lists or tuples (``torch.Size`` is one)."""
    fn = {"==": operator.eq, "!=": operator.ne}.get(symbol)
    pairs = _holds_tensor(m, a, b) if fn is not None else None
    if pairs is None:
        scalar_op(m, inst, fn or _ORDER[symbol], [a, b])
        return
    equal = all(_pair_equal(m, x, y) for x, y in pairs)  # (stops at the first unequal pair)
    result = equal if symbol == "==" else not equal

    def make(real: list[Any]) -> list[Val]:
        if real[0] is not result:
            raise m.unsupported(f"{symbol} of two sequences the monitor cannot follow")
        return [m.cap.const(real[0])]

    m.expect_outputs(inst, 1, make)


_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
