"""Which values become dynamic: the scalars and tensor sizes that change between calls.

On a miss (``dynamic=None``), the int/float scalars and the tensor sizes that differ from what
an earlier record specialised on become dynamic for the next capture (scalars turn into graph
inputs, sizes into symbols, see ``magpy_monitor.core.shapes``). The last record allowed by
``max_records`` is captured with everything dynamic, as ``dynamic=True`` does from the start;
``dynamic=False`` never promotes anything. The record cache (``_cache``) and the sites
(``_sites``) both keep such a set of entry paths.
"""

from __future__ import annotations

import builtins
import inspect
import types
from typing import Any

import torch

from magpy_codegen import Record
from magpy_monitor import dim_key, length_key
from magpy_refgraph import AccessKind, GuardKind, Local, Path, iter_remaining

__all__ = ["as_locals", "changed_on_miss", "changed_scalars", "eval_path", "promote_all"]


def promote_all(dynamic: bool | None, last: bool) -> bool:
    """Capture with every scalar and size dynamic: ``dynamic=True``, or the last record allowed
    by ``max_records`` under ``dynamic=None`` (the region keeps changing: treat it as dynamic)."""
    return dynamic is True or (dynamic is None and last)


def as_locals(func: types.FunctionType, bound: bool, paths: set[Any]) -> set[Path]:
    """A compiled callable's dynamic ``paths`` (under ``args`` and ``kwargs``) as the paths
    of ``func``'s own locals (what its sites see; ``bound``: the call passes no ``self``).
    When a function's loops split, its sites start with the sizes and scalars the callable
    already saw change (a trip count's tensor length): their first records are symbolic in
    them, not specialised once and then recorded again."""
    code = func.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    skip = 1 if bound else 0
    mapped: set[Path] = set()
    for path in paths:
        if path.root.kind is not AccessKind.LOCAL or not path.steps:
            continue
        key, first = path.root.key, path.steps[0].key
        if key == "args" and type(first) is int and first + skip < code.co_argcount:
            mapped.add(Path(Local(names[first + skip]), path.steps[1:]))
        elif key == "kwargs" and first in names:
            mapped.add(Path(Local(first), path.steps[1:]))
    return mapped


def changed_scalars(plan: Any, others: list[Record]) -> set[Any]:
    """Entry paths of int/float/bool values guarded by value here and with another value elsewhere.

    Those are the scalars that change from call to call: the next capture makes them graph
    inputs (the paper's promotion of non-constant scalars) instead of specializing again.
    Tensor sizes that differ between two records' TENSOR_META guards are included, as
    ``dim_key(path, d)`` (the next capture makes them symbolic), where both records run the
    same block shape: the same parameters, of the same sizes (see ``changed_on_miss``).
    """

    def scalars(p: Any) -> dict[Any, Any]:
        found = {
            g.path: g.payload
            for g in p.guards
            if g.kind is GuardKind.VALUE and type(g.payload) in (int, float, bool)
        }
        found.update(_lengths(p))
        return found

    def shapes(p: Any) -> dict[Any, tuple[Any, ...]]:
        return {g.path: g.payload[3] for g in p.guards if g.kind is GuardKind.TENSOR_META}

    mine = scalars(plan)
    my_shapes = shapes(plan)
    my_parameters = _parameters(plan)
    changed: set[Any] = set()
    for rec in others:
        for path, value in scalars(rec.plan).items():
            if path in mine and type(mine[path]) is type(value) and mine[path] != value:
                changed.add(path)
        if _parameters(rec.plan) != my_parameters:
            continue  # another block shape
        for path, shape in shapes(rec.plan).items():
            if path in my_shapes:
                changed |= _changed_dims(path, my_shapes[path], shape)
    return changed


def _lengths(plan: Any) -> dict[Any, int]:
    """The lengths of the lists ``plan`` guards, by ``length_key`` (a list that grows from call
    to call: its length becomes an entry int of the next capture, see ``core.growing``)."""
    return {
        length_key(g.path): g.payload
        for g in plan.guards
        if g.kind is GuardKind.LEN and type(g.payload) is int
    }


def _parameters(plan: Any) -> dict[Any, tuple[Any, ...]]:
    """The sizes of the parameters ``plan`` reads, by path."""
    return {
        g.path: g.payload[3]
        for g in plan.guards
        if g.kind is GuardKind.TENSOR_META and issubclass(g.payload[0], torch.nn.Parameter)
    }


def _changed_dims(path: Any, old: tuple[Any, ...], now: tuple[Any, ...]) -> set[Any]:
    """``dim_key``s of the sizes that are known (not None) in both shapes and differ."""
    if len(old) != len(now):
        return set()
    return {
        dim_key(path, d)
        for d, (a, b) in enumerate(zip(old, now, strict=True))
        if a is not None and b is not None and a != b
    }


def changed_on_miss(records: list[Record], roots: dict[str, Any]) -> set[Any]:
    """Entry paths of int/float/bool values some record specialized on that differ in this call.

    A record's sizes count only where this call runs the same block shape: a parameter's sizes
    stay static (one graph per block shape, as in ``torch.compile``), so a record whose
    parameters have other sizes here, or whose tensors are not found here (another structure),
    tells nothing about sizes: the symbolic graph its sizes would give is pinned again."""
    changed: set[Any] = set()
    for rec in records:
        sizes: set[Any] | None = set()
        for g in rec.plan.guards:
            if g.kind is GuardKind.TENSOR_META:
                if sizes is not None:
                    dims = _changed_sizes(g, roots)
                    sizes = None if dims is None else sizes | dims
                continue
            if g.kind is GuardKind.LEN and type(g.payload) is int:
                changed |= _changed_length(g.path, g.payload, roots)
                continue
            if g.kind is not GuardKind.VALUE or type(g.payload) not in (int, float, bool):
                continue
            try:
                now = eval_path(g.path, roots)
            except Exception:  # the path does not resolve in this call: not a scalar change
                continue
            if type(now) is type(g.payload) and now != g.payload:
                changed.add(g.path)
        changed |= sizes or set()
    return changed


def _changed_length(path: Any, length: int, roots: dict[str, Any]) -> set[Any]:
    """``length_key(path)`` where a list some record guarded the length of has another here."""
    try:
        now = eval_path(path, roots)
    except Exception:  # the path does not resolve in this call
        return set()
    return {length_key(path)} if type(now) is list and len(now) != length else set()


def _changed_sizes(guard: Any, roots: dict[str, Any]) -> set[Any] | None:
    """Sizes a TENSOR_META guard names that differ in this call (same class, dtype, ndim);
    None where the tensor is not found, or is a parameter whose sizes differ."""
    try:
        now = eval_path(guard.path, roots)
    except Exception:  # the path does not resolve in this call
        return None
    cls, dtype, _device, shape = guard.payload[:4]
    if type(now) is not cls or not isinstance(now, torch.Tensor) or now.dtype is not dtype:
        return set()
    dims = _changed_dims(guard.path, shape, tuple(now.shape))
    return None if dims and isinstance(now, torch.nn.Parameter) else dims


def eval_path(path: Any, roots: dict[str, Any]) -> Any:
    """The object at ``path`` given the root namespaces of a call or a site."""
    root = path.root
    key = root.key
    if root.kind is AccessKind.LOCAL:
        if "L" in roots:
            obj = roots["S"][int(key[2:])] if str(key).startswith("$s") else roots["L"][key]
        else:
            obj = roots[key]
    elif root.kind is AccessKind.GLOBAL:
        obj = root.scope[key]
    elif root.kind is AccessKind.BUILTIN:
        obj = builtins.__dict__[key]
    elif root.kind is AccessKind.CELL:
        fn = root.scope
        obj = fn.__closure__[fn.__code__.co_freevars.index(key)].cell_contents
    else:
        obj = key
    for step in path.steps:
        obj = _step(obj, step)
    return obj


_NO = object()


def _step(obj: Any, step: Any) -> Any:
    """One step of ``eval_path``, on an object of a call that missed: it must change nothing
    and run none of the program's code, so a property, a ``__getitem__`` of the program's or a
    ``defaultdict``'s ``__missing__`` (which would insert the key) is not run: ``LookupError``
    (the path does not resolve)."""
    kind, key = step.kind, step.key
    if kind in (AccessKind.ATTR, AccessKind.OBJATTR):
        if isinstance(inspect.getattr_static(type(obj), key, None), property):
            raise LookupError(f"property {key!r}")
        return getattr(obj, key) if kind is AccessKind.ATTR else object.__getattribute__(obj, key)
    if kind is AccessKind.ITER:
        return iter_remaining(obj)[key]
    if kind is AccessKind.JOINED:
        return key[0](obj, key[1])
    if isinstance(obj, dict):
        found = dict.get(obj, key, _NO)
        if found is _NO:
            raise LookupError(key)
        return found
    if type(obj) in (list, tuple) or (kind is AccessKind.ITEM and _plain_getitem(obj)):
        return obj[key]
    raise LookupError(f"item of a {type(obj).__name__}")


def _plain_getitem(obj: Any) -> bool:
    """``obj[key]`` runs none of the program's code: torch's module containers."""
    return isinstance(obj, torch.nn.ModuleList | torch.nn.Sequential | torch.nn.ModuleDict)
