"""Shadow values: what the monitor knows about each stack slot, local and container element.

A ``Val`` travels beside the real object it describes. Provenance is carried by the ``Val``, not
by ``id()``: two equal ints from different sources are two ``Val``s, so a small int or ``True``
read from a guarded attribute is never confused with a literal. Heap objects (tensors, lists,
dicts, modules, user objects, cells) get one ``Val`` per object, found again through the
capture's identity table when they come back out of native code.
"""

from __future__ import annotations

import collections
import types
from typing import TYPE_CHECKING, Any, TypeVar

from magpy_refgraph import InternalError

if TYPE_CHECKING:
    from torch.fx import Node

__all__ = [
    "UNBOUND",
    "AppendLog",
    "BoundMethod",
    "Change",
    "Construction",
    "Instance",
    "MadeFunction",
    "PackedArgs",
    "Payload",
    "ScalarFx",
    "Val",
    "Write",
    "dict_view_items",
    "keys_in_order",
    "plain_container",
    "remember_dict_keys",
]

# what reading a container's contents runs: none of it may be Python for observe() to guard
# the contents as the builtin base's
_READS = ("__iter__", "__getitem__", "__len__", "__eq__", "__contains__", "keys")


def plain_container(obj: Any) -> type | None:
    """``list``, ``tuple``, ``dict`` or ``deque``: the builtin container ``obj`` is, or a
    subclass of, when its contents read the builtin way (a namedtuple, ``OrderedDict``,
    ``defaultdict``, a structseq): guards may compare them item by item. None otherwise (an
    output class with a Python ``__getitem__``, a user class)."""
    for base in (tuple, list, dict, collections.deque):
        if isinstance(obj, base):
            t = type(obj)
            if t is base or not any(
                isinstance(getattr(t, name, None), types.FunctionType) for name in _READS
            ):
                return base
            return None
    return None


class _Unbound:
    def __repr__(self) -> str:
        return "UNBOUND"


UNBOUND: Any = _Unbound()


class AppendLog:
    """The ``items`` of a pre-existing list the run has only appended to (or inserted into) so
    far: ``values`` in the order added, ``positions`` the index ``Val`` of each insert and the
    position the item took (None for an append). See ``core.growing``.

    The mock replays the changes (no guard on the list's length or contents is needed). The
    first time the run reads the list's contents, ``flush(val)`` materializes it: its length at
    entry is guarded and its shadow contents become complete.
    """

    __slots__ = ("flush", "positions", "values")

    def __init__(self, flush: Any) -> None:
        self.flush = flush
        self.values: list[Val] = []
        self.positions: list[tuple[Val, int] | None] = []


class Payload:
    """What one kind of shadow value carries besides its object: the base of the payload
    classes. The generic ones are below; the others live with the layer whose concept they
    are (an iterator's state in ``bytecode/iteration``, a set's in ``pyobj/setstate``...)."""

    __slots__ = ()


P = TypeVar("P", bound=Payload)


class Val:
    """One shadow value.

    ``obj``: the real object (kept alive while monitoring). ``node``: its RefGraph node, if the
    object is part of the captured state (external objects, objects written outside). ``external``:
    it existed at entry and was reached from SN#0. ``fx``: the operator-graph node producing a
    tensor. ``expr``: ``(fn, args)`` when the value was computed by a pure function of other
    ``Val``s and can be replayed. ``const``: the value is a constant of the program (a literal, or
    fixed by a guard). ``items``/``attrs``: known contents of containers/objects.
    ``payload``: what one kind of value carries besides (a bound method's ``self``, a made
    function's closure, an iterator's state): one ``Payload``, read with ``payload(Kind)``.
    """

    __slots__ = (
        "__weakref__",
        "_items",
        "_payload",
        "attrs",
        "const",
        "expr",
        "external",
        "fx",
        "node",
        "obj",
    )

    def __init__(
        self,
        obj: Any,
        *,
        const: bool = False,
        external: bool = False,
        fx: Any = None,
        expr: tuple[Any, tuple[Val, ...]] | None = None,
        node: Any = None,
        items: Any = None,
        payload: Payload | None = None,
    ) -> None:
        self.obj = obj
        self.const = const
        self.external = external
        self.fx = fx
        self.expr = expr
        self.node = node
        self._items = items
        self.attrs: dict[str, Val] | None = None
        self._payload = payload

    def payload(self, kind: type[P]) -> P | None:
        """The payload if it is a ``kind`` (``payload(Payload)``: any payload), else None."""
        p = self._payload
        return p if isinstance(p, kind) else None

    def require(self, kind: type[P]) -> P:
        """The payload, which must be a ``kind`` (the caller has checked what ``self`` is)."""
        p = self._payload
        if not isinstance(p, kind):
            raise InternalError(f"{self!r} carries {p!r}, not a {kind.__name__}")
        return p

    def set_payload(self, payload: Payload | None) -> None:
        """Replace the payload (None: the value carries none any more)."""
        self._payload = payload

    @property
    def items(self) -> Any:
        """Known contents (list/dict of ``Val``s), or None; reading flushes an ``AppendLog``."""
        items = self._items
        if type(items) is AppendLog:
            items.flush(self)
            return self._items
        return items

    @items.setter
    def items(self, value: Any) -> None:
        self._items = value

    def __repr__(self) -> str:
        tags = [k for k in ("const", "external") if getattr(self, k)]
        if self.fx is not None:
            tags.append(f"fx={self.fx}")
        if self.expr is not None:
            tags.append(f"expr={getattr(self.expr[0], '__name__', self.expr[0])}")
        text = repr(self.obj)
        if len(text) > 40:
            text = text[:37] + "..."
        return f"Val({text}{', ' if tags else ''}{', '.join(tags)})"


# ---------------------------------------------------------------------- generic payloads
class BoundMethod(Payload):
    """A bound method read during the run: the shadow of its ``__self__``."""

    __slots__ = ("self_val",)

    def __init__(self, self_val: Val) -> None:
        self.self_val = self_val


class PackedArgs(Payload):
    """The ``*args`` tuple or ``**kwargs`` dict bound for a call the monitor follows: CPython
    builds the real object when the frame starts, and ``calls._fresh`` swaps it in."""

    __slots__ = ()


class ScalarFx(Payload):
    """A Python number the graph computes (a promoted scalar, or arithmetic over such):
    ``fx`` is its graph node. ``shapes.SymInt`` and ``speculation.Speculated`` are kinds of it."""

    __slots__ = ("fx",)

    def __init__(self, fx: Node) -> None:
        self.fx = fx


class MadeFunction(Payload):
    """A function MAKE_FUNCTION made during the run: the shadows of its closure's cells, its
    ``__defaults__`` tuple and its ``__kwdefaults__`` dict (None where it has none)."""

    __slots__ = ("cells", "defaults", "kwdefaults")

    def __init__(
        self, cells: list[Val] | None, defaults: Val | None, kwdefaults: Val | None
    ) -> None:
        self.cells, self.defaults, self.kwdefaults = cells, defaults, kwdefaults


class Instance(Payload):
    """An instance of a plain class built during the run (``pyobj/instances``): the shadow of
    its class, and that of its ``__dict__`` once the run has read it (kept in step with its
    attributes by ``Capture.set_attr``/``del_attr``)."""

    __slots__ = ("cls_val", "dict_view")

    def __init__(self, cls_val: Val) -> None:
        self.cls_val = cls_val
        self.dict_view: Val | None = None


def dict_view_items(base: Val) -> dict[Any, Any] | None:
    """The shadow items of ``base.__dict__`` when the run has read it (``pyobj/instances``)."""
    view = inst.dict_view if (inst := base.payload(Instance)) is not None else None
    if view is not None:
        items: dict[Any, Any] = view.items
        return items
    return None


class Construction(Payload):
    """An object the mock rebuilds by calling its class again (a dataclass, a namedtuple,
    ``pyobj/objects``): the class and the shadows of the arguments it was built from, and
    the changes the run made to it afterwards, in order (``changes``: made again by the mock
    once it has built the object)."""

    __slots__ = ("changes", "cls", "kwargs", "pos")

    def __init__(self, cls: Any, pos: list[Val], kwargs: dict[str, Val]) -> None:
        self.cls, self.pos, self.kwargs = cls, pos, kwargs
        self.changes: list[Change] = []


class Change:
    """One change the run made to an object the mock rebuilds (``Construction.changes``):
    ``op(obj, key)`` or ``op(obj, key, value)`` (``value`` None), called again by the mock on
    the object it built: ``setattr``/``operator.setitem``/``delattr`` (the class's own hooks, a
    library's, run natively in the run as well), or the native store a followed hook of the
    program's made (``object.__setattr__``, ``dict.__setitem__``)."""

    __slots__ = ("key", "op", "value")

    def __init__(self, op: Any, key: Val, value: Val | None) -> None:
        self.op, self.key, self.value = op, key, value


class Write:
    """One write into a pre-existing object, in program order (``op`` in setattr/delattr/...)."""

    __slots__ = ("key", "op", "target", "value")

    def __init__(self, op: str, target: Val, key: Any, value: Val | None) -> None:
        self.op, self.target, self.key, self.value = op, target, key, value


def keys_in_order(obj: Any) -> tuple[Any, ...]:
    """The keys of a dict from outside in its iteration order, running none of its class's
    code: an ``OrderedDict``, or any subclass of it, keeps its own order (``move_to_end``),
    which ``dict.keys`` does not see; the guard's KEYS check reads them the same way."""
    if issubclass(type(obj), collections.OrderedDict):
        return tuple(collections.OrderedDict.keys(obj))
    if isinstance(obj, dict):
        return tuple(dict.keys(obj))
    return tuple(obj.keys())


def remember_dict_keys(base: Val) -> None:
    """Before the run first changes ``base``, an object from outside: the keys of its own
    ``__dict__`` (what a later read of that dict is guarded against: ``Capture._external``)."""
    assert base.node is not None
    if "dict_keys" in base.node.meta or isinstance(base.obj, dict):
        return
    try:
        own = object.__getattribute__(base.obj, "__dict__")  # (no hook of its class runs)
    except (AttributeError, TypeError):
        own = None
    base.node.meta["dict_keys"] = tuple(dict.keys(own)) if type(own) is dict else None
