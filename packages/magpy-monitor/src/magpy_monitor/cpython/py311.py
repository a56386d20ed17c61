"""CPython 3.11: the version MagPy was written against; its names are the neutral vocabulary."""

from __future__ import annotations

import dis

from .interp import Interpreter

__all__ = ["INTERP"]


def _rename(ins: dis.Instruction) -> tuple[str, object] | None:
    return None


INTERP = Interpreter(
    version=(3, 11),
    stacktop_in_frame=True,
    precall=True,
    null_above_callable=False,
    kwnames_on_stack=False,
    for_iter_exit_skip=0,
    jump_if_true="POP_JUMP_FORWARD_IF_TRUE",
    events_from_monitoring=False,
    instance_dict_tags_exact=True,
    c_snapshot_check=True,
    compare_bool_bit=0,
    send_pops_receiver=True,
    stop_iteration_event=False,
    prefix_has_own_event=False,
    recursion_limit_counts_c_calls=True,
    rename=_rename,
)
