"""Read the live value stack of a CPython frame (ctypes; valid only inside a trace callback).

Layout (Include/internal/pycore_frame.h): ``PyFrameObject`` = ob_refcnt, ob_type, f_back,
f_frame -> ``_PyInterpreterFrame`` = eight pointers (3.11: f_func, f_globals, f_builtins,
f_locals, f_code, frame_obj, previous, prev_instr; 3.12: f_code, previous, f_funcobj,
f_globals, f_builtins, f_locals, frame_obj, prev_instr; 3.13: f_executable first and
instr_ptr last), then ``int stacktop``, a few bytes, and ``localsplus[]``: the same offsets on
all three. The stack occupies ``localsplus[nlocalsplus:nlocalsplus + depth]``. On 3.11,
``stacktop`` holds that end while a trace function runs; from 3.12 on it does not
(``INTERP.stacktop_in_frame``), and the depth before the current instruction comes from the
bytecode (``stackdepth.stack_depths``). 3.14 changes the slots to tagged stack references and
the frame layout: see docs/cpython.md.
A NULL slot (``PUSH_NULL``, ``LOAD_GLOBAL`` with the low bit) is a zero pointer and is returned as
the ``NULL`` sentinel, distinct from ``None``. A self-test at import checks the layout.
"""

from __future__ import annotations

import ctypes
import types
from typing import Any

from .current import INTERP, gettrace, opcode_trace_off, opcode_trace_on, settrace
from .stackdepth import stack_depths

__all__ = ["NULL", "StackView", "nlocalsplus", "read_stack", "stack_depth"]

_PTR = ctypes.sizeof(ctypes.c_void_p)
_F_FRAME_OFFSET = 3 * _PTR  # after ob_refcnt, ob_type, f_back
_STACKTOP_OFFSET = 8 * _PTR  # after eight pointers of _PyInterpreterFrame
_LOCALSPLUS_OFFSET = _STACKTOP_OFFSET + 8  # int stacktop, bool is_entry, char owner, padding


class _Null:
    """The NULL stack slot: not an object, never ``None``."""

    _instance: _Null | None = None

    def __new__(cls) -> _Null:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL"

    def __reduce__(self) -> str:
        return "NULL"


NULL: Any = _Null()

_nlocalsplus_cache: dict[types.CodeType, int] = {}


def nlocalsplus(code: types.CodeType) -> int:
    """Number of ``localsplus`` slots: varnames, cells that are not arguments, free variables."""
    n = _nlocalsplus_cache.get(code)
    if n is None:
        varnames = set(code.co_varnames)
        cells = sum(1 for c in code.co_cellvars if c not in varnames)
        n = len(code.co_varnames) + cells + len(code.co_freevars)
        _nlocalsplus_cache[code] = n
    return n


def _interp_frame(frame: types.FrameType) -> int:
    return ctypes.c_void_p.from_address(id(frame) + _F_FRAME_OFFSET).value or 0


class StackView:
    """Cached ctypes views of one frame's stack; build once per monitored frame."""

    __slots__ = ("_base", "_depths", "_slots", "_top", "frame")

    def __init__(self, frame: types.FrameType) -> None:
        self.frame = frame
        iframe = _interp_frame(frame)
        if not iframe:
            raise RuntimeError("frame has no interpreter frame (already finished?)")
        self._base = nlocalsplus(frame.f_code)
        if INTERP.stacktop_in_frame:
            self._top: ctypes.c_int | None = ctypes.c_int.from_address(iframe + _STACKTOP_OFFSET)
            self._depths: dict[int, int] = {}
        else:
            self._top = None
            self._depths = stack_depths(frame.f_code)
        size = self._base + frame.f_code.co_stacksize
        self._slots = (ctypes.c_void_p * size).from_address(iframe + _LOCALSPLUS_OFFSET)

    def depth(self) -> int:
        """Number of values on the stack."""
        if self._top is not None:
            return self._top.value - self._base
        return self._depths[self.frame.f_lasti]

    def _end(self) -> int:
        return self._top.value if self._top is not None else self._base + self.depth()

    def peek(self, i: int) -> Any:
        """The ``i``-th value from the top (0 = TOS); ``NULL`` for a NULL slot."""
        p = self._slots[self._end() - 1 - i]
        if not p:
            return NULL
        return ctypes.cast(p, ctypes.py_object).value

    def local(self, i: int) -> Any:
        """The ``i``-th ``localsplus`` slot (a local, a cell object or a free variable's cell)."""
        p = self._slots[i]
        if not p:
            return NULL
        return ctypes.cast(p, ctypes.py_object).value

    def replace(self, i: int, obj: Any) -> None:
        """Put ``obj`` in the ``i``-th slot from the top (0 = TOS), releasing the old value.

        Only for swapping a callable for an equivalent one right before its CALL runs."""
        idx = self._end() - 1 - i
        old = self._slots[idx]
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
        self._slots[idx] = id(obj)
        if old:
            ctypes.pythonapi.Py_DecRef(ctypes.c_void_p(old))

    def values(self) -> list[Any]:
        """The whole stack, bottom first."""
        return [self.peek(i) for i in range(self.depth() - 1, -1, -1)]


def stack_depth(frame: types.FrameType) -> int:
    """Depth of ``frame``'s value stack (inside a trace callback only)."""
    return StackView(frame).depth()


def read_stack(frame: types.FrameType) -> list[Any]:
    """The value stack of ``frame`` bottom first (inside a trace callback only)."""
    return StackView(frame).values()


def _self_test() -> None:
    """Trace a probe and check that NULL, a global and a constant sit where the version puts
    them."""
    seen: list[list[Any]] = []

    def probe(a: object) -> object:
        return len((a, 7))

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not probe.__code__:
            return None
        if event == "call":
            opcode_trace_on(frame, tracer)
        elif event == "opcode":
            seen.append(read_stack(frame))
        elif event == "return":
            opcode_trace_off(frame)
        return tracer

    old = gettrace()
    settrace(tracer)
    try:
        probe("x")
    finally:
        settrace(old)
    expected = [len, NULL, "x", 7] if INTERP.null_above_callable else [NULL, len, "x", 7]
    if not any(s[:4] == expected for s in seen):
        raise ImportError(
            f"magpy-monitor: the interpreter frame layout is not the CPython {INTERP.version} one "
            f"(probe saw {seen!r}); a debug or patched build?"
        )


_self_test()
