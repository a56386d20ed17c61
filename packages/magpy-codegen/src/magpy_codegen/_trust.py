"""The owner and mode checks of the files MagPy runs or unpickles: one definition for the
stored records (``magpy_runtime.store._entryfiles``) and the built snapshot check (``_cbuild``).

A directory or a file is trusted when it belongs to this user (``uid``: the caller's, which
tests replace to simulate another owner) and group and others cannot write it; a directory
MagPy makes is user-only (0700). A file is checked on the descriptor it is read from (opened
without following a final symbolic link), so that what is checked is what is read. Each answer
is None (trusted) or why not, as a sentence whose subject is ``what`` (e.g. ``"the entry"``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

__all__ = ["directory_problem", "open_trusted", "stat_problem", "write_private"]


def stat_problem(st: os.stat_result, what: str, *, uid: int, directory: bool) -> str | None:
    """Why the directory (``directory``) or regular file with status ``st`` is not trusted."""
    if directory and not stat.S_ISDIR(st.st_mode):
        return f"{what} is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return f"{what} is not a regular file"
    if st.st_uid != uid:
        return f"{what} belongs to another user"
    if st.st_mode & 0o022:
        return f"{what} is writable by group or others"
    return None


def directory_problem(
    path: str | os.PathLike[str], what: str, *, uid: int, create: bool
) -> str | None:
    """Why directory ``path`` must not be used (None: it may). ``create``: make it (0700)
    where it is missing."""
    try:
        if create and not os.path.isdir(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except FileNotFoundError:
        return f"{what} does not exist"
    except OSError as exc:
        return f"{what} cannot be used: {exc.strerror}"
    return stat_problem(st, what, uid=uid, directory=True)


def open_trusted(
    path: str | os.PathLike[str], what: str, *, uid: int
) -> tuple[BinaryIO, os.stat_result] | str:
    """File ``path`` open for reading with its status, once it passed the checks; else why
    not (nothing stays open). The caller closes the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return f"{what} cannot be opened: {exc.strerror}"
    file = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    problem = stat_problem(st, what, uid=uid, directory=False)
    if problem is not None:
        file.close()
        return problem
    return file, st


def write_private(directory: Path, name: str, data: bytes) -> None:
    """``directory/name`` holds ``data`` (0600: ``mkstemp``'s mode) at once or not at all: it
    is written to a temporary file beside it and renamed into place."""
    fd, temporary = tempfile.mkstemp(prefix=".part-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, directory / name)
    except BaseException:
        os.unlink(temporary)
        raise
