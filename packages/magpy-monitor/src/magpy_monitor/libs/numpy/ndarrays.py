"""numpy arrays the program makes during the run: constants of the record.

An ndarray created during the run from guarded values (``np.array(x.shape[2:])``,
``np.zeros((0, 4))``, ``np.tile(k, (c, 1, 1))``, arithmetic, subscripts, ``a.T``...) is a pure
function of those values (the paper's PureClosure): numpy runs natively at record time, the inputs
are guarded and the array is a constant of the record. ``torch.from_numpy``, ``torch.tensor``,
``torch.as_tensor`` and the legacy constructors (``torch.FloatTensor(a)``) of such an array are a
constant tensor of the graph, built anew on every call from the eager result's values (its dtype,
device and strides).

- Arrays from outside (attributes, globals, arguments, function defaults) are mutable and a guard
  checks only their type: numpy over them stays a break ("... read from outside"). A tensor made
  from one (``torch.from_numpy(a)``, ``as_tensor``, ``tensor``) is a graph input instead: the
  guard turns the array into a tensor over its memory on every call (its dtype, shape, strides
  and flags guarded, its values read as they are then: ``array_input_to_tensor``).
- A run-made array never reaches the mock (the planner refuses to hand one mutable constant to every
  call): returning or storing one is a break.
- In-place changes of run-made arrays (``a[0] = 1``, ``a += 1``, ``out=``) run natively and keep the
  array a constant. The tensors made from an array without a copy (``from_numpy``, ``as_tensor``,
  legacy constructors) share its memory while the graph's constant is a snapshot: writing such an
  array afterwards, or reading it after the graph changed the tensor in place, is a break.
- Object arrays (``dtype=object``) hold references to program objects, and ndarray subclasses
  carry more state: both are breaks, as are ``np.empty`` (uninitialised memory) and ``np.random``.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from magpy_refgraph import GuardKind, Outcome, Unsupported

from ...core import registry
from ...core.annotations import classify
from ...core.calls import _as_op, _opaque_input
from ...core.capture import Capture
from ...core.frame import FrameMonitor, Inst
from ...core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS
from ...core.values import BoundMethod, Val
from ...core.valuetypes import is_value_type
from .errstate import check_error_state
from .outside import check_outside, guard_outside, np, written_arrays
from .tensorarrays import array_method, numpy_call, operator_result, tensor_of_array

__all__ = [
    "array_attr",
    "array_items",
    "array_layout",
    "array_op",
    "array_to_tensor",
    "involves_array",
    "is_array",
    "is_fresh_array",
    "outside_array",
    "store_array_item",
]

MAX_CONSTANT_ELEMENTS = 1 << 16  # larger constants would make the graph's source huge
_SCAN_DEPTH = 16


class _Arrays:
    """What one capture knows about numpy arrays."""

    def __init__(self) -> None:
        self.fresh: dict[int, Any] = {}  # id -> an array created during the run
        self.shared: list[tuple[Any, Any]] = []  # (array, fx node of the tensor sharing it)
        self.inputs: dict[int, tuple[Any, Any]] = {}  # id -> (array from outside, placeholder)


_STATE: weakref.WeakKeyDictionary[Capture, _Arrays] = weakref.WeakKeyDictionary()


def _state(cap: Capture) -> _Arrays:
    st = _STATE.get(cap)
    if st is None:
        st = _STATE[cap] = _Arrays()
    return st


def is_array(obj: Any) -> bool:
    """``obj`` is a numpy array (of any ndarray subclass)."""
    return np is not None and isinstance(obj, np.ndarray)


@registry.INVOLVES_ARRAY.provide
def involves_array(args: list[Val], result: Any) -> bool:
    """An operator's operands or result include a numpy array."""
    return np is not None and (
        isinstance(result, np.ndarray) or any(isinstance(a.obj, np.ndarray) for a in args)
    )


def _registered(cap: Capture, obj: Any) -> bool:
    return _state(cap).fresh.get(id(obj)) is obj


def is_fresh_array(cap: Capture, v: Val) -> bool:
    """``v`` is an array created during the run from guarded values (a constant)."""
    return v.const and is_array(v.obj) and _registered(cap, v.obj)


def _made(cap: Capture, obj: Any) -> Val:
    """The constant ``Val`` of an array numpy created during the run."""
    known = cap.known(obj)
    if known is not None and known.const and _registered(cap, obj):
        return known
    _state(cap).fresh[id(obj)] = obj
    return cap.new(obj, const=True)


def _result(m: FrameMonitor, obj: Any, inputs: list[Val]) -> Val:
    """The ``Val`` of what numpy returned: one of its inputs, a new array, or plain values."""
    cap = m.cap
    if not is_value_type(obj):
        for v in inputs:
            if v.obj is obj:
                return v
    if obj is None or is_value_type(obj):
        return cap.const(obj)  # (numpy scalars are values)
    if type(obj) is np.ndarray:
        if obj.dtype.hasobject:
            raise m.unsupported("a numpy array of Python objects (it holds references)")
        return _made(cap, obj)
    if type(obj) in (list, tuple):
        return cap.new(obj, items=[_result(m, x, inputs) for x in obj])
    if isinstance(obj, np.dtype):
        return cap.new(obj, const=True)
    raise m.unsupported(f"numpy gave a {type(obj).__name__}")


# ---------------------------------------------------------------------- inputs
def outside_array(cap: Capture, v: Val) -> Any:
    """An array in ``v`` that was not created during the run (or a tensor numpy would read),
    else None."""
    if is_array(v.obj):
        return None if is_fresh_array(cap, v) else v.obj
    return _scan(cap, v.obj, 0)


def _scan(cap: Capture, obj: Any, depth: int) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj
    if is_array(obj):
        return None if _registered(cap, obj) else obj
    if depth > _SCAN_DEPTH or type(obj) not in (list, tuple, dict):
        return None
    items = obj.items() if type(obj) is dict else [(x,) for x in obj]
    for pair in items:
        for x in pair:
            found = _scan(cap, x, depth + 1)
            if found is not None:
                return found
    return None


def _plain_const(obj: Any, depth: int) -> bool:
    """A constant numpy may read: values, run-made arrays, types and dtypes, numpy's own
    objects (``np.mgrid``), and lists/tuples/dicts of those."""
    if obj is None or is_value_type(obj) or is_array(obj) or isinstance(obj, type):
        return True  # (arrays: ``outside_array`` already found any not made during the run)
    if type(obj) in (list, tuple, dict):
        if depth > _SCAN_DEPTH:
            return False
        items = [x for kv in obj.items() for x in kv] if type(obj) is dict else obj
        return all(_plain_const(x, depth + 1) for x in items)
    return np is not None and (
        isinstance(obj, np.dtype) or type(obj).__module__.split(".")[0] == "numpy"
    )


def _accept(m: FrameMonitor, vals: list[Val], what: str) -> None:
    """Guard the inputs of a numpy computation; a break for inputs whose contents no guard
    checks (arrays from outside, objects made during the run) and for tensors (their values)."""
    for v in vals:
        _accept_one(m, v, what)


def _accept_one(m: FrameMonitor, v: Val, what: str) -> None:
    cap = m.cap
    bad = outside_array(cap, v)
    if isinstance(bad, torch.Tensor):
        raise m.unsupported(f"{what} over a tensor reads its values")
    if bad is not None and bad is v.obj and guard_outside(cap, v):
        return  # read only, guarded by its contents (``outside``)
    if bad is not None and (v.const or not isinstance(v.items, list | dict)):
        raise m.unsupported(
            f"{what} over a {type(bad).__name__} read from outside (its contents are not guarded)"
        )
    obj = v.obj
    if is_array(obj):
        _check_shared(m, obj, write=False)
        return
    if obj is None or is_value_type(obj):
        cap.observe(v)
        return
    if v.const:
        if not _plain_const(obj, 0):
            # (a function's default, say: mutable, and no guard checks its contents)
            raise m.unsupported(f"{what} over a constant {type(obj).__name__}")
        return
    if isinstance(v.items, list):
        for x in v.items:
            _accept_one(m, x, what)
        return
    if isinstance(v.items, dict):
        for k, x in v.items.values():
            _accept_one(m, k, what)
            _accept_one(m, x, what)
        return
    if v.external:
        opaque = _opaque_input(v)
        if opaque is not None:
            raise m.unsupported(
                f"{what} over a {type(opaque).__name__} read from outside "
                "(its contents are not guarded)"
            )
        cap.observe(v)
        return
    raise m.unsupported(f"{what} over a {type(obj).__name__} made during the run")


# ---------------------------------------------------------------------- memory shared with tensors
def _check_shared(m: FrameMonitor, arr: Any, *, write: bool) -> None:
    """``arr`` is about to be read (or written): a break if a tensor shares its memory and the
    graph changed that tensor in place (or if it is written at all)."""
    for base, node in _state(m.cap).shared:
        if not np.may_share_memory(arr, base):
            continue
        if write:
            raise m.unsupported(
                "writing a numpy array that a tensor shares memory with (from_numpy/as_tensor)"
            )
        if _changed_in_graph(node):
            raise m.unsupported(
                "reading a numpy array after the graph changed a tensor sharing its memory"
            )


def _changed_in_graph(node: Any) -> bool:
    """An in-place operation of the graph uses ``node`` or a value computed from it."""
    seen: set[Any] = set()
    work = list(node.users)
    while work:
        n = work.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.meta.get("effect"):
            return True
        work.extend(n.users)
    return False


def _snapshots(cap: Capture, vals: list[Val]) -> list[tuple[Any, Any]]:
    """Copies of the arrays among ``vals`` that a tensor shares memory with (to notice a write
    through ``out=``); usually none."""
    st = _state(cap)
    if not st.shared:
        return []
    out = []
    for v in vals:
        if is_array(v.obj) and any(np.may_share_memory(v.obj, b) for b, _ in st.shared):
            out.append((v.obj, v.obj.copy()))
    return out


def _unchanged(m: FrameMonitor, snaps: list[tuple[Any, Any]]) -> None:
    for arr, before in snaps:
        if arr.shape != before.shape or arr.tobytes() != before.tobytes():
            raise m.unsupported(
                "writing a numpy array that a tensor shares memory with (from_numpy/as_tensor)"
            )


# ---------------------------------------------------------------------- operations
@registry.ARRAY_OP.provide
def array_op(m: FrameMonitor, fn: Any, args: list[Val], result: Any) -> Val:
    """An operator over arrays (``a + 1``, ``a[i]``, ``a > 0``, ``a += b``), after it ran."""
    over_tensor = operator_result(m, fn, args, result)  # (arrays of tensor values)
    if over_tensor is not None:
        return over_tensor
    name = getattr(fn, "__name__", str(fn))
    if is_array(result) and args and result is args[0].obj and not is_fresh_array(m.cap, args[0]):
        raise m.unsupported(f"{name} over a ndarray read from outside (in place)")
    _accept(m, args, name)
    check_outside(m, result)
    if is_array(result) and args and result is args[0].obj:
        _check_shared(m, result, write=True)  # an in-place operator (a += b)
    return _result(m, result, args)


@registry.STORE_ARRAY_ITEM.provide
def store_array_item(m: FrameMonitor, container: Val, key: Val, value: Val) -> None:
    """``a[key] = value`` on an array, about to run."""
    if not is_fresh_array(m.cap, container):
        raise m.unsupported("item assignment on a ndarray read from outside")
    _accept(m, [key, value], "item assignment on a ndarray")
    _check_shared(m, container.obj, write=True)


def array_attr(m: FrameMonitor, base: Val, name: str, real: Any) -> Val:
    """``a.name`` of a constant array (``a.T``, ``a.shape``, ``a.astype``)."""
    if not is_fresh_array(m.cap, base):
        raise m.unsupported(f"attribute {name!r} of a ndarray read from outside")
    _check_shared(m, base.obj, write=False)
    if callable(real) and getattr(real, "__self__", None) is base.obj:
        return Val(real, payload=BoundMethod(base))
    return _result(m, real, [base])


@registry.ARRAY_ITEMS.provide
def array_items(m: FrameMonitor, v: Val) -> list[Val] | None:
    """The elements of constant 1-d array ``v`` (``for n in a``, ``h, w = a``), or None if ``v``
    is no array."""
    if not is_array(v.obj):
        return None
    if not is_fresh_array(m.cap, v):
        raise m.unsupported("iterating over a ndarray read from outside")
    if v.obj.ndim != 1:
        # the rows of a 2-d array are new views on every pass: no shadow could name them
        raise m.unsupported(f"iterating over a {v.obj.ndim}-d ndarray")
    _check_shared(m, v.obj, write=False)
    return [_result(m, x, [v]) for x in v.obj]  # numpy scalars (values)


def _call(what: str, fn: Any) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if numpy_call(m, inst, fn, pos, kw):  # over tensor values: tensor math
            return
        for v in written_arrays(fn, pos, kw):  # (before it runs: outside arrays stay as they are)
            if is_array(v.obj) and not is_fresh_array(m.cap, v):
                raise m.unsupported(f"{what} writing into a ndarray read from outside")
        vals = [*pos, *kw.values()]
        _accept(m, vals, what)
        snaps = _snapshots(m.cap, vals)

        def make(real: list[Any]) -> list[Val]:
            _unchanged(m, snaps)
            args, kwargs = [v.obj for v in pos], {k: v.obj for k, v in kw.items()}
            check_error_state(m, fn, args, kwargs, real[0])  # (np.errstate decided it?)
            check_outside(m, real[0])
            return [_result(m, real[0], vals)]

        m.expect_outputs(inst, 1, make)

    return handle


def _method(name: str) -> Any:
    call = _call(f"ndarray.{name}", getattr(np.ndarray, name))

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if array_method(m, inst, name, pos, kw):  # of an array of tensor values
            return
        if not pos or not is_fresh_array(m.cap, pos[0]):
            raise m.unsupported(f"ndarray.{name} of a ndarray read from outside")
        call(m, inst, pos, kw)

    return handle


# ---------------------------------------------------------------------- tensors from arrays
_CONSTANT_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


def array_to_tensor(
    m: FrameMonitor, inst: Inst, data: Val, others: list[Val], what: str, *, shares: bool
) -> None:
    """``what(data, ...)`` of a run-made array (or a numpy scalar): a constant of the graph.

    ``shares``: the tensor may share the array's memory (``from_numpy``, ``as_tensor``).
    """
    cap = m.cap
    _accept(m, [data], what)
    for v in others:
        cap.observe(v)  # dtype, device, copy=...

    def make(real: list[Any]) -> list[Val]:
        t = real[0]
        if not isinstance(t, torch.Tensor) or type(t) is not torch.Tensor:
            raise m.unsupported(f"{what} gave a {type(t).__name__}")
        if t.requires_grad:
            raise m.unsupported(f"{what}(requires_grad=True) makes a new autograd leaf")
        node = constant_tensor(cap, t, what)
        if shares and is_array(data.obj):
            _state(cap).shared.append((data.obj, node))
        return [cap.op_result(t, node)]

    m.expect_outputs(inst, 1, make)


def constant_tensor(cap: Capture, t: torch.Tensor, what: str) -> Any:
    """A graph node that builds a fresh copy of ``t`` (same values, dtype, device, strides)."""
    if t.dtype not in _CONSTANT_DTYPES:
        raise Unsupported(f"{what} of a {t.dtype} array")
    if t.numel() > MAX_CONSTANT_ELEMENTS:
        raise Unsupported(f"{what} of {t.numel()} elements is too large for a graph constant")
    size, stride = tuple(t.shape), t.stride()
    order = sorted(range(t.dim()), key=lambda d: -stride[d])
    dense = _dense(size, stride, order) and not t.is_contiguous()
    values = (t.permute(order) if dense else t).detach().cpu().contiguous().reshape(-1)
    opts = {"dtype": t.dtype, "device": t.device}
    node = cap.rec.call("call_function", torch.tensor, (values.tolist(),), opts)
    if dense:  # eager's strides (torch.from_numpy(a.T)): the same layout over fresh memory
        return cap.rec.call("call_function", torch.as_strided, (node, size, stride), {})
    if t.dim() != 1:
        node = cap.rec.call("call_method", "reshape", (node, size), {})
    return node


def _dense(size: tuple[int, ...], stride: tuple[int, ...], order: list[int]) -> bool:
    """The strides lay the elements out without gaps or overlaps (a permuted contiguous
    layout)."""
    expected = 1
    for d in reversed(order):
        if size[d] != 1 and stride[d] != expected:
            return False
        expected *= size[d]
    return True


# ---------------------------------------------------------------------- arrays from outside
def array_layout(a: Any) -> Any:
    """What a tensor over array ``a``'s memory (``torch.from_numpy``) depends on besides the
    values: the guard of an array input (None for anything but a plain ndarray)."""
    if type(a) is not np.ndarray:
        return None
    return (a.dtype.str, a.shape, a.strides, bool(a.flags.writeable), bool(a.flags.aligned))


def array_input_to_tensor(
    m: FrameMonitor, inst: Inst, data: Val, others: list[Val], what: str
) -> None:
    """``torch.from_numpy(a)``/``as_tensor(a)``/``tensor(a)`` of an array from outside (an
    argument, a global, an attribute): the array is a graph input, turned into a tensor over
    its memory on every call (the guard checks its dtype, shape and strides, not its values,
    so a write into it between two calls is seen, as in eager). The program's tensor is a view
    of that input where eager's shares the array's memory, else the copy eager made (``to`` with
    ``copy=True``, which keeps a dense layout's strides as ``torch.tensor`` does; checked)."""
    cap = m.cap
    for v in others:
        cap.observe(v)  # dtype, device, requires_grad...

    def make(real: list[Any]) -> list[Val]:
        t = real[0]
        if type(t) is not torch.Tensor or t.requires_grad:
            raise m.unsupported(f"{what} of a ndarray from outside gave a new autograd leaf")
        node = _array_input(m, data, what)
        src = node.meta["example_value"]
        if t.device == src.device and t.dtype == src.dtype and t.data_ptr() == src.data_ptr():
            if t.shape != src.shape or t.stride() != src.stride():
                raise m.unsupported(f"{what} of a ndarray from outside gave another layout")
            out = cap.rec.call("call_method", "view_as", (node, node), {})
        else:
            opts = {"dtype": t.dtype, "device": t.device, "copy": True}
            if src.to(**opts).stride() != t.stride():
                raise m.unsupported(f"{what} of a ndarray from outside gave another layout")
            out = cap.rec.call("call_method", "to", (node,), opts)
        return [cap.op_result(t, out)]

    m.expect_outputs(inst, 1, make)


def _array_input(m: FrameMonitor, data: Val, what: str) -> Any:
    """The placeholder of array ``data`` from outside (one per array in a capture)."""
    cap, arr = m.cap, data.obj
    st = _state(cap)
    known = st.inputs.get(id(arr))
    if known is not None and known[0] is arr:
        return known[1]
    layout = array_layout(arr)
    if layout is None or data.node is None or arr.dtype.hasobject:
        raise m.unsupported(f"{what} over a {type(arr).__name__} read from outside")
    if not (arr.flags.writeable and arr.flags.aligned):
        raise m.unsupported(f"{what} over a read-only or unaligned ndarray from outside")
    try:
        example = torch.from_numpy(arr)
    except (TypeError, ValueError) as exc:  # a dtype torch has not, negative strides
        raise m.unsupported(f"{what} over a ndarray torch cannot share: {exc}") from exc
    cap.graph.observe(data.node, GuardKind.CUSTOM, Outcome(array_layout, layout))
    node = cap.rec.placeholder(cap.paths[data.node], example)
    node.meta["dtype"] = example.dtype
    cap.array_inputs.add(len(cap.rec.input_paths) - 1)
    st.inputs[id(arr)] = (arr, node)
    return node


def _tensor_ctor(fn: Any, *, shares: bool) -> Any:
    """``torch.tensor``/``as_tensor``/``from_numpy``: arrays become graph constants; any other
    data is the tensor operation it always was."""
    name = f"torch.{fn.__name__}"

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        data = pos[0] if pos else kw.get("data", kw.get("ndarray"))
        if data is None or not (is_array(data.obj) or _numpy_scalar(data.obj)):
            _as_op(m, inst, fn, classify(fn), pos, kw)
            return
        others = [v for v in (*pos, *kw.values()) if v is not data]
        if tensor_of_array(m, inst, data, others, name):
            return
        if is_array(data.obj) and not is_fresh_array(m.cap, data) and data.external:
            array_input_to_tensor(m, inst, data, others, name)
            return
        array_to_tensor(m, inst, data, others, name, shares=shares)

    return handle


def _numpy_scalar(obj: Any) -> bool:
    return np is not None and isinstance(obj, np.generic)


# ---------------------------------------------------------------------- registration
# numpy's functions that compute new values from their arguments (np.empty reads uninitialised
# memory and np.random draws from hidden state: neither is here)
_FUNCTIONS = (
    "array asarray asanyarray ascontiguousarray asfortranarray copy "
    "zeros ones full zeros_like ones_like full_like arange linspace logspace geomspace "
    "eye identity diag diagflat tri triu tril meshgrid indices "
    "tile repeat stack vstack hstack dstack column_stack concatenate append insert delete "
    "expand_dims squeeze reshape ravel transpose swapaxes moveaxis flip fliplr flipud roll rot90 "
    "pad broadcast_to atleast_1d atleast_2d atleast_3d split array_split hsplit vsplit "
    "where select clip round around rint fix floor ceil trunc sign abs absolute negative "
    "sqrt square cbrt exp exp2 expm1 log log2 log10 log1p power float_power reciprocal "
    "sin cos tan arcsin arccos arctan arctan2 sinh cosh tanh arcsinh arccosh arctanh hypot "
    "radians degrees deg2rad rad2deg add subtract multiply divide true_divide floor_divide "
    "mod fmod remainder maximum minimum fmax fmin logical_and logical_or logical_not "
    "logical_xor greater greater_equal less less_equal equal not_equal isnan isinf isfinite "
    "isclose allclose array_equal sum prod mean average std var median max min amax amin "
    "argmax argmin argsort sort cumsum cumprod diff nonzero count_nonzero any all unique "
    "dot matmul outer inner cross einsum kron trace ptp percentile quantile interp "
    "floor_divide nan_to_num sinc gcd lcm "
    # scalar types and dtype conversions: np.float32(0.5) is a value, np.float32(a) an array
    "float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool_ "
    "dtype result_type promote_types can_cast"
)
_LINALG = "norm inv det pinv"
# ndarray methods that leave the array as it is (``sort``, ``fill``, ``put``, ``resize`` and
# ``itemset`` change it in place and stay breaks)
_METHODS = (
    "astype reshape ravel flatten transpose swapaxes squeeze repeat take clip round copy view "
    "sum prod mean std var max min argmax argmin argsort cumsum cumprod any all dot nonzero "
    "tolist item conj conjugate diagonal trace ptp searchsorted compress __array__ tobytes"
)


def _register() -> None:
    if np is None:
        return
    for name in _FUNCTIONS.split():
        fn = getattr(np, name, None)
        if fn is not None:
            BUILTIN_HANDLERS[id(fn)] = (fn, _call(f"numpy.{name}", fn))
    for name in _LINALG.split():
        fn = getattr(np.linalg, name, None)
        if fn is not None:
            BUILTIN_HANDLERS[id(fn)] = (fn, _call(f"numpy.linalg.{name}", fn))
    for name in _METHODS.split():
        if hasattr(np.ndarray, name):
            METHOD_HANDLERS[(np.ndarray, name)] = _method(name)
    for fn, shares in ((torch.from_numpy, True), (torch.as_tensor, True), (torch.tensor, False)):
        BUILTIN_HANDLERS[id(fn)] = (fn, _tensor_ctor(fn, shares=shares))


_register()
