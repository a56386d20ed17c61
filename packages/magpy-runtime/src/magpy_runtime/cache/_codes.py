"""The instrumented code objects of the frame hook, and when a function holds one.

A function with sites (``_sites``) runs an instrumented copy of its code. The frame hook is
pure Python, so the only way to make CPython start a frame on another code object is to set the
function's ``__code__`` — which the program can read (``f.__code__ is code``, ``co_code``,
``co_names``, ``dis.dis(f)``, ``f.__code__ == g.__code__``, ``inspect.getclosurevars``, copies
made with ``types.FunctionType(f.__code__, ...)``). MagPy's work must not show there, so:

- **A function holds its instrumented code only while a compiled call runs** (in any thread:
  ``activate``/``deactivate`` count them). The first call to begin installs the current
  generation on every registered function, the last to end puts the original code back; a
  generation made during a call is installed at once, one made outside is only kept
  (``CodeState.current``). Outside compiled calls the program sees its own code objects, by
  identity. Frames already running keep the code they started with, so a call that ends while
  another thread's frame runs an instrumented generation does not disturb it.
- **Inside a compiled call** the program's own reads of a function's ``__code__`` (monitored:
  every read of a segment being recorded, and so every read a record replays) give the original
  code: the monitor's attribute rule for ``__code__`` puts the original on the frame's stack and
  in the record (``magpy_monitor`` ``core/attributes.py``, "function code"), and guards accept
  either (``CodeOf``).

Why not run the instrumented code without ever storing it on the function: the callee of a
break is entered by the program's own call (``self.block(x)`` goes through
``Module.__call__``), never through MagPy, and without a C frame-evaluation hook nothing else
decides which code a new frame runs. What is left visible is said in docs/frame-hook.md
(section 7): native code that reads a function's code object while a compiled call runs (a
break instruction such as ``dis.dis(f)``, a site that runs eagerly, another thread).

Installing costs a ``__code__`` store per instrumented function at the start and at the end of
each outermost compiled call in split mode (about 60 ns each).
"""

from __future__ import annotations

import dis
import itertools
import threading
import types
import weakref
from typing import Any

import attrs

from magpy_codegen import Instrumented, Layout, instrument
from magpy_monitor import ORIGINAL_CODE, CodeInfo
from magpy_refgraph import MagPyError

from .._logging import log_topic
from ._sitestate import SiteState

__all__ = ["ENTRY", "REGISTRY", "CodeState", "first_offset", "installed", "uninstalled"]

ENTRY = -1  # site key of a function's entry (before its first traceable instruction)


@attrs.define(eq=False)
class CodeState:
    """Everything MagPy did to one original code object."""

    key: int
    original: types.CodeType
    functions: list[weakref.ref[types.FunctionType]] = attrs.field(factory=list)
    sites: dict[int, SiteState] = attrs.field(factory=dict)
    generation: int = 0
    variants: dict[int, dict[int, list[Layout]]] = attrs.field(factory=dict)
    current: Instrumented | None = None
    # each iteration of its range() loops is a segment of its own (a trip count that changes
    # from call to call would otherwise make a record per count)
    split_loops: bool = False
    # the paths its new sites start dynamic in (``split_loops_of``)
    dynamic_paths: set[Any] = attrs.field(factory=set)

    def add_function(self, fn: types.FunctionType) -> None:
        if not any(r() is fn for r in self.functions):
            # (closures of one code come and go: the references to dropped ones go too)
            self.functions[:] = [r for r in self.functions if r() is not None]
            self.functions.append(weakref.ref(fn))
            if self.current is not None and REGISTRY.active:
                fn.__code__ = self.current.code

    def reinstrument(self) -> None:
        """Build a new generation of the instrumented code (installed while a call runs)."""
        self.generation += 1
        gen = self.generation
        spec = {}
        for off, site in self.sites.items():
            at = first_offset(self.original) if off == ENTRY else off
            spec[at] = ((self.key, off, gen), site.depth, list(site.layouts))
        self.variants[gen] = {off: list(site.layouts) for off, site in self.sites.items()}
        inst = instrument(self.original, spec)
        self.current = inst
        info = CodeInfo(
            self.original,
            inst.injected,
            inst.to_original,
            {v: k for k, v in inst.site_offsets.items()},
        )
        REGISTRY.infos[inst.code] = info
        ORIGINAL_CODE[inst.code] = self.original  # (guards on a function's code accept it)
        if REGISTRY.active:
            self.install()
        log_topic(
            "records",
            "instrumented %s (generation %d, %d sites)",
            self.original.co_qualname,
            gen,
            len(self.sites),
        )

    def install(self) -> None:
        """Give every registered function the current generation (a compiled call runs)."""
        if self.current is None:
            return
        code = self.current.code
        for ref in self.functions:
            fn = ref()
            if fn is not None and fn.__code__ is not code and _mine(fn.__code__, self.original):
                fn.__code__ = code

    def uninstall(self) -> None:
        """Give every registered function its original code back (no compiled call runs)."""
        for ref in self.functions:
            fn = ref()
            code = fn.__code__ if fn is not None else self.original
            if fn is not None and code is not self.original and _mine(code, self.original):
                fn.__code__ = self.original

    def restore(self) -> None:
        self.uninstall()
        self.current = None


def _mine(code: types.CodeType, original: types.CodeType) -> bool:
    """``code`` is ``original`` or one of MagPy's generations of it (a program that stored
    a code object of its own into the function keeps it)."""
    return code is original or ORIGINAL_CODE.get(code) is original


def first_offset(code: types.CodeType) -> int:
    for ins in dis.get_instructions(code):
        if ins.opname not in ("RESUME", "MAKE_CELL", "COPY_FREE_VARS", "NOP", "EXTENDED_ARG"):
            return ins.offset
    raise MagPyError(f"{code.co_qualname} has no instructions")


class _Registry:
    def __init__(self) -> None:
        self.by_code: dict[types.CodeType, CodeState] = {}
        self.by_key: dict[int, CodeState] = {}
        self.infos: weakref.WeakKeyDictionary[types.CodeType, CodeInfo] = (
            weakref.WeakKeyDictionary()
        )
        self.lock = threading.RLock()
        # keys are never reused: after a reset, a frame still running an old generation
        # must not find another function's site under its key
        self.keys = itertools.count(1)
        self.epoch = 0  # restore_all() count: activations of an older epoch are stale
        self.active = 0  # compiled calls running (all threads): instrumented code installed

    def state(self, code: types.CodeType) -> CodeState:
        info = self.infos.get(code)
        original = info.original if info is not None else code
        st = self.by_code.get(original)
        if st is None:
            st = CodeState(next(self.keys), original)
            self.by_code[original] = st
            self.by_key[st.key] = st
        return st


REGISTRY = _Registry()


def installed() -> None:
    """A compiled call begins: the first one installs every function's instrumented code."""
    with REGISTRY.lock:
        REGISTRY.active += 1
        if REGISTRY.active == 1:
            for st in REGISTRY.by_code.values():
                st.install()


def uninstalled() -> None:
    """A compiled call ends: the last one puts every original code back."""
    with REGISTRY.lock:
        REGISTRY.active -= 1
        if REGISTRY.active == 0:
            for st in REGISTRY.by_code.values():
                st.uninstall()
