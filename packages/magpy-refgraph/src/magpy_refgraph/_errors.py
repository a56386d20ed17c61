"""The exception tree shared by every MagPy package.

It lives in the lowest layer so that ``monitor``, ``codegen`` and ``runtime`` can all extend it.
Each class also subclasses the builtin it resembles, so ``except ValueError`` keeps working for
callers that do not know MagPy.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "GuardFailure",
    "InternalError",
    "MagPyError",
    "NotCompiledError",
    "SpeculationMiss",
    "StateNotReady",
    "UnknownOptionError",
    "Unsupported",
]


class MagPyError(Exception):
    """Root of every exception MagPy raises on purpose."""


class Unsupported(MagPyError):
    """A graph break / capture stop: run this part eagerly. Not a bug.

    ``reason`` says what was found, ``filename``/``lineno`` where (both optional).
    ``str()`` is ``"reason (file:line)"``, or just ``reason`` when no location is known.
    """

    reason: str
    filename: str | None
    lineno: int | None

    def __init__(self, reason: str, filename: str | None = None, lineno: int | None = None) -> None:
        super().__init__(reason, filename, lineno)
        self.reason = reason
        self.filename = filename
        self.lineno = lineno

    def __str__(self) -> str:
        if self.filename is None and self.lineno is None:
            return self.reason
        where = self.filename if self.filename is not None else "<unknown>"
        if self.lineno is not None:
            where = f"{where}:{self.lineno}"
        return f"{self.reason} ({where})"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reason!r}, filename={self.filename!r}, "
            f"lineno={self.lineno!r})"
        )


class StateNotReady(Unsupported):
    """A break on state the program has not made yet, which its first call makes (a missing
    key of a container from outside: an optimizer's per-parameter state, a cache filled on
    first use): the next call may be captured whole."""


class InternalError(MagPyError, RuntimeError):
    """A MagPy bug (a broken invariant); the message names the object and what was expected."""


class BackendError(MagPyError, RuntimeError):
    """The graph backend failed, or broke its contract (it must return a callable); the region
    runs eagerly. The message names the backend and the graph."""


class UnknownOptionError(MagPyError, ValueError):
    """An option name or value that MagPy does not know; the message lists the allowed ones."""


class NotCompiledError(MagPyError, TypeError):
    """An inspection function was called on something that is not a MagPy-compiled function."""


class GuardFailure(MagPyError):
    """A guard check failed in a way the caller asked to see as an exception (unused here)."""


class SpeculationMiss(MagPyError):
    """A record's graph computed a value other than the one its capture assumed.

    A program that reads a tensor's value into Python (``if t.any():``, ``t.item() > 0``)
    is recorded with the value seen at capture; the graph outputs that value and the mock
    compares before it builds anything or writes outside. On a difference the mock raises
    this (nothing has been changed yet) and the call takes another record or runs the
    program again. ``check`` is the index of the failed check in ``Plan.checks``.
    """

    def __init__(self, check: int) -> None:
        super().__init__(check)
        self.check = check
