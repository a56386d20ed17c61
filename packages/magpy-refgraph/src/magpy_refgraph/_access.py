"""Accesses (one reference step) and paths (a chain of accesses rooted at SN#0).

An :class:`Access` names one reference: a root reference held by the frame's entry state
(``LOCAL``, ``GLOBAL``, ``BUILTIN``, ``CELL``, ``CONST``) or a reference held by an object
(``ATTR``, ``OBJATTR``, ``ITEM``, ``DICTITEM``, ``ITER``).  Keys compare like dict keys (``==`` and
``hash``), except that ``CONST`` objects and unhashable keys compare by identity; ``scope``
always compares by identity.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from typing import Any, cast

import attrs

__all__ = [
    "Access",
    "AccessKind",
    "Attr",
    "Builtin",
    "Cell",
    "Const",
    "DictItem",
    "Global",
    "Item",
    "IterPos",
    "Joined",
    "Length",
    "Local",
    "ObjAttr",
    "Path",
]


class AccessKind(enum.Enum):
    """What kind of reference an :class:`Access` follows."""

    LOCAL = "local"
    GLOBAL = "global"
    BUILTIN = "builtin"
    CELL = "cell"
    ATTR = "attr"
    # ``object.__getattribute__(obj, name)``: the read a class's own ``__getattribute__`` makes
    # with ``super().__getattribute__(name)``, bypassing itself
    OBJATTR = "objattr"
    ITEM = "item"
    # ``dict.__getitem__(d, key)``: an entry as a dict subclass stores it (its own Python
    # ``__getitem__``, which the program did not go through, bypassed)
    DICTITEM = "dictitem"
    ITER = "iter"
    # ``fn(container, dim)``: the tensor a joining function (``torch.stack``/``torch.cat``)
    # makes of a container's items, computed by the guard (the items are not read one by one)
    JOINED = "joined"
    CONST = "const"

    @property
    def is_root(self) -> bool:
        """True for kinds that start at SN#0 (LOCAL, GLOBAL, BUILTIN, CELL, CONST)."""
        return self in _ROOT_KINDS


_ROOT_KINDS = frozenset(
    {AccessKind.LOCAL, AccessKind.GLOBAL, AccessKind.BUILTIN, AccessKind.CELL, AccessKind.CONST}
)
_NAME_KINDS = frozenset(
    {
        AccessKind.LOCAL,
        AccessKind.GLOBAL,
        AccessKind.BUILTIN,
        AccessKind.CELL,
        AccessKind.ATTR,
        AccessKind.OBJATTR,
    }
)
_SCOPED_KINDS = frozenset({AccessKind.GLOBAL, AccessKind.CELL})
_ROOT_PREFIX = {
    AccessKind.LOCAL: "L.",
    AccessKind.GLOBAL: "G.",
    AccessKind.BUILTIN: "B.",
    AccessKind.CELL: "C.",
    AccessKind.ATTR: ".",
    AccessKind.OBJATTR: ".!",
}
_CTOR_NAME = {
    AccessKind.LOCAL: "Local",
    AccessKind.GLOBAL: "Global",
    AccessKind.BUILTIN: "Builtin",
    AccessKind.CELL: "Cell",
    AccessKind.ATTR: "Attr",
    AccessKind.OBJATTR: "ObjAttr",
    AccessKind.ITEM: "Item",
    AccessKind.DICTITEM: "DictItem",
    AccessKind.ITER: "IterPos",
    AccessKind.JOINED: "Joined",
    AccessKind.CONST: "Const",
}


def short_repr(obj: object, limit: int = 60) -> str:
    """Return a one-line, printable ``repr`` of ``obj`` cut to ``limit`` characters.

    Never raises: a failing ``__repr__`` gives ``<TypeName object>``. Non-printable characters
    (newlines, control characters, lone surrogates) are shown as escapes.
    """
    try:
        text = repr(obj)
    except Exception:  # a user __repr__ may raise anything; a label must still be produced
        text = f"<{type(obj).__name__} object>"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def name_label(name: str) -> str:
    """Return ``name`` itself when it is an identifier, else its short ``repr``."""
    if type(name) is str and name.isidentifier() and len(name) <= 60:
        return name
    return short_repr(name)


def _by_identity(kind: AccessKind, key: object) -> bool:
    if kind is AccessKind.CONST:
        return True
    try:
        hash(key)
    except TypeError:
        return True
    return False


def _same_key(a: object, b: object) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an exotic __eq__ (e.g. elementwise) means "not the same key"
        return False


def _check_access(kind: AccessKind, key: object, scope: object) -> None:
    if not isinstance(kind, AccessKind):
        raise TypeError(f"Access kind must be an AccessKind, got {kind!r}")
    if kind in _NAME_KINDS and not isinstance(key, str):
        raise TypeError(f"{kind.name} access needs a str name, got {short_repr(key)}")
    if kind is AccessKind.ITER:
        if type(key) is not int:
            raise TypeError(f"ITER access needs an int position, got {short_repr(key)}")
        if key < 0:
            raise ValueError(f"ITER position must be >= 0, got {key}")
    if kind is AccessKind.JOINED and not (
        type(key) is tuple and len(key) == 2 and callable(key[0]) and type(key[1]) is int
    ):
        raise TypeError(f"JOINED access needs a (function, dim) key, got {short_repr(key)}")
    if scope is not None and kind not in _SCOPED_KINDS:
        raise ValueError(f"only GLOBAL and CELL accesses take a scope, not {kind.name}")


@attrs.frozen(eq=False, repr=False)
class Access:
    """One reference step: ``kind`` + ``key`` (+ ``scope`` for GLOBAL/CELL).

    Hashable. Two accesses are equal when kinds match, scopes are the *same object*, and keys are
    equal as dict keys (``CONST`` objects and unhashable keys: the same object).
    """

    kind: AccessKind
    key: Hashable
    scope: object | None = None
    _identity: bool = attrs.field(init=False, repr=False)
    _hash: int = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _check_access(self.kind, self.key, self.scope)
        identity = _by_identity(self.kind, self.key)
        key_hash = id(self.key) if identity else hash(self.key)
        object.__setattr__(self, "_identity", identity)
        object.__setattr__(self, "_hash", hash((self.kind, key_hash, id(self.scope))))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Access):
            return NotImplemented
        if self.kind is not other.kind or self.scope is not other.scope:
            return False
        if self._identity or other._identity:
            return self.key is other.key
        return self._hash == other._hash and _same_key(self.key, other.key)

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_root(self) -> bool:
        """True when this access starts at SN#0."""
        return self.kind.is_root

    def __str__(self) -> str:
        kind = self.kind
        if kind in _ROOT_PREFIX:
            return _ROOT_PREFIX[kind] + name_label(str(self.key))
        if kind is AccessKind.ITEM:
            return f"[{short_repr(self.key)}]"
        if kind is AccessKind.DICTITEM:
            return f"[!{short_repr(self.key)}]"
        if kind is AccessKind.ITER:
            return f"#{self.key}"
        if kind is AccessKind.JOINED:
            fn, dim = cast(tuple[Any, int], self.key)
            return f"→{getattr(fn, '__name__', 'join')}(dim={dim})"
        return f"K({short_repr(self.key)})"

    def __repr__(self) -> str:
        args = short_repr(self.key)
        if self.scope is not None:
            args += f", scope=<{type(self.scope).__name__}@{id(self.scope):#x}>"
        return f"{_CTOR_NAME[self.kind]}({args})"


def Local(name: str) -> Access:
    """A local variable ``name`` of the monitored frame (root access)."""
    return Access(AccessKind.LOCAL, name)


def Global(name: str, scope: object | None = None) -> Access:
    """Global ``name``; ``scope`` is the globals dict it lives in (None: the frame's globals)."""
    return Access(AccessKind.GLOBAL, name, scope)


def Builtin(name: str) -> Access:
    """Builtin ``name`` (root access)."""
    return Access(AccessKind.BUILTIN, name)


def Cell(name: str, scope: object | None = None) -> Access:
    """Free variable ``name``; ``scope`` is the function whose closure holds the cell."""
    return Access(AccessKind.CELL, name, scope)


def Attr(name: str) -> Access:
    """Attribute ``name`` of an object."""
    return Access(AccessKind.ATTR, name)


def ObjAttr(name: str) -> Access:
    """Attribute ``name`` as ``object.__getattribute__`` reads it (the class's own
    ``__getattribute__``, which makes this read, does not run)."""
    return Access(AccessKind.OBJATTR, name)


def Item(key: object) -> Access:
    """Item ``key`` of a container (``obj[key]``)."""
    return Access(AccessKind.ITEM, key)


def DictItem(key: object) -> Access:
    """Entry ``key`` of a dict (subclass) as it is stored: ``dict.__getitem__(d, key)``."""
    return Access(AccessKind.DICTITEM, key)


def IterPos(i: int) -> Access:
    """The ``i``-th element produced by iterating an object (not renderable as code)."""
    return Access(AccessKind.ITER, i)


def Joined(fn: Callable[[Any, int], Any], dim: int) -> Access:
    """The tensor ``fn(container, dim)`` (``torch.stack``, ``torch.cat``) of a container read
    from outside: one value in place of its items."""
    return Access(AccessKind.JOINED, (fn, dim))


def entry_length(obj: Any, _dim: int) -> int:
    """The length of a list (the key function of ``Length``): a guard or mock computing it
    over anything else fails (a miss), as a joining function refusing its items does."""
    if type(obj) is not list:
        raise TypeError(f"the length of a list, not of a {type(obj).__name__}")
    return len(obj)


def Length() -> Access:
    """The length of a list from outside as an entry int (``len(lst)`` computed by the guard):
    a JOINED access, since like a joined tensor it is one value computed from a container."""
    return Access(AccessKind.JOINED, (entry_length, 0))


def Const(obj: object) -> Access:
    """A root edge to the constant ``obj``, pinned by the guard (compared by identity)."""
    return Access(AccessKind.CONST, obj)


def _check_root(_self: object, _attr: attrs.Attribute[Access], root: Access) -> None:
    if not isinstance(root, Access) or not root.kind.is_root:
        raise ValueError(f"a Path must start with a root access, got {root!r}")


def _check_steps(
    _self: object, _attr: attrs.Attribute[tuple[Access, ...]], steps: tuple[Access, ...]
) -> None:
    if type(steps) is not tuple:
        raise TypeError(f"Path steps must be a tuple of Access, got {type(steps).__name__}")
    for step in steps:
        if not isinstance(step, Access) or step.kind.is_root:
            raise ValueError(f"Path steps must be derived accesses, got {step!r}")


@attrs.frozen(cache_hash=True, repr=False)
class Path:
    """An access path from SN#0: a root access followed by derived accesses. Hashable.

    ``len(path)`` counts every access (root included); ``path / access`` extends it.
    """

    root: Access = attrs.field(validator=_check_root)
    steps: tuple[Access, ...] = attrs.field(default=(), validator=_check_steps)

    def child(self, access: Access) -> Path:
        """Return this path extended by one derived ``access``."""
        if not isinstance(access, Access) or access.kind.is_root:
            raise ValueError(f"Path steps must be derived accesses, got {access!r}")
        return _checked_parts(self.root, (*self.steps, access))

    def __truediv__(self, access: Access) -> Path:
        return self.child(access)

    def __len__(self) -> int:
        return 1 + len(self.steps)

    @property
    def parent(self) -> Path | None:
        """The path without its last step; None for a path made of the root access only."""
        if not self.steps:
            return None
        return _checked_parts(self.root, self.steps[:-1])

    @property
    def accesses(self) -> tuple[Access, ...]:
        """All accesses, root first."""
        return (self.root, *self.steps)

    @property
    def last(self) -> Access:
        """The final access of the path."""
        return self.steps[-1] if self.steps else self.root

    def startswith(self, prefix: Path) -> bool:
        """True when ``prefix`` is this path or one of its ancestors."""
        n = len(prefix.steps)
        return prefix.root == self.root and n <= len(self.steps) and self.steps[:n] == prefix.steps

    def __str__(self) -> str:
        return str(self.root) + "".join(str(step) for step in self.steps)

    def __repr__(self) -> str:
        return f"Path({self})"


# (attrs keeps a cached hash in this slot; ``_checked_parts`` starts it empty, as __init__ does)
_HASH_SLOT = "_attrs_cached_hash"
_FAST_PATHS = _HASH_SLOT in getattr(Path, "__slots__", ())


def _checked_parts(root: Access, steps: tuple[Access, ...]) -> Path:
    """A ``Path`` of parts already known valid (a valid path's prefix, or one plus a checked
    step) without checking every step again: a guard of a big model derives tens of
    thousands of paths, and the validators made that quadratic in their depth."""
    if not _FAST_PATHS:
        return Path(root, steps)
    path = object.__new__(Path)
    object.__setattr__(path, "root", root)
    object.__setattr__(path, "steps", steps)
    object.__setattr__(path, _HASH_SLOT, None)
    return path
