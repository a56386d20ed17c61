"""A record's guard: the ``Guard`` protocol and its two forms.

``guard.check(*roots) -> inputs | None``: the graph's inputs where the call is one the record
serves, else None (it never raises: the generated function catches what its reads raise).
The roots are ``(fn, args, kwargs)`` for a whole call and ``(L, S)`` for a site (the frame's
locals and the stack values there; ``generate_guard``'s ``roots``). ``check`` is the generated
function itself, an attribute and not a method, so that a hit pays no frame for the protocol.

- ``PythonGuard``: the generated guard as ``generate_guard`` writes it, every check on every
  call. A record starts with it; twins of a record (``Record.fork``) get a fresh one.
- ``MemoGuard``: the same checks with a memo (``_memo``): the stable part is skipped while the
  memo's snapshot holds. A record moves onto it on its first hit (``Record.memoize``), which
  makes a new guard; a guard is never changed in place (its memo's snapshot is its state).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ._generated import GeneratedCode
from ._memo import Memo

__all__ = ["Guard", "MemoGuard", "PythonGuard"]

Check = Callable[..., tuple[Any, ...] | None]


class Guard(Protocol):
    """``check(*roots) -> inputs | None`` (see the module docstring); ``code``: its source."""

    @property
    def check(self) -> Check: ...

    @property
    def code(self) -> GeneratedCode: ...


@attrs.frozen
class PythonGuard:
    """The generated guard: every check runs on every call."""

    check: Check
    code: GeneratedCode

    @classmethod
    def load(cls, code: GeneratedCode) -> PythonGuard:
        return cls(code.load()["__magpy_guard"], code)


@attrs.frozen
class MemoGuard:
    """The generated guard with a memo (``code.memo``): its stable part runs only where the
    memo's snapshot no longer holds."""

    check: Check
    code: GeneratedCode
    memo: Memo

    @classmethod
    def load(cls, code: GeneratedCode) -> MemoGuard:
        if code.memo is None:
            raise ValueError("a memo guard needs code generated with a memo")
        return cls(code.load()["__magpy_guard"], code, code.memo)
