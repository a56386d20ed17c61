"""Variables: constants, fast locals, closure cells and globals (LOAD_*/STORE_*/DELETE_FAST).

A fast local's shadow is kept in ``FrameMonitor.fast``; a cell's in its ``CellBox``. A global
(or builtin) read becomes an entry path of the record (``Global``/``Builtin``), guarded like
any value read from outside; torch's and the stdlib's own globals are constants.
"""

from __future__ import annotations

from typing import Any

from magpy_refgraph import Builtin, Cell, Const, Global, GuardKind, Outcome

from ..core.frame import LAZY, FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import UNBOUND, Val
from ..core.valuetypes import FROZEN_MODULE_ROOTS
from ..cpython.frameio import NULL
from .closures import store_outer_cell

__all__ = ["Defines", "global_value", "load_deref"]

_MUTABLE = (list, dict, set, bytearray)


@opcode("LOAD_CONST")
def _load_const(m: FrameMonitor, inst: Inst) -> None:
    m.push(Val(m.code.co_consts[inst.arg], const=True))


@opcode("LOAD_FAST")
def _load_fast(m: FrameMonitor, inst: Inst) -> None:
    m.push(m.load_fast(inst.arg))


@opcode("STORE_FAST")
def _store_fast(m: FrameMonitor, inst: Inst) -> None:
    m.fast[inst.arg] = m.pop()[0]
    m.stored.add(inst.arg)


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
    name = m.code.co_names[inst.arg >> 1]
    null = inst.arg & 1
    globals_ = m.frame.f_globals

    def make(real: list[Any]) -> list[Val]:
        val = global_value(m, globals_, name, real[-1])
        return [Val(NULL, const=True), val] if null else [val]

    m.expect_outputs(inst, 1 + null, make)


def global_value(m: FrameMonitor, globals_: dict[str, Any], name: str, obj: Any) -> Val:
    """The shadow of global (or builtin) ``name``, whose real value is ``obj``."""
    module = str(globals_.get("__name__", ""))
    if module.split(".")[0] in FROZEN_MODULE_ROOTS and not isinstance(obj, _MUTABLE):
        return m.cap.const(obj)  # torch's (and the stdlib's) own globals are stable
    if name in globals_:
        return m.cap.root(Global(name, scope=globals_), obj)
    _not_shadowed(m, globals_, name)
    return m.cap.root(Builtin(name), obj)


class Defines:
    """``name in scope``: the check that a module global does not shadow a builtin, or that a
    dict from outside still lacks a key the program did not find (``exceptions``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, scope: dict[str, Any]) -> bool:
        return self.name in scope

    def __eq__(self, other: object) -> bool:
        return type(other) is Defines and other.name == self.name

    def __hash__(self) -> int:
        return hash((Defines, self.name))

    def __repr__(self) -> str:
        return f"defines({self.name!r})"


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
    m.cap.set_global(m.frame.f_globals, m.code.co_names[inst.arg], value)
    m.expect_outputs(inst, 0, lambda real: [])
