"""CPython 3.12: what it renamed, merged or split, put back into the neutral vocabulary.

- ``LOAD_ATTR`` with the low bit of its argument is 3.11's ``LOAD_METHOD`` (``[meth, self]`` or
  ``[NULL, attr]``); ``LOAD_FAST_CHECK`` is ``LOAD_FAST``; a ``POP_JUMP_IF_*`` keeps its
  direction in the name, as 3.11 spelled it.
- ``CALL_INTRINSIC_1``/``_2`` name the instruction each intrinsic replaced (``UNARY_POSITIVE``,
  ``LIST_TO_TUPLE``, ``IMPORT_STAR``, ``PRINT_EXPR``, ``ASYNC_GEN_WRAP``,
  ``PREP_RERAISE_STAR``); the others (PEP 695's type parameters and aliases) keep the
  interpreter's own ``INTRINSIC_*`` name, which no handler knows (a break that names it).
- No ``PRECALL``; an exhausted ``FOR_ITER`` skips the ``END_FOR`` at its target; the stack
  pointer is not in the frame during a callback.
- All trace events (calls, returns, exceptions, instructions) come from ``sys.monitoring``
  under MagPy's own tool id (``events.py``), as on 3.13: ``sys.settrace`` runs on it too, and
  instruments LINE and JUMP events in every code object while installed (measured: the
  monitored run 2.8x 3.11's per instruction; 1.1x without it); its ``f_trace_opcodes`` path
  needs a frame to set the flag before ``sys.settrace`` (priming) and then turns instruction
  events on for *every* code object.
"""

from __future__ import annotations

import dis

from .interp import Interpreter

__all__ = ["INTERP", "rename_312"]

_INTRINSIC_1 = {
    1: "PRINT_EXPR",
    2: "IMPORT_STAR",
    3: "INTRINSIC_STOPITERATION_ERROR",
    4: "ASYNC_GEN_WRAP",
    5: "UNARY_POSITIVE",
    6: "LIST_TO_TUPLE",
    7: "INTRINSIC_TYPEVAR",
    8: "INTRINSIC_PARAMSPEC",
    9: "INTRINSIC_TYPEVARTUPLE",
    10: "INTRINSIC_SUBSCRIPT_GENERIC",
    11: "INTRINSIC_TYPEALIAS",
}
_INTRINSIC_2 = {
    1: "PREP_RERAISE_STAR",
    2: "INTRINSIC_TYPEVAR_WITH_BOUND",
    3: "INTRINSIC_TYPEVAR_WITH_CONSTRAINTS",
    4: "INTRINSIC_SET_FUNCTION_TYPE_PARAMS",
    5: "INTRINSIC_SET_TYPEPARAM_DEFAULT",  # (3.13)
}
_JUMPS = {
    "POP_JUMP_IF_TRUE": "IF_TRUE",
    "POP_JUMP_IF_FALSE": "IF_FALSE",
    "POP_JUMP_IF_NONE": "IF_NONE",
    "POP_JUMP_IF_NOT_NONE": "IF_NOT_NONE",
}


def rename_312(ins: dis.Instruction) -> tuple[str, object] | None:
    """The 3.12 renames (3.13 starts from these)."""
    name = ins.opname
    if name == "LOAD_ATTR" and (ins.arg or 0) & 1:
        return "LOAD_METHOD", ins.argval
    if name == "LOAD_FAST_CHECK":
        return "LOAD_FAST", ins.argval
    if name in _JUMPS:
        way = "FORWARD" if ins.argval > ins.offset else "BACKWARD"
        return f"POP_JUMP_{way}_{_JUMPS[name]}", ins.argval
    if name == "CALL_INTRINSIC_1":
        return _INTRINSIC_1.get(ins.arg or 0, f"INTRINSIC_1_{ins.arg}"), ins.argval
    if name == "CALL_INTRINSIC_2":
        return _INTRINSIC_2.get(ins.arg or 0, f"INTRINSIC_2_{ins.arg}"), ins.argval
    return None


INTERP = Interpreter(
    version=(3, 12),
    stacktop_in_frame=False,
    precall=False,
    null_above_callable=False,
    kwnames_on_stack=False,
    for_iter_exit_skip=1,
    jump_if_true="POP_JUMP_IF_TRUE",
    events_from_monitoring=True,
    instance_dict_tags_exact=True,
    c_snapshot_check=True,
    compare_bool_bit=0,
    send_pops_receiver=False,
    stop_iteration_event=True,
    prefix_has_own_event=True,
    recursion_limit_counts_c_calls=False,
    rename=rename_312,
)
