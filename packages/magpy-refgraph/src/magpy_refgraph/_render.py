"""Rendering access paths as safe Python expressions.

The output is meant to be pasted into generated guard and mock code, so it must never let a
name or key inject code: only exact ``str``/``bytes``/numbers/``None``/tuples of those are
written as literals (through their builtin ``repr``, which always yields a closed literal);
every other key goes through the constants table (``K[i]``).
"""

from __future__ import annotations

import keyword
import math
import types
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

import attrs

from ._access import Access, AccessKind, Path
from ._errors import InternalError, Unsupported

__all__ = [
    "RenderContext",
    "SimpleRenderContext",
    "iter_remaining",
    "literal_expr",
    "render_path",
    "render_step",
]

_MAX_LITERAL_CHARS = 200
_MAX_INT_BITS = 128
_MAX_TUPLE_ITEMS = 16
_MAX_TUPLE_DEPTH = 6


@runtime_checkable
class RenderContext(Protocol):
    """Where root accesses and constants live in the generated code's namespace."""

    def root_expr(self, access: Access) -> str:
        """Return an expression (a Python primary) for the root ``access``."""
        ...

    def const_expr(self, obj: object) -> str:
        """Return an expression (a Python primary) that evaluates to ``obj`` itself."""
        ...


def _literal(obj: object, depth: int) -> str | None:
    kind = type(obj)
    if obj is None or kind is bool:
        return repr(obj)
    if kind is int and isinstance(obj, int):
        return repr(obj) if obj.bit_length() <= _MAX_INT_BITS else None
    if kind is float and isinstance(obj, float):
        return repr(obj) if math.isfinite(obj) else None
    if (kind is str or kind is bytes) and isinstance(obj, str | bytes):
        return repr(obj) if len(obj) <= _MAX_LITERAL_CHARS else None
    if (kind is tuple or kind is frozenset) and isinstance(obj, tuple | frozenset):
        return _literal_collection(obj, depth)
    return None


def _literal_collection(items: tuple[object, ...] | frozenset[object], depth: int) -> str | None:
    if depth >= _MAX_TUPLE_DEPTH or len(items) > _MAX_TUPLE_ITEMS:
        return None
    texts: list[str] = []
    for item in items:
        text = _literal(item, depth + 1)
        if text is None:
            return None
        texts.append(text)
    if type(items) is frozenset:
        return f"frozenset({{{', '.join(sorted(texts))}}})" if texts else "frozenset()"
    return f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"


def literal_expr(obj: object) -> str | None:
    """Return literal source that evaluates to an object equal to ``obj`` of the same type.

    Only exact ``None``, ``bool``, ``int`` (up to 128 bits), finite ``float``, ``str``/``bytes``
    (up to 200 characters), and tuples/frozensets of those (small, shallow) qualify. Returns None
    for anything else (subclasses, ``inf``/``nan``, huge values): use the constants table then.
    """
    text = _literal(obj, 0)
    if text is None or len(text) > 2 * _MAX_LITERAL_CHARS:
        return None
    return text


def _key_expr(key: object, ctx: RenderContext) -> str:
    text = literal_expr(key)
    return text if text is not None else ctx.const_expr(key)


def _plain_attr(name: object) -> bool:
    """True when ``e.name`` means exactly ``getattr(e, name)`` in any context."""
    if type(name) is not str or len(name) > _MAX_LITERAL_CHARS:
        return False
    if not (name.isascii() and name.isidentifier()) or keyword.iskeyword(name):
        return False  # non-ASCII names are NFKC-normalised by the parser
    return not (name.startswith("__") and not name.endswith("__"))  # private-name mangling


_REDUCIBLE_ITERATORS: frozenset[type] = frozenset(
    {
        type(iter([])),
        type(iter(())),
        type(iter(range(0))),
        type(iter({}.keys())),
        type(iter({}.values())),
        type(iter({}.items())),
    }
)


def iter_remaining(it: object) -> Sequence[object]:
    """The values the built-in iterator ``it`` will still produce, without advancing it.

    Works for iterators over lists, tuples, ranges and dict views (``__reduce__`` tells their
    sequence and position), and ``enumerate``/``zip`` objects over such iterators (a loop
    ``for i, layer in enumerate(self.layers)`` that a segment resumes in); an ITER access
    ``#k`` is element ``k`` of this sequence (a new ``(index, value)`` tuple each time, for an
    ``enumerate``). Raises ``TypeError`` for any other iterator.
    """
    kind = type(it)
    reduced: Any
    if kind is enumerate:
        reduced = it.__reduce__()
        inner, count = reduced[1]
        return [(count + i, x) for i, x in enumerate(iter_remaining(inner))]
    if kind is zip:
        reduced = it.__reduce__()
        parts = [iter_remaining(x) for x in reduced[1]]
        if len(reduced) > 2 and reduced[2] and len({len(p) for p in parts}) > 1:
            raise TypeError("cannot look ahead in a zip(strict=True) of unequal lengths")
        return list(zip(*parts, strict=False))
    if kind not in _REDUCIBLE_ITERATORS:
        raise TypeError(f"cannot look ahead in a {kind.__name__}")
    reduced = it.__reduce__()
    seq: Sequence[object] = reduced[1][0]
    start: int = reduced[2] if len(reduced) > 2 else 0
    return seq[start:] if start else seq


def render_step(base: str, access: Access, ctx: RenderContext) -> str:
    """Return the expression for following the derived ``access`` from expression ``base``.

    ``base`` must be a Python primary (a name, subscription, call or attribute reference).
    ATTR renders as ``base.name`` or ``getattr(base, 'name')``; OBJATTR as
    ``object.__getattribute__(base, 'name')``; ITEM as ``base[key]``; ITER
    ``#k`` as ``iter_remaining(base)[k]``; JOINED as ``fn(base, dim)``. Raises
    :class:`InternalError` for root accesses.
    """
    if access.kind is AccessKind.ATTR:
        if _plain_attr(access.key):
            return f"{base}.{access.key}"
        return f"getattr({base}, {_key_expr(access.key, ctx)})"
    if access.kind is AccessKind.OBJATTR:
        return f"{ctx.const_expr(object.__getattribute__)}({base}, {_key_expr(access.key, ctx)})"
    if access.kind is AccessKind.ITEM:
        return f"{base}[{_key_expr(access.key, ctx)}]"
    if access.kind is AccessKind.DICTITEM:
        return f"{ctx.const_expr(dict.__getitem__)}({base}, {_key_expr(access.key, ctx)})"
    if access.kind is AccessKind.ITER:
        return f"{ctx.const_expr(iter_remaining)}({base})[{access.key!r}]"
    if access.kind is AccessKind.JOINED:
        fn, dim = cast(tuple[Any, int], access.key)
        return f"{ctx.const_expr(fn)}({base}, {dim!r})"
    raise InternalError(f"render_step got root access {access!r}; use ctx.root_expr")


def render_path(path: Path, ctx: RenderContext) -> str:
    """Return a Python expression that evaluates ``path`` in ``ctx``'s namespace.

    Raises :class:`Unsupported` for paths the expression language cannot express (cells
    without a known function).
    """
    expr = ctx.root_expr(path.root)
    for step in path.steps:
        expr = render_step(expr, step, ctx)
    return expr


def _check_name(_self: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or not value.isidentifier() or keyword.iskeyword(value):
        raise ValueError(f"{attribute.name} must be a plain identifier, got {value!r}")


@attrs.define(eq=False)
class SimpleRenderContext:
    """Render roots against four namespace names: locals, globals, builtins, constants.

    LOCAL x -> ``L['x']``; GLOBAL x -> ``G['x']`` (with a scope dict: ``K[i]['x']``);
    BUILTIN x -> ``B['x']``; CELL x of fn -> ``K[i].__closure__[j].cell_contents``;
    CONST -> ``K[i]``. ``consts`` is the list to bind to the constants name; objects are
    interned by identity and kept alive by the list.
    """

    locals_name: str = attrs.field(default="L", validator=_check_name)
    globals_name: str = attrs.field(default="G", validator=_check_name)
    builtins_name: str = attrs.field(default="B", validator=_check_name)
    consts_name: str = attrs.field(default="K", validator=_check_name)
    consts: list[object] = attrs.field(init=False, factory=list)
    _index: dict[int, int] = attrs.field(init=False, factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        names = (self.locals_name, self.globals_name, self.builtins_name, self.consts_name)
        if len(set(names)) != len(names):
            raise ValueError(f"namespace names must be distinct, got {names}")

    def const_expr(self, obj: object) -> str:
        """Intern ``obj`` (by identity) and return ``K[i]``."""
        index = self._index.get(id(obj))
        if index is None:
            index = len(self.consts)
            self.consts.append(obj)
            self._index[id(obj)] = index
        return f"{self.consts_name}[{index}]"

    def root_expr(self, access: Access) -> str:
        """Return the expression for a root access (see the class docstring)."""
        kind, key = access.kind, access.key
        if kind is AccessKind.LOCAL:
            return f"{self.locals_name}[{_key_expr(key, self)}]"
        if kind is AccessKind.GLOBAL:
            base = self.globals_name if access.scope is None else self.const_expr(access.scope)
            return f"{base}[{_key_expr(key, self)}]"
        if kind is AccessKind.BUILTIN:
            return f"{self.builtins_name}[{_key_expr(key, self)}]"
        if kind is AccessKind.CELL:
            return self._cell_expr(access)
        if kind is AccessKind.CONST:
            return self.const_expr(key)
        raise InternalError(f"root_expr got derived access {access!r}")

    def _cell_expr(self, access: Access) -> str:
        fn = access.scope
        if not isinstance(fn, types.FunctionType):
            raise Unsupported(f"cell {access} has no function scope; cannot render it")
        freevars = fn.__code__.co_freevars
        if access.key not in freevars or fn.__closure__ is None:
            raise Unsupported(f"cell {access} is not a free variable of {fn.__qualname__}")
        index = freevars.index(str(access.key))
        return f"{self.const_expr(fn)}.__closure__[{index}].cell_contents"

    def eval_globals(
        self,
        local_vars: object = None,
        global_vars: object = None,
        builtin_vars: object = None,
    ) -> dict[str, object]:
        """Return a namespace binding the four names, for ``eval``/``exec`` of rendered code."""
        return {
            self.locals_name: local_vars,
            self.globals_name: global_vars,
            self.builtins_name: builtin_vars,
            self.consts_name: self.consts,
        }
