"""Text the program controls never becomes code in the guard or the mock MagPy generates.

Names, qualnames, attribute names and dict keys come from the program and can be any string:
newlines, carriage returns, Unicode line separators, quotes, comment and statement characters.
Hypothesis makes such strings around a payload that would record that it ran; each program is
compiled with them in every place where a name reaches generated source, and must (1) never
run the payload, (2) give eager's results on several calls, and (3) still hit its record (so a
guard that always failed could not pass), and miss when the value the name leads to changes.
"""

from __future__ import annotations

import builtins
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import magpy

_MARK = "_magpy_generated_source_payload_ran"
_PAYLOAD = f"__import__('builtins').__dict__.setdefault({_MARK!r}, []).append(1)"

# the characters that could end a comment, a string or a statement in generated source
_HOSTILE = st.sampled_from(
    ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\u2028", "\u2029", "'", '"', "\\", "#", ";", "):"]
)
_PIECES = st.one_of(_HOSTILE, st.text(alphabet="abc_ xyz0", max_size=4), st.just(_PAYLOAD))
_HOSTILE_TEXT = st.lists(_PIECES, min_size=1, max_size=6).map("".join)

_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def _payload_never_runs() -> Iterator[None]:
    builtins.__dict__.pop(_MARK, None)
    yield
    ran = builtins.__dict__.pop(_MARK, None)
    assert ran is None, "text from the program ran as generated code"


def _x(i: int) -> torch.Tensor:
    return torch.arange(3.0) + i


def _run(fn: Any, calls: int = 3) -> Any:
    compiled = magpy.compile(fn, backend="eager")
    for i in range(calls):
        torch.testing.assert_close(compiled(_x(i)), fn(_x(i)))
    return compiled


def _assert_one_record_that_hits(compiled: Any, calls: int = 3) -> None:
    stats = magpy.stats(compiled)
    assert stats.records == 1, stats
    assert stats.hits == calls - 1, stats


@_SETTINGS
@given(name=_HOSTILE_TEXT)
def test_a_hostile_qualname_is_only_a_comment(name: str) -> None:
    magpy.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    f.__qualname__ = name
    f.__code__ = f.__code__.replace(co_qualname=name, co_name="f")
    compiled = _run(f)
    _assert_one_record_that_hits(compiled)


@_SETTINGS
@given(key=_HOSTILE_TEXT)
def test_a_hostile_dict_key_is_guarded_as_a_literal(key: str) -> None:
    magpy.reset()
    table = {key: 2.0, "other": 5.0}

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * table[key]

    compiled = _run(f)
    _assert_one_record_that_hits(compiled)
    table[key] = 3.0  # the guard reads this key: the next call must see the new value
    torch.testing.assert_close(compiled(_x(0)), _x(0) * 3.0)


@_SETTINGS
@given(attr=_HOSTILE_TEXT)
def test_a_hostile_attribute_name_is_read_with_getattr(attr: str) -> None:
    magpy.reset()
    obj = types.SimpleNamespace()
    setattr(obj, attr, 2.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * getattr(obj, attr)

    compiled = _run(f)
    _assert_one_record_that_hits(compiled)
    setattr(obj, attr, 4.0)
    torch.testing.assert_close(compiled(_x(0)), _x(0) * 4.0)


@_SETTINGS
@given(name=_HOSTILE_TEXT)
def test_a_hostile_global_name_is_read_as_a_key(name: str) -> None:
    magpy.reset()
    scope: dict[str, Any] = {"__builtins__": builtins, name: 2.0}
    code = compile("def f(x):\n    return x * PLACEHOLDER\n", "<hostile>", "exec")
    fn_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    fn_code = fn_code.replace(
        co_names=tuple(name if n == "PLACEHOLDER" else n for n in fn_code.co_names)
    )
    f = types.FunctionType(fn_code, scope, "f")
    compiled = _run(f)
    _assert_one_record_that_hits(compiled)
    scope[name] = 6.0
    torch.testing.assert_close(compiled(_x(0)), _x(0) * 6.0)


def test_the_payload_marker_would_be_seen() -> None:
    """The fixture's check can fail: running the payload sets the marker it looks for."""
    exec(_PAYLOAD)
    assert builtins.__dict__.pop(_MARK) == [1]
