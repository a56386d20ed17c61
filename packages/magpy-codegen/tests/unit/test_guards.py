"""The ``Guard`` protocol (_guards.py): a record starts with its ``PythonGuard``, moves onto a
new ``MemoGuard`` on a call it passed, and a twin starts again from the Python one; both forms
give the same inputs. The memo's snapshot is a ``Frozen`` of the 20 fields ``_snapcheck.c``
reads."""

from __future__ import annotations

from typing import Any

import torch

from magpy_codegen import MemoGuard, PythonGuard
from magpy_codegen._memo import Memo
from magpy_codegen._snapshot import Frozen


class _Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.factor = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.factor


def test_a_record_moves_onto_a_new_memo_guard(record_of: Any) -> None:
    model = _Scale()
    x = torch.randn(2, 3)
    rec, _ = record_of(model, x)
    first = rec.guard
    assert isinstance(first, PythonGuard) and first.code is rec.guard_code
    assert rec.memo_guard_code is None
    inputs = first.check(model, (x,), {})
    assert inputs is not None
    assert rec.memoize is not None
    rec.memoize(model, (x,), {})
    memo = rec.guard
    assert isinstance(memo, MemoGuard) and memo is not first
    assert rec.memo_guard_code is memo.code and memo.memo is memo.code.memo
    assert isinstance(memo.memo.state, Frozen) and memo.memo.state.fn is model
    for _ in range(2):  # (the first check may re-arm; the second reads the memo)
        again = memo.check(model, (x,), {})
        assert again is not None and all(a is b for a, b in zip(again, inputs, strict=True))
    model.factor = 3
    assert memo.check(model, (x,), {}) is None
    assert first.check(model, (x,), {}) is None
    assert rec.fork is not None
    twin = rec.fork()
    assert isinstance(twin.guard, PythonGuard) and twin.guard.code is rec.guard_code


def test_the_snapshot_has_the_fields_the_c_check_reads() -> None:
    """``_snapcheck.c`` reads a snapshot by position and refuses any other length than 20."""
    assert len(Frozen._fields) == 20
    assert Frozen._fields[0] == "fn" and Frozen._fields[-1] == "kept"
    assert Memo().valid(object()) is None
