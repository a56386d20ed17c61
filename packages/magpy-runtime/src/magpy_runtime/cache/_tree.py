"""When a record's guard becomes its memoizing form (``magpy_codegen._memo``: on its first
hit)."""

from __future__ import annotations

from typing import Any

import torch

from magpy_codegen import Record

from .._logging import log_topic

__all__ = ["memoize_guard"]


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
