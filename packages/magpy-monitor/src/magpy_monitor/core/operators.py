"""What an operator means: identity tests, operators over scalars and containers, tensor operators.

The instructions (``BINARY_OP``, ``COMPARE_OP``, ``BINARY_SUBSCR``, ``FORMAT_VALUE``...) and
the builtins that run an operator (``operator.add``, ``getattr``) share these models:

* ``tensor_op``: one node of the operator graph;
* ``scalar_op``: the result of values (or of containers the shadow knows) is a new value, an
  expression of its inputs or a constant guarded by them;
* ``identity_compare`` / ``guard_identity``: ``a is b``, and ``a == b`` where equality is
  identity.

Identity, as the record's guards decide it:

* a value (int, str, None, ...) is guarded by value, as any read value;
* a class, function, module or code object is guarded by identity (``observe``);
* an entry tensor is a graph input (inputs are kept pairwise distinct);
* for other objects (instances), which ones are the same is kept by the alias guards (two reads
  of one object share one node) and, when they differ, by requiring the two entry objects to
  stay distinct (``Capture.distinct_nodes``). An object made during the run is never an entry
  object. An entry object compared with a constant object of the same type is pinned by
  identity.

``==`` of two objects whose classes keep ``object.__eq__``/``object.__ne__`` (modules, plain
instances, classes) is ``is``; so is ``==`` of such an object and a builtin value
(``module == "focal_loss"``): both sides answer NotImplemented and Python falls back to identity.
The classes are guarded with the objects, so the record holds on every call it admits.
"""

from __future__ import annotations

import operator
import types
from typing import Any

import torch

from . import registry
from .frame import FrameMonitor, Inst
from .programcode import program_frames
from .scalars import tensor_operands
from .shapes import index_by_promoted_int
from .values import Val, plain_container
from .valuetypes import is_value_type

__all__ = ["guard_identity", "identity_compare", "opaque_object", "scalar_op", "tensor_op"]

# exact types whose ``__eq__``/``__ne__`` answer NotImplemented for an object of another type
_FOREIGN_NOT_EQUAL = (str, bytes, int, float, complex, bool, tuple, frozenset)
# objects an identity test guards by identity
_PINNED_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    types.CodeType,
    type,
)
# objects ``observe()`` guards by identity (their contents are not what they mean)
_BY_IDENTITY = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    types.CodeType,
    type,
)


# ---------------------------------------------------------------------- identity
def _identity_eq(obj: Any) -> bool:
    """True when ``==``/``!=`` on ``obj`` fall back to identity (no class overrides them).

    ``None`` compares by identity on every version; 3.12 gave ``NoneType`` comparison slots of
    its own (beside its constant hash), which answer as ``object``'s do."""
    if obj is None:
        return True
    t: Any = type(obj)
    return bool(t.__eq__ is object.__eq__ and t.__ne__ is object.__ne__)


def identity_compare(m: FrameMonitor, inst: Inst, fn: Any, args: list[Val]) -> bool:
    """``a == b`` / ``a != b`` decided by identity: model it as ``a is b``. False: it is not
    such a comparison (the caller models it otherwise)."""
    if fn not in (operator.eq, operator.ne) or len(args) != 2:
        return False
    if not all(_identity_eq(v.obj) or type(v.obj) in _FOREIGN_NOT_EQUAL for v in args):
        return False  # a class of its own __eq__ (tensors included) decides
    if not any(_identity_eq(v.obj) for v in args):
        return False  # (two tuples, or frozensets, compare their items: not by identity)
    if all(is_value_type(v.obj) or v.obj is None for v in args):
        return False  # values: the scalar model covers them
    guard_identity(m, *args)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])
    return True


def _pinned(obj: Any) -> bool:
    """Guarded by value or by identity when observed."""
    return obj is None or is_value_type(obj) or isinstance(obj, _PINNED_TYPES)


def guard_identity(m: FrameMonitor, a: Val, b: Val) -> None:
    """The program depends on whether ``a is b``: guard what decides it."""
    cap = m.cap
    for v in (a, b):
        if _pinned(v.obj):
            cap.observe(v)
        elif isinstance(v.obj, torch.Tensor):
            if v.external and v.node is not None:
                cap.tensor_node(v)  # (the graph inputs are kept pairwise distinct)
        else:
            cap.observe_type(v)
    if _pinned(a.obj) or _pinned(b.obj) or type(a.obj) is not type(b.obj):
        return  # one side is pinned, or their (guarded) classes differ
    ext = [v for v in (a, b) if v.external and v.node is not None]
    if isinstance(a.obj, torch.Tensor) and len(ext) < 2 and (a.const or b.const):
        raise m.unsupported("identity test of a tensor and a constant tensor")
    if a.obj is b.obj:
        if len(ext) == 2 and a.node is b.node:
            return  # one entry object: the alias guards keep its paths one object
        for v in ext:
            cap.observe_identity(v)  # the same object as a constant of the record
        return
    if len(ext) == 2:
        for v in ext:
            assert v.node is not None
            cap.distinct_nodes.setdefault(v.node, None)
    elif ext and (a.const or b.const):
        cap.observe_identity(ext[0])  # it must not become that constant object


# ---------------------------------------------------------------------- scalars and containers
def opaque_object(obj: Any) -> Any:
    """An object in ``obj`` (itself, or inside a plain container) that ``observe()`` would
    guard by type alone, so that a value computed from its contents could go stale; None if
    there is none."""
    if obj is None or is_value_type(obj) or isinstance(obj, (torch.Tensor, *_BY_IDENTITY)):
        return None
    kind = plain_container(obj)
    if kind is dict:
        return next(
            (o for kv in obj.items() for o in map(opaque_object, kv) if o is not None), None
        )
    if kind is not None:
        return next((o for o in map(opaque_object, obj) if o is not None), None)
    return obj


def scalar_op(m: FrameMonitor, inst: Inst, fn: Any, args: list[Val]) -> None:
    """``fn(*args)`` of operands that are no tensors, about to run natively: its one output."""
    cap = m.cap
    if identity_compare(m, inst, fn, args):
        return

    def make(real: list[Any]) -> list[Val]:
        # (numpy arithmetic whose result numpy's error state decided: a guard, or a break)
        registry.NUMPY_ERROR_STATE.impl(m, fn, [a.obj for a in args], {}, real[0])
        if registry.INVOLVES_ARRAY.impl(args, real[0]):  # arrays made during the run: constants
            return [registry.ARRAY_OP.impl(m, fn, args, real[0])]
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

    p = m.expect_outputs(inst, 1, make)
    # (a Python ``__eq__``/``__lt__`` of the objects, run natively by ``(a,) == (b,)``: unseen)
    p.calls_back = program_frames()


def _sequence_op(m: FrameMonitor, fn: Any, args: list[Val], result: Any) -> Val | None:
    """``a + b`` of tuples/lists and ``seq * n``: a new sequence whose items are followed."""
    if type(result) not in (tuple, list):
        return None
    a, b = args
    unpack = registry.UNPACK.impl
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
    if result is a.obj and type(result) is list:  # an in-place list operation (list_inplace)
        return None
    if result is a.obj or result is b.obj:  # `t + ()` is t itself: keep its shadow
        return a if result is a.obj else b
    if len(items) != len(result) or any(x.obj is not y for x, y in zip(items, result, strict=True)):
        return None
    return m.cap.new(result, items=items)


# ---------------------------------------------------------------------- tensors
def tensor_op(
    m: FrameMonitor, inst: Inst, fn: Any, args: list[Val], *, inplace: bool = False
) -> None:
    """``fn(*args)`` with a tensor among ``args``: one node of the graph (``inplace``: the
    first operand is changed in place, ``x += y``)."""
    cap = m.cap

    def make(real: list[Any]) -> list[Val]:
        if fn is operator.getitem and isinstance(args[0].obj, torch.Tensor):
            node = index_by_promoted_int(cap, args[0], args[1])
            if node is not None:
                return [cap.op_result(real[0], node)]
        node = cap.rec.call("call_function", fn, tensor_operands(cap, fn, args), {})
        target = args[0] if inplace and isinstance(args[0].obj, torch.Tensor) else None
        return [cap.op_result(real[0], node, inplace_of=target)]

    m.expect_outputs(inst, 1, make)
