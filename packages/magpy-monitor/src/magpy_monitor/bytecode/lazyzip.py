"""``zip``/``enumerate`` over an iterable only running it can tell the values of.

``zip(layer_types, config.per_layer_config)`` (transformers' cache setup) draws from a
``collections.abc.Sequence``: its ``__iter__`` is a Python generator function, which ``zip``
calls natively, and whose frame runs (``__getitem__`` after ``__getitem__`` until one raises
``IndexError``) only when the loop asks for a row. Such a zip is followed lazily, as CPython
runs it: each ``FOR_ITER`` takes the next item of every source in order — from the items of a
container the shadow knows, or from what a followed generator yields while the instruction
runs — and the first source that has none ends the loop (the values taken before it are lost,
as in ``zip``). Generators made by ``zip`` itself (a Python ``__iter__``) are found in the real
zip object (``__reduce__`` gives its iterators without advancing them) and followed from then
on like any generator the program made.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from ..core.calls import GeneratorState, _closure, bind_args, function_source, guard_code
from ..core.frame import FrameMonitor, Inst
from ..core.values import Payload, Val

__all__ = ["LazyZip", "for_iter_lazy", "lazy_zip"]

_GENERATOR_FLAG = 0x20  # CO_GENERATOR


class _Items:
    """A source whose values the shadow knows: ``items``, of which ``pos`` were taken."""

    __slots__ = ("items", "pos")

    def __init__(self, items: list[Val]) -> None:
        self.items, self.pos = items, 0


class _Count:
    """``enumerate``'s counter: never ends."""

    __slots__ = ("next",)

    def __init__(self, start: int) -> None:
        self.next = start


class LazyZip(Payload):
    """A zip (or enumerate) drawing from ``sources``: ``_Items``, ``_Count`` or the shadow of
    a generator the monitor follows; ``ended``: it reported exhaustion; ``strict``: a
    ``zip(strict=True)``, whose end must find every source at its end."""

    __slots__ = ("ended", "sources", "strict")

    def __init__(self, sources: list[Any], strict: bool = False) -> None:
        self.sources, self.ended, self.strict = sources, False, strict


def _python_iter(obj: Any) -> types.FunctionType | None:
    """The generator function ``type(obj).__iter__``, if it is one (``Sequence.__iter__``)."""
    fn = getattr(type(obj), "__iter__", None)
    if isinstance(fn, types.FunctionType) and fn.__code__.co_flags & _GENERATOR_FLAG:
        return fn
    return None


def lazy_zip(
    m: FrameMonitor,
    inst: Inst,
    sources: list[Val],
    iter_items: Callable[[FrameMonitor, Val], list[Val] | None],
    is_generator: Callable[[Val], bool],
    *,
    start: int | None = None,
    strict: bool = False,
) -> bool:
    """``zip(*sources)`` (``enumerate(sources[0], start)`` where ``start`` is given) about to
    run natively, with some source's values unknown: follow it lazily (True), or False where a
    source is neither a container of known values, a followed generator, nor an object whose
    ``__iter__`` is a Python generator function (an iterator part-way through is left out)."""
    cap = m.cap
    plan: list[Any] = []
    for v in sources:
        items = None if is_generator(v) else iter_items(m, v)
        if items is not None and not hasattr(type(v.obj), "__next__"):  # (not an iterator)
            plan.append(_Items(list(items)))
        elif is_generator(v):
            plan.append(v)
        elif (fn := _python_iter(v.obj)) is not None:
            cap.observe_type(v)  # (its class's __iter__ runs)
            fn_val = cap.const(fn)
            src = function_source(m, fn_val)
            if src is not None:
                guard_code(cap, src, fn.__code__)
            plan.append((fn, bind_args(m, fn_val, [v], {}), _closure(m, fn_val)))
        else:
            return False

    def make(real: list[Any]) -> list[Val]:
        inner = real[0].__reduce__()[1]  # zip: its iterators; enumerate: (iterator, index)
        iters = inner if start is None else inner[:1]
        state = LazyZip([] if start is None else [_Count(start)], strict)
        for item, it in zip(plan, iters, strict=True):
            state.sources.append(_source(m, item, it))
        return [cap.new(real[0], payload=state)]

    m.expect_outputs(inst, 1, make)
    return True


def _source(m: FrameMonitor, item: Any, it: Any) -> Any:
    if not isinstance(item, tuple):
        if isinstance(item, Val) and it is not item.obj:
            raise m.unsupported("zip over a generator it does not iterate itself")
        return item
    fn, bound, closure = item
    frame = getattr(it, "gi_frame", None)
    if type(it) is not types.GeneratorType or it.gi_code is not fn.__code__ or frame is None:
        raise m.unsupported(f"zip over a {fn.__qualname__} that made no generator")
    if it.gi_suspended or it.gi_running:  # (not just created)
        raise m.unsupported(f"zip over a {fn.__qualname__} generator that already ran")
    gen = m.cap.new(it, payload=GeneratorState(bound, closure))
    m.cap.gen_frames[id(frame)] = gen
    return gen


def for_iter_lazy(m: FrameMonitor, inst: Inst, it: Val, n_out: Callable[[int], int]) -> None:
    """FOR_ITER over a lazily followed zip: the row its sources give, or its end."""
    state = it.require(LazyZip)
    if state.ended:
        raise m.unsupported("FOR_ITER over a zip that reported its end")
    gens = [s for s in state.sources if isinstance(s, Val)]

    def make(real: list[Any]) -> list[Val]:
        row, ended = _take(m, state, list(p.yields))
        if ended != (not real) or (
            real and any(a is not b.obj for a, b in zip(real[0], row, strict=True))
        ):
            raise m.unsupported("a zip gave other rows than its sources")
        if ended:
            if state.strict and not _all_ended(state, row):
                raise m.unsupported("zip(strict=True) of sources of unequal lengths")
            state.ended = True
            m.stack.pop()
            return []
        return [m.cap.new(real[0], items=row)]

    p = m.expect_outputs(inst, n_out, make, opaque=True)
    p.gen = gens[0] if gens else None  # (a generator's return value is reported to the loop)


def _all_ended(state: LazyZip, row: list[Val]) -> bool:
    """A strict zip ended where eager's does without raising: the first source had no value
    and every other is a container whose values were all taken (a generator's end after the
    first cannot be told without running it: not followed)."""
    rest = state.sources[1:]
    return not row and all(isinstance(s, _Items) and s.pos >= len(s.items) for s in rest)


def _take(m: FrameMonitor, state: LazyZip, yields: list[Val]) -> tuple[list[Val], bool]:
    """The next row of ``state``'s sources, in order, and whether one of them had no value
    (the sources before it gave theirs, which are lost)."""
    row: list[Val] = []
    for s in state.sources:
        if isinstance(s, _Count):
            row.append(m.cap.const(s.next))
            s.next += 1
        elif isinstance(s, _Items):
            if s.pos >= len(s.items):
                return row, True
            row.append(s.items[s.pos])
            s.pos += 1
        elif yields:
            row.append(yields.pop(0))
        else:
            return row, True
    return row, False
