"""Lists and dicts the program mutates: shadow contents and write-backs.

A list or dict created during the run keeps the shadows of its elements as it changes. One that
existed at entry is *materialized* the first time the program mutates it: its length (or keys)
is guarded and every element becomes an entry path; from then on the shadow contents follow
every mutation, and the mock gives the real container exactly the final contents, in place.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from magpy_refgraph import Item, Unsupported

from ..bytecode.iteration import (
    DICT_TYPES,
    consume_generator,
    is_generator,
    iter_items,
    unpack,
)
from ..core import registry
from ..core.capture import Capture
from ..core.frame import FrameMonitor, Inst
from ..core.growing import log_append, log_insert
from ..core.programcode import program_frames
from ..core.registry import METHOD_HANDLERS, opcode
from ..core.values import Val
from ..core.valuetypes import is_value_type

__all__ = ["materialize", "plain_data"]


def plain_data(obj: Any, depth: int = 0) -> bool:
    """Values, and lists/tuples/dicts/sets of them (what ``json`` could hold)."""
    if depth > 16:
        return False
    if obj is None or is_value_type(obj):
        return True
    if type(obj) in (list, tuple, set, frozenset):
        return all(plain_data(x, depth + 1) for x in obj)
    if type(obj) is dict:
        return all(plain_data(k, depth + 1) and plain_data(v, depth + 1) for k, v in obj.items())
    return False


@registry.MATERIALIZE.provide
def materialize(cap: Capture, val: Val, reason: str) -> None:
    """Make ``val``'s shadow contents complete before a mutation (entry containers)."""
    obj = val.obj
    if val.items is None and val.const and not val.external and plain_data(obj):
        # a constant of the run (a pure call's result, e.g. json.loads): its contents are
        # values, known from the object itself
        if type(obj) is list:
            val.items = [cap.const(x) for x in obj]
        elif type(obj) is dict:
            val.items = {k: (cap.const(k), cap.const(x)) for k, x in obj.items()}
    if val.items is None:
        if not val.external:
            raise_unknown(val)
        if type(obj) is list:
            cap.observe_len(val)
            val.items = [cap.child(val, Item(i), x) for i, x in enumerate(obj)]
        elif type(obj) in (dict, collections.defaultdict):
            cap.observe_keys(val)
            for k in obj:
                cap.observe_key(cap.const(k))  # (a key hashed by Python: a break)
            val.items = {k: (cap.const(k), cap.child(val, Item(k), x)) for k, x in obj.items()}
        else:
            raise_unknown(val)
        if (
            val.node is not None
        ):  # (what the entry held: a run that puts it all back changed nothing)
            items: Any = val.items
            val.node.meta["entry_items"] = type(items)(items)
    cap.mutations += 1
    if val.external and val.node is not None:
        cap.graph.update_in_place(val.node, reason, keep_edges=False)
        if val not in cap.mutated_containers:
            cap.mutated_containers.append(val)


def raise_unknown(val: Val) -> None:
    raise Unsupported(f"mutating a {type(val.obj).__name__} of unknown contents")


def _list_method(name: str) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        cap = m.cap
        base, args = pos[0], pos[1:]
        if kw:
            raise m.unsupported(f"list.{name} with keyword arguments")
        if (name == "append" and log_append(cap, base, args[0])) or (
            name == "insert" and len(args) == 2 and log_insert(cap, base, args[0], args[1])
        ):
            m.expect_outputs(inst, 1, lambda real: [cap.const(None)])
            return
        materialize(cap, base, f"list.{name}")
        items: list[Val] = base.items
        result: Val | None = None
        if name == "append":
            items.append(args[0])
        elif name == "extend" and is_generator(args[0]):

            def finish(yielded: list[Val], real: list[Any]) -> list[Val]:
                items.extend(yielded)
                return [cap.const(None)]

            consume_generator(m, inst, args[0], 1, finish)
            return
        elif name == "extend":
            items.extend(unpack(m, args[0], None))
        elif name == "insert":
            cap.observe(args[0])
            items.insert(args[0].obj, args[1])
        elif name == "pop":
            index = -1
            if args:
                cap.observe(args[0])
                index = args[0].obj
            result = items.pop(index)
        elif name == "clear":
            items.clear()
        elif name == "reverse":
            items.reverse()
        elif name == "remove":
            cap.observe(args[0])
            for v in items:
                cap.observe(v)
            objs = [v.obj for v in items]
            if args[0].obj in objs:  # else list.remove raises ValueError (nothing changes)
                items.pop(objs.index(args[0].obj))
        fixed, none = result, cap.const(None)
        p = m.expect_outputs(inst, 1, lambda real: [fixed if fixed is not None else none])
        p.calls_back = program_frames()  # (``remove`` runs the items' Python ``__eq__``: unseen)

    return handle


for _name in ("append", "extend", "insert", "pop", "clear", "reverse", "remove"):
    METHOD_HANDLERS[(list, _name)] = _list_method(_name)


def _list_copy(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``lst.copy()``: a new list holding the same values (known as they are)."""
    if kw or len(pos) != 1:
        raise m.unsupported("list.copy with arguments")
    items = iter_items(m, pos[0])
    if items is None:
        raise m.unsupported("list.copy of a list of unknown contents")
    m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], items=list(items))])


METHOD_HANDLERS[(list, "copy")] = _list_copy


def _dict_method(name: str) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        cap = m.cap
        base, args = pos[0], pos[1:]
        materialize(cap, base, f"dict.{name}")
        items: dict[Any, tuple[Val, Val]] = base.items
        result: Val | None = None
        if name == "update":
            if args:
                src = args[0]
                if isinstance(src.items, dict):
                    items.update(src.items)
                else:
                    keys = iter_items(m, src)
                    if keys is None or type(src.obj) is not dict:
                        raise m.unsupported("dict.update from an iterable of pairs")
                    for k in keys:
                        cap.observe_key(k)
                        items[k.obj] = (k, cap.child(src, Item(k.obj), src.obj[k.obj]))
            for kw_name, v in kw.items():
                items[kw_name] = (cap.const(kw_name), v)
        elif name in ("pop", "setdefault"):
            key = args[0]
            cap.observe_key(key)
            default = args[1] if len(args) > 1 else cap.const(None)
            if name == "pop":
                pair = items.pop(key.obj, None)
                result = pair[1] if pair is not None else default
            else:
                pair = items.setdefault(key.obj, (key, default))
                result = pair[1]
        elif name == "clear":
            items.clear()
        fixed = result
        m.expect_outputs(inst, 1, lambda real: [fixed if fixed is not None else cap.const(None)])

    return handle


for _name in ("update", "pop", "setdefault", "clear"):
    METHOD_HANDLERS[(dict, _name)] = _dict_method(_name)


@opcode("DELETE_SUBSCR")
def _delete_subscr(m: FrameMonitor, inst: Inst) -> None:
    container, key = m.pop(2)
    cap = m.cap
    if type(container.obj) not in (list, *DICT_TYPES):
        raise m.unsupported(f"del on an item of a {type(container.obj).__name__}")
    if isinstance(container.obj, dict):
        cap.observe_key(key)
    else:
        cap.observe(key)
    materialize(cap, container, "del item")
    if isinstance(container.items, dict):
        if key.obj not in container.items:
            raise m.unsupported("del of a missing key raises KeyError")
        container.items.pop(key.obj)
    else:
        del container.items[key.obj]


@opcode("UNPACK_EX")
def _unpack_ex(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    before, after = inst.arg & 0xFF, inst.arg >> 8
    if isinstance(v.obj, torch.Tensor):
        registry.UNPACK_EX_ROWS.impl(m, inst, v, before, after)  # `x, *rest = t`: rows of t
        return
    items = unpack(m, v, None)
    if len(items) < before + after:
        raise m.unsupported("not enough values to unpack")
    head, middle = items[:before], items[before : len(items) - after]
    tail = items[len(items) - after :]

    def make(real: list[Any]) -> list[Val]:
        rest = m.cap.new(real[after], items=list(middle))
        return [*reversed(tail), rest, *reversed(head)]

    m.expect_outputs(inst, before + after + 1, make)
