"""Reads of ``os.environ`` guard only the variables the program read.

``os.environ`` is Python (``os._Environ``) over a dict of every variable (``environ._data``).
``os.environ.get("X")`` and ``"X" in os.environ`` look ``X`` up there: a present variable is
guarded by its value; a missing one raises ``KeyError`` inside ``_Environ.__getitem__``, and
what decides that is only that ``X`` is not among the keys, so the guard checks that and no
other variable (before, it checked the whole environment, and a variable set between two calls,
as Inductor sets ``_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR`` while it compiles, made every
later call a miss). Iterating the environment still depends on all of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

import magpy

FLAG, OTHER, UNRELATED = "MAGPY_TEST_FLAG", "MAGPY_TEST_OTHER", "MAGPY_TEST_UNRELATED"


@pytest.fixture(autouse=True)
def _clean_environ() -> Iterator[None]:
    for name in (FLAG, OTHER, UNRELATED):
        os.environ.pop(name, None)
    yield
    for name in (FLAG, OTHER, UNRELATED):
        os.environ.pop(name, None)


def configured(x: torch.Tensor) -> torch.Tensor:
    if os.environ.get(FLAG) == "1":
        return x + 1
    if OTHER in os.environ:
        return x * 3
    return x * 2


def _check(compiled: object, x: torch.Tensor) -> None:
    assert torch.equal(compiled(x), configured(x))  # type: ignore[operator]


def test_an_unrelated_variable_set_between_calls_still_hits() -> None:
    compiled = magpy.compile(configured, backend="eager")
    x = torch.randn(4)
    _check(compiled, x)
    os.environ[UNRELATED] = "a"
    _check(compiled, x + 1)
    os.environ[UNRELATED] = "b"
    _check(compiled, x + 2)
    del os.environ[UNRELATED]
    _check(compiled, x + 3)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


def test_the_variables_read_decide_the_record() -> None:
    compiled = magpy.compile(configured, backend="eager")
    x = torch.randn(4)
    _check(compiled, x)  # neither set
    os.environ[FLAG] = "1"
    _check(compiled, x)  # FLAG's value
    os.environ[FLAG] = "0"
    _check(compiled, x)  # another value: OTHER is looked up again
    os.environ[OTHER] = ""
    _check(compiled, x)  # OTHER present
    del os.environ[FLAG], os.environ[OTHER]
    _check(compiled, x)  # the first record again
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (4, 1, 0), st


def variables_with_prefix(x: torch.Tensor) -> torch.Tensor:
    n = sum(1 for name in os.environ if name.startswith("MAGPY_TEST_"))
    return x * (n + 1)


def test_iterating_the_environment_depends_on_all_of_it() -> None:
    compiled = magpy.compile(variables_with_prefix, backend="eager")
    x = torch.randn(4)
    for value in ("a", "a"):
        os.environ[UNRELATED] = value
        assert torch.equal(compiled(x), variables_with_prefix(x))
    os.environ[OTHER] = "b"  # a new variable: the iteration sees it
    assert torch.equal(compiled(x), variables_with_prefix(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (2, 1), st
