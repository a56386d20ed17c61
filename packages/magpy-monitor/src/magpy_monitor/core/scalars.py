"""Python scalars promoted to graph inputs: ``x * scale`` where ``scale`` changes per call.

An entry int/float/bool on a *dynamic* path (``Capture.dynamic_paths``, or every one with
``promote_all``) is not guarded by value when tensor arithmetic uses it: it becomes a 0-d tensor
placeholder of the graph (``scalar_tensor``), and arithmetic over such scalars (``s / 2``,
``float(s)``) becomes graph nodes too. A Python branch on promoted-scalar arithmetic
(``if step > warmup``) guards the branch's outcome instead of the scalar's value
(``guard_outcome``), so one record serves every value that takes the same branch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import torch
import torch.fx as fx

from magpy_refgraph import GuardKind, Outcome

from .speculation import assume_outcome, python_number, speculated
from .values import Payload, ScalarFx, Val
from .valuetypes import is_value_type

if TYPE_CHECKING:
    from .capture import Capture

__all__ = ["dynamic_scalar", "guard_outcome", "scalar_tensor"]


# comparisons and bit operations act on bools as bools; the other scalar ops treat them as ints
_SCALAR_LOGIC_OPS = frozenset(
    {
        operator.lt,
        operator.le,
        operator.gt,
        operator.ge,
        operator.eq,
        operator.ne,
        operator.and_,
        operator.or_,
        operator.xor,
    }
)


# exprs whose value depends on more than the values of their arguments
_NOT_SCALAR_ARITHMETIC = frozenset({len, range, getattr, hash, id})


def _expr_of(val: Val, leaf: Val) -> Callable[[Any], Any]:
    """``val``'s arithmetic as a function of ``leaf``'s value (the others are constants)."""
    if val is leaf:
        return _identity
    if val.expr is None:
        return _Constant(val.obj)
    fn, args = val.expr
    return _Apply(fn, tuple(_expr_of(a, leaf) for a in args))


def _identity(x: Any) -> Any:
    return x


@attrs.frozen
class _Constant:
    value: Any

    def __call__(self, x: Any) -> Any:
        return self.value


@attrs.frozen
class _Apply:
    """``fn(*(part(x) for part in parts))``: a guard re-evaluates the program's arithmetic."""

    fn: Any
    parts: tuple[Any, ...]

    def __call__(self, x: Any) -> Any:
        return self.fn(*(part(x) for part in self.parts))


def scalar_tensor(value: float | bool) -> torch.Tensor:
    """A promoted Python scalar as the graph sees it: a 0-d tensor of Python's precision.

    A float is a double, as in Python: a float32 tensor would round it before the graph's
    arithmetic, and ``x64 * s`` would differ from eager. Tensor arithmetic with a 0-d tensor
    follows the same type promotion as with the Python scalar (``x32 * s`` stays float32).
    """
    if type(value) is float:
        return torch.tensor(value, dtype=torch.float64)
    return torch.tensor(value)


_GRAPH_SCALAR_OPS = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.truediv,
        operator.neg,
        operator.pow,
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.itruediv,
    }
    # a promoted bool (``x * (step > warmup)``) is a 0-d bool tensor, which tensor arithmetic
    # treats as Python treats True/False
    | _SCALAR_LOGIC_OPS
)


def dynamic_scalar(cap: Capture, val: Val) -> Any:
    """The graph node of a promoted scalar (or arithmetic over promoted scalars), or None."""
    if val.const or type(val.obj) not in (int, float, bool):
        return None
    if (known := val.payload(ScalarFx)) is not None:
        return known.fx
    node = None
    if val.external and val.node is not None and val.payload(Payload) is None:
        path = cap.paths[val.node]
        if cap.promote_all or path in cap.dynamic_paths:
            cap.observe_type(val)
            node = cap.rec.placeholder(path, scalar_tensor(val.obj))
            cap.scalar_inputs.add(len(cap.rec.input_paths) - 1)
    elif val.expr is not None and val.expr[0] in (int, float, bool) and len(val.expr[1]) == 1:
        (arg,) = val.expr[1]
        x = dynamic_scalar(cap, arg)
        if x is None:
            return None
        node = python_number(cap, x, val.expr[0], type(arg.obj) is float)  # float(s)
    elif val.expr is not None and val.expr[0] in _GRAPH_SCALAR_OPS:
        fn, args = val.expr
        mapped = [dynamic_scalar(cap, a) for a in args]
        if all(x is None for x in mapped):
            return None
        fx_args = tuple(
            _python_operand(cap, fn, val.obj, a, x if x is not None else cap.to_arg(a))
            for x, a in zip(mapped, args, strict=True)
        )
        node = cap.rec.call("call_function", fn, fx_args, {})
    if node is not None:
        val.set_payload(ScalarFx(node))
    return node


def guard_outcome(cap: Capture, val: Val) -> bool:
    """Python branches on ``val``, computed from one promoted scalar (``if step > warmup``):
    guard the outcome instead of the scalar's value, so one record serves every value that
    takes the same branch. Returns False (nothing guarded) for any other ``val``.

    A branch on a tensor's value read into Python (or arithmetic over such reads) assumes
    the outcome instead, checked after the graph ran (see _speculation)."""
    if speculated(val) and assume_outcome(cap, val):
        return True
    if val.const or val.expr is None or val.expr[0] in _NOT_SCALAR_ARITHMETIC:
        return False
    leaves: list[Val] = []
    if not _scalar_expr_leaves(cap, val, leaves):
        return False
    dynamic = [x for x in leaves if not x.const and _promotable(cap, x)]
    if len({id(x) for x in dynamic}) != 1:
        return False
    leaf = dynamic[0]
    for x in leaves:
        if x is not leaf:
            cap.observe(x)  # a scalar that has not changed: a constant, guarded by value
    assert leaf.node is not None
    cap.observe_type(leaf)
    fn = _expr_of(val, leaf)
    if type(val.obj) is bool:
        val.const = True  # the outcome is the value
    else:
        fn = _Apply(bool, (fn,))  # ``d = s - w; if d:`` guards bool(d), not d
    cap.graph.observe(leaf.node, GuardKind.CUSTOM, Outcome(fn, bool(val.obj)))
    return True


def _promotable(cap: Capture, val: Val) -> bool:
    """An entry int/float/bool that changes from call to call (a dynamic path)."""
    return (
        val.external
        and val.node is not None
        and type(val.payload(Payload)) in (type(None), ScalarFx)  # (not a size, not a read)
        and type(val.obj) in (int, float, bool)
        and (cap.promote_all or cap.paths[val.node] in cap.dynamic_paths)
    )


def _scalar_expr_leaves(cap: Capture, val: Val, out: list[Val]) -> bool:
    """Collect the leaves of promoted-scalar arithmetic ``val`` (False: something else)."""
    if val.expr is None:
        if (val.const and is_value_type(val.obj)) or (
            val.external and val.node is not None and type(val.obj) in (int, float, bool)
        ):
            out.append(val)
            return True
        return False
    fn, args = val.expr
    if fn in _NOT_SCALAR_ARITHMETIC:
        return False
    # any other expr is a pure Python function of values (operators, abs, math.*): the
    # guard calls the very same functions
    return all(_scalar_expr_leaves(cap, a, out) for a in args)


def _python_operand(cap: Capture, fn: Any, result: Any, arg: Val, x: Any) -> Any:
    """Operand ``x`` (a 0-d tensor node or a constant) of promoted scalar arithmetic, cast
    so the tensor operation computes what Python does: bools are ints in arithmetic
    (``True + True == 2``), and an int operand of an op with a float result is a double
    first (``s / 2``, ``2 ** -s``: int64 tensors would give float32 or refuse)."""
    if fn in _SCALAR_LOGIC_OPS:
        return x
    kind = type(arg.obj)
    want = torch.float64 if type(result) is float else torch.int64
    if kind is bool or (kind is int and want is torch.float64):
        if isinstance(x, fx.Node):
            return cap.rec.call("call_method", "to", (x, want), {})
        return float(x) if want is torch.float64 else int(x)
    return x
