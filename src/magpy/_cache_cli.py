"""``magpy cache list`` and ``magpy cache clear``: the records MagPy stored on disk.

``list`` prints one entry per line: its file (named by the key's hash), size, the callable it
belongs to, its backend, and the versions it was made with (``other versions``: this MagPy,
torch or Python would ignore it); an entry that fails its checks (owner, permissions, digest)
is listed with the reason. Nothing is unpickled. ``clear`` deletes the user's entries.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from magpy_runtime.store._entryfiles import clear_entries, list_entries

__all__ = ["describe", "run"]


def describe(row: dict[str, Any]) -> str:
    """One line about the entry ``row`` of ``list_entries``."""
    head = f"{row['file']}  {row['size']} B"
    if "problem" in row:
        return f"{head}  unusable: {row['problem']}"
    key = row.get("key") or {}
    made = row.get("versions") or {}
    versions = " ".join(f"{k}={made[k]}" for k in sorted(made))
    created = datetime.datetime.fromtimestamp(float(row.get("created") or 0)).isoformat(
        " ", "seconds"
    )
    state = "current" if row.get("current") else "other versions"
    library = "  +library" if row.get("native") else ""
    return (
        f"{head}  {key.get('module')}.{key.get('qualname')} ({key.get('kind')}, "
        f"backend={key.get('backend')!r}){library}  {versions}  [{state}]  {created}"
    )


def run(args: argparse.Namespace) -> int:
    """``magpy cache list|clear`` on ``args.dir``."""
    directory = str(args.dir)
    if args.action == "clear":
        print(f"removed {clear_entries(directory)} entries from {directory}")
        return 0
    rows = list_entries(directory)
    for row in rows:
        print(describe(row))
    print(f"{len(rows)} entries in {directory}")
    return 0
