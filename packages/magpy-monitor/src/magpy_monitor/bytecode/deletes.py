"""``del`` of a cell variable (DELETE_DEREF) and of a module global (DELETE_GLOBAL)."""

from __future__ import annotations

from magpy_refgraph import Global

from ..core.capture import Write
from ..core.frame import LAZY, FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import UNBOUND, Val

__all__: list[str] = []


@opcode("DELETE_DEREF")
def _delete_deref(m: FrameMonitor, inst: Inst) -> None:
    """``del v`` of a variable a nested function closes over: the cell is emptied."""
    box = m.cell(inst.arg)
    if box.scope is not None:
        raise m.unsupported(f"del of an outer function's variable {box.name!r}")
    if box.content is LAZY:
        box.content = m.lazy_local(box.name)
    if box.content is UNBOUND:
        raise m.unsupported(f"del of the unbound variable {box.name!r}")
    box.content = UNBOUND
    m.stored.add(inst.arg)


@opcode("DELETE_GLOBAL")
def _delete_global(m: FrameMonitor, inst: Inst) -> None:
    """``global g; del g``: the binding must exist at entry (read, so guarded), and the mock
    deletes it again."""
    scope = m.frame.f_globals
    name = inst.argval
    if name not in scope:
        raise m.unsupported(f"del of the missing global {name!r}")
    cap = m.cap
    access = Global(name, scope=scope)
    cap.observe_type(cap.root(access, scope[name]))  # (a guard that needs the binding)
    if (cap.graph.root, access) in cap.written:
        raise m.unsupported(f"del of the global {name!r} the run assigned")
    cap.graph.delete(cap.graph.root, access)
    cap.written.add((cap.graph.root, access))
    cap.writes.append(Write("delglobal", Val(scope, const=True), name, None))
    m.expect_outputs(inst, 0, lambda real: [])
