"""Iterating a tensor by rows where CPython does it natively: star-unpacking and ``zip``.

``Tensor.__iter__`` is Python (``iter(self.unbind(0))``), but ``UNPACK_EX`` (``x, *rest = t``)
and ``zip(ws, t)`` call it from native code, so the monitor never sees its frame. The rows they
hold are the outputs of one ``unbind(0)`` in the graph, recorded when the native code made them;
their number follows ``t``'s first size, which is guarded (``UNPACK_SEQUENCE`` of a tensor and
``enumerate(t)`` are modelled the same way elsewhere).
"""

from __future__ import annotations

from typing import Any

import torch

from ...bytecode.iteration import draw, iter_items, make_iterator
from ...core import registry
from ...core.frame import FrameMonitor, Inst
from ...core.values import Val
from ...pyobj.highorder import LazyMap

__all__ = [
    "check_row_source",
    "is_row_source",
    "map_rows",
    "tensor_rows",
    "unpack_ex_rows",
    "zip_rows",
]


def is_row_source(v: Val) -> bool:
    """True for a tensor that iterating splits into rows with ``Tensor.__iter__``."""
    return isinstance(v.obj, torch.Tensor) and type(v.obj).__iter__ is torch.Tensor.__iter__


@registry.CHECK_ROW_SOURCE.provide
def check_row_source(m: FrameMonitor, v: Val) -> None:
    if not is_row_source(v):
        raise m.unsupported(f"iterating over a {type(v.obj).__name__} with its own __iter__")
    if v.obj.dim() == 0:
        raise m.unsupported("iterating over a 0-d tensor (raises TypeError)")
    m.cap.guard_meta(v)  # how many rows there are follows the first size


@registry.TENSOR_ROWS.provide
def tensor_rows(m: FrameMonitor, v: Val, rows: Any) -> Val:
    """The shadow of ``rows``, the tuple ``Tensor.__iter__`` made from ``v`` natively: the
    outputs of an ``unbind(0)`` recorded now."""
    cap = m.cap
    if type(rows) is not tuple or len(rows) != v.obj.shape[0]:
        raise m.unsupported("iterating over a tensor gave rows the monitor cannot name")
    node = cap.rec.call("call_function", torch.unbind, (cap.to_arg(v), 0), {})
    return cap.op_result(rows, node)


@registry.UNPACK_EX_ROWS.provide
def unpack_ex_rows(m: FrameMonitor, inst: Inst, v: Val, before: int, after: int) -> None:
    """``a, *rest, b = t`` (UNPACK_EX) of a tensor: the rows of ``t.unbind(0)``, the starred
    part a new list of the middle rows."""
    check_row_source(m, v)
    if v.obj.shape[0] < before + after:
        raise m.unsupported("not enough values to unpack (raises ValueError)")

    def make(real: list[Any]) -> list[Val]:
        # real is bottom-first: the last values (reversed), the starred list, the first values
        # (reversed, the first one on top)
        head = real[after + 1 :][::-1]
        middle = real[after]
        tail = real[:after][::-1]
        if type(middle) is not list:
            raise m.unsupported("star-unpacking a tensor gave an unexpected value")
        rows = tensor_rows(m, v, (*head, *middle, *tail)).items
        assert isinstance(rows, list)
        n_mid = len(middle)
        rest = m.cap.new(middle, items=rows[before : before + n_mid])
        return [*reversed(rows[before + n_mid :]), rest, *reversed(rows[:before])]

    m.expect_outputs(inst, before + after + 1, make)


@registry.ZIP_ROWS.provide
def zip_rows(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``zip(...)`` where some of the iterables are tensors: each tensor's rows are those of the
    iterator ``zip`` made with ``Tensor.__iter__``; the other iterables are drawn as usual."""
    cap = m.cap
    for v in pos:
        if isinstance(v.obj, torch.Tensor):
            check_row_source(m, v)
    strict = kw.get("strict")
    if strict is not None:
        cap.observe(strict)

    def make(real: list[Any]) -> list[Val]:
        inner = _zip_iterators(m, real[0], len(pos))
        sources = [
            tensor_rows(m, v, _iterator_rows(m, it)) if isinstance(v.obj, torch.Tensor) else v
            for v, it in zip(pos, inner, strict=True)
        ]
        drawn = draw(m, sources)
        if drawn is None:
            raise m.unsupported("zip over an iterable of unknown contents")
        rows, feeds = drawn
        if strict is not None and strict.obj:
            if feeds:
                raise m.unsupported("zip(strict=True) over an iterator")
            if len({len(iter_items(m, s) or ()) for s in sources}) > 1:
                raise m.unsupported("zip(strict=True) of unequal lengths raises ValueError")
        tuples = [cap.new(tuple(v.obj for v in row), items=row) for row in rows]
        return [make_iterator(m, real[0], tuples, feeds=feeds)]

    m.expect_outputs(inst, 1, make)


@registry.MAP_ROWS.provide
def map_rows(m: FrameMonitor, inst: Inst, kind: str, fn_val: Val, v: Val) -> None:
    """``map(f, t)``/``filter(f, t)`` of a tensor: over the rows of the iterator ``map`` made
    with ``Tensor.__iter__``."""
    check_row_source(m, v)

    def make(real: list[Any]) -> list[Val]:
        try:
            it = real[0].__reduce__()[1][1]  # map -> (map, (fn, iterator)); filter alike
        except Exception as exc:
            raise m.unsupported(f"{kind} over a tensor gave an unknown iterator") from exc
        rows = tensor_rows(m, v, _iterator_rows(m, it)).items
        return [m.cap.new(real[0], payload=LazyMap(kind, fn_val, rows))]

    m.expect_outputs(inst, 1, make)


def _zip_iterators(m: FrameMonitor, z: Any, n: int) -> tuple[Any, ...]:
    """The iterators a fresh ``zip`` object draws from (``zip.__reduce__``)."""
    try:
        its = z.__reduce__()[1]
    except Exception as exc:  # not a zip object
        raise m.unsupported("zip over a tensor gave an unknown iterator") from exc
    if type(z) is not zip or type(its) is not tuple or len(its) != n:
        raise m.unsupported("zip over a tensor gave an unknown iterator")
    return its


def _iterator_rows(m: FrameMonitor, it: Any) -> Any:
    """The rows a fresh iterator made by ``Tensor.__iter__`` holds (``iter(rows_tuple)``)."""
    try:
        reduced = it.__reduce__()  # tuple_iterator -> (iter, (rows,), index)
        rows, index = reduced[1][0], reduced[2] if len(reduced) > 2 else 0
    except Exception as exc:  # not the iterator Tensor.__iter__ makes
        raise m.unsupported("iterating over a tensor with an unknown iterator") from exc
    if index != 0:
        raise m.unsupported("iterating over a tensor with an unknown iterator")
    return rows
