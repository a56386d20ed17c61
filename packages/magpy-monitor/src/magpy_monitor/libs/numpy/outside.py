"""Arrays from outside that numpy reads: guarded by their contents.

An ndarray the program reaches from outside (a module's ``self.scales``, a global table) is
mutable and no guard used to check what it holds, so numpy over it was a break. A small one
(up to ``MAX_GUARDED_ELEMENTS`` elements of a plain dtype) that numpy only reads is now guarded
by its contents (dtype, shape, strides and bytes: ``ArrayContents``): the computation over it is
then a pure function of guarded values, run natively at record time, its result a constant of
the record (``ndarrays``); a call where the array holds anything else misses.

The array stays the outside object: what numpy gives back that shares its memory (a view,
``a.T``, ``a[1:]``) is a break (a write through it would change the outside array), and so is
any numpy call or operator that changes it (``out=a``, ``a += 1``: checked after each one by
comparing its contents with the guarded ones). Its methods and attributes stay breaks, as
before.
"""

from __future__ import annotations

import importlib
import weakref
from typing import Any

from magpy_refgraph import GuardKind, Outcome

from ...core.capture import Capture
from ...core.frame import FrameMonitor
from ...core.values import Val

__all__ = [
    "MAX_GUARDED_ELEMENTS",
    "ArrayContents",
    "check_outside",
    "guard_outside",
    "written_arrays",
]

try:
    np: Any = importlib.import_module("numpy")
except ImportError:  # numpy is optional
    np = None

MAX_GUARDED_ELEMENTS = 4096  # the guard compares every byte on every call


class ArrayContents:
    """A guard's outcome function: ``(dtype, shape, strides, bytes)`` of an exact ndarray (None
    for anything else)."""

    def __call__(self, a: Any) -> Any:
        if np is None or type(a) is not np.ndarray:
            return None
        return (a.dtype.str, a.shape, a.strides, a.tobytes())

    def __eq__(self, other: object) -> bool:
        return type(other) is ArrayContents

    def __hash__(self) -> int:
        return hash(ArrayContents)

    def __repr__(self) -> str:
        return "ArrayContents()"


_CONTENTS = ArrayContents()
# per capture: id -> (an outside array numpy read, the contents its guard checks)
_GUARDED: weakref.WeakKeyDictionary[Capture, dict[int, tuple[Any, Any]]] = (
    weakref.WeakKeyDictionary()
)


def guard_outside(cap: Capture, v: Val) -> bool:
    """Guard outside array ``v`` by its contents, for numpy to read it; False where it cannot
    be (no entry path, too large, of objects, a subclass)."""
    obj = v.obj
    if (
        np is None
        or type(obj) is not np.ndarray
        or obj.dtype.hasobject
        or obj.size > MAX_GUARDED_ELEMENTS
        or not v.external
        or v.node is None
    ):
        return False
    if _graph_may_have_written(cap, obj):
        return False  # (its contents now may not be the ones at entry)
    guarded = _GUARDED.setdefault(cap, {})
    if id(obj) not in guarded:
        contents = _CONTENTS(obj)
        cap.graph.observe(v.node, GuardKind.CUSTOM, Outcome(_CONTENTS, contents))
        guarded[id(obj)] = (obj, contents)
    return True


def _graph_may_have_written(cap: Capture, arr: Any) -> bool:
    """The graph so far updated a tensor in place whose memory may be ``arr``'s (a tensor over
    the same buffer, made outside or by ``torch.from_numpy``): numpy reads values then that the
    guard, which reads the array at entry, does not see. A CPU storage that starts between the
    start of the buffer numpy allocated and the array's end may overlap it; for an array over
    memory numpy did not allocate (``t.numpy()``, a buffer), any update on the CPU may."""
    if cap.updated_unknown:
        return True
    starts = [key[1] for key in cap.updated if key[0].type == "cpu"]
    if not starts:
        return False
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.base is not None:
        return True
    low, high = _byte_bounds(arr)
    first = root.__array_interface__["data"][0]
    return any(min(first, low) <= p < high for p in starts)


def _byte_bounds(a: Any) -> tuple[int, int]:
    utils = getattr(np.lib, "array_utils", None)
    bounds = getattr(utils, "byte_bounds", None) or np.byte_bounds
    low, high = bounds(a)
    return int(low), int(high)


def written_arrays(fn: Any, pos: list[Val], kw: dict[str, Val]) -> list[Val]:
    """The arguments numpy function ``fn`` writes into: ``out=`` (an array or a tuple of
    them), a ufunc's positional outputs, ``nan_to_num(a, copy=False)``'s ``a``."""
    out: list[Val] = []
    for v in [kw[k] for k in ("out",) if k in kw] + (
        pos[fn.nin :] if np is not None and isinstance(fn, np.ufunc) else []
    ):
        out += v.items if isinstance(v.items, list) else [v]
    copy = kw.get("copy")
    if getattr(fn, "__name__", "") == "nan_to_num" and copy is not None and not copy.obj and pos:
        out.append(pos[0])
    return out


def check_outside(m: FrameMonitor, result: Any = None) -> None:
    """After numpy ran (it wrote no outside array: ``written_arrays``): a break if ``result``
    is an array sharing memory with a guarded outside array (or a list or tuple of arrays with
    one), or, as a last resort, if a guarded array changed all the same."""
    guarded = _GUARDED.get(m.cap)
    if not guarded:
        return
    results = list(result) if type(result) in (list, tuple) else [result]
    for arr, contents in guarded.values():
        if _CONTENTS(arr) != contents:
            raise m.unsupported("numpy changed a ndarray read from outside")
        for r in results:
            if type(r) is np.ndarray and r is not arr and np.may_share_memory(r, arr):
                raise m.unsupported("a view of a ndarray read from outside")
