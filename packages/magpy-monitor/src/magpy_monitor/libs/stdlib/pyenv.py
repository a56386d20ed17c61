"""The Python environment library code consults: context variables, dicts, logging.

- ``ContextVar.set``/``reset``/``get``: a variable set *and* reset during the run (a library's
  "active collector" scoped around a forward) leaves no trace once the call returns, so the
  monitor tracks the values the run sets (``get`` returns the shadow of the value last set) and
  the record needs no write-back. Reading a variable the run did not set is a hidden input, and
  a variable still set when the capture ends cannot be replayed: both stop capture.
- ``dict(...)`` and ``dict.__getitem__`` (a dict subclass's ``super().__getitem__(k)``).
- ``Logger.isEnabledFor(level)`` (inside ``logger.debug(...)``): its answer is guarded by asking
  the logger again, so a message at a disabled level costs nothing on a hit and a logging
  configuration change is a miss. (On a cold cache it takes the logging lock: without this it
  would break the graph on the first call.)
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import operator
import types
import weakref
from typing import Any

import attrs

from magpy_refgraph import Attr, Const, DictItem, GuardKind, Item, Outcome, Unsupported

from ...bytecode.iteration import (
    DICT_TYPES,
    consume_generator,
    exhaust,
    is_generator,
    iter_items,
    pairs_of,
)
from ...bytecode.subscripts import subscr
from ...core.calls import _name as qualified_name
from ...core.calls import function_source, pure_call
from ...core.capture import Capture, Write
from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.registry import BUILTIN_HANDLERS, METHOD_HANDLERS
from ...core.values import Payload, Val
from ...cpython import lrucache
from ...pyobj.containers import plain_data

__all__ = ["check_context_vars"]

# capture -> id(ContextVar) -> (the variable, the shadows of the values the run set, in order)
_SET: weakref.WeakKeyDictionary[Capture, dict[int, tuple[contextvars.ContextVar[Any], list[Val]]]]
_SET = weakref.WeakKeyDictionary()


class ContextVarToken(Payload):
    """The token ``var.set(value)`` returned in the run: the variable, and how many values the
    run has set it to (``var.reset(token)`` must undo the last of them)."""

    __slots__ = ("depth", "var")

    def __init__(self, var: contextvars.ContextVar[Any], depth: int) -> None:
        self.var, self.depth = var, depth


def _stack(m: FrameMonitor, var: Any) -> list[Val]:
    per_var = _SET.setdefault(m.cap, {})
    return per_var.setdefault(id(var), (var, []))[1]


def _var_set(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    var_val, value = pos[0], pos[1]
    m.cap.observe_identity(var_val)
    stack = _stack(m, var_val.obj)
    stack.append(value)
    depth = len(stack)
    m.expect_outputs(
        inst, 1, lambda real: [m.cap.new(real[0], payload=ContextVarToken(var_val.obj, depth))]
    )


def _var_reset(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    var_val, token = pos[0], pos[1]
    stack = _stack(m, var_val.obj)
    info = token.payload(ContextVarToken)
    if info is None or info.var is not var_val.obj or info.depth != len(stack):
        raise m.unsupported("ContextVar.reset with a token of a set from outside the run")
    stack.pop()
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(None)])


def _var_get(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    stack = _stack(m, pos[0].obj)
    if not stack:
        raise m.unsupported("ContextVar.get reads context state set outside the run")
    m.push(stack[-1])


METHOD_HANDLERS[(contextvars.ContextVar, "set")] = _var_set
METHOD_HANDLERS[(contextvars.ContextVar, "reset")] = _var_reset
METHOD_HANDLERS[(contextvars.ContextVar, "get")] = _var_get


def check_context_vars(cap: Capture) -> None:
    """Raise ``Unsupported`` if the run leaves a context variable set (a replay would not)."""
    for var, stack in _SET.get(cap, {}).values():
        if stack:
            raise Unsupported(f"ContextVar {var.name!r} is set when the capture ends")


def _dict_getitem(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``dict.__getitem__(d, k)`` (``super().__getitem__(k)`` in a dict subclass): the entry as
    stored, bypassing the subclass's own ``__getitem__`` (transformers' ``ACT2FN``, whose
    ``__getitem__`` instantiates the class it stores)."""
    cap = m.cap
    base, key = pos[0], pos[1]
    if type(base.obj) in DICT_TYPES or not isinstance(base.obj, dict):
        subscr(m, inst, base, key)
        return
    cap.observe_key(key)
    if key.obj not in dict.keys(base.obj):  # (a __missing__ would run: not modelled)
        raise m.unsupported(f"dict.__getitem__ of a missing key of a {type(base.obj).__name__}")
    if isinstance(base.items, dict):
        m.push(base.items[key.obj][1])
    elif base.external:
        cap.observe_type(base)
        m.expect_outputs(inst, 1, lambda real: [cap.child(base, DictItem(key.obj), real[0])])
    else:
        raise m.unsupported(f"dict.__getitem__ of a {type(base.obj).__name__} of unknown contents")


def _dict_ctor(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``dict()``, ``dict(mapping)``, ``dict(pairs)``, ``dict(**kw)``: a new dict whose entries
    are the shadows of the source's."""
    cap = m.cap
    items: dict[Any, tuple[Val, Val]] = {}
    if len(pos) > 1:
        raise m.unsupported("dict() with more than one positional argument")
    if pos:
        src = pos[0]
        if isinstance(src.items, dict) and isinstance(src.obj, dict):
            items.update(src.items)
        elif src.external and type(src.obj) is dict:
            cap.observe_keys(src)
            for k in src.obj:
                cap.observe_key(cap.const(k))  # (a key hashed by Python: a break)
            items.update(
                {k: (cap.const(k), cap.child(src, Item(k), x)) for k, x in src.obj.items()}
            )
        elif is_generator(src):  # dict(self.named_parameters())

            def finish(yielded: list[Val], real: list[Any]) -> list[Val]:
                for k, v in pairs_of(m, yielded, "dict()"):
                    items[k.obj] = (k, v)
                for name, v in kw.items():
                    items[name] = (cap.const(name), v)
                return [cap.new(real[0], items=items)]

            consume_generator(m, inst, src, 1, finish)
            return
        else:
            pairs = iter_items(m, src)
            if pairs is None:
                raise m.unsupported(f"dict() of a {type(src.obj).__name__}")
            for k, v in pairs_of(m, pairs, "dict()"):
                items[k.obj] = (k, v)
            exhaust(m, src)
    for name, v in kw.items():
        items[name] = (cap.const(name), v)
    m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], items=items)])


METHOD_HANDLERS[(dict, "__getitem__")] = _dict_getitem
BUILTIN_HANDLERS[id(dict)] = (dict, _dict_ctor)


def _is_enabled_for(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if kw or len(pos) != 2 or not isinstance(pos[0].obj, logging.Logger):
        raise m.unsupported("Logger.isEnabledFor with unusual arguments")
    logger, level = pos
    cap.observe(level)
    node = logger.node if logger.external else cap.root(Const(logger.obj), logger.obj).node
    if node is None:
        raise m.unsupported("Logger.isEnabledFor of a logger made during the run")
    enabled = logger.obj.isEnabledFor(level.obj)  # what the call about to run gives
    ask = operator.methodcaller("isEnabledFor", level.obj)
    cap.graph.observe(node, GuardKind.CUSTOM, Outcome(ask, enabled))
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


BUILTIN_HANDLERS[id(logging.Logger.isEnabledFor)] = (logging.Logger.isEnabledFor, _is_enabled_for)


# ---------------------------------------------------------------------- inspect.signature
_SIGNATURE_READS = ("__defaults__", "__kwdefaults__", "__code__")


def _signature(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``inspect.signature(f)`` (diffusers' Attention reads its processor's on every call): a
    constant of the record, as a pure library function, guarded by what it reads of a Python
    function: its defaults, keyword defaults and code, and that it has no ``__signature__`` or
    ``__wrapped__`` (either would be read instead)."""
    cap = m.cap
    if len(pos) == 1 and not kw and isinstance(pos[0].obj, types.FunctionType):
        src = function_source(m, pos[0])
        if src is not None and src.node is not None:
            fn = pos[0].obj
            for name in _SIGNATURE_READS:
                read = cap.child(src, Attr(name), getattr(fn, name))
                cap.observe_identity(read) if name == "__code__" else cap.observe(read)
            for name in ("__signature__", "__wrapped__"):
                cap.graph.observe(src.node, GuardKind.NOT_HASATTR, name)
    pure_call(m, inst, pos, kw)


BUILTIN_HANDLERS[id(inspect.signature)] = (inspect.signature, _signature)


# ---------------------------------------------------------------------- functools.lru_cache
@attrs.frozen
class CachedCall:
    """What an ``lru_cache`` wrapper holds under one call's ``key``, read without calling it
    (``cpython.lrucache``; ``bounded``: its ``maxsize`` is not None)."""

    key: Any
    bounded: bool

    def __call__(self, fn: Any) -> Any:
        return lrucache.cached_result(fn, self.key, bounded=self.bounded)


def replay_cached_call(call: tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]]) -> None:
    """The program's call of an ``lru_cache`` wrapper, made again by the mock on a hit (whose
    guard found the result cached): a hit, counted and moved to the front as in eager."""
    fn, args, kwargs = call
    fn(*args, **dict(kwargs))


def _cached_function(c: Call) -> bool:
    return type(c.fn) is functools._lru_cache_wrapper and isinstance(
        getattr(c.fn, "__wrapped__", None), types.FunctionType
    )


@call_rule("lru_cache wrapper", _cached_function)
def _cached_call(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """A call of an ``functools.lru_cache``/``cache``-wrapped function over plain values
    (transformers' ``is_torch_greater_or_equal("2.3")``, ``is_torch_distributed_available()``):
    a constant of the record guarded by the function and its arguments. Caching asserts
    that the result depends on the arguments only (once cached, eager returns the same object
    until ``cache_clear()`` or an eviction); TorchDynamo makes the same assumption by tracing
    the wrapped function. A result that is not a plain value stays a break.

    The cache itself is state the program sees: ``cache_clear()`` makes the next call run the
    function again (which may now read something else), a bounded cache evicts, and
    ``cache_info()`` counts every call. So the guard looks into the cache without calling it
    (``CachedCall``: no count, no reordering, no eviction, also for the records that do not
    serve the call) and wants the same result held under the call's key; the mock then calls
    the wrapper once, as the program did (``replay_cached_call``, in program order with the
    other writes): a hit, counted and moved to the front as in eager. Where the result is not
    held any more, the record misses and the program's own call runs natively."""
    cap = m.cap
    args = [*c.pos, *c.kwargs.values()]
    if not all(plain_data(v.obj) for v in args):
        raise m.unsupported(f"{qualified_name(c.fn)}: a cached function over objects")
    if not lrucache.AVAILABLE:
        raise m.unsupported(f"{qualified_name(c.fn)}: an lru_cache this interpreter hides")
    cap.observe_identity(c.fn_val)
    for v in args:
        cap.observe(v)
    fn_node = c.fn_val.node if c.fn_val.external else cap.root(Const(c.fn), c.fn).node
    if fn_node is None:
        raise m.unsupported(f"{qualified_name(c.fn)}: a cached function made during the run")
    pos = tuple(v.obj for v in c.pos)
    kw = tuple((k, v.obj) for k, v in c.kwargs.items())
    key = lrucache.cache_key(c.fn, pos, kw)
    if key is lrucache.MISSING:
        raise m.unsupported(f"{qualified_name(c.fn)}: an lru_cache key this interpreter hides")
    held = CachedCall(key, c.fn.cache_parameters().get("maxsize") is not None)

    def make(real: list[Any]) -> list[Val]:
        if not plain_data(real[0]):
            raise m.unsupported(f"{qualified_name(c.fn)} returned a {type(real[0]).__name__}")
        if held(c.fn) is not real[0]:  # (maxsize=0 keeps nothing: every call runs it)
            raise m.unsupported(f"{qualified_name(c.fn)}: its cache does not keep the result")
        cap.graph.observe(fn_node, GuardKind.CUSTOM, Outcome(held, real[0]))
        replay = cap.root(Const(replay_cached_call), replay_cached_call)
        fn = c.fn_val if c.fn_val.external else cap.root(Const(c.fn), c.fn)
        items = [fn, cap.const(pos), cap.const(kw)]
        call = cap.new((c.fn, pos, kw), items=items)
        cap.writes.append(Write("callmethod", replay, "__call__", call))
        return [cap.new(real[0], const=True)]

    m.expect_outputs(inst, 1, make)
