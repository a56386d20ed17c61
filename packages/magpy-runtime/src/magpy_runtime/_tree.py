"""When a record's guard becomes its C++ guard tree (``magpy_codegen._cguard``)."""

from __future__ import annotations

from magpy_codegen import Record

from ._logging import log_topic

__all__ = ["upgrade_guard"]


def upgrade_guard(rec: Record) -> None:
    """Swap ``rec``'s guard for its C++ guard tree (``Record.upgrade``), once; where building
    it fails the Python guard stays (as exact, slower), and the ``guards`` log says why."""
    upgrade, rec.upgrade = rec.upgrade, None
    try:
        if upgrade is not None:
            upgrade()
    except Exception as exc:
        log_topic("guards", f"the guard stays in Python: {type(exc).__name__}: {exc}")
        return
    if rec.tree_guard_code is not None:  # (what it checks is the Python guard logged before)
        log_topic("guards", "%s", rec.tree_guard_code.source)
