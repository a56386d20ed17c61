"""Golden-file tests (STYLE.md practice 13): the generated guard and mock source of small cases.

Each case is captured, its record built with the eager backend, and the guard and mock source
(followed by a normalised listing of the constants they reference) compared with
``tests/golden/<case>.guard.py`` / ``<case>.mock.py``. After an intended change to code
generation, regenerate with::

    python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden

and review the diff. Memory addresses and test-module names are normalised away; the
``__magpy_kN``/``vN``/``bN`` names come from a fresh NameAllocator per record, so they are stable.
"""

from __future__ import annotations

import builtins
import re
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

from magpy_codegen import GeneratedCode


def scale_shift(x: torch.Tensor, n: int, *, bias: float) -> torch.Tensor:
    return (x * n).relu() + bias


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.k = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.k


class History:
    def __init__(self) -> None:
        self.calls = 0
        self.history = [1]


def bookkeeping(state: History, x: torch.Tensor) -> Any:
    out = [x * 2]
    state.calls = state.calls + 1
    state.last = out  # type: ignore[attr-defined]
    return out, out, state.history


def _scale_shift_case() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    return scale_shift, (torch.ones(2, 3), 2), {"bias": 0.5}


def _block_case() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    return Block(), (torch.ones(5, 4),), {}


def _bookkeeping_case() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    return bookkeeping, (History(), torch.ones(3)), {}


CASES: dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {
    "scale_shift": _scale_shift_case,
    "block_module": _block_case,
    "bookkeeping": _bookkeeping_case,
}

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _class_name(cls: type) -> str:
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    if module.split(".")[0] == "torch":
        return f"{module}.{cls.__qualname__}"
    return cls.__qualname__  # a test-module class: its module name depends on the rootdir


def describe(obj: Any) -> str:
    """A stable one-line description of a constant referenced by generated code."""
    if isinstance(obj, type):
        return f"<class {_class_name(obj)}>"
    if isinstance(obj, types.FunctionType):
        return f"<function {obj.__qualname__}>"
    if obj is builtins.__dict__:
        return "<builtins.__dict__>"
    if isinstance(obj, dict) and "__builtins__" in obj and "__name__" in obj:
        return "<module globals>"
    if isinstance(obj, types.ModuleType):
        return f"<module {obj.__name__}>"  # (its file's path depends on the venv)
    if isinstance(obj, types.CodeType):
        return f"<code {obj.co_qualname}>"  # (its file's path depends on the checkout)
    return _ADDRESS.sub("0x?", repr(obj))


def golden_text(kind: str, case: str, code: GeneratedCode) -> str:
    header = [
        f"# Golden file: the {kind} generated for the {case!r} case of test_golden.py.",
        "# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests "
        "--update-golden",
        "# ruff: noqa",
        "# fmt: off",
    ]
    used = sorted(
        (name for name in code.globals if name in code.source),
        key=lambda n: (len(n), n),
    )
    consts = ["# constants:"] + [f"#   {n} = {describe(code.globals[n])}" for n in used]
    return "\n".join([*header, code.source.rstrip("\n"), "", *consts]) + "\n"


@pytest.mark.parametrize("case", list(CASES))
def test_guard_source_matches_golden(case: str, record_of: Any, golden: Any) -> None:
    """The generated guard of each case equals its golden file."""
    fn, args, kwargs = CASES[case]()
    rec, _ = record_of(fn, *args, kwargs=kwargs)
    golden(f"{case}.guard.py", golden_text("guard", case, rec.guard_code))


@pytest.mark.parametrize("case", list(CASES))
def test_mock_source_matches_golden(case: str, record_of: Any, golden: Any) -> None:
    """The generated mock of each case equals its golden file."""
    fn, args, kwargs = CASES[case]()
    rec, _ = record_of(fn, *args, kwargs=kwargs)
    golden(f"{case}.mock.py", golden_text("mock", case, rec.mock_code))


@pytest.mark.parametrize("case", list(CASES))
def test_golden_case_record_hits_its_own_state(case: str, record_of: Any) -> None:
    """Each golden case's guard accepts the state it was recorded from."""
    fn, args, kwargs = CASES[case]()
    rec, _ = record_of(fn, *args, kwargs=kwargs)
    assert rec.guard.check(fn, args, kwargs) is not None


def test_describe_normalises_addresses() -> None:
    """Constant descriptions drop memory addresses and test-module names."""

    class Local:
        pass

    assert describe(Local) == "<class test_describe_normalises_addresses.<locals>.Local>"
    assert "0x?" in describe(object()) and not re.search(r"0x[0-9a-f]{4,}", describe(object()))
    assert describe(torch.Tensor) == "<class torch.Tensor>"
    assert describe(builtins.__dict__) == "<builtins.__dict__>"
