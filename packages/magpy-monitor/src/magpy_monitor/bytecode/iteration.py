"""Iteration: GET_ITER, FOR_ITER, UNPACK_SEQUENCE and the iterables builtins consume.

An iterator's shadow knows the ``Val``s it will produce (an ``IteratorState``), computed
when it is created: from a container built during the run, from an entry container (its length
or keys guarded, each element an entry path), from a constant, or lazily from a generator whose
frame the monitor follows (values arrive through ``Pending.yields``). A pre-existing built-in
iterator that a segment finds on its stack (a loop resumed after a break) is followed by looking
ahead in it (an ``AheadIterator``, see ``_look_ahead``).
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import DictItem, Item, IterPos, iter_remaining

from ..core import registry
from ..core.calls import GeneratorState, inline
from ..core.frame import FrameMonitor, Inst, _same_tuple, _same_value
from ..core.values import Payload, Val
from ..core.valuetypes import is_value_type
from ..cpython.current import INTERP
from .lazyzip import LazyZip, for_iter_lazy

__all__ = [
    "DICT_TYPES",
    "AheadIterator",
    "DictView",
    "IteratorState",
    "LazyRange",
    "advance",
    "consume_generator",
    "consume_items",
    "draw",
    "exhaust",
    "for_iter",
    "get_iter",
    "is_generator",
    "is_known_iterator",
    "iter_items",
    "lazy_source",
    "next_value",
    "pairs_of",
    "send",
    "unpack",
    "unpack_pending",
]

# dicts read from outside key by key (keys guarded, each value an entry path)
DICT_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
_INDEXABLE_MODULES = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)


# an iterator drawn from, its position after each value the drawing iterator gave (index 0:
# before the first), its position once the drawing iterator reported exhaustion, and whether
# it was found exhausted then (asked for a value it did not have)
Feed = tuple[Val, list[int], int, bool]


class IteratorState(Payload):
    """An iterator whose values the shadow knows: ``items``, of which it has given those
    before ``pos``; ``base``: the container it iterates, if any; ``feeds``: the iterators it
    draws from (see ``draw``); ``drawn_by``: the states of the iterators drawing from it;
    ``stale``: it draws from an iterator that was advanced elsewhere."""

    __slots__ = ("base", "drawn_by", "feeds", "items", "pos", "stale")

    def __init__(self, items: list[Val], base: Val | None = None) -> None:
        self.items, self.pos, self.base = items, 0, base
        self.feeds: list[Feed] = []
        self.drawn_by: list[IteratorState] = []
        self.stale = False


class LazyRange(Payload):
    """An untouched iterator over ``range_val``, a range of a dynamic length: its values are
    read (and its length guarded) when the run first takes one (``_materialize_range``)."""

    __slots__ = ("range_val",)

    def __init__(self, range_val: Val) -> None:
        self.range_val = range_val


class AheadIterator(Payload):
    """A pre-existing built-in iterator followed by looking ahead in it (``_look_ahead``): how
    many values the run took, whether it found the iterator exhausted, and the bound on the
    values left that chose the run's chunk of a split loop (``below``, see
    ``magpy_monitor.driver.segments``)."""

    __slots__ = ("below", "exhausted", "pos")

    def __init__(self) -> None:
        self.pos, self.exhausted = 0, False
        self.below: int | None = None


class DictView(Payload):
    """``d.keys()``/``d.values()``/``d.items()`` (``kind``) of the dict shadowed by ``base``."""

    __slots__ = ("base", "kind")

    def __init__(self, kind: str, base: Val) -> None:
        self.kind, self.base = kind, base


_VIEWS = ("keys", "items", "values", "__iter__", "__len__")


def native_mapping(obj: Any) -> bool:
    """A dict read from outside key by key: one of ``DICT_TYPES``, or a subclass whose keys,
    items, values, iteration and length are the dict's own (transformers' ``ModelOutput``;
    its entries are then read as stored, ``DictItem``)."""
    kind = type(obj)
    if kind in DICT_TYPES:
        return True
    if not isinstance(obj, dict):
        return False
    base = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
    return all(getattr(kind, name) is getattr(base, name) for name in _VIEWS)


def is_generator(v: Val) -> bool:
    """True for the shadow of a generator the monitor follows."""
    return v.payload(GeneratorState) is not None


def consume_generator(
    m: FrameMonitor,
    inst: Inst,
    gen: Val,
    n_out: int,
    finish: Callable[[list[Val], list[Any]], list[Val]],
) -> None:
    """``inst`` runs the followed generator ``gen`` to its end natively (``dict(gen)``,
    ``[*gen]``): its frame is monitored as it resumes, and ``finish(yielded, real)`` makes the
    instruction's ``n_out`` outputs from the values it yielded."""
    p = m.expect_outputs(inst, n_out, lambda real: finish(list(p.yields), real))
    p.gen = gen


def pairs_of(m: FrameMonitor, values: list[Val], what: str) -> list[tuple[Val, Val]]:
    """The ``(key, value)`` shadows of ``values``, each a pair of known items (``dict(pairs)``)."""
    out = []
    for pair in values:
        if not (isinstance(pair.items, list) and len(pair.items) == 2):
            raise m.unsupported(f"{what} of pairs of unknown contents")
        k, v = pair.items
        m.cap.observe_key(k)
        out.append((k, v))
    return out


def is_known_iterator(v: Val) -> bool:
    """True for an iterator shadow that knows the values it will produce."""
    return v.payload(IteratorState) is not None or v.payload(LazyRange) is not None


def iter_items(m: FrameMonitor, v: Val) -> list[Val] | None:
    """The values iterating ``v`` yields, or None when only running it can tell (generators)."""
    cap = m.cap
    obj = v.obj
    if is_generator(v):
        return None
    if v.payload(LazyRange) is not None:
        _materialize_range(m, v)
    if (state := v.payload(IteratorState)) is not None:
        if state.stale:
            raise m.unsupported("using a zip/enumerate whose iterator was advanced elsewhere")
        return state.items[state.pos :]
    if (view := v.payload(DictView)) is not None:
        return _view_items(m, view)
    model = registry.ITER_ITEMS_MODELS.get(type(obj))
    if model is not None:  # sets
        return model(m, v)
    if isinstance(v.items, list) and isinstance(obj, list | tuple | collections.deque):
        return list(v.items)
    if isinstance(v.items, list) and isinstance(obj, _INDEXABLE_MODULES):  # a slice of one
        return list(v.items)
    if isinstance(v.items, dict):
        return [k for k, _ in v.items.values()]
    if v.external and (
        type(obj) in (list, tuple)
        or isinstance(obj, _INDEXABLE_MODULES)
        or (isinstance(obj, tuple) and type(obj).__iter__ is tuple.__iter__)  # a namedtuple
    ):
        cap.observe_len(v)
        return [cap.child(v, Item(i), x) for i, x in enumerate(obj)]
    if v.external and native_mapping(obj):
        cap.observe_keys(v)
        return [cap.const(k) for k in obj]
    if v.const and not is_value_type(obj):
        rows = registry.ARRAY_ITEMS.impl(m, v)  # the elements of a 1-d numpy array of the run
        if rows is not None:
            return rows
    if is_value_type(obj) or v.const or v.expr is not None:
        if type(obj) is range:
            cap.range_trip = True  # (the runtime splits such loops when records pile up)
        cap.observe(v)
        return [cap.const(x) for x in obj]
    if isinstance(obj, torch.Tensor):
        raise m.unsupported("iterating over a tensor")
    return None


def _holds_tensor(d: dict[Any, Any]) -> bool:
    return any(isinstance(x, torch.Tensor) for x in d.values())


def _view_items(m: FrameMonitor, view: DictView) -> list[Val]:
    cap = m.cap
    kind, base = view.kind, view.base
    if isinstance(base.items, dict):
        pairs = list(base.items.values())
    elif base.external and native_mapping(base.obj):
        cap.observe_keys(base)
        step = Item if type(base.obj) in DICT_TYPES else DictItem  # (a subclass: as stored)
        pairs = [(cap.const(k), cap.child(base, step(k), x)) for k, x in base.obj.items()]
    elif base.const and type(base.obj) in DICT_TYPES and not _holds_tensor(base.obj):
        # a constant of the program (a class attribute of torch's): so are its items
        pairs = [(cap.const(k), cap.new(x, const=True)) for k, x in base.obj.items()]
    else:
        raise m.unsupported(f"iterating dict.{kind}() of a dict of unknown contents")
    if kind == "keys":
        return [k for k, _ in pairs]
    if kind == "values":
        return [x for _, x in pairs]
    return [cap.new((k.obj, x.obj), items=[k, x]) for k, x in pairs]


def make_iterator(
    m: FrameMonitor,
    real: Any,
    items: list[Val],
    base: Val | None = None,
    feeds: list[Feed] | None = None,
) -> Val:
    """A new iterator shadow over ``items`` (``base``: the container it iterates, if any;
    ``feeds``: the iterators it draws from, see ``draw``)."""
    state = IteratorState(items, base)
    it = m.cap.new(real, payload=state)
    if feeds:
        state.feeds = feeds
        for src, *_ in feeds:
            src.require(IteratorState).drawn_by.append(state)
    return it


def draw(m: FrameMonitor, sources: list[Val]) -> tuple[list[list[Val]], list[Feed]] | None:
    """The rows ``zip(*sources)`` gives (``enumerate(x)`` draws like ``zip(x)``), and the
    ``Feed`` of each iterator among ``sources`` (one iterator may appear several times:
    ``zip(it, it)`` pairs its values). None when some source's values are unknown."""
    cols: list[tuple[int, list[Val]]] = []
    cursor: dict[int, int] = {}
    iters: dict[int, Val] = {}
    for s in sources:
        items = iter_items(m, s)
        if items is None:
            return None
        if (state := s.payload(IteratorState)) is not None:
            iters[id(s)] = s
            cursor.setdefault(id(s), state.pos)
            cols.append((id(s), state.items))
        else:  # a container: zip iterates it with an iterator of its own
            cursor[-len(cols) - 1] = 0
            cols.append((-len(cols) - 1, items))
    steps = {k: [cursor[k]] for k in iters}
    rows: list[list[Val]] = []
    ended = None  # the source found exhausted
    while cols:
        row: list[Val] = []
        for key, items in cols:
            if cursor[key] >= len(items):
                ended = key  # (the values the sources before it gave are lost, as in zip)
                break
            row.append(items[cursor[key]])
            cursor[key] += 1
        else:
            rows.append(row)
            for k in iters:
                steps[k].append(cursor[k])
            continue
        break
    return rows, [(iters[k], steps[k], cursor[k], k == ended) for k in iters]


def advance(m: FrameMonitor, it: Val, pos: int) -> None:
    """Iterator shadow ``it`` has given its values before ``pos``; the iterators it draws from
    advance with it, and any other ``zip``/``enumerate`` drawing from it is now stale."""
    if it.require(IteratorState).stale:
        raise m.unsupported("using a zip/enumerate whose iterator was advanced elsewhere")
    _move(it, pos, exhausted=False, via=None)


def consume_items(m: FrameMonitor, v: Val) -> list[Val] | None:
    """``iter_items`` for native code that iterates ``v`` to its end now (``max(it)``,
    ``"".join(it)``): an iterator shadow is left exhausted, as the real one is."""
    items = iter_items(m, v)
    if items is not None:
        exhaust(m, v)
    return items


def lazy_source(m: FrameMonitor, v: Val, what: str) -> None:
    """``v`` is to be drawn from later by a lazy iterator (``map``, ``itertools.chain``),
    which the shadow does not follow for an iterator: its position would go stale."""
    if is_generator(v) or is_known_iterator(v):
        raise m.unsupported(f"{what} over an iterator")


def exhaust(m: FrameMonitor, it: Val) -> None:
    """Iterator shadow ``it`` (if it is one) has given all its values and reported the end."""
    if (state := it.payload(IteratorState)) is not None:
        if state.stale:
            raise m.unsupported("using a zip/enumerate whose iterator was advanced elsewhere")
        _move(it, len(state.items), exhausted=True, via=None)


def _move(it: Val, pos: int, *, exhausted: bool, via: IteratorState | None) -> None:
    state = it.require(IteratorState)
    state.pos = pos
    for d in state.drawn_by:
        if d is not via:
            d.stale = True
    for src, steps, end, src_exhausted in state.feeds:
        if exhausted:
            _move(src, end, exhausted=src_exhausted, via=state)
        else:
            _move(src, steps[pos], exhausted=False, via=state)


def next_value(m: FrameMonitor, inst: Inst, it: Val, default: Val | None) -> None:
    """``next(it)`` / ``next(it, default)`` of an iterator shadow that knows its values. At the
    end, ``next(it)`` raises StopIteration (the exception machinery models the rest)."""
    items = iter_items(m, it)
    assert items is not None
    if not items:
        exhaust(m, it)

        def make_end(real: list[Any]) -> list[Val]:
            if default is None or not _same(default, real[0]):
                raise m.unsupported("next() gave a value from an iterator the shadow says is over")
            return [default]

        m.expect_outputs(inst, 1, make_end)
        return
    val = items[0]

    def make(real: list[Any]) -> list[Val]:
        if not _same(val, real[0]):  # (its list changed after iter(): not followed)
            raise m.unsupported("next() gave a value the iterator's shadow does not know")
        advance(m, it, it.require(IteratorState).pos + 1)
        return [val]

    m.expect_outputs(inst, 1, make)


def _same(v: Val, real: Any) -> bool:
    """Whether shadow ``v`` describes ``real`` (as ``FrameMonitor.bind`` checks)."""
    return (
        v.obj is real or (is_value_type(real) and _same_value(v.obj, real)) or _same_tuple(v, real)
    )


def get_iter(m: FrameMonitor, inst: Inst, v: Val) -> None:
    """GET_ITER (and ``iter(x)``): the iterator shadow of ``v``."""
    if is_generator(v) or v.payload(IteratorState) is not None or v.payload(LazyZip) is not None:
        m.push(v)
        return
    if type(v.obj) is range and not v.const and v.expr is not None:
        # a range over a value that may change (a dynamic size): its values are only read
        # (and the length guarded) when the loop takes one, so a segment that ends at the
        # loop's head serves every trip count
        m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], payload=LazyRange(v))])
        return
    if isinstance(v.obj, torch.Tensor) and type(v.obj).__iter__ is torch.Tensor.__iter__:
        # `for row in x`: Tensor.__iter__ is Python (iter(x.unbind(0))), so the rows are the
        # outputs of an unbind in the graph; their number follows x's guarded size
        inline(m, inst, m.cap.const(torch.Tensor.__iter__), [v], {})
        return
    items = iter_items(m, v)
    if items is None:
        fn = getattr(type(v.obj), "__iter__", None)
        if isinstance(fn, types.FunctionType):
            m.cap.observe_type(v)
            inline(m, inst, m.cap.const(fn), [v], {})
            return
        raise m.unsupported(f"iterating over a {type(v.obj).__name__}")
    m.expect_outputs(inst, 1, lambda real: [make_iterator(m, real[0], items, v)])


def for_iter(m: FrameMonitor, inst: Inst) -> None:
    """FOR_ITER: the next value, or exhaustion (the iterator is popped and execution jumps)."""
    it = m.stack[-1]
    exhausted_at = inst.argval

    def n_out(lasti: int) -> int:
        return 0 if lasti == exhausted_at else 1

    if is_generator(it):

        def make_gen(real: list[Any]) -> list[Val]:
            if not real:
                m.stack.pop()
                return []
            if not p.yields:
                raise m.unsupported("generator produced a value the monitor did not see")
            return [p.yields[-1]]

        p = m.expect_outputs(inst, n_out, make_gen, opaque=True)
        p.gen = it
        return
    if it.payload(LazyZip) is not None:
        for_iter_lazy(m, inst, it, n_out)
        return
    if it.payload(LazyRange) is not None:
        _materialize_range(m, it)
    if it.payload(AheadIterator) is not None or _look_ahead(m, it):
        _for_iter_ahead(m, inst, it, n_out)
        return
    if it.payload(IteratorState) is None:
        raise m.unsupported(f"FOR_ITER over a {type(it.obj).__name__} of unknown contents")

    def make(real: list[Any]) -> list[Val]:
        state = it.require(IteratorState)
        if not real:
            m.stack.pop()
            m.exhausted = it.obj
            exhaust(m, it)
            return []
        val = state.items[state.pos]
        advance(m, it, state.pos + 1)
        return [val]

    m.expect_outputs(inst, n_out, make)


def send(m: FrameMonitor, inst: Inst) -> None:
    """SEND of a ``yield from`` loop: the delegate's next value, or, when it is done (execution
    jumps to ``inst.argval``), its return value in the delegate's place.

    The delegate is a generator the monitor follows (its values arrive through
    ``Pending.yields``, its return value through ``Pending.result``) or an iterator whose
    values the shadow knows. Only ``None`` is ever sent (``_resume_generator`` checks).
    """
    (sent,) = m.pop()
    if sent.obj is not None:
        raise m.unsupported("generator.send() of a value into a `yield from`")
    it = m.stack[-1]

    def done() -> bool:
        lasti = m.frame.f_lasti
        return m.real.get(lasti, lasti) == inst.argval

    if is_generator(it):

        def make_gen(real: list[Any]) -> list[Val]:
            if done():
                if INTERP.send_pops_receiver:
                    m.stack.pop()
                if p.result is not None:
                    return [p.result]
                if real[0] is None:
                    return [m.cap.const(None)]
                raise m.unsupported("delegated generator returned a value the monitor did not see")
            if not p.yields:
                raise m.unsupported("generator produced a value the monitor did not see")
            return [p.yields[-1]]

        p = m.expect_outputs(inst, 1, make_gen, opaque=True)
        p.gen = it
        return
    if it.payload(LazyRange) is not None:
        _materialize_range(m, it)
    if it.payload(IteratorState) is None:
        raise m.unsupported(f"`yield from` a {type(it.obj).__name__} of unknown contents")

    def make(real: list[Any]) -> list[Val]:
        state = it.require(IteratorState)
        if done():
            if INTERP.send_pops_receiver:
                m.stack.pop()
            exhaust(m, it)
            return [m.cap.const(None)]
        val = state.items[state.pos]
        advance(m, it, state.pos + 1)
        return [val]

    m.expect_outputs(inst, 1, make)


def _materialize_range(m: FrameMonitor, it: Val) -> None:
    """The run takes values from a lazy range iterator: its length is guarded from here on."""
    base = it.require(LazyRange).range_val
    it.set_payload(None)  # (taken first: a break reading the values leaves it without one)
    items = iter_items(m, base)
    assert items is not None
    it.set_payload(IteratorState(items, base))


def _look_ahead(m: FrameMonitor, it: Val) -> bool:
    """Start following a pre-existing built-in iterator (a loop's iterator on a segment's stack).

    Its values are read through ITER accesses (``iter_remaining(it)[k]``, guarded like any
    entry value); the record advances the real iterator by as many values as it took
    (``AdvanceIter``). Only iterators over lists, tuples, ranges and dict views qualify.
    """
    if not (it.external and it.node is not None) or it.payload(Payload) is not None:
        return False
    try:
        iter_remaining(it.obj)
    except TypeError:
        return False
    m.cap.observe_type(it)
    it.set_payload(AheadIterator())
    m.cap.ahead_iters.append(it)
    return True


def _for_iter_ahead(m: FrameMonitor, inst: Inst, it: Val, n_out: Callable[[int], int]) -> None:
    def make(real: list[Any]) -> list[Val]:
        state = it.require(AheadIterator)
        m.cap.mutations += 1  # the iterator advanced: an effect on outside state
        if not real:
            m.stack.pop()
            state.exhausted = True  # (a split loop's tail: the segment goes on after the loop)
            return []
        val = m.cap.child(it, IterPos(state.pos), real[0])
        state.pos += 1
        return [val]

    m.expect_outputs(inst, n_out, make)


@registry.UNPACK.provide
def unpack(m: FrameMonitor, v: Val, n: int | None) -> list[Val]:
    """The values of iterable ``v`` known without running it (``*args``, ``list.extend``)."""
    items = iter_items(m, v)
    if items is None:
        raise m.unsupported(f"unpacking a {type(v.obj).__name__}")
    if n is not None and len(items) != n:
        raise m.unsupported(f"unpacking {len(items)} values into {n}")
    exhaust(m, v)
    return items


def unpack_pending(m: FrameMonitor, inst: Inst, v: Val, n: int) -> None:
    """UNPACK_SEQUENCE n: pushes the values so that the first one ends on top."""
    if is_generator(v):

        def make(real: list[Any]) -> list[Val]:
            if len(p.yields) != n:
                raise m.unsupported("generator yielded values the monitor did not see")
            return list(reversed(p.yields))

        p = m.expect_outputs(inst, n, make)
        p.gen = v
        return
    if isinstance(v.obj, torch.Tensor):
        _unpack_tensor(m, inst, v, n)
        return
    if registry.UNPACK_LAZY.impl(m, inst, v, n):  # a lazy map/filter made in the run
        return
    known = iter_items(m, v)
    if known is not None and len(known) != n:
        # the instruction raises ValueError (its length is guarded); a ``try`` of the program
        # may handle it (``try: _, b, n, h = x.size()`` / ``except: x = x.unsqueeze(0)``)
        def never(real: list[Any]) -> list[Val]:
            raise m.unsupported(f"unpacking {len(known)} values into {n} did not raise")

        m.expect_outputs(inst, n, never)
        return
    items = unpack(m, v, n)
    m.expect_outputs(inst, n, lambda real: list(reversed(items)))


def _unpack_tensor(m: FrameMonitor, inst: Inst, v: Val, n: int) -> None:
    """``a, b = t``: iterating a tensor gives ``t.unbind(0)`` (its first size is guarded)."""
    cap = m.cap
    t = v.obj
    if t.dim() == 0 or t.shape[0] != n:
        raise m.unsupported(f"unpacking a tensor of shape {tuple(t.shape)} into {n} values")
    cap.guard_meta(v)

    def make(real: list[Any]) -> list[Val]:
        node = cap.rec.call("call_method", "unbind", (cap.tensor_node(v), 0), {})
        items = [cap.op_result(x, cap.rec.getitem(node, i)) for i, x in enumerate(real[::-1])]
        return items[::-1]

    m.expect_outputs(inst, n, make)
