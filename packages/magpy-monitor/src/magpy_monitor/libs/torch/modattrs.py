"""Submodules, parameters and buffers read as ``self.name``: recorded where they are stored.

``self.conv`` of an ``nn.Module`` is not in the instance's ``__dict__``: CPython's lookup
misses and calls ``Module.__getattr__``, a Python function that looks in ``_parameters``,
``_buffers`` and ``_modules``, in that order. A guard that repeated ``self.conv`` would run that
function for every submodule, parameter and buffer the record reads, on every call: most of a
large model's guard. The read is recorded as what it found, ``self._modules['conv']`` (two
dictionary lookups on a hit), with the checks that make the two the same: the instance's class
(guarded by type), no ``conv`` in the instance's own ``__dict__`` (which would shadow it), and,
for a class the program may change, no class attribute ``conv`` on it or its bases.
"""

from __future__ import annotations

from typing import Any

import torch

from magpy_refgraph import Attr, Const, GuardKind, Item, NotInInstanceDict

from ...core.attributes import MISSING, Read, attr_rule, static_lookup, user_class
from ...core.frame import FrameMonitor
from ...core.values import Val

__all__ = ["module_slot"]

_SLOTS = ("_parameters", "_buffers", "_modules")  # Module.__getattr__'s order


def module_slot(obj: Any, name: str, real: Any) -> str | None:
    """The dict of module ``obj`` in which ``Module.__getattr__`` found ``obj.name`` (which
    gave ``real``), or None when the read did not go that way."""
    cls: Any = type(obj)
    if not isinstance(obj, torch.nn.Module):
        return None
    if cls.__getattr__ is not torch.nn.Module.__getattr__:
        return None
    if cls.__getattribute__ is not object.__getattribute__:
        return None
    own = obj.__dict__
    if name in own or static_lookup(cls, name) is not MISSING:
        return None
    for slot in _SLOTS:
        d = own.get(slot)
        if type(d) is dict and name in d:
            return slot if d[name] is real else None
    return None


def _applies(r: Read) -> bool:
    base = r.base
    if not base.external or base.node is None:
        return False
    return module_slot(r.obj, r.name, r.real) is not None


@attr_rule("module dict attribute", _applies)
def _module_dict_attribute(m: FrameMonitor, r: Read) -> Val:
    cap, base, obj, name = m.cap, r.base, r.obj, r.name
    slot = module_slot(obj, name, r.real)
    assert slot is not None and base.node is not None
    cap.observe_type(base)
    cap.graph.observe(base.node, GuardKind.CUSTOM, NotInInstanceDict(name))
    cls = type(obj)
    for k in cls.__mro__:
        if user_class(k):  # a class attribute added later would win over __getattr__
            klass = cap.root(Const(k), k)
            if klass.node is not None:
                cap.graph.observe(klass.node, GuardKind.NOT_HASATTR, name)
            break  # (hasattr on the most derived user class searches its bases too)
    # (``v._modules[name]`` is what ``Module.__getattr__`` does with whatever mapping is there)
    table = cap.child(base, Attr(slot), obj.__dict__[slot])
    return cap.child(table, Item(name), r.real)
