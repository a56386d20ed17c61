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

__all__ = ["dynamic_scalar", "guard_outcome", "scalar_tensor", "tensor_operands"]


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


_SCALAR_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool}


def scalar_tensor(value: float | bool) -> torch.Tensor:
    """A promoted Python scalar as the graph sees it: a 0-d tensor of Python's precision.

    A float is a double, as in Python: a float32 tensor would round it before the graph's
    arithmetic, and ``x64 * s`` would differ from eager. Tensor arithmetic with a 0-d tensor
    follows the same type promotion as with the Python scalar (``x32 * s`` stays float32).
    """
    dtype = _SCALAR_DTYPES.get(type(value))
    if dtype is None:
        return torch.tensor(value)
    # (what torch.tensor makes of it, in half its time: the guard of each loop step runs this)
    return torch.scalar_tensor(value, dtype=dtype)


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
    """The graph node of a promoted scalar (or arithmetic over promoted scalars), or None.

    Tensor arithmetic equals Python's only under conditions (no overflow of int64, a non-zero
    divisor, a real power, ints exact as doubles): arithmetic over one promoted scalar guards
    them (``_Exact``, re-evaluating the program's arithmetic on the new value); arithmetic
    over several that needs such conditions is not computed in the graph (its value is a
    constant, guarded by value)."""
    if val.const or type(val.obj) not in (int, float, bool):
        return None
    if (known := val.payload(ScalarFx)) is not None:
        return known.fx
    node = _new_node(cap, val)
    if node is None:
        return None
    if val.expr is not None:
        leaves: list[Val] = []
        others = _graph_leaves(val, leaves)
        if leaves and _needs_check(val):  # (reads and sizes: see speculation, shapes)
            if others or len({id(x) for x in leaves}) != 1:
                return None  # (the node stays unused in the graph)
            cap.graph.observe(
                leaves[0].node, GuardKind.CUSTOM, Outcome(_Exact(_check_tree(val, leaves[0])), True)
            )
        val.set_payload(_Checked(node))
        return node
    val.set_payload(ScalarFx(node))
    return node


def _new_node(cap: Capture, val: Val) -> Any:
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
    return node


class _Checked(ScalarFx):
    """Promoted-scalar arithmetic whose conditions of exactness are guarded (or not needed)."""

    __slots__ = ()


def _graph_args(val: Val) -> list[Val]:
    """The operands of graph-computed ``val`` that the graph computes (the others are constants)."""
    assert val.expr is not None
    return [a for a in val.expr[1] if a.payload(ScalarFx) is not None]


def _graph_leaves(val: Val, out: list[Val]) -> bool:
    """Collect the promoted scalars graph-computed ``val`` is arithmetic over; True where it
    also depends on other graph values (a symbolic size, a tensor's value read)."""
    others = False
    for a in _graph_args(val):
        p = a.payload(ScalarFx)
        if a.expr is None and type(p) is ScalarFx:
            out.append(a)
        elif a.expr is None or type(p) not in (ScalarFx, _Checked):
            others = True
        else:
            others |= _graph_leaves(a, out)
    return others


# arithmetic that IEEE doubles compute exactly as Python floats do (infinities, NaN, signed
# zeros included; bools are 0 and 1), and never raises
_FLOAT_EXACT_OPS = frozenset(
    {operator.add, operator.sub, operator.mul, operator.neg, operator.iadd, operator.isub}
    | {operator.imul, float, operator.lt, operator.le, operator.gt, operator.ge}
    | {operator.eq, operator.ne}
)


def _needs_check(val: Val) -> bool:
    """Whether tensor arithmetic could differ from Python's for other values of the leaves:
    not for float arithmetic, nor for comparisons and bit operations of int64 ints (every
    graph int is in int64: a leaf converts or misses, arithmetic guards its range)."""
    assert val.expr is not None
    fn, args = val.expr
    kinds = {type(a.obj) for a in args}
    if fn is bool or (fn in _SCALAR_LOGIC_OPS and kinds <= {int, bool}):
        return False
    return not (fn in _FLOAT_EXACT_OPS and kinds <= {float, bool})


_INT64 = 2**63
_DOUBLE_EXACT = 2**53  # ints a double holds exactly


@attrs.frozen
class _Exact:
    """``fn(leaf)`` for the guard: True where the graph computes promoted-scalar arithmetic
    ``val`` as Python does for this value of ``leaf``: every intermediate of the same type as
    when recorded, ints within int64 (within 2**53 where they meet floats), nothing raised."""

    tree: Any

    def __call__(self, x: Any) -> bool:
        try:
            self.tree(x)
        except (ArithmeticError, ValueError, TypeError, _Inexact):
            return False
        return True


class _Inexact(Exception):
    pass


def _check_tree(val: Val, leaf: Val, *, root: bool = True) -> Any:
    """``val``'s arithmetic (computed by the graph) as a checked function of ``leaf``."""
    if val is leaf:
        return _identity
    if val.expr is None or (not root and val.payload(ScalarFx) is None):
        return _Constant(val.obj)
    fn, args = val.expr
    parts = tuple(_check_tree(a, leaf, root=False) for a in args)
    return _CheckedApply(fn, parts, type(val.obj))


@attrs.frozen
class _CheckedApply:
    fn: Any
    parts: tuple[Any, ...]
    kind: type

    def __call__(self, x: Any) -> Any:
        vals = [part(x) for part in self.parts]
        ints = all(type(v) is int for v in vals)
        if self.fn in (operator.pow, operator.ipow) and ints and abs(vals[0]) > 1 and vals[1] >= 64:
            raise _Inexact  # (out of range: not computed)
        r = self.fn(*vals)
        if type(r) is not self.kind:
            raise _Inexact
        floats = type(r) is float or any(type(v) is float for v in vals)
        bound = _DOUBLE_EXACT if floats else _INT64
        if any(type(v) is int and not -bound <= v < bound for v in (*vals, r)):
            raise _Inexact
        return r


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


# tensor operations whose kernels take another path for a Python scalar than for a 0-d tensor
# (``x ** 2`` squares, ``x ** 0.5`` takes a square root): their scalars are not promoted
_SCALAR_KERNEL_OPS = frozenset({operator.pow, operator.ipow})


def tensor_operands(cap: Capture, fn: Any, args: list[Val]) -> tuple[Any, ...]:
    """The fx operands of tensor operation ``fn(*args)``, promoted scalars included.

    Python scalars are *weak* in type promotion (``x_int64 * 0.5`` is float32, the default
    dtype, and ``t0d_f32 * 0.5`` stays float32), a 0-d float64 tensor is not: a promoted
    scalar is cast to the dtype the operation takes with the Python scalar, where they differ.
    """
    promote = fn not in _SCALAR_KERNEL_OPS
    out = [cap.to_arg(a, promote=promote) for a in args]
    if len(args) != 2:
        return tuple(out)
    for i, (a, x) in enumerate(zip(args, out, strict=True)):
        other = args[1 - i].obj
        if not isinstance(x, fx.Node) or type(a.obj) not in (int, float, bool):
            continue
        if not isinstance(other, torch.Tensor):
            continue
        ordered = (other, a.obj) if i else (a.obj, other)
        weak = torch.result_type(*ordered)
        strong = torch.result_type(
            *((other, scalar_tensor(a.obj)) if i else (scalar_tensor(a.obj), other))
        )
        if weak != strong:
            out[i] = cap.rec.call("call_method", "to", (x, weak), {})
    return tuple(out)
