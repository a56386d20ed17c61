"""Recursion headroom: a compiled call gives the program back the depth MagPy itself uses.

CPython counts frames (and a few C calls) against ``sys.getrecursionlimit()``. A compiled
call puts MagPy's frames between the caller and the user's function (one on a hit or a native
call, two while a whole call is monitored: see ``_boundary_importlib_bootstrap``), and the
monitor's trace callbacks run on top of the program's innermost frame. So that recursion near
the limit behaves as in eager, the limit is raised while the program's code runs in a
compiled call, by what MagPy adds on that path: ``NATIVE`` (split mode, eager mode),
``MONITORED`` while a whole call is monitored, ``MONITOR_CALLBACKS`` more for the rest of a
split call once a segment of it is monitored; it is put back when the call returns or raises.
A hit runs no program code and gets nothing (raising and restoring the limit would cost about
as much as the rest of a small hit); its guard and mock use about as much depth as the
program would (one unit more for a one-line function, less for a model).

The limit is one per interpreter but depth is per thread: each thread's compiled calls (nested
ones add up) ask for their extra depth, and the limit is the program's own limit plus the
largest request of any thread. A limit the program sets during a compiled call becomes the
program's limit (it is what the program finds after the call). While a compiled call runs,
``sys.getrecursionlimit()`` reads the raised value. Native calls overflow at exactly eager's
depth; a monitored call can recurse up to ``MONITOR_CALLBACKS`` frames deeper than eager
before it overflows (the headroom its callbacks need stays once the monitor stops), and
``integration/test_lifecycle.py`` measures both.
"""

from __future__ import annotations

import sys
import threading
import types
from sys import getrecursionlimit, setrecursionlimit
from threading import get_ident

from magpy_monitor import INTERP

__all__ = ["MONITORED", "MONITOR_CALLBACKS", "NATIVE", "OWN_ROOTS", "grow", "shrink", "user_level"]

# MagPy's own packages
OWN_ROOTS = frozenset(
    {"magpy", "magpy_runtime", "magpy_codegen", "magpy_monitor", "magpy_refgraph"}
)

# measured in recursion units: the call through the partial and ``run`` (3.11 counts ``run``,
# called from C, as two units; 3.12+ counts Python frames only)
NATIVE = 2 if INTERP.recursion_limit_counts_c_calls else 1
# the deepest chain of trace callbacks above the program's innermost frame (measured: 10 for a
# recursive function, 15 for a recursive method with keyword arguments), with a margin
MONITOR_CALLBACKS = 20
# a monitored whole call: also ``entry``, and the callbacks
MONITORED = NATIVE + 1 + MONITOR_CALLBACKS

_lock = threading.Lock()
_extra: dict[int, int] = {}  # thread id -> depth its running compiled calls asked for
_base = sys.getrecursionlimit()  # the program's own limit
_set = _base  # the limit this module last set


def grow(n: int) -> None:
    """This thread's compiled call needs ``n`` more frames than the program's limit."""
    global _base, _set
    tid = get_ident()
    with _lock:
        extra = _extra.get(tid, 0) + n
        _extra[tid] = extra
        now = getrecursionlimit()
        if now != _set:  # the program set its own limit
            _base = now
        _set = _base + (extra if len(_extra) == 1 else max(_extra.values()))
        if _set != now:
            setrecursionlimit(_set)  # higher than now: never refused


def shrink(n: int) -> None:
    """Undo ``grow(n)`` (the call returned or raised)."""
    global _base, _set
    tid = get_ident()
    with _lock:
        extra = _extra.pop(tid, 0) - n
        if extra > 0:
            _extra[tid] = extra
        now = getrecursionlimit()
        if now != _set:  # the program set its own limit during the call: it keeps it
            _base = now
        target = _base + max(_extra.values(), default=0)
        if target != now:
            try:
                setrecursionlimit(target)
            except RecursionError:  # this thread is deeper than that: keep the higher limit
                target = now
        _set = target


def user_level() -> int:
    """The ``stacklevel`` that attributes a warning MagPy issues in the calling function to
    the innermost frame outside MagPy's packages (the program's line it is about).

    ``warnings.warn`` does not count the frames it skips (a file name containing
    ``importlib`` and ``_bootstrap``, as ``_boundary_importlib_bootstrap``'s), nor does this.
    """
    level = 1
    f: types.FrameType | None = sys._getframe(1)
    while f is not None and str(f.f_globals.get("__name__", "")).split(".")[0] in OWN_ROOTS:
        f = f.f_back
        name = f.f_code.co_filename if f is not None else ""
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
    return level
