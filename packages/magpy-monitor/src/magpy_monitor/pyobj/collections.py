"""``collections`` containers made during the run: OrderedDict, defaultdict, Counter, deque.

Each is modelled like the builtin it extends: an ``OrderedDict``/``defaultdict``/``Counter``
keeps the shadows of its items in a dict (``Val.items``, in order), a ``deque`` in a list. The
mock rebuilds them with their own type (``OrderedDict({...})``, ``defaultdict(list, {...})``,
``deque([...], maxlen)``). A ``defaultdict`` read at a missing key inserts its factory's value
(modelled for the builtin factories); a ``Counter`` gives 0. Containers of these types that
exist before the run are read like dicts; changing them is a graph break.
"""

from __future__ import annotations

import collections
import operator
import types
from typing import Any

from magpy_refgraph import Item

from ..bytecode.iteration import consume_generator, is_generator, unpack
from ..core import registry
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS
from ..core.values import Val
from ..core.valuetypes import is_value_type
from . import containers as _containers  # noqa: F401  (dict's methods, copied below)
from .sets import empty_set

__all__ = ["missing_item", "put_item"]

OrderedDict, defaultdict, Counter, deque = (
    collections.OrderedDict,
    collections.defaultdict,
    collections.Counter,
    collections.deque,
)
# factories of a defaultdict whose values the monitor can name (a new container or a constant)
_FACTORIES = (list, dict, set, OrderedDict, int, float, str, bool, tuple, frozenset)

Items = dict[Any, tuple[Val, Val]]


@registry.PUT_ITEM.provide
def put_item(items: Items, key: Val, value: Val) -> None:
    """``d[key] = value`` on shadow items: an equal key already there keeps its object and place
    (``d[True] = x`` on ``{1: y}`` leaves the key ``1``)."""
    old = items.get(key.obj)
    items[key.obj] = (old[0] if old is not None else key, value)


def _pairs(m: FrameMonitor, src: Val) -> list[tuple[Val, Val]]:
    """The ``(key, value)`` shadows a dict constructor takes from ``src``."""
    cap = m.cap
    if isinstance(src.items, dict):
        return list(src.items.values())
    if src.external and type(src.obj) is dict:
        cap.observe_keys(src)
        for k in src.obj:
            cap.observe_key(cap.const(k))  # (a key hashed by Python: a break)
        return [(cap.const(k), cap.child(src, Item(k), x)) for k, x in src.obj.items()]
    pairs = []
    for p in unpack(m, src, None):
        k, v = unpack(m, p, 2)
        pairs.append((k, v))
    return pairs


def _items_from(m: FrameMonitor, pos: list[Val], kw: dict[str, Val]) -> Items:
    cap = m.cap
    items: Items = {}
    if len(pos) > 1:
        raise m.unsupported(f"a dict built from {len(pos)} positional arguments")
    for k, v in _pairs(m, pos[0]) if pos else []:
        if not (k.obj is None or is_value_type(k.obj)):
            raise m.unsupported(f"a {type(k.obj).__name__} as a dict key")
        cap.observe(k)
        put_item(items, k, v)
    for name, v in kw.items():
        put_item(items, cap.const(name), v)
    return items


def _check_items(m: FrameMonitor, real: Any, items: Items) -> None:
    if len(real) != len(items) or any(real[k] is not v.obj for k, (_, v) in items.items()):
        raise m.unsupported(f"a {type(real).__name__} whose items the monitor could not follow")


def _ordered_dict(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    if len(pos) == 1 and is_generator(pos[0]):  # OrderedDict(self.named_parameters())

        def finish(yielded: list[Val], real: list[Any]) -> list[Val]:
            pairs = m.cap.new(list(yielded), items=list(yielded))
            items = _items_from(m, [pairs], kw)
            _check_items(m, real[0], items)
            return [m.cap.new(real[0], items=dict(items))]

        consume_generator(m, inst, pos[0], 1, finish)
        return
    items = _items_from(m, pos, kw)

    def make(real: list[Any]) -> list[Val]:
        _check_items(m, real[0], items)
        return [m.cap.new(real[0], items=dict(items))]

    m.expect_outputs(inst, 1, make)


def _default_dict(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    factory = pos[0] if pos else cap.const(None)
    if factory.obj is not None and not callable(factory.obj):
        raise m.unsupported(f"defaultdict with the factory {factory.obj!r}")  # (TypeError)
    # (any factory: a missing key with one the monitor does not model is a break then)
    cap.observe_identity(factory)
    items = _items_from(m, pos[1:], kw)

    def make(real: list[Any]) -> list[Val]:
        _check_items(m, real[0], items)
        return [cap.new(real[0], items=dict(items))]

    m.expect_outputs(inst, 1, make)


def _counter(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``Counter(iterable)`` / ``Counter(mapping)``: every element (or count) is guarded, so
    the counts are constants of the record."""
    cap = m.cap
    if len(pos) > 1:
        raise m.unsupported("Counter() with several positional arguments")
    elements: list[Val] = []
    if pos and (isinstance(pos[0].items, dict) or isinstance(pos[0].obj, dict)):
        for k, v in _pairs(m, pos[0]):
            elements += [k, v]
    elif pos:
        elements = unpack(m, pos[0], None)
    elements += list(kw.values())
    for v in elements:
        if not (v.obj is None or is_value_type(v.obj)):
            raise m.unsupported(f"counting {type(v.obj).__name__} objects")
        cap.observe(v)

    def make(real: list[Any]) -> list[Val]:
        items = {k: (cap.const(k), cap.const(n)) for k, n in real[0].items()}
        return [cap.new(real[0], items=items)]

    m.expect_outputs(inst, 1, make)


def _deque(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if len(pos) > 2 or set(kw) - {"iterable", "maxlen"}:
        raise m.unsupported("deque() with unusual arguments")
    src = pos[0] if pos else kw.get("iterable")
    maxlen = pos[1] if len(pos) > 1 else kw.get("maxlen", cap.const(None))
    cap.observe(maxlen)
    items = unpack(m, src, None) if src is not None else []
    if maxlen.obj is not None:
        items = items[max(0, len(items) - maxlen.obj) :]

    def make(real: list[Any]) -> list[Val]:
        v = cap.new(real[0], items=list(items))
        _check_seq(m, v)
        return [v]

    m.expect_outputs(inst, 1, make)


def _getter(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``operator.itemgetter(1)`` (``Counter.most_common``'s sort key): a constant callable
    built from guarded values."""
    if kw or not all(v.obj is None or is_value_type(v.obj) for v in pos):
        raise m.unsupported("itemgetter/attrgetter of objects")
    for v in pos:
        m.cap.observe(v)
    m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], const=True)])


for _cls, _handler in (
    (operator.itemgetter, _getter),
    (operator.attrgetter, _getter),
    (OrderedDict, _ordered_dict),
    (defaultdict, _default_dict),
    (Counter, _counter),
    (deque, _deque),
):
    BUILTIN_HANDLERS[id(_cls)] = (_cls, _handler)


# ---------------------------------------------------------------------- dict-like methods
def _copy(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``d.copy()`` of a dict (or OrderedDict, defaultdict) whose items are known."""
    (base,) = pos
    if not isinstance(base.items, dict) or base.external:
        raise m.unsupported(f"{type(base.obj).__name__}.copy of a dict from outside")
    items = dict(base.items)

    def make(real: list[Any]) -> list[Val]:
        _check_items(m, real[0], items)
        return [m.cap.new(real[0], items=dict(items))]

    m.expect_outputs(inst, 1, make)


def _known_items(m: FrameMonitor, base: Val, name: str) -> Items:
    if not isinstance(base.items, dict) or base.external:
        raise m.unsupported(f"OrderedDict.{name} on a dict from outside")
    items: Items = base.items
    return items


def _popitem(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    base = pos[0]
    last = pos[1] if len(pos) > 1 else kw.get("last", m.cap.const(True))
    m.cap.observe(last)
    items = _known_items(m, base, "popitem")
    if not items:
        raise m.unsupported("popitem of an empty dict raises KeyError")
    key = next(reversed(items)) if last.obj else next(iter(items))
    m.cap.mutations += 1

    def make(real: list[Any]) -> list[Val]:
        k, v = items.pop(key)
        return [m.cap.new(real[0], items=[k, v])]

    m.expect_outputs(inst, 1, make)


def _move_to_end(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    base, key = pos[0], pos[1]
    last = pos[2] if len(pos) > 2 else kw.get("last", m.cap.const(True))
    m.cap.observe_key(key)
    m.cap.observe(last)
    items = _known_items(m, base, "move_to_end")
    if key.obj not in items:
        raise m.unsupported("move_to_end of a missing key raises KeyError")
    m.cap.mutations += 1

    def make(real: list[Any]) -> list[Val]:
        pair = items.pop(key.obj)
        if last.obj:
            items[key.obj] = pair
        else:
            rest = dict(items)
            items.clear()
            items[key.obj] = pair
            items.update(rest)
        _check_items(m, base.obj, items)
        return [m.cap.const(None)]

    m.expect_outputs(inst, 1, make)


def _fromkeys(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``dict.fromkeys(keys, value=None)`` (``OrderedDict.fromkeys``): every key maps to the
    one value object (Mamba's cache layers: ``dict.fromkeys(range(n))``)."""
    cap = m.cap
    if kw or not 2 <= len(pos) <= 3 or pos[0].obj not in (dict, OrderedDict):
        raise m.unsupported("fromkeys of another class or with unusual arguments")
    cap.observe_identity(pos[0])
    keys = unpack(m, pos[1], None)
    value = pos[2] if len(pos) == 3 else cap.const(None)
    items: Items = {}
    for k in keys:
        if not (k.obj is None or is_value_type(k.obj)):
            raise m.unsupported(f"a {type(k.obj).__name__} as a dict key")
        cap.observe(k)
        put_item(items, k, value)

    def make(real: list[Any]) -> list[Val]:
        _check_items(m, real[0], items)
        return [cap.new(real[0], items=dict(items))]

    m.expect_outputs(inst, 1, make)


def _register_dict_methods() -> None:
    for name in ("update", "pop", "setdefault", "clear"):
        handler = METHOD_HANDLERS.get((dict, name))
        if handler is not None:
            METHOD_HANDLERS.setdefault((OrderedDict, name), handler)
    for owner in (dict, OrderedDict, defaultdict):
        METHOD_HANDLERS.setdefault((owner, "copy"), _copy)
    METHOD_HANDLERS[(OrderedDict, "popitem")] = _popitem
    METHOD_HANDLERS.setdefault((dict, "popitem"), _popitem)
    METHOD_HANDLERS[(OrderedDict, "move_to_end")] = _move_to_end
    METHOD_HANDLERS.setdefault((type, "fromkeys"), _fromkeys)  # (classmethods bound to a class)


_register_dict_methods()


def missing_item(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """``d[key]`` where the shadow items lack ``key``: a defaultdict inserts its factory's
    value, a Counter gives 0, anything else raises KeyError (a graph break)."""
    cap = m.cap
    obj = container.obj
    if type(obj) is Counter:
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])
        return
    if not modelled_missing(obj, key.obj):
        raise m.unsupported(f"a missing key of a {type(obj).__name__} (KeyError)")
    items = container.items
    cap.mutations += 1

    def make(real: list[Any]) -> list[Val]:
        made = real[0]
        if type(made) in (list, dict, OrderedDict):
            v = cap.new(made, items=[] if type(made) is list else {})
        elif type(made) is set:
            v = empty_set(cap, made)
        else:
            v = cap.const(made)
        items[key.obj] = (key, v)
        return [v]

    m.expect_outputs(inst, 1, make)


def modelled_missing(obj: Any, key: Any) -> bool:
    """Whether ``obj[key]`` of a missing ``key`` is modelled: a defaultdict whose factory makes
    a container or constant the monitor names, or is a Python function (followed), and a key
    that is a plain value."""
    factory = getattr(obj, "default_factory", None)
    if type(obj) is not defaultdict or not (key is None or is_value_type(key)):
        return False
    return isinstance(factory, types.FunctionType) or any(factory is f for f in _FACTORIES)


# ---------------------------------------------------------------------- deque
def _check_seq(m: FrameMonitor, v: Val) -> None:
    real = v.obj
    if len(real) != len(v.items) or any(a.obj is not b for a, b in zip(v.items, real, strict=True)):
        raise m.unsupported("a deque whose contents the monitor could not follow")


def _deque_method(name: str) -> Any:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        cap = m.cap
        base, args = pos[0], pos[1:]
        if kw or not isinstance(base.items, list) or base.external:
            raise m.unsupported(f"deque.{name} on a deque from outside")
        items: list[Val] = base.items
        maxlen = base.obj.maxlen
        if name in ("pop", "popleft") and not items:
            raise m.unsupported(f"deque.{name} of an empty deque raises IndexError")
        if name == "copy":
            m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=list(items))])
            return
        new: list[Val] = []
        if name in ("extend", "extendleft"):
            new = unpack(m, args[0], None)
        elif name in ("append", "appendleft"):
            new = [args[0]]
        elif name == "rotate":
            if args:
                cap.observe(args[0])
        elif name not in ("pop", "popleft", "clear", "reverse"):
            raise m.unsupported(f"deque.{name}")
        steps = args[0].obj if name == "rotate" and args else 1
        cap.mutations += 1

        def make(real: list[Any]) -> list[Val]:
            out: Val = cap.const(None)
            if name in ("append", "extend"):
                items.extend(new)
                if maxlen is not None:
                    del items[: max(0, len(items) - maxlen)]
            elif name in ("appendleft", "extendleft"):
                items[:0] = list(reversed(new))
                if maxlen is not None:
                    del items[maxlen:]
            elif name == "pop":
                out = items.pop()
            elif name == "popleft":
                out = items.pop(0)
            elif name == "clear":
                items.clear()
            elif name == "reverse":
                items.reverse()
            elif name == "rotate" and items:
                k = steps % len(items)
                items[:] = items[len(items) - k :] + items[: len(items) - k]
            _check_seq(m, base)
            return [out]

        m.expect_outputs(inst, 1, make)

    return handle


for _name in "append appendleft pop popleft extend extendleft clear rotate reverse copy".split():
    METHOD_HANDLERS[(deque, _name)] = _deque_method(_name)
