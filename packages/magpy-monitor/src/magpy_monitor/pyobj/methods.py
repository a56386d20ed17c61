"""Native methods of builtin types that code calls, modelled by name.

``d.items()``/``keys()``/``values()`` give views over the dict's shadow; ``d.get(k)`` reads its
shadow items (or, from outside, guards its keys); a ``mappingproxy`` read is pure when the
mapping is a constant of the record; str and tuple methods are pure over guarded values.
Methods of ``re`` patterns and matches, ``torch.Size``, ``int``,
``float``, ``bytes`` and ``list`` that compute a value from their arguments are pure, and so are
``re``'s functions. (``str.join`` iterates its argument: see ``pyobj.highorder``; ``list``
methods that change the list: ``pyobj.containers``.)
"""

from __future__ import annotations

import collections
import re
import types
from typing import Any

import torch

from magpy_refgraph import Item

from ..bytecode.iteration import DictView, consume_items
from ..core.calls import pure_call
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS, BuiltinHandler, register_methods
from ..core.values import BoundMethod, Val
from ..core.valuetypes import is_value_type

__all__: list[str] = []


# ---------------------------------------------------------------------- dict and mappingproxy reads
def _dict_view(name: str) -> BuiltinHandler:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        (base,) = pos
        m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], payload=DictView(name, base))])

    return handle


for _name in ("items", "keys", "values"):
    METHOD_HANDLERS[(dict, _name)] = _dict_view(_name)


def _const_mapping_read(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """A read of a read-only mapping that is a constant of the record (``Signature.parameters``
    from ``inspect.signature``): its result is a constant too."""
    if not pos[0].const:
        raise m.unsupported("reading a mappingproxy from outside (it may view a changing dict)")
    pure_call(m, inst, pos, kw)


for _name in ("items", "keys", "values", "get", "copy", "__getitem__", "__contains__"):
    METHOD_HANDLERS[(types.MappingProxyType, _name)] = _const_mapping_read


def _plain_dict(obj: Any) -> bool:
    """A dict, or a subclass that reads items like one (a registry adding a ``get`` helper)."""
    cls = type(obj)
    return cls is dict or (
        isinstance(obj, dict)
        and cls.__getitem__ is dict.__getitem__
        and cls.keys is dict.keys
        and cls.__contains__ is dict.__contains__
    )


@register_methods(dict, "get")
def _dict_get(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    base, key = pos[0], pos[1]
    default = pos[2] if len(pos) > 2 else m.cap.const(None)
    cap = m.cap
    cap.observe_key(key)
    if isinstance(base.items, dict):
        pair = base.items.get(key.obj)
        m.push(pair[1] if pair is not None else default)
        return
    if base.external and _plain_dict(base.obj):
        cap.observe_keys(base)
        if key.obj in base.obj:
            m.expect_outputs(inst, 1, lambda real: [cap.child(base, Item(key.obj), real[0])])
        else:
            m.push(default)
        return
    raise m.unsupported("dict.get on a dict of unknown contents")


def _read_only_dict_methods() -> None:
    """``OrderedDict``'s own ``keys``/``items``/``values``/``get`` behave like ``dict``'s."""
    for name in ("keys", "items", "values", "get"):
        handler = METHOD_HANDLERS.get((dict, name))
        if handler is not None:
            METHOD_HANDLERS.setdefault((collections.OrderedDict, name), handler)


_read_only_dict_methods()


# ---------------------------------------------------------------------- str and tuple methods
@register_methods(
    str,
    "split",
    "rsplit",
    "strip",
    "lstrip",
    "rstrip",
    "upper",
    "lower",
    "startswith",
    "endswith",
    "replace",
    "format",
    "partition",
    "rpartition",
    "find",
    "rfind",
    "index",
    "count",
    "isidentifier",
    "isdigit",
    "isalpha",
    "title",
    "zfill",
    "splitlines",
    "capitalize",
    "casefold",
    "center",
    "ljust",
    "rjust",
    "encode",
)
@register_methods(tuple, "index", "count")
def _str_method(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    flat: list[Val] = [pos[0]]
    for v in pos[1:]:
        items = None if is_value_type(v.obj) else consume_items(m, v)
        flat.extend(items if items is not None else [v])
    if any(isinstance(v.obj, torch.Tensor) for v in flat):
        raise m.unsupported("string method over tensors")
    pure_call(m, inst, flat, kw)


# ---------------------------------------------------------------------- other pure methods
def _pure_method(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    pure_call(m, inst, pos, kw)


def _register_pure_methods() -> None:
    pattern, match = type(re.compile("")), type(re.match("", ""))
    for owner, names in (
        (pattern, "match search fullmatch findall sub subn split finditer"),
        (match, "group groups groupdict span start end expand"),
        (torch.Size, "numel count index"),
        (int, "bit_length to_bytes conjugate"),
        (float, "is_integer hex conjugate"),
        (bytes, "hex decode startswith endswith split join"),
        (list, "index count copy"),
    ):
        for n in names.split():
            METHOD_HANDLERS.setdefault((owner, n), _pure_method)
    for fn in (
        re.compile,
        re.match,
        re.search,
        re.fullmatch,
        re.sub,
        re.split,
        re.findall,
        re.escape,
    ):
        BUILTIN_HANDLERS.setdefault(id(fn), (fn, _pure_method))


_register_pure_methods()


@register_methods(types.FunctionType, "__get__")
def _function_get(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``func.__get__(obj, cls)``: ``func`` bound to ``obj`` (a wrapper binding a method by
    hand, as an LR scheduler's patched ``optimizer.step`` does)."""
    if kw or len(pos) not in (2, 3):
        raise m.unsupported("function.__get__ with other arguments")
    func, obj = pos[0], pos[1]
    m.cap.observe_identity(func)
    if obj.obj is None:
        m.push(func)  # (unbound: the function itself)
        return
    m.expect_outputs(inst, 1, lambda real: [Val(real[0], payload=BoundMethod(obj))])
