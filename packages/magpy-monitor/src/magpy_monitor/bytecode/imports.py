"""``import`` statements inside the monitored code: IMPORT_NAME and IMPORT_FROM (IMPORT_STAR is
not supported)."""

from __future__ import annotations

import types
from typing import Any

from magpy_refgraph import Const

from ..core.attributes import load_attr
from ..core.frame import FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import Val
from ..core.valuetypes import FROZEN_MODULE_ROOTS

__all__: list[str] = []


@opcode("IMPORT_STAR")
def _unsupported_scope(m: FrameMonitor, inst: Inst) -> None:
    raise m.unsupported(f"{inst.opname} is not supported yet")


@opcode("IMPORT_NAME")
def _import_name(m: FrameMonitor, inst: Inst) -> None:
    """``import x`` inside a function: the module object from ``sys.modules``.

    torch's and the stdlib's modules are constants; any other module is an entry object reached
    through a constant root, so what the program reads from it is guarded like a global.
    """
    m.pop(2)

    def make(real: list[Any]) -> list[Val]:
        mod = real[0]
        if not isinstance(mod, types.ModuleType):
            raise m.unsupported(f"import gave a {type(mod).__name__}, not a module")
        if mod.__name__.split(".")[0] in FROZEN_MODULE_ROOTS:
            return [m.cap.const(mod)]
        return [m.cap.root(Const(mod), mod)]

    m.expect_outputs(inst, 1, make)


@opcode("IMPORT_FROM")
def _import_from(m: FrameMonitor, inst: Inst) -> None:
    """``from x import name``: an attribute read of the module (which stays on the stack)."""
    base = m.stack[-1]
    name = inst.argval
    m.expect_outputs(inst, 1, lambda real: [load_attr(m, base, name, real[-1])])
