"""Handlers for the builtin functions that code calls (native methods: ``pyobj.methods``).

Each handler models one native callable's effect on provenance. Scalar arithmetic (``abs``,
``int``, ``math.sqrt``) stays replayable (an ``expr``) until its value is observed; container
builders keep the shadows of their elements; everything else here is pure and guarded by its
inputs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch

from ..bytecode.iteration import (
    consume_items,
    draw,
    exhaust,
    get_iter,
    is_generator,
    is_known_iterator,
    iter_items,
    make_iterator,
    next_value,
)
from ..bytecode.lazyzip import lazy_zip
from ..core import registry
from ..core.annotations import classify
from ..core.calls import _as_op, pure_call
from ..core.frame import FrameMonitor, Inst
from ..core.growing import live_length
from ..core.operators import scalar_op, tensor_op
from ..core.registry import (
    BUILTIN_HANDLERS,
    METHOD_HANDLERS,
    BuiltinHandler,
    register_builtin,
)
from ..core.shapes import SymInt, size_vals
from ..core.speculation import read_value, truth_of_tensor
from ..core.values import Val
from ..core.valuetypes import is_value_type
from .instances import follow, python_dunder

__all__: list[str] = []


def _has_tensor(vals: list[Val]) -> bool:
    return any(isinstance(v.obj, torch.Tensor) for v in vals)


# builtins that, given a tensor, call its own method: a tensor operation, not a value read
_TENSOR_BUILTINS: dict[Any, Any] = {abs: torch.abs, pow: torch.pow}


def _replayable(fn: Any) -> BuiltinHandler:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if _has_tensor([*pos, *kw.values()]) or kw:
            if fn in (int, float, bool) and len(pos) == 1 and not kw:
                # int(t.sum()): the value stays in the graph until Python needs it
                reason = f"{fn.__name__}() of a tensor reads its value"
                m.expect_outputs(inst, 1, lambda real: [read_value(m.cap, pos[0], real[0], reason)])
                return
            op = _TENSOR_BUILTINS.get(fn)
            if op is not None and not kw and len(pos) == (2 if fn is pow else 1):
                _as_op(m, inst, op, classify(op), pos, {})  # abs(t) is t.__abs__()
                return
            if _has_tensor([*pos, *kw.values()]):
                raise m.unsupported(f"{fn.__name__}() of a tensor reads its value")
            pure_call(m, inst, pos, kw)
            return
        scalar_op(m, inst, fn, pos)

    return handle


_fn: Callable[..., Any]
for _fn in (
    abs,
    int,
    float,
    bool,
    str,
    round,
    divmod,
    pow,
    math.sqrt,
    math.exp,
    math.log,
    math.log2,
    math.log10,
    math.ceil,
    math.floor,
    math.trunc,
    math.sin,
    math.cos,
    math.tan,
    math.tanh,
    math.erf,
    math.fabs,
    math.isqrt,
    math.gcd,
    math.pow,
    math.isnan,
    math.isinf,
    math.isfinite,
    operator.index,
    chr,
    ord,
    hash,
):
    BUILTIN_HANDLERS[id(_fn)] = (_fn, _replayable(_fn))

for _fn in (
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.mod,
    operator.neg,
    operator.pow,
    operator.matmul,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    operator.eq,
    operator.ne,
    operator.and_,
    operator.or_,
    operator.not_,
    operator.abs,
    operator.pos,
    operator.invert,
    operator.xor,
):

    def _op_handler(
        m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val], fn: Any = _fn
    ) -> None:
        if _has_tensor(pos):
            tensor_op(m, inst, fn, pos)
        else:
            scalar_op(m, inst, fn, pos)

    BUILTIN_HANDLERS[id(_fn)] = (_fn, _op_handler)


@register_builtin(len)
def _len(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    (v,) = pos
    cap = m.cap
    obj = v.obj
    if isinstance(obj, torch.Tensor):
        dims = size_vals(cap, v)
        if dims is not None:
            m.expect_outputs(inst, 1, lambda real: [dims[0]])
            return
        cap.guard_meta(v)
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])
    elif (live := live_length(cap, v)) is not None:
        m.expect_outputs(inst, 1, lambda real: [live])  # a list that grows from call to call
    elif isinstance(v.items, list | dict):
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])
    elif (hook := _own_len(obj)) is not None:
        if v.external:
            cap.observe_type(v)

        def outputs(real: list[Any], got: Val) -> list[Val]:
            if type(got.obj) is not int or got.obj != real[0]:
                raise m.unsupported(f"{type(obj).__name__}.__len__ gave a {type(got.obj).__name__}")
            return [got]

        follow(m, inst, hook, [v], 1, outputs)  # a user class's Python __len__
    elif v.external:
        m.expect_outputs(inst, 1, lambda real: [Val(real[0], expr=(len, (v,)))])
    else:
        cap.observe(v)
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


def _own_len(obj: Any) -> Any:
    """The Python ``__len__`` of ``obj``'s class, but for torch's module containers (pure:
    the guard on ``len(obj)`` may run it)."""
    hook = python_dunder(obj, "__len__")
    if isinstance(obj, torch.nn.Module) and getattr(hook, "__module__", "").startswith("torch."):
        return None
    return hook


def _dunder_len(owner: type) -> BuiltinHandler:
    """``x.__len__()`` of a built-in container (``t.shape.__len__()``): ``len(x)``."""
    own = getattr(owner, "__len__", None)

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if len(pos) != 1 or kw or getattr(type(pos[0].obj), "__len__", None) is not own:
            raise m.unsupported(f"{owner.__name__}.__len__ called unusually")
        _len(m, inst, pos, kw)

    return handle


for _owner in (tuple, list, dict, set, frozenset, str):
    METHOD_HANDLERS[(_owner, "__len__")] = _dunder_len(_owner)


@register_builtin(type)
def _type(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    if len(pos) != 1:
        raise m.unsupported("type() with three arguments creates a class")
    (v,) = pos
    if isinstance(v.obj, torch.Tensor):
        m.cap.guard_meta(v, sizes=False)
    else:
        m.cap.observe_type(v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@register_builtin(id)
def _id(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``id(obj)`` of an object from outside the run (``GradScaler.step``'s
    ``self._per_optimizer_states[id(optimizer)]``): the record is guarded to see that very
    object, which keeps its number while it lives: a constant of the record. An object the run
    makes has another number on every call (a break), and so may a value (``id(3)``)."""
    if len(pos) != 1 or kw:
        raise m.unsupported("id() with other than one argument")  # (TypeError)
    (v,) = pos
    if not (v.external and v.node is not None) or v.obj is None or is_value_type(v.obj):
        raise m.unsupported(f"id() of an object the run made ({type(v.obj).__name__}) or a value")
    m.cap.observe_identity(v)
    number = id(v.obj)

    def make(real: list[Any]) -> list[Val]:
        if real[0] != number:
            raise m.unsupported("id() gave another number")
        return [m.cap.const(number)]

    m.expect_outputs(inst, 1, make)


@register_builtin(range, slice)
def _range(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    if (
        not kw
        and all(type(v.obj) is int for v in pos)
        and any(not v.const and (v.payload(SymInt) is not None or v.external) for v in pos)
    ):
        # range() over a dynamic size or an int read from outside is not specialised yet: its
        # values are read (and its bounds guarded) only when a loop takes one (see
        # _iteration.get_iter), so a segment ending at the loop's head serves every trip count
        args = tuple(pos)

        def make(real: list[Any]) -> list[Val]:
            if type(real[0]) is range and not any(v.const for v in args):
                return [Val(real[0], expr=(range, args))]
            for v in args:
                m.cap.observe(v)
            return [m.cap.const(real[0])]

        m.expect_outputs(inst, 1, make)
        return
    for v in pos:
        m.cap.observe(v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@register_builtin(tuple, list)
def tuple_list(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if not pos:
        m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=[])])
        return
    (src,) = pos
    if isinstance(src.obj, torch.Tensor):
        _tensor_rows_sequence(m, inst, src)
        return
    items = iter_items(m, src)
    if items is None:
        if not is_generator(src):
            raise m.unsupported(f"building a sequence from a {type(src.obj).__name__}")

        def make_gen(real: list[Any]) -> list[Val]:
            return [cap.new(real[0], items=list(p.yields))]

        p = m.expect_outputs(inst, 1, make_gen)
        p.gen = src
        return
    exhaust(m, src)

    def make(real: list[Any]) -> list[Val]:
        # a tuple of constants is a constant; a list stays a container the program may change
        if (
            type(real[0]) is tuple
            and all(i.const for i in items)
            and is_value_type(tuple(i.obj for i in items))
        ):
            return [cap.new(real[0], const=True)]
        return [cap.new(real[0], items=list(items))]

    m.expect_outputs(inst, 1, make)


def _tensor_rows_sequence(m: FrameMonitor, inst: Inst, src: Val) -> None:
    """``list(t)``/``tuple(t)``: the rows ``Tensor.__iter__`` made natively, the outputs of one
    ``unbind(0)`` of the graph (their number is ``t``'s first size, which is guarded)."""
    registry.CHECK_ROW_SOURCE.impl(m, src)

    def make(real: list[Any]) -> list[Val]:
        rows = registry.TENSOR_ROWS.impl(m, src, tuple(real[0])).items
        return [m.cap.new(real[0], items=list(rows))]

    m.expect_outputs(inst, 1, make)


@register_builtin(iter)
def _iter(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    if len(pos) != 1:
        raise m.unsupported("iter() with a sentinel")
    get_iter(m, inst, pos[0])


@register_builtin(enumerate)
def _enumerate(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    start_val = pos[1] if len(pos) > 1 else kw.get("start")
    start = 0
    if start_val is not None:
        cap.observe(start_val)
        start = start_val.obj
    if isinstance(pos[0].obj, torch.Tensor) and type(pos[0].obj).__iter__ is torch.Tensor.__iter__:
        _enumerate_rows(m, inst, pos[0], start)
        return
    drawn = draw(m, [pos[0]])
    if drawn is None:
        if lazy_zip(m, inst, [pos[0]], iter_items, is_generator, start=start):
            return
        raise m.unsupported(f"enumerate over a {type(pos[0].obj).__name__}")
    rows, feeds = drawn
    pairs = [
        cap.new((start + i, v.obj), items=[cap.const(start + i), v]) for i, (v,) in enumerate(rows)
    ]
    m.expect_outputs(inst, 1, lambda real: [make_iterator(m, real[0], pairs, feeds=feeds)])


def _enumerate_rows(m: FrameMonitor, inst: Inst, x: Val, start: int) -> None:
    """``enumerate(x)`` of a tensor: Tensor.__iter__ (Python, run natively by enumerate) made the
    rows with ``x.unbind(0)``; the rows it holds are the outputs of an unbind in the graph."""
    cap = m.cap
    if x.obj.dim() == 0:
        raise m.unsupported("enumerate over a 0-d tensor")

    def make(real: list[Any]) -> list[Val]:
        try:  # enumerate -> (tuple_iterator, start); tuple_iterator -> (iter, (rows,), index)
            inner = real[0].__reduce__()[1][0].__reduce__()
            rows, index = inner[1][0], inner[2] if len(inner) > 2 else 0
        except Exception as exc:  # not the iterator Tensor.__iter__ makes
            raise m.unsupported("enumerate over a tensor with an unknown iterator") from exc
        if type(rows) is not tuple or index != 0 or len(rows) != x.obj.shape[0]:
            raise m.unsupported("enumerate over a tensor with an unknown iterator")
        node = cap.rec.call("call_function", torch.unbind, (cap.to_arg(x), 0), {})
        items = cap.op_result(rows, node).items
        assert isinstance(items, list)
        pairs = [
            cap.new((start + i, v.obj), items=[cap.const(start + i), v])
            for i, v in enumerate(items)
        ]
        return [make_iterator(m, real[0], pairs)]

    m.expect_outputs(inst, 1, make)


@register_builtin(zip)
def _zip(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if set(kw) - {"strict"}:
        raise m.unsupported(f"zip() with keyword arguments {sorted(kw)}")
    if _has_tensor(pos):
        registry.ZIP_ROWS.impl(m, inst, pos, kw)  # zip(ws, t): t's rows are those of an unbind
        return
    drawn = draw(m, list(pos))
    if drawn is None:
        strict = kw.get("strict")
        if strict is not None:
            m.cap.observe(strict)
        strict_on = strict is not None and bool(strict.obj)
        if lazy_zip(m, inst, list(pos), iter_items, is_generator, strict=strict_on):
            return
        raise m.unsupported("zip over an iterable of unknown contents")
    rows, feeds = drawn
    if "strict" in kw:
        cap.observe(kw["strict"])
        if kw["strict"].obj and feeds:
            raise m.unsupported("zip(strict=True) over an iterator")
        if kw["strict"].obj and len({len(iter_items(m, p) or ()) for p in pos}) > 1:
            raise m.unsupported("zip(strict=True) of unequal lengths raises ValueError")
    tuples = [cap.new(tuple(v.obj for v in row), items=row) for row in rows]
    m.expect_outputs(inst, 1, lambda real: [make_iterator(m, real[0], tuples, feeds=feeds)])


@register_builtin(next)
def _next(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``next(gen)`` of a generator the monitor follows (the value it yields; exhaustion
    raises StopIteration in the caller, as the exception machinery models), or ``next(it)``
    / ``next(it, default)`` of an iterator whose values the shadow knows."""
    if pos and not kw and len(pos) <= 2 and is_known_iterator(pos[0]):
        next_value(m, inst, pos[0], pos[1] if len(pos) == 2 else None)
        return
    if len(pos) != 1 or kw or not is_generator(pos[0]):
        raise m.unsupported(f"next() of a {type(pos[0].obj).__name__ if pos else 'nothing'}")

    def make(real: list[Any]) -> list[Val]:
        if not p.yields:
            raise m.unsupported("generator produced a value the monitor did not see")
        return [p.yields[-1]]

    p = m.expect_outputs(inst, 1, make, opaque=True)
    p.gen = pos[0]


@register_builtin(reversed)
def _reversed(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    items = iter_items(m, pos[0])
    if items is None:
        raise m.unsupported(f"reversed() of a {type(pos[0].obj).__name__}")
    rev = list(reversed(items))
    m.expect_outputs(inst, 1, lambda real: [make_iterator(m, real[0], rev)])


def _min_max(maximum: bool) -> BuiltinHandler:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if len(pos) == 1:
            items = iter_items(m, pos[0])
            if items is None:
                raise m.unsupported("min()/max() over an iterable of unknown contents")
            exhaust(m, pos[0])
            pos = items
        if _has_tensor([*pos, *kw.values()]):
            _pick_extreme(m, inst, pos, kw, maximum)
            return
        pure_call(m, inst, pos, kw)

    return handle


BUILTIN_HANDLERS[id(min)] = (min, _min_max(False))
BUILTIN_HANDLERS[id(max)] = (max, _min_max(True))


def _pick_extreme(
    m: FrameMonitor, inst: Inst, items: list[Val], kw: dict[str, Val], maximum: bool
) -> None:
    """``max(1.0, t.sum())`` (mmaction's ``max(torch.sum(mask), 1)``): Python keeps the first
    item and replaces it by each later one that compares greater (``>``; ``<`` for ``min``).
    Each comparison that involves a tensor is a branch on a tensor's value: its outcome is
    assumed (``_speculation``); the result is the item it picked, the very object."""
    cap = m.cap
    if kw or not items:
        raise m.unsupported("min()/max() over tensors with key= or default=")
    op = operator.gt if maximum else operator.lt
    best = items[0]
    for item in items[1:]:
        if not (isinstance(item.obj, torch.Tensor) or isinstance(best.obj, torch.Tensor)):
            cap.observe(item)
            cap.observe(best)
            outcome = bool(op(item.obj, best.obj))
        else:
            for v in (item, best):
                if isinstance(v.obj, torch.Tensor) and v.obj.numel() != 1:
                    raise m.unsupported("min()/max() of a tensor of several elements")
            real = op(item.obj, best.obj)
            if not isinstance(real, torch.Tensor):
                raise m.unsupported("min()/max() comparison that gives no tensor")
            node = cap.rec.call("call_function", op, (cap.to_arg(item), cap.to_arg(best)), {})
            reason = "min()/max() compares tensor values"
            outcome = truth_of_tensor(cap, cap.op_result(real, node), reason)
        if outcome:
            best = item
    chosen = best

    def make(real: list[Any]) -> list[Val]:
        if real[0] is not chosen.obj:
            raise m.unsupported("min()/max() picked another item than the comparisons said")
        return [chosen]

    m.expect_outputs(inst, 1, make)


def _effect(name: str) -> BuiltinHandler:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        raise m.unsupported(f"{name}() has effects outside the program (I/O, identity, scopes)")

    return handle


for _fn in (
    print,
    input,
    open,
    globals,
    locals,
    vars,
    exec,
    eval,
    compile,
    breakpoint,
    __import__,
):
    BUILTIN_HANDLERS[id(_fn)] = (_fn, _effect(_fn.__name__))


@register_builtin(
    torch.Size,
    torch.device,
    torch.finfo,
    torch.iinfo,
    math.prod,
    sorted,
    any,
    all,
    repr,
    format,
    callable,
    math.isclose,
)
def _pure(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    flat: list[Val] = []
    for v in pos:
        items = None if is_value_type(v.obj) else consume_items(m, v)
        flat.extend(items if items is not None else [v])
    if _has_tensor(flat):
        raise m.unsupported("pure function over tensors would read their values")
    pure_call(m, inst, flat, kw)
