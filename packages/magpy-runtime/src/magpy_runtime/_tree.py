"""When a record's guard becomes its memoizing form (``magpy_codegen._memo``: on its first hit)
or its C++ guard tree (``magpy_codegen._cguard``: opt-in, after ``guard_tree_after`` hits)."""

from __future__ import annotations

from typing import Any

import torch

from magpy_codegen import Record

from ._logging import log_topic

__all__ = ["memoize_guard", "upgrade_guard"]


def upgrade_guard(rec: Record) -> None:
    """Swap ``rec``'s guard for its C++ guard tree (``Record.upgrade``), once; where building
    it fails the Python guard stays (as exact, slower), and the ``guards`` log says why."""
    upgrade, rec.upgrade = rec.upgrade, None
    try:
        if upgrade is not None:
            with torch._C.DisableTorchFunction():  # (MagPy's own tensors: not the program's)
                upgrade()
    except Exception as exc:
        log_topic("guards", f"the guard stays in Python: {type(exc).__name__}: {exc}")
        return
    if rec.tree_guard_code is not None:  # (what it checks is the Python guard logged before)
        log_topic("guards", "%s", rec.tree_guard_code.source)


def memoize_guard(rec: Record, fn: Any, args: Any, kwargs: Any) -> None:
    """Swap ``rec``'s guard for its memoizing form (``Record.memoize``), once, on a call it
    passed; where that fails the guard stays as it is (as exact), and the ``guards`` log says
    why."""
    memoize = rec.memoize
    try:
        if memoize is not None:
            # (its example tensors and metadata reads are MagPy's own: no torch function
            # mode or subclass hook of the program sees them)
            with torch._C.DisableTorchFunction():
                memoize(fn, args, kwargs)
    except Exception as exc:
        rec.memoize = None
        log_topic("guards", f"the guard stays without a memo: {type(exc).__name__}: {exc}")
        return
    code = rec.memo_guard_code
    if code is not None:
        log_topic("guards", "%s", code.source)
        if code.memo is not None and code.memo.off is not None:
            log_topic("guards", "its memo is off: %s", code.memo.off)
