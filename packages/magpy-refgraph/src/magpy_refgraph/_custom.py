"""The payloads of ``GuardKind.CUSTOM`` requirements: one small frozen class per check.

The monitor's rules observe them, ``magpy_codegen`` emits one check per class (an unknown
payload is an internal error there). They are hashable when their fields are; deduplication
compares them field by field with exact types (see ``_guards.payload_key``), so
``Outcome(f, True)`` and ``Outcome(f, 1)`` stay two checks. Fields holding callables or torch
objects are typed ``Any``: this package never imports torch.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

import attrs

__all__ = [
    "CustomPayload",
    "IterLen",
    "ModuleCall",
    "ModuleNoHooks",
    "NoPlainAttr",
    "NotInInstanceDict",
    "Outcome",
    "SetItems",
    "SetOrder",
    "plain_attr_absent",
]


class CustomPayload:
    """Base of the ``GuardKind.CUSTOM`` payloads; ``cost`` orders its check among the others
    (``GuardKind.cost``: the costliest kind unless a payload says otherwise)."""

    __slots__ = ()
    cost: ClassVar[int] = 8


@attrs.frozen
class ModuleCall(CustomPayload):
    """A module is called the way the record called it: no backward hooks on it (unless
    ``grad_off``: called with gradients off and a result its backward hooks leave alone, they
    cannot run, so whether it has any does not matter), no global module hooks, and (unless
    ``own_forward``: the instance's ``forward`` is guarded on its own path) no ``forward`` in
    the instance's ``__dict__``."""

    own_forward: bool = False
    grad_off: bool = False


@attrs.frozen
class ModuleNoHooks(CustomPayload):
    """A module has no forward hooks and no forward pre-hooks."""


@attrs.frozen
class NotInInstanceDict(CustomPayload):
    """``name`` is not in the object's own ``__dict__`` (a read the record takes from where the
    class's ``__getattr__`` found it, e.g. a module's ``_modules``, is not shadowed)."""

    name: str


@attrs.frozen
class NoPlainAttr(CustomPayload):
    """``object.__getattribute__(obj, name)`` finds nothing: no attribute of that name on the
    object's class (its MRO) nor in its own ``__dict__`` (a class's own ``__getattribute__``
    raised AttributeError for it)."""

    name: str


def plain_attr_absent(obj: object, name: str) -> bool:
    """What ``NoPlainAttr(name)`` checks of ``obj``, running no code of the object's: ``name``
    is in no namespace of its class's MRO, and not in its own ``__dict__``."""
    for cls in type(obj).__mro__:
        if name in cls.__dict__:
            return False
    own = object.__getattribute__(obj, "__dict__") if hasattr(type(obj), "__dict__") else None
    return not (type(own) is dict and name in own)


@attrs.frozen
class IterLen(CustomPayload):
    """An iterator from outside that the record takes values from has at least ``n`` values
    left, or exactly ``n`` (``exact``) where the record saw the loop end; fewer than
    ``below`` where it is set (a chunk of a split loop: the record serves the counts that
    choose the same chunk)."""

    exact: bool
    n: int
    below: int | None = None
    # a len(): checked before the values the record took (which record of a split loop's
    # head serves this chunk is decided at once)
    cost: ClassVar[int] = 4


@attrs.frozen
class Outcome(CustomPayload):
    """``fn(obj)`` gives ``value`` (exact type): a branch on arithmetic over a promoted scalar,
    state read through a call, whatever the object's own value."""

    fn: Any
    value: Any


@attrs.frozen
class SetItems(CustomPayload):
    """A set from outside holds the same values of the same types, in any order
    (``items`` from :func:`set_contents`)."""

    items: frozenset[Hashable]


@attrs.frozen
class SetOrder(CustomPayload):
    """A set from outside that the record iterates holds the same values in the same order
    (``order`` from :func:`set_order`)."""

    order: tuple[Hashable, ...]
