"""Items: ``container[key]`` (BINARY_SUBSCR, and ``operator.getitem``) and STORE_SUBSCR.

A tensor subscript is one graph node; a list, tuple or dict the run built gives the shadow of
the item it holds; an entry container gives a guarded access path (its type, and for
``defaultdict``-like mappings its keys); a scalar expression is replayed; a Python
``__getitem__`` is followed. Objects built by the run and missing keys of mappings with a
default are the object model's (registry hooks ``BUILT_OBJECT`` and ``MISSING_ITEM``).

A store changes the shadow's items of a container the shadow knows (an entry list or dict gets
shadow items first), is one effect node for a tensor, runs natively on a numpy array made by
the run, follows a Python ``__setitem__`` of an object built in the run, and is one of the
changes the mock makes again to an object it rebuilds by calling its class (``pyobj.replayed``).
"""

from __future__ import annotations

import collections
import operator
import types
from typing import Any, cast

import torch

from magpy_refgraph import Item, ObjAttr, StateNotReady

from ..core import registry
from ..core.calls import inline
from ..core.frame import FrameMonitor, Inst
from ..core.operators import scalar_op, tensor_op
from ..core.recorder import setitem
from ..core.registry import BUILT_OBJECT, MISSING_ITEM, opcode
from ..core.values import Construction, Val
from ..core.valuetypes import is_value_type
from .build import new_with_items
from .iteration import DICT_TYPES, iter_items, unpack

__all__ = ["dict_item_read", "store_item", "subscr"]

_MODULE_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)
_DICT_LIKE = (collections.OrderedDict, collections.defaultdict, collections.Counter)


def _operator_subscript(v: Val) -> bool:
    """``v[key]`` is the operator over values: a value, a constant, a replayable expression, or
    an array the run made (of tensor values: see ``libs.numpy.tensorarrays``)."""
    if is_value_type(v.obj) or v.const or v.expr is not None:
        return True
    return not v.external and registry.INVOLVES_ARRAY.impl([v], None)


def subscr(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """Model ``container[key]`` (BINARY_SUBSCR)."""
    cap = m.cap
    obj = container.obj
    if isinstance(obj, torch.Tensor):
        _tensor_item(m, inst, container, key)
        return
    getitem = getattr(type(obj), "__getitem__", None)
    replayed = BUILT_OBJECT.impl(container)
    if replayed and isinstance(getitem, types.FunctionType):
        inline(m, inst, cap.const(getitem), [container, key], {})  # ModelOutput.__getitem__
        return
    if isinstance(container.items, list) and (
        type(obj) in (list, tuple) or isinstance(obj, (tuple, *_MODULE_CONTAINERS))
    ):
        cap.observe(key)
        k = key.obj
        if isinstance(k, slice):
            items = container.items[k]
            m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=items)])
        else:
            m.push(container.items[k])
        return
    if isinstance(container.items, dict):
        cap.observe_key(key)
        if key.obj not in container.items:
            MISSING_ITEM.impl(m, inst, container, key)  # defaultdict, Counter; else KeyError
            return
        m.push(container.items[key.obj][1])
        return
    if type(obj) is collections.deque and isinstance(container.items, list):
        cap.observe(key)
        if type(key.obj) is not int or not -len(container.items) <= key.obj < len(container.items):
            raise m.unsupported("deque index that is not an int in range")
        m.push(container.items[key.obj])
        return
    if container.external and (
        type(obj) in (list, tuple, dict, *_DICT_LIKE)
        or isinstance(obj, (*_MODULE_CONTAINERS, torch.nn.ModuleDict, torch.nn.ParameterDict))
        or dict_item_read(type(obj))
    ):
        _entry_item(m, inst, container, key)
        return
    if _operator_subscript(container):
        scalar_op(m, inst, operator.getitem, [container, key])
        return
    getitem = getattr(type(obj), "__getitem__", None)
    if isinstance(getitem, types.FunctionType):
        cap.observe_type(container)
        inline(m, inst, cap.const(getitem), [container, key], {})
        return
    if isinstance(obj, type) and _native_class_getitem(obj):
        # ``list[Any]`` (an annotation evaluated at def time): a generic alias, made natively
        # from which class and which key
        cap.observe_identity(container)
        cap.observe(key)
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])
        return
    raise m.unsupported(f"subscript of a {type(obj).__name__}")


#: the start of torch's warning for a uint8 mask as an index (then where in its sources)
UINT8_INDEX_WARNING = "indexing with dtype torch.uint8 is now deprecated"
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def uint8_mask_index(obj: object, key: object) -> bool:
    """``obj[key]`` indexes a plain tensor by one plain uint8 tensor (a deprecated mask)."""
    return (
        type(obj) in _PLAIN and type(key) in _PLAIN and cast(torch.Tensor, key).dtype is torch.uint8
    )


def _uint8_mask_index(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """``t[mask]`` with a uint8 mask: the same elements as with ``mask.bool()`` (a nonzero byte
    selects), and torch warns on every such index (``TORCH_WARN``). The graph indexes with the
    bool mask (no warning from the graph's code) and the mock replays the warning from the
    program's line, as eager issues it."""
    cap = m.cap

    def make(real: list[Any]) -> list[Val]:
        registry.NATIVE_WARNING_REPLAYED.impl(m, UINT8_INDEX_WARNING)
        mask = cap.rec.call("call_method", "bool", (cap.tensor_node(key),), {})
        node = cap.rec.call(
            "call_function", operator.getitem, (cap.tensor_node(container), mask), {}
        )
        return [cap.op_result(real[0], node)]

    m.expect_outputs(inst, 1, make)


def _tensor_item(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """``t[key]``: one graph node."""
    if uint8_mask_index(container.obj, key.obj):
        _uint8_mask_index(m, inst, container, key)
        return
    key = registry.ARRAY_INDEX.impl(m.cap, key) or key  # (numpy arrays in the key)
    tensor_op(m, inst, operator.getitem, [container, key])


def dict_item_read(cls: type) -> bool:
    """``d[key]`` of a ``dict`` subclass runs dict's own C code and nothing else: the class
    keeps dict's ``__getitem__`` and has no ``__missing__`` (a guard reading the item on a
    later call must not run one: defaultdict's would insert the key, a Python one is unseen
    code). A config dict whose only Python method is ``__getattr__`` is one; its other Python
    methods (``__contains__``, ``keys``...) are not what a subscript calls."""
    if not issubclass(cls, dict) or getattr(cls, "__getitem__", None) is not dict.__getitem__:
        return False
    return not hasattr(cls, "__missing__")


def _native_class_getitem(cls: type) -> bool:
    """``cls[key]`` makes a generic alias natively (``list``, ``dict``, ``tuple``, ...)."""
    hook = getattr(cls, "__class_getitem__", None)
    return hook is not None and not isinstance(getattr(hook, "__func__", None), types.FunctionType)


def _entry_item(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """``container[key]`` of an entry list, tuple, dict or module container: a guarded access
    path (a slice: a new container whose shadow knows its items)."""
    cap = m.cap
    obj = container.obj
    cap.observe_key(key)
    cap.observe_type(container)
    if type(obj) in _DICT_LIKE:
        # a defaultdict would insert a missing key even while a guard reads it: its keys
        # are checked first (and a missing key is a break)
        cap.observe_keys(container)
        if key.obj not in obj and registry.MODELLED_MISSING.impl(obj, key.obj):
            # (a defaultdict keyed by a value, GradScaler's per-optimizer states): the entry
            # its factory makes is a change of the dict the mock writes back
            factory = cap.child(container, ObjAttr("default_factory"), obj.default_factory)
            cap.observe_identity(factory)
            registry.MATERIALIZE.impl(cap, container, "defaultdict.__missing__")
            MISSING_ITEM.impl(m, inst, container, key)
            return
        if key.obj not in obj:
            where = m.unsupported("")
            reason = f"a missing key of a {type(obj).__name__} from outside"
            raise StateNotReady(reason, where.filename, where.lineno)
    if isinstance(key.obj, slice):
        if type(obj) not in (list, tuple) and not isinstance(obj, _MODULE_CONTAINERS):
            raise m.unsupported(f"slicing a {type(obj).__name__} from outside")
        # a slice of an entry list/tuple/ModuleList (``self.resnets[1:]``): its length is
        # guarded, each item an entry path; the new container's shadow knows its items
        whole = iter_items(m, container)
        assert whole is not None
        part = whole[key.obj]
        m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=part)])
        return
    m.expect_outputs(inst, 1, lambda real: [cap.child(container, Item(key.obj), real[0])])


@opcode("BINARY_SUBSCR")
def _binary_subscr(m: FrameMonitor, inst: Inst) -> None:
    container, key = m.pop(2)
    subscr(m, inst, container, key)


@opcode("BINARY_SLICE")
def _binary_slice(m: FrameMonitor, inst: Inst) -> None:
    """``container[start:stop]`` in one instruction (3.12): ``BUILD_SLICE 2`` then
    ``BINARY_SUBSCR``."""
    container, start, stop = m.pop(3)
    subscr(m, inst, container, _slice_of(m, start, stop))


@opcode("STORE_SLICE")
def _store_slice(m: FrameMonitor, inst: Inst) -> None:
    """``container[start:stop] = value`` in one instruction (3.12)."""
    value, container, start, stop = m.pop(4)
    _store(m, inst, value, container, _slice_of(m, start, stop))


def _slice_of(m: FrameMonitor, start: Val, stop: Val) -> Val:
    """The shadow of ``slice(start, stop)`` that ``BUILD_SLICE 2`` would have made."""
    return new_with_items(m, slice(start.obj, stop.obj), [start, stop])


@opcode("STORE_SUBSCR")
def _store_subscr(m: FrameMonitor, inst: Inst) -> None:
    value, container, key = m.pop(3)
    _store(m, inst, value, container, key)


def _store(m: FrameMonitor, inst: Inst, value: Val, container: Val, key: Val) -> None:
    cap = m.cap
    if isinstance(container.obj, torch.Tensor):
        node = cap.rec.call(
            "call_function",
            setitem,
            (cap.tensor_node(container), cap.to_arg(key), cap.to_arg(value)),
            {},
            effect=True,
        )
        cap.mutate_tensor(container, node)
    elif container.payload(Construction) is not None:  # a dataclass built in the run
        registry.CHANGE_REPLAYED.impl(m, inst, container, "item", key, value)
        return
    elif registry.IS_PYOBJ.impl(container) and registry.STORE_ITEM_FOLLOWED.impl(
        m, inst, container, key, value
    ):
        return  # an object built in the run: its Python __setitem__, or its own items
    else:
        cap.observe_key(key)
        store_item(m, container, key, value)
    m.expect_outputs(inst, 0, lambda real: [])


def store_item(m: FrameMonitor, container: Val, key: Val, value: Val) -> None:
    """``container[key] = value`` on a container that is no tensor, about to run natively."""
    cap = m.cap
    obj = container.obj
    if type(obj) is list and isinstance(key.obj, slice) and isinstance(container.items, list):
        items = list(container.items)
        try:  # x[::2] = a: the same assignment on the shadow items (or the same error)
            items[key.obj] = unpack(m, value, None)
        except (TypeError, ValueError) as exc:
            raise m.unsupported(f"slice assignment that raises ({exc})") from None
        container.items[:] = items
    elif type(obj) in (list, collections.deque) and isinstance(container.items, list):
        container.items[key.obj] = value
    elif type(obj) in DICT_TYPES and isinstance(container.items, dict):
        registry.PUT_ITEM.impl(container.items, key, value)
    elif container.external and type(obj) in (list, dict):
        registry.MATERIALIZE.impl(cap, container, "setitem")
        store_item(m, container, key, value)
    elif registry.INVOLVES_ARRAY.impl([container], None):
        registry.STORE_ARRAY_ITEM.impl(m, container, key, value)
    else:
        raise m.unsupported(f"item assignment on {type(obj).__name__}")
