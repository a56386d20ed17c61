"""Builders: BUILD_*, LIST_*/SET_*/MAP_ADD/DICT_*, FORMAT_VALUE and UNPACK_SEQUENCE.

A container built during the run gets a shadow that knows its items (the ``Val`` of each), so
that reading them back gives the values that went in. Sets are modelled by the object model
(``pyobj.sets``), through the registry's ``BUILD_SET``/``SET_ADD``/``SET_UPDATE`` hooks.
"""

from __future__ import annotations

from typing import Any

import torch

from magpy_refgraph import Item

from ..core import registry
from ..core.frame import FrameMonitor, Inst
from ..core.operators import scalar_op
from ..core.registry import opcode
from ..core.values import Val
from .iteration import consume_generator, is_generator, iter_items, unpack, unpack_pending

__all__ = ["new_with_items"]


def new_with_items(m: FrameMonitor, obj: Any, items: Any) -> Val:
    if all(isinstance(i, Val) and i.const for i in items):
        return m.cap.const(obj)
    return m.cap.new(obj, items=items)


@opcode("BUILD_SLICE")
def _build_slice(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg)
    m.expect_outputs(inst, 1, lambda real: [new_with_items(m, real[0], list(parts))])


@opcode("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET")
def _build_seq(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg)

    def make(real: list[Any]) -> list[Val]:
        if inst.opname == "BUILD_TUPLE":
            return [new_with_items(m, real[0], list(parts))]
        return [m.cap.new(real[0], items=list(parts))]

    if inst.opname == "BUILD_SET":
        registry.BUILD_SET.impl(m, inst, list(parts))
        return
    m.expect_outputs(inst, 1, make)


@opcode("BUILD_MAP")
def _build_map(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(2 * inst.arg)
    pairs = [(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
    for k, _ in pairs:
        m.cap.observe_key(k)
    m.expect_outputs(
        inst, 1, lambda real: [m.cap.new(real[0], items={k.obj: (k, v) for k, v in pairs})]
    )


@opcode("BUILD_CONST_KEY_MAP")
def _build_const_key_map(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg + 1)
    keys, values = parts[-1], parts[:-1]
    m.cap.observe(keys)
    m.expect_outputs(
        inst,
        1,
        lambda real: [
            m.cap.new(
                real[0],
                items={k: (m.cap.const(k), v) for k, v in zip(keys.obj, values, strict=True)},
            )
        ],
    )


# ---------------------------------------------------------------------- comprehensions, displays
@opcode("LIST_APPEND", "SET_ADD")
def _list_append(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    target = m.stack[-inst.arg]
    if inst.opname == "SET_ADD":
        registry.SET_ADD.impl(m, inst, target, v)
        return
    if not isinstance(target.items, list):
        raise m.unsupported(f"{inst.opname} on a container of unknown contents")
    target.items.append(v)


@opcode("MAP_ADD")
def _map_add(m: FrameMonitor, inst: Inst) -> None:
    k, v = m.pop(2)
    target = m.stack[-inst.arg]
    m.cap.observe_key(k)
    if not isinstance(target.items, dict):
        raise m.unsupported("MAP_ADD on a dict of unknown contents")
    target.items[k.obj] = (k, v)


@opcode("LIST_EXTEND", "SET_UPDATE")
def _list_extend(m: FrameMonitor, inst: Inst) -> None:
    (it,) = m.pop()
    target = m.stack[-inst.arg]
    if inst.opname == "SET_UPDATE":
        registry.SET_UPDATE.impl(m, inst, target, it)
        return
    if not isinstance(target.items, list):
        raise m.unsupported(f"{inst.opname} on a container of unknown contents")
    items = target.items
    if is_generator(it):  # [*gen], (*self.parameters(),)

        def finish(yielded: list[Val], real: list[Any]) -> list[Val]:
            items.extend(yielded)
            return []

        consume_generator(m, inst, it, 0, finish)
        return
    if isinstance(it.obj, torch.Tensor):  # [*t]: the rows Tensor.__iter__ made natively
        registry.CHECK_ROW_SOURCE.impl(m, it)
        start = len(items)

        def rows(real: list[Any]) -> list[Val]:
            items.extend(registry.TENSOR_ROWS.impl(m, it, tuple(target.obj[start:])).items)
            return []

        m.expect_outputs(inst, 0, rows)
        return
    items.extend(unpack(m, it, None))


@opcode("DICT_MERGE", "DICT_UPDATE")
def _dict_merge(m: FrameMonitor, inst: Inst) -> None:
    (other,) = m.pop()
    target = m.stack[-inst.arg]
    cap = m.cap
    if not isinstance(target.items, dict):
        raise m.unsupported(f"{inst.opname} into a dict of unknown contents")
    if isinstance(other.items, dict):
        target.items.update(other.items)
    elif other.external and type(other.obj) is dict:
        cap.observe_keys(other)
        for k, v in other.obj.items():
            cap.observe_key(cap.const(k))  # (a key hashed by Python: a break)
            target.items[k] = (cap.const(k), cap.child(other, Item(k), v))
    else:
        raise m.unsupported(f"{inst.opname} from a {type(other.obj).__name__}")


@opcode("LIST_TO_TUPLE")
def _list_to_tuple(m: FrameMonitor, inst: Inst) -> None:
    (lst,) = m.pop()
    items = iter_items(m, lst)  # (a list from before the segment: read from outside)
    if items is None:
        raise m.unsupported("a tuple of a list of unknown contents")
    m.expect_outputs(inst, 1, lambda real: [new_with_items(m, real[0], items)])


@opcode("UNPACK_SEQUENCE")
def _unpack_sequence(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    unpack_pending(m, inst, v, inst.arg)


# ---------------------------------------------------------------------- strings
@opcode("FORMAT_VALUE")
def _format_value(m: FrameMonitor, inst: Inst) -> None:
    has_spec = (inst.arg & 0x04) == 0x04
    parts = m.pop(1 + has_spec)
    conv = inst.arg & 0x03
    m.cap.observe(parts[0]) if isinstance(parts[0].obj, torch.Tensor) else None
    fn = _FORMATTERS[conv]
    scalar_op(m, inst, fn, list(parts))


@opcode("CONVERT_VALUE")
def _convert_value(m: FrameMonitor, inst: Inst) -> None:
    """``!s``/``!r``/``!a`` of an f-string field (3.13)."""
    parts = m.pop()
    m.cap.observe(parts[0]) if isinstance(parts[0].obj, torch.Tensor) else None
    scalar_op(m, inst, _CONVERTERS[inst.arg], list(parts))


@opcode("FORMAT_SIMPLE", "FORMAT_WITH_SPEC")
def _format_simple(m: FrameMonitor, inst: Inst) -> None:
    """An f-string field, with or without a format spec (3.13)."""
    parts = m.pop(2 if inst.opname == "FORMAT_WITH_SPEC" else 1)
    m.cap.observe(parts[0]) if isinstance(parts[0].obj, torch.Tensor) else None
    scalar_op(m, inst, _fmt_plain, list(parts))


def _fmt_plain(v: Any, spec: str = "") -> str:
    return format(v, spec)


def _fmt_str(v: Any, spec: str = "") -> str:
    return format(str(v), spec)


def _fmt_repr(v: Any, spec: str = "") -> str:
    return format(repr(v), spec)


def _fmt_ascii(v: Any, spec: str = "") -> str:
    return format(ascii(v), spec)


_FORMATTERS = {0: _fmt_plain, 1: _fmt_str, 2: _fmt_repr, 3: _fmt_ascii}
_CONVERTERS = {1: str, 2: repr, 3: ascii}


def _join_strings(*parts: str) -> str:
    return "".join(parts)


@opcode("BUILD_STRING")
def _build_string(m: FrameMonitor, inst: Inst) -> None:
    parts = m.pop(inst.arg)
    scalar_op(m, inst, _join_strings, list(parts))
