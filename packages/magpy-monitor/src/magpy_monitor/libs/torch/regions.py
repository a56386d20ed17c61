"""``torch.compiler.nested_compile_region(fn)``: the operations of one call of ``fn``, marked.

The wrapper torch puts around ``fn`` calls ``invoke_subgraph_placeholder(fn, *args)``, which
in eager just calls ``fn``. That call is followed through (the placeholder's frame runs
natively, untraced; ``fn``'s frame is followed as the call's), and once ``fn`` has returned
each graph node made during the call gets ``meta[REGION]``: ``(call id, fn's qualified
name)``. An enclosing region's call returns later and marks its nodes again: the outermost
region wins (as torch unwraps a marked function marked again). A call that does not return
into this record (a break inside it, an exception) marks nothing.

Nothing else changes here: the graph holds the region's operations inline, as it did before,
and computes the same values. ``magpy_codegen`` may outline each marked call into one
``invoke_subgraph`` of a subgraph shared by every structurally identical call, so that the
backend compiles it once (``magpy_codegen._regions``), where that is sound.
"""

from __future__ import annotations

import itertools
import types
from typing import Any

from torch._higher_order_ops.invoke_subgraph import invoke_subgraph_placeholder

from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.values import Val
from ...pyobj.instances import follow

__all__ = ["REGION"]

REGION = "magpy_region"  # node meta: (region call id, the marked function's qualified name)

_call_ids = itertools.count()


def _is_placeholder(c: Call) -> bool:
    return c.fn is invoke_subgraph_placeholder and bool(c.pos)


@call_rule("compile region placeholder", _is_placeholder)
def _region(m: FrameMonitor, inst: Inst, c: Call) -> Call | None:
    """``invoke_subgraph_placeholder(fn, *args, **kwargs)``: followed as ``fn(*args,
    **kwargs)``, its graph nodes marked as one region call."""
    fn = c.pos[0].obj
    if type(fn) is not types.FunctionType:
        return c  # (followed as plain Python: the placeholder calls it)
    cap = m.cap
    cap.observe_identity(c.pos[0])
    rec = cap.rec
    start = len(rec.created)
    call_id = next(_call_ids)
    name = fn.__qualname__

    def outputs(real: list[Any], result: Val) -> list[Val]:
        for node in rec.created[start:]:
            if node.graph is rec.graph:
                node.meta[REGION] = (call_id, name)
        return [result]

    follow(m, inst, fn, c.pos[1:], 1, outputs, kwargs=c.kwargs)
    return None
