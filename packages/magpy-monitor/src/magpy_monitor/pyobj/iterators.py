"""``itertools`` iterators made during the run: their values are known when they are made.

``itertools.chain`` gives the values of each part in turn (an iterator among the parts advances
as the chain gives its values). ``combinations``, ``permutations``, ``product``, ``islice``,
``repeat``, ``pairwise``, ``accumulate``, ``starmap`` and the like are worked out again over the
shadows' objects; the values they give are found again by identity (or are guarded values), so
the iterator's shadow lists them up front. Endless iterators (``count``, ``cycle``) are a break.
"""

from __future__ import annotations

import functools
import gc
import itertools
from typing import Any

import torch

from ..bytecode.iteration import (
    Feed,
    IteratorState,
    is_generator,
    is_known_iterator,
    iter_items,
    lazy_source,
    make_iterator,
)
from ..core import registry
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, register_builtin
from ..core.values import Val
from ..core.valuetypes import is_value_type

__all__: list[str] = []


@register_builtin(itertools.chain)
def _chain(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``itertools.chain(xs, reversed(xs))``: the values of each part in turn. An iterator
    among the parts advances as the chain gives its values (a ``Feed``, as for ``zip``)."""
    items: list[Val] = []
    drawn: list[tuple[Val, int, int, int]] = []  # an iterator, its start, offset and length
    for p in pos:
        if is_generator(p):
            raise m.unsupported("itertools.chain over a generator")
        part = iter_items(m, p)
        if part is None:
            raise m.unsupported("itertools.chain over an iterable of unknown contents")
        if is_known_iterator(p):
            if any(d[0] is p for d in drawn):
                raise m.unsupported("itertools.chain over one iterator twice")
            drawn.append((p, p.require(IteratorState).pos, len(items), len(part)))
        items += part
    # after the chain gave k values, a part at ``offset`` of ``n`` values has given
    # min(max(k - offset, 0), n) of them; at the chain's end, all (and was found exhausted)
    feeds: list[Feed] = [
        (p, [start + min(max(k - offset, 0), n) for k in range(len(items) + 1)], start + n, True)
        for p, start, offset, n in drawn
    ]
    m.expect_outputs(inst, 1, lambda real: [make_iterator(m, real[0], items, feeds=feeds)])


# the itertools functions modelled, and the positions of the arguments each iterates (None:
# all); the first seven only rearrange what they are given: every value they give is an
# argument, a value of an iterated one, or a tuple of those
_ITERTOOLS: dict[Any, tuple[int, ...] | None] = {
    itertools.combinations: (0,),
    itertools.permutations: (0,),
    itertools.product: None,
    itertools.combinations_with_replacement: (0,),
    itertools.islice: (0,),
    itertools.repeat: (),
    itertools.pairwise: (0,),
    itertools.accumulate: (0,),
    itertools.starmap: (1,),
}
_REARRANGING = tuple(_ITERTOOLS)[:7]
_POOLED = _REARRANGING[:4]  # these keep a tensor's rows in a tuple, a pool (see _pools)


def _itertools_iterator(
    m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val], fn: Any
) -> None:
    """``itertools.combinations(parts, 2)`` and the like: the iterator's values are worked
    out by running ``fn`` again over the shadows' objects (the real iterator is left alone: a
    copy of it could share, and advance, the iterator it draws from). Numbers among the
    arguments (``r``, lengths) are guarded; other objects, tensors among them, are found again
    by identity (DeepCTR's bilinear interactions). A tensor iterated gives the rows of an
    ``unbind(0)``: those in the pool native code made of it."""
    name = f"itertools.{fn.__name__}"
    if fn is itertools.repeat and len(pos) + len(kw) < 2:
        raise m.unsupported(f"{name} without an end")
    args, row_sources = _itertools_args(m, pos, fn, name)
    flat = [x for a in args for x in (a if isinstance(a, list) else [a])]
    flat += [v for j, v in enumerate(pos) if j in row_sources]
    for v in (*flat, *kw.values()):
        if v.obj is None or is_value_type(v.obj):
            m.cap.observe(v)
        elif fn not in _REARRANGING:
            raise m.unsupported(f"{name} over a {type(v.obj).__name__}")
    by_id = {id(v.obj): v for v in flat}

    def shadow(x: Any) -> Val:
        found = by_id.get(id(x))
        if found is not None:
            return found
        if x is None or is_value_type(x):
            return m.cap.const(x)
        raise m.unsupported(f"{name} gave a {type(x).__name__} it was not given")

    def make(real: list[Any]) -> list[Val]:
        if row_sources:
            held = _pools(m, real[0], name)
            for j in row_sources:
                pool = held[j] if fn is itertools.product else held
                rows = registry.TENSOR_ROWS.impl(m, pos[j], pool).items
                by_id.update((id(r.obj), r) for r in rows)
                args[j] = rows
        values = fn(
            *[[x.obj for x in a] if isinstance(a, list) else a.obj for a in args],
            **{k: v.obj for k, v in kw.items()},
        )
        given = []
        for x in values:
            if type(x) is tuple and not is_value_type(x):
                given.append(m.cap.new(x, items=[shadow(e) for e in x]))
            else:
                given.append(shadow(x))
        return [make_iterator(m, real[0], given)]

    m.expect_outputs(inst, 1, make)


def _pools(m: FrameMonitor, it: Any, name: str) -> tuple[Any, ...]:
    """What a fresh pooling iterator holds: the pool tuple it made of its iterable
    (``combinations``, ``permutations``, ``combinations_with_replacement``), or the tuple of
    pools (``product``). Read through the garbage collector's view of its references (its
    ``tp_traverse``): before its first value, the pools are the only tuple it holds (its
    result tuple is made by the first ``next``; 3.12+ also lists the type). Not
    ``__reduce__``, which 3.12 deprecated for itertools (and 3.14 removes), and which would
    warn in the program's name."""
    held = [r for r in gc.get_referents(it) if type(r) is tuple]
    if len(held) != 1:
        raise m.unsupported(f"{name} holds {len(held)} tuples, not its pool")
    return held[0]


def _itertools_args(
    m: FrameMonitor, pos: list[Val], fn: Any, name: str
) -> tuple[list[Val | list[Val]], list[int]]:
    """The arguments of ``fn`` with the values of those it iterates (a tensor it pools stays
    itself: its rows are found once native code made them), and the positions of those
    tensors."""
    iterated = _ITERTOOLS[fn]
    args: list[Val | list[Val]] = []
    row_sources = []
    for j, v in enumerate(pos):
        if not (iterated is None or j in iterated):
            args.append(v)
        elif isinstance(v.obj, torch.Tensor) and fn in _POOLED:
            registry.CHECK_ROW_SOURCE.impl(m, v)
            row_sources.append(j)
            args.append(v)
        else:
            lazy_source(m, v, name)
            items = iter_items(m, v)
            if items is None:
                raise m.unsupported(f"{name} over an iterable of unknown contents")
            args.append(items)
    return args, row_sources


for _fn in _ITERTOOLS:
    BUILTIN_HANDLERS[id(_fn)] = (_fn, functools.partial(_itertools_iterator, fn=_fn))


def _endless(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val], fn: Any) -> None:
    """``itertools.count()``/``cycle(xs)``: an iterator shadow lists its values up front."""
    raise m.unsupported(f"itertools.{fn.__name__} without an end")


for _fn in (itertools.count, itertools.cycle):
    BUILTIN_HANDLERS[id(_fn)] = (_fn, functools.partial(_endless, fn=_fn))
