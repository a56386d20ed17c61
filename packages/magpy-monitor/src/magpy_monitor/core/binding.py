"""Calls whose arguments the called function cannot take.

CPython binds a call's arguments to the function's parameters as it sets up the frame; too many
positional arguments, or a keyword with no parameter, raise TypeError then, before any line of
the function runs. Such a call is not followed: the instruction runs natively and raises, and a
handler the program has for it runs next (torchbearer's ``try: base(x, state) except
TypeError: base(x)``). What decides it is the code object and the call's shape, both guarded.
"""

from __future__ import annotations

import types
from typing import Any

from ..cpython.code import CO_VARARGS, CO_VARKEYWORDS
from .frame import FrameMonitor, Inst
from .values import Val

__all__ = ["expect_type_error", "signature_mismatch"]


def signature_mismatch(code: types.CodeType, npos: int, kwargs: dict[str, Val]) -> str | None:
    """What makes CPython refuse to start ``code``'s frame with ``npos`` positional arguments
    and these keywords, read from the code object alone: too many positional arguments, or a
    keyword it has no parameter for. None when it binds that far."""
    argc, kwonly, posonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    names = code.co_varnames
    if npos > argc and not code.co_flags & CO_VARARGS:
        return "too many arguments"
    if code.co_flags & CO_VARKEYWORDS:
        return None
    accepted = set(names[posonly : argc + kwonly])
    bad = [k for k in kwargs if k not in accepted]
    return f"bad keyword argument {bad[0]!r}" if bad else None


def expect_type_error(m: FrameMonitor, inst: Inst, why: str) -> None:
    """The call raises TypeError as CPython binds its arguments, before any frame starts:
    ``inst`` runs natively and raises it (a handler the program has for it runs next). Its
    cause is guarded already: which function is called (its code) and how many arguments,
    which keywords, the program passes it."""

    def make(real: list[Any]) -> list[Val]:
        raise m.unsupported(f"{why}, yet the call returned")

    def on_raise(exc: BaseException) -> None:
        if type(exc) is not TypeError:
            raise m.unsupported(f"{why}: it raised {type(exc).__name__}, not TypeError")

    p = m.expect_outputs(inst, 1, make)
    p.on_raise = on_raise
