"""Guard requirements: what must hold of the entry state for a compiled segment to be reused.

Requirements are data only (a path, a kind, an opaque payload); ``codegen`` turns them into
checks. Payload equality is strict so that deduplication never merges different checks:
``ID``/``TYPE`` payloads compare by identity, ``VALUE``-like payloads by exact type and value
(floats bit-exact), unhashable payloads by identity. ``CUSTOM`` payloads are the classes of
``_custom.py``, compared field by field the same way.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Hashable, Iterable, Iterator
from typing import cast

import attrs

from ._access import Path, short_repr
from ._custom import CustomPayload

__all__ = [
    "GuardKind",
    "GuardReq",
    "GuardSet",
    "exact_token",
    "immutable_value",
    "set_contents",
    "set_order",
]


class GuardKind(enum.Enum):
    """What a guard checks. ``kind.cost`` orders checks, cheapest first."""

    ID = "id"
    TYPE = "type"
    NONE = "none"
    NOT_NONE = "not_none"
    VALUE = "value"
    LEN = "len"
    KEYS = "keys"
    HASATTR = "hasattr"
    NOT_HASATTR = "not_hasattr"
    TENSOR_META = "tensor_meta"
    CUSTOM = "custom"

    @property
    def cost(self) -> int:
        """Relative cost: ID < TYPE < NONE < VALUE < LEN < KEYS < HASATTR < TENSOR_META < CUSTOM."""
        return _COST[self]


_COST = {
    GuardKind.ID: 0,
    GuardKind.TYPE: 1,
    GuardKind.NONE: 2,
    GuardKind.NOT_NONE: 2,
    GuardKind.VALUE: 3,
    GuardKind.LEN: 4,
    GuardKind.KEYS: 5,
    GuardKind.HASATTR: 6,
    GuardKind.NOT_HASATTR: 6,
    GuardKind.TENSOR_META: 7,
    GuardKind.CUSTOM: 8,
}
_IDENTITY_KINDS = frozenset({GuardKind.ID, GuardKind.TYPE})


def _cost(req: GuardReq) -> int:
    payload = req.payload
    return payload.cost if isinstance(payload, CustomPayload) else req.kind.cost


_REAL = complex.real  # (the slot descriptors: a subclass's properties are never run)
_IMAG = complex.imag
# types whose ``==`` is identity (compared as they are)
_C_VALUES: frozenset[type] = frozenset({type(None), type(Ellipsis), type(NotImplemented)})


_ATOMS: frozenset[type] = frozenset({int, float, complex, str, bytes, bool, *_C_VALUES})


def immutable_value(value: object) -> bool:
    """Whether ``value`` can never change: an int, float, complex, str, bytes, bool or None,
    or a tuple, frozenset, slice or range (of exactly those types) made of such values. The
    object itself then stands for its :func:`exact_token`: a guard that finds the very object
    it recorded needs to compute nothing."""
    kind = type(value)
    if kind in _ATOMS:
        return True
    if kind is tuple:
        return all(immutable_value(x) for x in cast("tuple[object, ...]", value))
    if kind is frozenset:
        return all(immutable_value(x) for x in cast("frozenset[object]", value))
    if kind is slice or kind is range:
        v = cast("slice", value)
        return all(immutable_value(x) for x in (v.start, v.stop, v.step))
    return False


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def exact_token(value: object) -> Hashable:
    """A token equal for two values iff they have the same types and the same values exactly.

    ``1``, ``1.0`` and ``True`` differ; floats compare by bits (``-0.0`` is not ``0.0``, a NaN
    matches a NaN); complex numbers by the bits of both parts; tuples, frozensets, slices and
    ranges item by item; enum members by identity; str/int/float subclasses by their type and
    builtin value. Reads through the builtin slots only: no user code (``__eq__``,
    ``__hash__``, ``__iter__``, a property) runs. Other objects give ``(type, value)``.
    """
    kind = type(value)
    if kind is int or kind is str or kind is bool or kind in _C_VALUES:
        return (kind, value)
    if issubclass(kind, enum.Enum):
        return (kind, "member", id(value))
    if issubclass(kind, float):
        return (kind, _bits(value))  # type: ignore[arg-type]
    if issubclass(kind, int):
        return (kind, int.__int__(value))  # type: ignore[arg-type]
    if issubclass(kind, str):
        return (kind, str.__str__(value))
    if issubclass(kind, bytes):
        return (kind, bytes.__bytes__(value))  # type: ignore[arg-type]
    if issubclass(kind, complex):
        return (kind, _bits(_REAL.__get__(value)), _bits(_IMAG.__get__(value)))
    if issubclass(kind, tuple):
        parts = cast("tuple[object, ...]", value)
        return (kind, tuple(exact_token(x) for x in tuple.__iter__(parts)))
    if issubclass(kind, frozenset):
        items = frozenset.__iter__(cast("frozenset[object]", value))
        return (kind, frozenset(exact_token(x) for x in items))
    if kind is slice or kind is range:
        v = cast("slice", value)
        return (kind, exact_token(v.start), exact_token(v.stop), exact_token(v.step))
    if isinstance(value, CustomPayload):
        fields = attrs.fields(cast("type[attrs.AttrsInstance]", kind))
        return (kind, tuple(exact_token(getattr(value, f.name)) for f in fields))
    if kind.__module__ == "numpy" and hasattr(kind, "item"):
        return (kind, exact_token(value.item()))  # type: ignore[attr-defined]  # a numpy scalar
    return (kind, value)


_typed = exact_token


def set_contents(s: Iterable[Hashable]) -> frozenset[Hashable]:
    """The elements of set ``s`` as exact tokens (type and value, floats bit-exact).

    Two sets give equal tokens iff they hold the same values of the same types (``{1}`` and
    ``{1.0}`` differ): the payload of a guard on a set's contents.
    """
    return frozenset(_typed(item) for item in s)


def set_order(s: Iterable[Hashable]) -> tuple[Hashable, ...]:
    """The elements of set ``s`` as exact tokens, in iteration order (a guard on its order)."""
    return tuple(_typed(item) for item in s)


def payload_key(kind: GuardKind, payload: object) -> Hashable:
    """Return the token under which ``(kind, payload)`` is deduplicated.

    Identity for ``ID``/``TYPE`` and for unhashable payloads (the caller must keep the payload
    alive while the token is in use); otherwise exact type + value, floats compared bit-exactly.
    """
    if kind in _IDENTITY_KINDS:
        return (kind, "id", id(payload))
    try:
        hash(payload)
    except TypeError:
        return (kind, "id", id(payload))
    return (kind, "value", _typed(payload))


@attrs.frozen(eq=False)
class GuardReq:
    """Require that the entry-state object at ``path`` satisfies ``kind`` with ``payload``.

    Hashable; equal when path and kind are equal and payloads match (see :func:`payload_key`).
    """

    path: Path
    kind: GuardKind
    payload: object = attrs.field(default=None, repr=short_repr)
    _key: Hashable = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.path, Path) or not isinstance(self.kind, GuardKind):
            raise TypeError(
                f"GuardReq needs a Path and a GuardKind, got {self.path!r}, {self.kind!r}"
            )
        object.__setattr__(self, "_key", (self.path, payload_key(self.kind, self.payload)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GuardReq):
            return NotImplemented
        return self is other or self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        return f"{self.path}: {self.kind.name} {short_repr(self.payload)}"


class GuardSet:
    """An ordered, deduplicated collection of :class:`GuardReq`.

    Iteration order is (path length, kind cost, insertion order), so the TYPE/ID checks of a
    prefix come before any check on its children.
    """

    __slots__ = ("_order", "_reqs")

    def __init__(self, reqs: Iterable[GuardReq] = ()) -> None:
        self._reqs: dict[GuardReq, int] = {}
        self._order: list[GuardReq] | None = None
        self.update(reqs)

    def add(self, req: GuardReq) -> bool:
        """Add ``req``; return False when an equal requirement was already present."""
        if not isinstance(req, GuardReq):
            raise TypeError(f"GuardSet.add expects a GuardReq, got {type(req).__name__}")
        if req in self._reqs:
            return False
        self._reqs[req] = len(self._reqs)
        self._order = None
        return True

    def update(self, reqs: Iterable[GuardReq]) -> None:
        """Add every requirement of ``reqs``."""
        for req in reqs:
            self.add(req)

    def _ordered(self) -> list[GuardReq]:
        if self._order is None:
            items = self._reqs.items()
            ranked = sorted(items, key=lambda item: (len(item[0].path), _cost(item[0]), item[1]))
            self._order = [req for req, _ in ranked]
        return self._order

    def __iter__(self) -> Iterator[GuardReq]:
        return iter(list(self._ordered()))

    def __len__(self) -> int:
        return len(self._reqs)

    def __contains__(self, req: object) -> bool:
        return isinstance(req, GuardReq) and req in self._reqs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GuardSet):
            return NotImplemented
        return self._reqs.keys() == other._reqs.keys()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def paths(self) -> list[Path]:
        """The distinct paths of the requirements, in iteration order."""
        return list(dict.fromkeys(req.path for req in self._ordered()))

    def __repr__(self) -> str:
        return f"GuardSet([{', '.join(str(req) for req in self._ordered())}])"
