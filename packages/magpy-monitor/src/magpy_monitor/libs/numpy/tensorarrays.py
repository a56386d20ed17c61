"""ndarrays over a tensor's values (``t.numpy()``) that only feed arithmetic back into tensors.

``t.numpy()`` (also ``t.detach().cpu().numpy()``, ``np.asarray(t)``, ``np.array(t)``) hands
Python an array over the tensor's values: with a plain tracer the graph ends there. Where the
array only meets numpy arithmetic whose result goes back into a tensor
(``torch.from_numpy(np.maximum(x.numpy(), 0) * 2)``), the whole computation is tensor math:
the array's shadow carries the graph node of the tensor it holds (``TensorArray``), each numpy
operation over such arrays is recorded as the torch operation computing the same values, and
``torch.from_numpy``/``as_tensor``/``tensor`` of the result is that node.

Only operations whose values are identical in both libraries are recorded: comparisons,
``maximum``/``minimum``, ``where``, ``abs``, negation, rounding to integers, logical and bitwise
operations, the correctly rounded ``+ - * /`` and ``sqrt``, and basic subscripts (``a[1:, 0]``:
views in both, with the same strides). Operands are first converted to the dtype numpy computes
in (``np.result_type``, or the result's dtype for arithmetic) as numpy converts them, over bool,
int32, int64, float32 and float64 only. Arithmetic that may meet a floating-point condition (an
overflow, a division by zero: numpy warns or raises under its error state) is recorded with an
assumption that its result is finite (see ``core.speculation``): a call where it is not misses
and runs the program eagerly, warnings included; the error state is guarded. At record time
every recorded operation is also run in torch over the run's values and must give numpy's
result bit for bit, or it is a break.

An array drawn at random (``np.random.normal(size=s)``, ``libs.numpy.randomstate``) is *fed*
(``FedArray``): the mock draws it again on every call and sets the graph's input to it. Any
other numpy operation over fed arrays and numbers (``(1 + s) ** rnd``, ``np.exp(rnd)``: not
exact in torch) is computed again the same way (``_computed_from_draws``): by the mock, with
numpy, right after the draws, its result fed to the graph in turn, so it has numpy's bits.

Any other use of such an array (a Python branch on ``a.sum()``, an attribute, iteration, a
write, returning it) finds an array that was not made from guarded values: a break, as before.
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import Attr, Const, GuardKind, Outcome

from ...core import registry
from ...core.capture import Capture
from ...core.frame import FrameMonitor, Inst
from ...core.speculation import assume
from ...core.values import Payload, Val, Write
from ..stdlib.draws import Draw, DrawHolder, GeneratorKind
from .errstate import ErrorState

__all__ = [
    "FedArray",
    "TensorArray",
    "array_method",
    "fed_array",
    "numpy_call",
    "operator_result",
    "tensor_of_array",
]

try:
    np: Any = importlib.import_module("numpy")
except ImportError:  # numpy is optional
    np = None


class TensorArray(Payload):
    """An ndarray holding the values of graph node ``fx`` (a tensor of the same dtype);
    ``view``: ``fx`` has the array's strides (a tensor sharing the array's memory is a view of
    ``fx``)."""

    __slots__ = ("fx", "view")

    def __init__(self, fx: Any, *, view: bool = False) -> None:
        self.fx, self.view = fx, view


class FedArray(TensorArray):
    """An array the mock sets on every call before the graph runs (a draw, or numpy over
    draws): ``holder.t`` holds its values, a graph input by a constant path."""

    __slots__ = ("holder",)

    def __init__(self, fx: Any, holder: DrawHolder) -> None:
        super().__init__(fx, view=True)
        self.holder = holder


def fed_array(cap: Capture, out: Any) -> tuple[Val, Callable[[Any], bool]]:
    """The shadow of C-contiguous array ``out``, fed to the graph on every call through a
    holder of its dtype and shape; and ``feed(value)``, which sets the holder to the array
    ``value`` of a later call (False where it does not fit)."""
    shape, dtype = out.shape, out.dtype
    holder = DrawHolder(shape, torch.from_numpy(out).dtype)
    holder.t.copy_(torch.from_numpy(out))
    root = cap.root(Const(holder), holder)
    node = cap.to_arg(cap.child(root, Attr("t"), holder.t))
    node = cap.rec.call("call_method", "clone", (node,), {"memory_format": torch.contiguous_format})
    val = cap.new(out, payload=FedArray(node, holder))

    def feed(value: Any) -> bool:
        if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
            return False
        holder.t.copy_(torch.from_numpy(value))
        return True

    return val, feed


def _dtypes() -> dict[Any, torch.dtype]:
    if np is None:
        return {}
    pairs = [("bool", torch.bool), ("int32", torch.int32), ("int64", torch.int64)]
    pairs += [("float32", torch.float32), ("float64", torch.float64)]
    return {np.dtype(n): t for n, t in pairs}


_TORCH_DTYPE = _dtypes()

# exact in both libraries and never a floating-point condition: name -> torch function
_EXACT: dict[str, Any] = {
    "maximum": torch.maximum, "minimum": torch.minimum, "fmax": torch.fmax,
    "fmin": torch.fmin, "absolute": torch.abs, "abs": torch.abs, "negative": torch.neg,
    "positive": torch.positive, "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc,
    "greater": torch.gt, "greater_equal": torch.ge, "less": torch.lt, "less_equal": torch.le,
    "equal": torch.eq, "not_equal": torch.ne, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf,
    "isfinite": torch.isfinite, "where": torch.where,
    "gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le, "eq": torch.eq,
    "ne": torch.ne, "neg": torch.neg, "pos": torch.positive,
    "and_": torch.bitwise_and, "or_": torch.bitwise_or, "xor": torch.bitwise_xor,
    "invert": torch.bitwise_not,
}  # fmt: skip
# correctly rounded, but a floating-point condition numpy reports (an overflow, 0/0...)
_ARITHMETIC: dict[str, Any] = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "true_divide": torch.div,
    "divide": torch.div, "sqrt": torch.sqrt, "square": torch.square, "sub": torch.sub,
    "mul": torch.mul, "truediv": torch.div,
}  # fmt: skip
# the result dtype is the dtype the operation computes in
_RESULT_DTYPE = frozenset(_ARITHMETIC) | {"floor", "ceil", "trunc", "where"}


def is_tensor_array(v: Val) -> bool:
    return v.payload(TensorArray) is not None


# ---------------------------------------------------------------------- arrays from tensors
def tensor_to_array(m: FrameMonitor, inst: Inst, t: Val, what: str, *, copy: bool) -> None:
    """``t.numpy()`` (``copy``: ``np.array(t)``): an array over ``t``'s values in the graph."""
    obj = t.obj
    if (
        type(obj) is not torch.Tensor
        or obj.requires_grad
        or obj.device.type != "cpu"
        or obj.dtype not in _TORCH_DTYPE.values()
        or obj.layout is not torch.strided
    ):
        raise m.unsupported(f"{what} reads tensor values into Python")
    cap = m.cap
    node = cap.to_arg(t)

    def make(real: list[Any]) -> list[Val]:
        arr = real[0]
        if type(arr) is not np.ndarray or _TORCH_DTYPE.get(arr.dtype) is not obj.dtype:
            raise m.unsupported(f"{what} gave a {type(arr).__name__}")
        x = cap.rec.call("call_method", "detach", (node,), {})
        strides = tuple(s * arr.itemsize for s in obj.stride())
        if copy:  # np.array(t): numpy's copy, contiguous where it is
            x = cap.rec.call("call_method", "clone", (x,), {})
            if arr.flags.c_contiguous:
                x = cap.rec.call("call_method", "contiguous", (x,), {})
        same = arr.flags.c_contiguous if copy else arr.strides == strides
        return [cap.new(arr, payload=TensorArray(x, view=bool(same)))]

    m.expect_outputs(inst, 1, make)


@registry.ARRAY_OF_TENSOR.provide
def array_of_tensor(m: FrameMonitor, inst: Inst, t: Val, what: str) -> None:
    tensor_to_array(m, inst, t, what, copy=False)


# ---------------------------------------------------------------------- operations
def numpy_call(m: FrameMonitor, inst: Inst, fn: Any, pos: list[Val], kw: dict[str, Val]) -> bool:
    """``np.<fn>(...)`` over arrays of tensor values (or ``np.asarray(t)`` of a tensor): True
    where it is recorded as tensor math; False leaves it to the constant-array rules."""
    name = getattr(fn, "__name__", "")
    of_tensor = len(pos) == 1 and not kw and isinstance(pos[0].obj, torch.Tensor)
    if name in ("asarray", "array") and of_tensor:
        tensor_to_array(m, inst, pos[0], f"numpy.{name}", copy=name == "array")
        return True
    if not any(is_tensor_array(v) for v in (*pos, *kw.values())):
        return False
    if not kw and name not in _EXACT and name not in _ARITHMETIC and _over_draws(fn, pos):

        def computed(real: list[Any]) -> list[Val]:
            val = _computed_from_draws(m, fn, pos, real[0])
            if val is None:
                raise m.unsupported(f"numpy.{name} over a ndarray of tensor values")
            return [val]

        m.expect_outputs(inst, 1, computed)
        return True
    if (
        kw
        or (name not in _EXACT and name not in _ARITHMETIC)
        or (name == "where" and len(pos) != 3)
    ):
        raise m.unsupported(f"numpy.{name} over a ndarray of tensor values")

    def make(real: list[Any]) -> list[Val]:
        return [_record(m, name, pos, real[0])]

    m.expect_outputs(inst, 1, make)
    return True


def operator_result(m: FrameMonitor, fn: Any, args: list[Val], result: Any) -> Val | None:
    """An operator (``a * 2``, ``a > b``, ``-a``) over arrays of tensor values, after it ran;
    None where no operand is one."""
    if not any(is_tensor_array(v) for v in args):
        return None
    name = getattr(fn, "__name__", "")
    if name == "getitem":
        return _item(m, args, result)
    if name not in _EXACT and name not in _ARITHMETIC:  # (in-place operators among them)
        computed = _computed_from_draws(m, fn, args, result) if _over_draws(fn, args) else None
        if computed is None:
            raise m.unsupported(f"operator.{name} over a ndarray of tensor values")
        return computed
    return _record(m, name, args, result)


def array_method(
    m: FrameMonitor, inst: Inst, name: str, pos: list[Val], kw: dict[str, Val]
) -> bool:
    """``a.astype(dtype)`` of an array of tensor values: a conversion numpy and torch make
    alike (to float64, to bool, between integers, to float32 from integers or float32)."""
    if not pos or not is_tensor_array(pos[0]):
        return False
    if name != "astype" or len(pos) != 2 or kw:
        raise m.unsupported(f"ndarray.{name} of a ndarray of tensor values")
    m.cap.observe(pos[1])
    src, dst = pos[0].obj.dtype, np.dtype(pos[1].obj)
    ok = dst.kind == "b" or dst == np.float64 or (dst.kind == "i" and src.kind in "bi")
    if not ok and not (dst == np.float32 and (src.kind in "bi" or src == np.float32)):
        raise m.unsupported(f"ndarray.astype from {src} to {dst}")

    def make(real: list[Any]) -> list[Val]:
        return [_record(m, "astype", pos[:1], real[0])]

    m.expect_outputs(inst, 1, make)
    return True


# ---------------------------------------------------------------------- numpy over draws
_IN_PLACE = frozenset(
    "iadd isub imul itruediv ifloordiv imod ipow imatmul iand ior ixor ilshift irshift".split()
)
_MAX_FED = 1 << 16  # (elements of an array fed to the graph on every call)


def _over_draws(fn: Any, args: list[Val]) -> bool:
    """A function over fed arrays and plain numbers only, that changes none of them (an
    operator, a ufunc), at least one fed array among its operands."""
    if getattr(fn, "__name__", "") in _IN_PLACE:
        return False
    if not (getattr(fn, "__module__", None) == "_operator" or isinstance(fn, np.ufunc)):
        return False
    fed = [a.payload(FedArray) is not None for a in args]
    plain = (bool, int, float)
    return any(fed) and all(f or type(a.obj) in plain for f, a in zip(fed, args, strict=True))


class _Recompute:
    """``fn`` over the arrays the holders hold now and the numbers, under an error state that
    reports nothing: a non-finite result is a miss instead (the program runs again and numpy
    warns or raises there, as in eager)."""

    __slots__ = ("fn", "parts")

    def __init__(self, fn: Any, parts: tuple[Any, ...]) -> None:
        self.fn, self.parts = fn, parts

    def __call__(self) -> Any:
        args = [p.t.numpy() if isinstance(p, DrawHolder) else p for p in self.parts]
        with np.errstate(all="ignore"):
            out = self.fn(*args)
        return out if type(out) is np.ndarray and np.isfinite(out).all() else None


_NOT_DRAWN = GeneratorKind(frozenset(), lambda g: None, lambda g, state: None)


def _computed_from_draws(m: FrameMonitor, fn: Any, args: list[Val], result: Any) -> Val | None:
    """``fn(*args)`` (it gave ``result``) over arrays fed from draws and numbers, which torch
    may not compute bit for bit as numpy: the mock computes it again with numpy on every
    call, after the draws it depends on (a step of the record's draws), and feeds the result
    to the graph. None where the result is no finite array the graph can take."""
    if (
        type(result) is not np.ndarray
        or result.dtype not in _TORCH_DTYPE
        or not result.flags.c_contiguous
        or not 0 < result.size <= _MAX_FED
        or not np.isfinite(result).all()
        or np.geterr().get("under") != "ignore"
        or not m.cap.speculate
    ):
        return None
    cap = m.cap
    parts: list[Any] = []
    for a in args:
        fed = a.payload(FedArray)
        if fed is None:
            cap.observe(a)  # a number: a guarded constant
        parts.append(a.obj if fed is None else fed.holder)
    _guard_error_state(cap)  # (underflow ignored, as when recorded)
    val, feed = fed_array(cap, result)
    where = f"numpy {getattr(fn, '__name__', fn)} over drawn arrays"
    draw = Draw(_Recompute(fn, tuple(parts)), object(), _NOT_DRAWN, (), {}, None, where)
    draw.feed = feed
    cap.writes.append(Write("draw", cap.const(draw.generator), draw, None))
    return val


# ---------------------------------------------------------------------- recording
def _record(m: FrameMonitor, name: str, args: list[Val], result: Any) -> Val:
    """The shadow of ``result``, computed by ``name`` over ``args``: graph nodes computing the
    same values, checked against numpy's result on the run's values."""
    cap = m.cap
    if type(result) is not np.ndarray or result.dtype not in _TORCH_DTYPE:
        raise m.unsupported(f"numpy {name} over tensor values gave a {type(result).__name__}")
    out_dtype = _TORCH_DTYPE[result.dtype]
    work = out_dtype if name in _RESULT_DTYPE else _common_dtype(m, name, args)
    try:
        pairs = [_operand(m, a, work, cond=name == "where" and i == 0) for i, a in enumerate(args)]
        values = [v for _, v in pairs]
        expect = values[0].to(out_dtype, copy=True) if name == "astype" else _fn(name)(*values)
    except (RuntimeError, TypeError, OverflowError) as exc:
        raise m.unsupported(f"numpy {name} over tensor values: {exc}") from exc
    raw_dtype = expect.dtype
    if raw_dtype != out_dtype:
        expect = expect.to(out_dtype)
    if not _same(expect, torch.from_numpy(np.ascontiguousarray(result))):
        raise m.unsupported(f"numpy {name} over tensor values differs from torch's")
    checked = name in _ARITHMETIC and out_dtype.is_floating_point
    if checked:
        _can_assume_finite(m, name, expect)
    nodes = tuple(n for n, _ in pairs)
    if name == "astype":
        node = cap.rec.call("call_method", "to", (nodes[0], out_dtype), {"copy": True})
    else:
        node = cap.rec.call("call_function", _fn(name), nodes, {})
    if raw_dtype != out_dtype:
        node = cap.rec.call("call_method", "to", (node, out_dtype), {})
    if result.flags.c_contiguous:  # (numpy's layout: a tensor sharing its memory has it too)
        node = cap.rec.call("call_method", "contiguous", (node,), {})
    if checked:
        _assume_finite(m, name, node)
    return cap.new(result, payload=TensorArray(node, view=bool(result.flags.c_contiguous)))


def _item(m: FrameMonitor, args: list[Val], result: Any) -> Val:
    """``a[key]`` with a basic index (ints, slices with a positive step, None, ``...``): a view
    in both libraries, with the same strides."""
    base, key = args
    ta = base.payload(TensorArray)
    if ta is None or type(result) is not np.ndarray or not _basic_index(key.obj, top=True):
        raise m.unsupported("a subscript of a ndarray of tensor values that is no basic index")
    cap = m.cap
    cap.observe(key)
    node = cap.rec.call("call_function", operator.getitem, (ta.fx, cap.to_arg(key)), {})
    return cap.new(result, payload=TensorArray(node, view=ta.view))


def _basic_index(key: Any, *, top: bool) -> bool:
    if type(key) is tuple and top:
        return all(_basic_index(k, top=False) for k in key)
    if type(key) is slice:
        parts = (key.start, key.stop, key.step)
        return all(p is None or type(p) is int for p in parts) and (key.step or 1) > 0
    return key is None or key is Ellipsis or type(key) is int


def _fn(name: str) -> Any:
    return _EXACT.get(name) or _ARITHMETIC[name]


def _common_dtype(m: FrameMonitor, name: str, args: list[Val]) -> torch.dtype:
    """The dtype numpy converts the operands to (Python numbers weakly, as numpy 2 does)."""
    objs = [a.obj for a in (args[1:] if name == "where" else args)]
    try:
        common = np.result_type(*objs)
    except (TypeError, ValueError, OverflowError) as exc:
        raise m.unsupported(f"numpy {name} over tensor values: {exc}") from exc
    if common not in _TORCH_DTYPE:
        raise m.unsupported(f"numpy {name} over tensor values computes in {common}")
    return _TORCH_DTYPE[common]


def _operand(m: FrameMonitor, v: Val, work: torch.dtype, *, cond: bool) -> tuple[Any, Any]:
    """Operand ``v`` in dtype ``work`` (``cond``: ``where``'s bool condition): its graph
    argument and its value now."""
    cap = m.cap
    ta = v.payload(TensorArray)
    if cond and (ta is None or v.obj.dtype != np.bool_):
        raise m.unsupported("numpy.where over tensor values with a condition that is no bool array")
    if ta is not None:
        value = torch.from_numpy(np.ascontiguousarray(v.obj))
        node = ta.fx
        if cond or value.dtype == work:
            return node, value
        return cap.rec.call("call_method", "to", (node, work), {}), value.to(work)
    obj = v.obj
    if type(obj) in (bool, int, float) or (np is not None and isinstance(obj, np.generic)):
        number = obj.item() if isinstance(obj, np.generic) else obj
        if isinstance(number, complex):
            raise m.unsupported("numpy arithmetic of a complex number over tensor values")
        cap.observe(v)  # a guarded constant of the graph
        value = torch.tensor(number, dtype=work)
        node = cap.rec.call("call_function", torch.tensor, (number,), {"dtype": value.dtype})
        return node, value
    raise m.unsupported(f"numpy over tensor values and a {type(obj).__name__}")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN where the other has NaN; the same shape)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(torch.equal(a, b))
    nan = a.isnan()
    if not torch.equal(nan, b.isnan()):
        return False
    a, b = a[~nan], b[~nan]
    return bool(torch.equal(a, b)) and bool(torch.equal(a.signbit(), b.signbit()))


def _can_assume_finite(m: FrameMonitor, name: str, value: torch.Tensor) -> None:
    """Arithmetic whose result is finite met no floating-point condition numpy reports (an
    overflow gives inf, 0/0 and inf-inf NaN, x/0 inf), so a finite result can be assumed (see
    ``_assume_finite``); underflow, which leaves no trace in the result, must be ignored by
    numpy's error state."""
    if not m.cap.speculate:
        raise m.unsupported(f"numpy {name} over tensor values (speculation is off here)")
    if not bool(torch.isfinite(value).all()):
        raise m.unsupported(f"numpy {name} over tensor values gave inf or NaN")
    modes = np.geterr()
    if modes.get("under") != "ignore":
        raise m.unsupported(
            f"numpy {name} over tensor values under np.seterr(under={modes['under']!r})"
        )


def _assume_finite(m: FrameMonitor, name: str, node: Any) -> None:
    """Assume arithmetic node ``node`` finite on every call, under the error state it was
    recorded in (guarded: another state may warn or raise where this one did not)."""
    cap = m.cap
    _guard_error_state(cap)
    ok = cap.rec.call("call_function", torch.isfinite, (node,), {})
    ok = cap.rec.call("call_method", "all", (ok,), {})
    assume(cap, ok, True, f"numpy {name} over tensor values gave finite values", truth=True)


def _guard_error_state(cap: Capture) -> None:
    root = cap.root(Const(np.geterr), np.geterr)
    assert root.node is not None
    cap.graph.observe(root.node, GuardKind.CUSTOM, Outcome(ErrorState(), ErrorState()(None)))


# ---------------------------------------------------------------------- tensors from them
def tensor_of_array(m: FrameMonitor, inst: Inst, data: Val, others: list[Val], what: str) -> bool:
    """``torch.from_numpy(a)``/``as_tensor(a)``/``tensor(a)`` of an array of tensor values: the
    node computing it (a view where eager's tensor shares the array's memory, else the copy
    eager made). False where ``data`` is no such array."""
    ta = data.payload(TensorArray)
    if ta is None:
        return False
    cap = m.cap
    for v in others:
        cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        t = real[0]
        if type(t) is not torch.Tensor or t.requires_grad:
            raise m.unsupported(f"{what} of tensor values gave a new autograd leaf")
        arr = data.obj
        shares = t.data_ptr() == arr.ctypes.data and t.dtype == _TORCH_DTYPE[arr.dtype]
        if not (ta.view if shares else t.is_contiguous()):
            raise m.unsupported(f"{what} of tensor values gave another layout")
        if shares:
            # the array's memory: a view of its node (which has the array's strides), so that
            # an in-place change of either reaches the other, as in eager
            node = cap.rec.call("call_method", "view_as", (ta.fx, ta.fx), {})
        else:  # a copy (torch.tensor, another dtype): contiguous, as eager's
            node = cap.rec.call("call_method", "to", (ta.fx,), {"dtype": t.dtype, "copy": True})
            node = cap.rec.call("call_method", "contiguous", (node,), {})
        return [cap.op_result(t, node)]

    m.expect_outputs(inst, 1, make)
    return True
