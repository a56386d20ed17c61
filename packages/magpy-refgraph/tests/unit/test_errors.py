"""Unit tests for the exception tree (_errors.py)."""

from __future__ import annotations

import pickle

import pytest

from magpy_refgraph import (
    GuardFailure,
    InternalError,
    MagPyError,
    NotCompiledError,
    UnknownOptionError,
    Unsupported,
)


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (Unsupported, Exception),
        (InternalError, RuntimeError),
        (UnknownOptionError, ValueError),
        (NotCompiledError, TypeError),
        (GuardFailure, Exception),
    ],
)
def test_each_error_is_a_magpy_error_and_its_builtin(cls: type, builtin: type) -> None:
    """Every error subclasses MagPyError and the builtin it resembles."""
    assert issubclass(cls, MagPyError)
    assert issubclass(cls, builtin)


def test_unsupported_fields_and_str_with_location() -> None:
    """Unsupported keeps reason/filename/lineno and prints 'reason (file:line)'."""
    err = Unsupported("data-dependent jump", "model.py", 12)
    assert (err.reason, err.filename, err.lineno) == ("data-dependent jump", "model.py", 12)
    assert str(err) == "data-dependent jump (model.py:12)"


def test_unsupported_str_without_location() -> None:
    """Without a location, str(Unsupported) is just the reason."""
    assert str(Unsupported("print() call")) == "print() call"


def test_unsupported_str_with_partial_location() -> None:
    """A file without a line, or a line without a file, still prints a location."""
    assert str(Unsupported("r", filename="f.py")) == "r (f.py)"
    assert str(Unsupported("r", lineno=3)) == "r (<unknown>:3)"


def test_unsupported_keyword_construction_and_repr() -> None:
    """Unsupported accepts keyword arguments and has an informative repr."""
    err = Unsupported(reason="x", filename=None, lineno=None)
    assert repr(err) == "Unsupported('x', filename=None, lineno=None)"


def test_unsupported_pickles() -> None:
    """Unsupported survives a pickle round trip with all fields."""
    err = pickle.loads(pickle.dumps(Unsupported("r", "f.py", 7)))
    assert isinstance(err, Unsupported)
    assert (err.reason, err.filename, err.lineno) == ("r", "f.py", 7)


def test_internal_error_caught_as_runtime_error() -> None:
    """InternalError is caught by `except RuntimeError`."""
    with pytest.raises(RuntimeError, match="bug"):
        raise InternalError("bug")
