"""Variables: constants, fast locals, closure cells and globals (LOAD_*/STORE_*/DELETE_FAST).

A fast local's shadow is kept in ``FrameMonitor.fast``; a cell's in its ``CellBox``. A global
(or builtin) read becomes an entry path of the record (``Global``/``Builtin``), guarded like
any value read from outside; torch's and the stdlib's own globals are constants.
"""

from __future__ import annotations

from typing import Any

from magpy_refgraph import Builtin, Cell, Const, Global, GuardKind, Outcome

from ..core.attributes import NamedCheck
from ..core.frame import LAZY, FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import UNBOUND, Val
from ..core.valuetypes import is_value_type
from ..cpython.current import INTERP
from ..cpython.frameio import NULL
from .closures import store_outer_cell

__all__ = ["Defines", "global_value", "load_deref"]


@opcode("LOAD_CONST")
def _load_const(m: FrameMonitor, inst: Inst) -> None:
    m.push(Val(m.code.co_consts[inst.arg], const=True))


@opcode("LOAD_FAST")
def _load_fast(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.load_fast(inst.arg))


@opcode("STORE_FAST")
def _store_fast(m: FrameMonitor, inst: Inst) -> None:
    (v,) = m.pop()
    # (a NULL stored back at an inlined comprehension's end: the local was unbound before it)
    m.fast[inst.arg] = UNBOUND if v.obj is NULL else v
    m.stored.add(inst.arg)


@opcode("LOAD_FAST_AND_CLEAR")
def _load_fast_and_clear(m: FrameMonitor, inst: Inst) -> None:
    """Save a local an inlined comprehension reuses (3.12): its value, or NULL when unbound;
    the local is unbound until the comprehension's end stores the saved value back."""
    v = m.fast[inst.arg]
    if v is LAZY:  # (a local the segment has not read yet: bound only if the real one is)
        v = UNBOUND if m.view.local(inst.arg) is NULL else m.load_fast(inst.arg)
    m.push(v if isinstance(v, Val) else Val(NULL, const=True))
    m.fast[inst.arg] = UNBOUND


@opcode("LOAD_FAST_LOAD_FAST")
def _load_fast_load_fast(m: FrameMonitor, inst: Inst) -> None:
    """Two ``LOAD_FAST`` in one instruction (3.13)."""
    m.push(m.load_fast(inst.arg >> 4), m.load_fast(inst.arg & 15))


@opcode("STORE_FAST_STORE_FAST")
def _store_fast_store_fast(m: FrameMonitor, inst: Inst) -> None:
    """Two ``STORE_FAST`` in one instruction (3.13): the top goes to the first."""
    first, second = inst.arg >> 4, inst.arg & 15
    m.fast[first] = m.pop()[0]
    m.fast[second] = m.pop()[0]
    m.stored.update((first, second))


@opcode("STORE_FAST_LOAD_FAST")
def _store_fast_load_fast(m: FrameMonitor, inst: Inst) -> None:
    """``STORE_FAST`` then ``LOAD_FAST`` in one instruction (3.13)."""
    store, load = inst.arg >> 4, inst.arg & 15
    m.fast[store] = m.pop()[0]
    m.stored.add(store)
    m.push(m.load_fast(load))


@opcode("DELETE_FAST")
def _delete_fast(m: FrameMonitor, inst: Inst) -> None:
    m.fast[inst.arg] = UNBOUND
    m.stored.add(inst.arg)


# ---------------------------------------------------------------------- cells
@opcode("LOAD_DEREF")
def load_deref(m: FrameMonitor, inst: Inst) -> None:
    box = m.cell(inst.arg)
    if box.content is LAZY:
        box.content = m.lazy_local(box.name)
    if box.content is not UNBOUND:
        m.push(box.content)
        return

    def make(real: list[Any]) -> list[Val]:
        if box.scope is None:
            raise m.unsupported(f"free variable {box.name!r} of unknown origin")
        box.content = m.cap.root(Cell(box.name, scope=box.scope), real[0])
        return [box.content]

    m.expect_outputs(inst, 1, make)


@opcode("STORE_DEREF")
def _store_deref(m: FrameMonitor, inst: Inst) -> None:
    box = m.cell(inst.arg)
    if box.scope is not None:  # a cell that outlives the run: a write-back
        store_outer_cell(m, m.fast[inst.arg], box, m.pop()[0])
        m.stored.add(inst.arg)
        return
    box.content = m.pop()[0]
    m.stored.add(inst.arg)


@opcode("LOAD_CLOSURE")
def _load_closure(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.fast[inst.arg])


# ---------------------------------------------------------------------- globals
@opcode("LOAD_GLOBAL")
def _load_global(m: FrameMonitor, inst: Inst) -> None:
    name = inst.argval
    null = inst.arg & 1
    globals_ = m.frame.f_globals

    def make(real: list[Any]) -> list[Val]:
        if not null:
            return [global_value(m, globals_, name, real[0])]
        if INTERP.null_above_callable:
            return [global_value(m, globals_, name, real[0]), Val(NULL, const=True)]
        return [Val(NULL, const=True), global_value(m, globals_, name, real[1])]

    m.expect_outputs(inst, 1 + null, make)


def global_value(m: FrameMonitor, globals_: dict[str, Any], name: str, obj: Any) -> Val:
    """The shadow of global (or builtin) ``name``, whose real value is ``obj``."""
    # (torch's and the stdlib's own globals too: a library changes its own state, e.g.
    # ``parametrize._cache_enabled`` under ``parametrize.cached()``, and programs patch them)
    if name in globals_:
        found = m.cap.root(Global(name, scope=globals_), obj)
        if type(obj) is frozenset and not is_value_type(obj):
            # (a frozenset of classes or functions, pytree's BUILTIN_TYPES: which one it is
            # decides its contents, which are constants)
            m.cap.observe_identity(found)
            return m.cap.const(obj)
        return found
    _not_shadowed(m, globals_, name)
    return m.cap.root(Builtin(name), obj)


class Defines(NamedCheck):
    """``name in scope``: the check that a module global does not shadow a builtin, or that a
    dict from outside still lacks a key the program did not find (``exceptions``)."""

    __slots__ = ()
    label = "defines"

    def __call__(self, scope: dict[str, Any]) -> bool:
        return self.name in scope


def _not_shadowed(m: FrameMonitor, globals_: dict[str, Any], name: str) -> None:
    """CPython finds builtin ``name`` because the module's globals lack it: guard that they
    still do (a global ``len`` defined later shadows it)."""
    cap = m.cap
    known = cap.known(globals_)
    if known is not None and not known.external:
        return  # a namespace the run made
    node = cap.root(Const(globals_), globals_).node
    if node is not None:
        cap.graph.observe(node, GuardKind.CUSTOM, Outcome(Defines(name), False))


@opcode("STORE_GLOBAL")
def _store_global(m: FrameMonitor, inst: Inst) -> None:
    """``global g; g = value``: a write into the module's globals, replayed by the mock."""
    (value,) = m.pop()
    m.cap.set_global(m.frame.f_globals, inst.argval, value)
    m.expect_outputs(inst, 0, lambda real: [])
