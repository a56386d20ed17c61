"""Calls: PUSH_NULL, KW_NAMES, PRECALL, CALL, CALL_KW and CALL_FUNCTION_EX.

The instructions only gather the callable and its shadow arguments; what the call means is
decided by ``core.dispatch.dispatch_call`` (the call rules). Where the call's NULL sits, and
whether a PRECALL unbinds a bound method before the CALL, is the interpreter's
(``INTERP.call_split``, ``INTERP.precall``).
"""

from __future__ import annotations

import types

from magpy_refgraph import Item

from ..core import registry
from ..core.calls import method_self
from ..core.dispatch import dispatch_call
from ..core.frame import FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import Val
from ..cpython.current import INTERP
from ..cpython.frameio import NULL
from .iteration import unpack

__all__: list[str] = []


@opcode("PUSH_NULL")
def _push_null(m: FrameMonitor, inst: Inst) -> None:
    m.push(Val(NULL, const=True))


@opcode("KW_NAMES")
def _kw_names(m: FrameMonitor, inst: Inst) -> None:
    m.kwnames = inst.argval


@opcode("PRECALL")
def _precall(m: FrameMonitor, inst: Inst) -> None:
    _unbind_method(m, inst.arg)


def _unbind_method(m: FrameMonitor, n: int) -> None:
    """A bound method called with no ``self`` slot becomes its function and its ``self``, as the
    interpreter does on the real stack (3.11's PRECALL; 3.12's and 3.13's CALL)."""
    if INTERP.null_above_callable:
        fn_at, null_at = -n - 2, -n - 1
    else:
        null_at, fn_at = -n - 2, -n - 1
    fn = m.stack[fn_at]
    if m.stack[null_at].obj is NULL and type(fn.obj) is types.MethodType:
        self_val = method_self(m, fn)
        m.stack[-n - 2] = m.cap.const(fn.obj.__func__)
        m.stack[-n - 1] = self_val


@opcode("CALL")
def _call(m: FrameMonitor, inst: Inst) -> None:
    n = inst.arg
    if not INTERP.precall:
        _unbind_method(m, n)
    kwnames, m.kwnames = m.kwnames, ()
    fn, args = INTERP.call_split(m.pop(n + 2), lambda v: v.obj is NULL)
    n_kw = len(kwnames)
    pos = list(args[: len(args) - n_kw])
    kwargs = dict(zip(kwnames, args[len(args) - n_kw :], strict=True))
    dispatch_call(m, inst, fn, pos, kwargs)


@opcode("CALL_KW")
def _call_kw(m: FrameMonitor, inst: Inst) -> None:
    (names,) = m.pop()
    m.kwnames = tuple(names.obj)
    _call(m, inst)


@opcode("CALL_FUNCTION_EX")
def _call_function_ex(m: FrameMonitor, inst: Inst) -> None:
    has_kw = inst.arg & 1
    parts = m.pop(3 + has_kw)
    fn, star = (parts[0] if INTERP.null_above_callable else parts[1]), parts[2]
    kw = parts[3] if has_kw else None
    kwargs: dict[str, Val] = {}
    if kw is not None:
        if isinstance(kw.items, dict):
            kwargs = {k: v for k, (_, v) in kw.items.items()}
        elif kw.external and type(kw.obj) is dict:
            m.cap.observe_keys(kw)
            kwargs = {k: m.cap.child(kw, Item(k), v) for k, v in kw.obj.items()}
        else:
            raise m.unsupported("**kwargs from a mapping of unknown contents")
    if not registry.CALL_WITH_LAZY_STAR.impl(m, inst, fn, star, kwargs):
        dispatch_call(m, inst, fn, unpack(m, star, None), kwargs)
