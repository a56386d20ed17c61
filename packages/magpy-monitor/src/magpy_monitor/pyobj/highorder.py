"""Native functions that run Python: consumers of generators and callers of callbacks.

``sum(gen)``, ``"".join(gen)``, ``sorted(xs, key=lambda ...)``, ``functools.reduce``,
``map``/``filter``: the native function drives Python frames (generator resumptions, callbacks)
while its CALL is pending. Generator frames hand their yielded values to the pending
instruction; callback frames are monitored with their arguments bound to the shadows of the
objects native code passes them (found by identity), and their results are collected in order.
``map(f, a, b, ...)`` calls ``f`` with one item of each source until the shortest ends (over
iterators of different lengths, which it leaves one value apart, it is a break).
"""

from __future__ import annotations

import collections
import functools
import operator
import types
from collections.abc import Callable
from typing import Any, cast

import torch

from ..bytecode.iteration import (
    IteratorState,
    consume_generator,
    consume_items,
    exhaust,
    is_generator,
    iter_items,
)
from ..core import registry
from ..core.calls import _fresh, bind_args, method_self, pure_call
from ..core.dispatch import dispatch_call
from ..core.frame import Callback, FrameMonitor, Inst, Pending
from ..core.programcode import program_frames
from ..core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS, register_builtin
from ..core.values import Payload, Val
from ..core.valuetypes import is_value_type
from . import collections as _collections  # noqa: F401  (its deque handler, wrapped below)
from .builtins import tuple_list
from .matching import match_order as _match_order
from .matching import same_value as _same_value

__all__ = ["LazyMap", "consume", "unpack_lazy"]

Then = Callable[[list[Val], Any, Pending], Val]


class LazyMap(Payload):
    """A ``map(fn, ...)`` or ``filter(fn, ...)`` (``kind``) made in the run, not consumed yet:
    the values it will apply ``fn`` to (None: unknown), or the ``source`` it draws them from
    when it is consumed; ``more``: the further sources of ``map(fn, a, b, ...)``, drawn then
    too; ``drawn``: it was consumed (a second use finds it exhausted)."""

    __slots__ = ("drawn", "fn", "items", "kind", "more", "source")

    def __init__(
        self,
        kind: str,
        fn: Val,
        items: list[Val] | None,
        source: Val | None = None,
        more: tuple[Val, ...] = (),
    ) -> None:
        self.kind, self.fn, self.items, self.source = kind, fn, items, source
        self.more = more
        self.drawn = False


def _lazy(v: Val) -> LazyMap | None:
    return v.payload(LazyMap)


def consume(
    m: FrameMonitor, inst: Inst, src: Val, then: Then, *, in_order: bool = False
) -> Pending:
    """Model a native call that iterates ``src`` completely, then builds its result.

    ``then(items, real_result, pending)`` runs at bind time with the shadows of every value the
    iteration produced (known up front, yielded by a generator, or returned by callbacks).
    ``in_order``: the real result holds those values in order (``list(x)``, ``tuple(x)``).
    """
    lazy = _lazy(src)
    if lazy is not None:
        return _consume_lazy(m, inst, src, lazy, then, in_order=in_order)
    items = None if is_generator(src) else iter_items(m, src)
    if items is None and not is_generator(src):
        raise m.unsupported(f"iterating a {type(src.obj).__name__} of unknown contents")
    exhaust(m, src)

    def make(real: list[Any]) -> list[Val]:
        return [then(list(p.yields) if items is None else items, real[0], p)]

    p = m.expect_outputs(inst, 1, make)
    return p


@registry.UNPACK_LAZY.provide
def unpack_lazy(m: FrameMonitor, inst: Inst, src: Val, n: int) -> bool:
    """UNPACK_SEQUENCE n of a ``map``/``filter`` made during the run (``q, k, v = map(f, qkv)``):
    CPython iterates it natively, calling ``f`` back for each item. False: ``src`` is not one."""
    lazy = _lazy(src)
    if lazy is None:
        return False
    _consume_lazy(m, inst, src, lazy, lambda items, real, p: items[::-1], outputs=n)
    return True


@registry.CALL_WITH_LAZY_STAR.provide
def call_with_lazy_star(
    m: FrameMonitor, inst: Inst, fn: Val, star: Val, kwargs: dict[str, Val]
) -> bool:
    """``zip(*map(f, xs))`` (CALL_FUNCTION_EX over a ``map``/``filter`` made in the run, as in
    mmdetection's ``multi_apply``, or over a generator): CPython makes the argument tuple
    natively, calling ``f`` back for each item (or resuming the generator), then calls
    ``zip``; the call is modelled once its arguments are known. False: ``star`` is not such
    an object, or the callee is not one of the native builtins that run no Python of their
    own."""
    lazy = _lazy(star)
    if lazy is None and is_generator(star) and fn.obj not in (zip, list, tuple):
        _call_after_generator(m, inst, fn, star, kwargs)
        return True
    if (lazy is None and not is_generator(star)) or fn.obj not in (zip, list, tuple):
        return False

    def then(items: list[Val], real: Any, p: Pending | None) -> Val:
        depth = len(m.stack)
        m.pending = None
        dispatch_call(m, inst, fn, list(items), kwargs)
        call = cast("Pending | None", m.pending)  # (set by the call's handler)
        m.pending = None
        if call is None:  # the handler knew the result up front and pushed it
            (val,) = m.pop(len(m.stack) - depth)
            return val
        (val,) = call.make([real])
        return val

    if lazy is None:  # zip(*(f(w) for w in widths)): the generator runs to its end first
        consume_generator(m, inst, star, 1, lambda values, real: [then(values, real[0], None)])
    else:
        _consume_lazy(m, inst, star, lazy, then)
    return True


def _call_after_generator(
    m: FrameMonitor, inst: Inst, fn: Val, gen: Val, kwargs: dict[str, Val]
) -> None:
    """``f(*gen)`` of any callee (torch's parametrization: ``self[0](*originals)``): CPython
    runs the generator to its end, then calls ``f``. The generator's frame is monitored; once
    it returns, the call is dispatched like any other with the values it yielded, and its
    own pending result (a followed callee's frame, a graph node) replaces this one."""

    def unreachable(real: list[Any]) -> list[Val]:
        raise m.unsupported("a call over a generator ended before the generator did")

    p = m.expect_outputs(inst, 1, unreachable)
    p.gen = gen

    def call() -> None:
        depth = len(m.stack)
        m.pending = None
        dispatch_call(m, inst, fn, list(p.yields), kwargs)
        if m.pending is None:  # the rule knew the result up front and pushed it
            (val,) = m.pop(len(m.stack) - depth)
            m.expect_outputs(inst, 1, lambda real: [val])

    p.on_gen_return = call


def _consume_lazy(
    m: FrameMonitor,
    inst: Inst,
    src: Val,
    lazy: LazyMap,
    then: Any,
    outputs: int | None = None,
    *,
    in_order: bool = False,
) -> Pending:
    """``outputs``: the instruction pushes that many values (``then`` returns them), else one.
    ``in_order``: the instruction's result holds the produced values in order."""
    fn_val = lazy.fn
    items, rows = _draw(m, lazy)
    native = not _is_python(fn_val.obj)

    def make(real: list[Any]) -> list[Val]:
        if native and outputs is not None and lazy.kind == "map":
            if len(items) != outputs:
                raise m.unsupported(f"unpacking {len(items)} values into {outputs}")
            # the values UNPACK_SEQUENCE pushed are the calls' own results (last on top)
            results = [
                _native_apply(m, fn_val.obj, row, real=r)
                for row, r in zip(rows, real[::-1], strict=True)
            ]
        elif native and in_order and lazy.kind == "map" and len(real[0]) == len(items):
            # (the very objects native code made: tuple(map(list, rows)))
            pairs = zip(rows, real[0], strict=True)
            results = [_native_apply(m, fn_val.obj, row, real=r) for row, r in pairs]
        elif native:
            results = [_native_apply(m, fn_val.obj, row) for row in rows]
        else:
            results = list(p.callback_results)
        if lazy.kind == "map":
            produced = results
        else:
            for r in results:
                m.cap.observe(r)
            produced = [v for v, r in zip(items, results, strict=True) if r.obj]
        if outputs is not None:
            if len(produced) != outputs:
                raise m.unsupported(f"unpacking {len(produced)} values into {outputs}")
            return list(then(produced, None, p))
        return [then(produced, real[0], p)]

    p = m.expect_outputs(inst, 1 if outputs is None else outputs, make)
    if not native:
        follow_callbacks(m, p, fn_val, lambda k: rows[k] if k < len(rows) else [])
    return p


def _draw(m: FrameMonitor, lazy: LazyMap) -> tuple[list[Val], list[list[Val]]]:
    """The values a map or filter draws as it is consumed, and the arguments of each call of
    its function (one row per call: an item of every source, up to the shortest)."""
    items, source = lazy.items, lazy.source
    if source is not None:
        # the values are drawn now, from what the source holds now (a list may have grown,
        # an iterator advanced, since the map was made); a second use finds it exhausted
        lazy.source = None
        items = lazy.items = iter_items(m, source)
        exhaust(m, source)
    elif lazy.drawn:
        items = lazy.items = []
    if items is None:
        raise m.unsupported(f"{lazy.kind}() over an iterable of unknown contents")
    columns = [items]
    for more in lazy.more:
        drawn = [] if lazy.drawn else iter_items(m, more)
        if drawn is None:
            raise m.unsupported(f"{lazy.kind}() over an iterable of unknown contents")
        columns.append(drawn)
    lazy.drawn = True
    if len({len(c) for c in columns}) > 1 and any(_stateful(s) for s in (source, *lazy.more)):
        # (the longer iterators are left one value further on: not modelled)
        raise m.unsupported(f"{lazy.kind}() over iterators of different lengths")
    for more in lazy.more:
        exhaust(m, more)
    return items, [list(row) for row in zip(*columns, strict=False)]


def _stateful(v: Val | None) -> bool:
    """``v`` is an iterator: drawing from it leaves it changed."""
    return v is not None and v.payload(IteratorState) is not None


def follow_callbacks(
    m: FrameMonitor, p: Pending, fn_val: Val, args_of: Callable[[int], list[Val]]
) -> None:
    """Native code will call Python ``fn_val`` back, the ``k``-th time with the values whose
    shadows ``args_of(k)`` gives (``map``: the k-th item): each callee frame is bound to those
    shadows, so a number passed keeps where it came from (binding by identity could not tell
    two equal ints apart). A call with other arguments stops capture."""
    fn = fn_val.obj
    lead: list[Val] = []
    keywords: dict[str, Val] = {}
    target, target_val = fn, fn_val
    if type(fn) is functools.partial:
        target_val, lead, keywords = registry.PARTIAL_CALL.impl(m, fn_val, [], {})
        target = target_val.obj
    if isinstance(target, types.MethodType):
        lead = [method_self(m, target_val), *lead]
        target = target.__func__
    if not isinstance(target, types.FunctionType):
        raise m.unsupported(f"native code calling back a {type(target).__name__}")
    calls = [0]

    def bind(frame: types.FrameType) -> dict[str, Val]:
        k = calls[0]
        calls[0] += 1
        bound = bind_args(m, m.cap.const(target), [*lead, *args_of(k)], dict(keywords))
        bound = _fresh(frame, bound)
        for name, v in bound.items():
            real = frame.f_locals.get(name)
            if real is not v.obj and not (is_value_type(real) and _same_value(real, v.obj)):
                raise m.unsupported(f"{target.__qualname__} called back with other arguments")
        return bound

    p.callbacks[target.__code__] = Val(target, payload=Callback(bind))


def _is_python(fn: Any) -> bool:
    if type(fn) is functools.partial:  # functools.partial(f, ...) of a Python f
        fn = fn.func
    if isinstance(fn, types.MethodType):  # a bound Python method: its frame is followed
        return isinstance(fn.__func__, types.FunctionType)
    return isinstance(fn, types.FunctionType)


def _native_apply(m: FrameMonitor, fn: Any, args: list[Val], real: Any = None) -> Val:
    """Shadow of ``fn(*args)`` for a native ``fn`` called by native code.

    ``real`` is the object native code produced, when known (the last step); otherwise the
    pure ``fn`` is re-executed to get an intermediate value.
    """
    cap = m.cap
    if real is None:
        real = fn(*(a.obj for a in args))
    if fn in (list, tuple) and len(args) == 1 and isinstance(args[0].items, list):
        return cap.new(real, items=list(args[0].items))  # list(row): the same values
    if any(isinstance(a.obj, torch.Tensor) for a in args):
        node = cap.rec.call("call_function", fn, tuple(cap.to_arg(a) for a in args), {})
        return cap.op_result(real, node)
    for a in args:
        cap.observe(a)
    return cap.new(real, const=True)


# ---------------------------------------------------------------------- consumers
def _seq_builder(m: FrameMonitor) -> Then:
    def then(items: list[Val], real: Any, p: Pending) -> Val:
        return m.cap.new(real, items=list(items))

    return then


def _as_seq(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> bool:
    """list(x)/tuple(x) over generators and lazy iterators; False if not applicable."""
    if len(pos) == 1 and (is_generator(pos[0]) or _lazy(pos[0]) is not None):
        consume(m, inst, pos[0], _seq_builder(m), in_order=True)
        return True
    return False


def _pure_over(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """A pure consumer (``"".join``, ``any``, ``set``...) over any iterable."""
    cap = m.cap
    if not pos:
        pure_call(m, inst, pos, kw)
        return
    head, src, rest = pos[:-1], pos[-1], kw

    def then(items: list[Val], real: Any, p: Pending) -> Val:
        for v in (*head, *items, *rest.values()):
            if isinstance(v.obj, torch.Tensor):
                raise m.unsupported("a pure function over tensors would read their values")
            cap.observe(v)
        return cap.new(real, const=True)

    consume(m, inst, src, then)


_fn: Callable[..., Any]
for _fn in (any, all):  # (set and frozenset: pyobj.sets)
    BUILTIN_HANDLERS[id(_fn)] = (_fn, _pure_over)
METHOD_HANDLERS[(str, "join")] = _pure_over


@register_builtin(sum)
def _sum(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    start = pos[1] if len(pos) > 1 else kw.get("start", cap.const(0))
    src = pos[0].obj
    if isinstance(src, torch.Tensor) and src.dim() and type(src).__iter__ is torch.Tensor.__iter__:
        _sum_rows(m, inst, pos[0], start)  # sum(t): start + t[0] + t[1] + ... (AddTensors)
        return

    def then(items: list[Val], real: Any, p: Pending) -> Val:
        if not any(isinstance(v.obj, torch.Tensor) for v in (*items, start)):
            for v in (*items, start):
                cap.observe(v)
            return cap.new(real, const=True)
        acc = cap.to_arg(start)
        for v in items:
            acc = cap.rec.call("call_function", operator.add, (acc, cap.to_arg(v)), {})
        return cap.op_result(real, acc)

    consume(m, inst, pos[0], then)


def _sum_rows(m: FrameMonitor, inst: Inst, t: Val, start: Val) -> None:
    """``sum(t)`` iterates ``t``'s rows (``Tensor.__iter__`` is ``iter(t.unbind(0))``) and adds
    them one by one: the same operations in the graph; the number of rows is guarded."""
    cap = m.cap
    n = t.obj.shape[0]
    if not n:
        raise m.unsupported("sum() over a tensor without rows")
    cap.guard_meta(t)

    def make(real: list[Any]) -> list[Val]:
        rows = cap.rec.call("call_method", "unbind", (cap.tensor_node(t), 0), {})
        acc = cap.to_arg(start)
        for i in range(n):
            acc = cap.rec.call("call_function", operator.add, (acc, cap.rec.getitem(rows, i)), {})
        return [cap.op_result(real[0], acc)]

    m.expect_outputs(inst, 1, make)


@register_builtin(sorted)
def _sorted(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    key = kw.get("key")
    if "reverse" in kw:
        cap.observe(kw["reverse"])
    if key is not None and key.obj is not None and _is_python(key.obj):
        items = consume_items(m, pos[0])
        if items is None:
            raise m.unsupported("sorted() with a key over an iterable of unknown contents")

        def make(real: list[Any]) -> list[Val]:
            for r in p.callback_results:
                if isinstance(r.obj, torch.Tensor):
                    raise m.unsupported("sorted() by tensor values")
                cap.observe(r)
            return [cap.new(real[0], items=_match_order(items, real[0]))]

        p = m.expect_outputs(inst, 1, make)
        # (sorted computes every key first, in the iterable's order)
        follow_callbacks(m, p, key, lambda k: [items[k]] if k < len(items) else [])
        return
    if key is not None and key.obj is not None:
        cap.observe(key)

    def then(items: list[Val], real: Any, p: Pending) -> Val:
        if key is None or key.obj is None:
            for v in items:
                if isinstance(v.obj, torch.Tensor):
                    raise m.unsupported("sorted() compares tensor values")
                cap.observe(v)
        return cap.new(real, items=_match_order(items, real))

    p = consume(m, inst, pos[0], then)
    p.calls_back = program_frames()  # (the items' Python ``__lt__``, run natively: unseen)


@register_builtin(functools.reduce)
def _reduce(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    fn_val, src = pos[0], pos[1]
    init = pos[2] if len(pos) > 2 else None
    cap.observe_identity(fn_val)
    if _is_python(fn_val.obj):
        items = consume_items(m, src)
        if items is None:
            raise m.unsupported("reduce() with a Python function over a generator")

        def make(real: list[Any]) -> list[Val]:
            if not p.callback_results:
                return [init if init is not None else items[0]]
            return [p.callback_results[-1]]

        p = m.expect_outputs(inst, 1, make)
        seq = ([init] if init is not None else []) + list(items)

        def step(k: int) -> list[Val]:  # fn(acc, next): acc is the previous call's result
            acc = seq[0] if k == 0 else p.callback_results[k - 1]
            return [acc, seq[k + 1]] if k + 1 < len(seq) else []

        follow_callbacks(m, p, fn_val, step)
        return

    def then(items: list[Val], real: Any, p: Pending) -> Val:
        seq = ([init] if init is not None else []) + list(items)
        acc = seq[0]
        for i, v in enumerate(seq[1:], start=2):
            acc = _native_apply(m, fn_val.obj, [acc, v], real if i == len(seq) else None)
        return acc

    consume(m, inst, src, then)


def _lazy_handler(kind: str) -> Callable[[FrameMonitor, Inst, list[Val], dict[str, Val]], None]:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if len(pos) < 2 or (len(pos) > 2 and kind != "map") or kw:
            raise m.unsupported(f"{kind}() with other arguments")
        fn_val = pos[0]
        if len(pos) > 2:
            _map_several(m, inst, fn_val, pos[1:])
            return
        if isinstance(pos[1].obj, torch.Tensor):
            m.cap.observe_identity(fn_val)
            registry.MAP_ROWS.impl(m, inst, kind, fn_val, pos[1])  # map(f, t): over t's rows
            return
        items = iter_items(m, pos[1])
        if items is None:
            raise m.unsupported(f"{kind}() over an iterable of unknown contents")
        m.cap.observe_identity(fn_val)
        # (an iterator it draws from is left exhausted once the map is consumed, always whole)
        lazy = LazyMap(kind, fn_val, items, pos[1])
        m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], payload=lazy)])

    return handle


def _map_several(m: FrameMonitor, inst: Inst, fn_val: Val, sources: list[Val]) -> None:
    """``map(fn, a, b, ...)`` (pytree's ``tree_map`` over several trees): ``fn`` is called with
    one item of every source, until the shortest ends."""
    for src in sources:
        if isinstance(src.obj, torch.Tensor) or is_generator(src):
            raise m.unsupported("map() over several iterables, one a tensor or a generator")
        if iter_items(m, src) is None:
            raise m.unsupported("map() over an iterable of unknown contents")
    m.cap.observe_identity(fn_val)
    lazy = LazyMap("map", fn_val, None, sources[0], tuple(sources[1:]))
    m.expect_outputs(inst, 1, lambda real: [m.cap.new(real[0], payload=lazy)])


BUILTIN_HANDLERS[id(map)] = (map, _lazy_handler("map"))
BUILTIN_HANDLERS[id(filter)] = (filter, _lazy_handler("filter"))


def _sequence_handler(
    previous: Any,
) -> Callable[[FrameMonitor, Inst, list[Val], dict[str, Val]], None]:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        if not _as_seq(m, inst, pos, kw):
            previous(m, inst, pos, kw)

    return handle


for _fn in (list, tuple):
    BUILTIN_HANDLERS[id(_fn)] = (_fn, _sequence_handler(tuple_list))


def _deque_handler(previous: Any) -> Any:
    """``deque(it, maxlen)`` over a generator or a map: run to its end, the last ``maxlen``
    values kept (``deque(map(f, xs), maxlen=0)``, pytree's ``tree_map_``: ``f`` for its
    effects); other sources go to ``previous`` (``pyobj.collections``)."""

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        src = pos[0] if pos else kw.get("iterable")
        maxlen = pos[1] if len(pos) > 1 else kw.get("maxlen")
        lazy = src is not None and (is_generator(src) or _lazy(src) is not None)
        if not lazy or len(pos) > 2 or set(kw) - {"iterable", "maxlen"}:
            previous(m, inst, pos, kw)
            return
        assert src is not None
        keep = None
        if maxlen is not None:
            m.cap.observe(maxlen)
            keep = maxlen.obj

        def then(items: list[Val], real: Any, p: Pending) -> Val:
            kept = items if keep is None else items[max(0, len(items) - keep) :]
            return m.cap.new(real, items=list(kept))

        consume(m, inst, src, then)

    return handle


BUILTIN_HANDLERS[id(collections.deque)] = (
    collections.deque,
    _deque_handler(BUILTIN_HANDLERS[id(collections.deque)][1]),
)


def factory_missing_item(m: FrameMonitor, inst: Inst, container: Val, key: Val) -> None:
    """``d[key]`` of a key missing from a defaultdict whose factory is a Python function (the
    shadow items of ``d`` known): native ``__missing__`` calls the factory, whose frame is
    followed, and inserts what it returns."""
    cap = m.cap
    factory = container.obj.default_factory
    items = container.items
    fn_val = cap.known(factory) or cap.const(factory)  # (its identity is guarded)
    cap.mutations += 1

    def make(real: list[Any]) -> list[Val]:
        if not p.callback_results or p.callback_results[-1].obj is not real[0]:
            raise m.unsupported("a defaultdict's factory gave a value the run did not see")
        items[key.obj] = (key, p.callback_results[-1])
        return [p.callback_results[-1]]

    p = m.expect_outputs(inst, 1, make)
    follow_callbacks(m, p, fn_val, lambda k: [])
