"""CPython 3.13: 3.12's renames, plus what 3.13 changed.

- A call's NULL sits above the callable (``LOAD_GLOBAL`` pushes ``[g, NULL]``, a non-method
  ``LOAD_METHOD`` pushes ``[attr, NULL]``); ``CALL_KW`` takes the keyword names from the stack.
- An exhausted ``FOR_ITER`` skips ``END_FOR`` and the ``POP_TOP`` after it.
- ``stacktop`` reads -1 during a callback. All trace events come from ``sys.monitoring``
  under a tool id of MagPy's own (``events.py``), as on 3.12: through ``sys.settrace``, an
  untraced frame of the same code in another thread turns opcode events off for the traced one.
"""

from __future__ import annotations

from .interp import Interpreter
from .py312 import rename_312

__all__ = ["INTERP"]

INTERP = Interpreter(
    version=(3, 13),
    stacktop_in_frame=False,
    precall=False,
    null_above_callable=True,
    kwnames_on_stack=True,
    for_iter_exit_skip=2,
    jump_if_true="POP_JUMP_IF_TRUE",
    events_from_monitoring=True,
    instance_dict_tags_exact=False,
    c_snapshot_check=True,
    compare_bool_bit=16,
    send_pops_receiver=False,
    stop_iteration_event=True,
    prefix_has_own_event=True,
    recursion_limit_counts_c_calls=False,
    rename=rename_312,
)
