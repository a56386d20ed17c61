"""The interface to one CPython version: every interpreter fact MagPy depends on.

``INTERP`` is the implementation for the running interpreter (``py311``, ``py312`` or
``py313``), chosen once, at import. The monitor, codegen and the runtime read these attributes
and never test ``sys.version_info`` or spell a version-specific opcode themselves
(``tools/check_layering.py`` refuses both outside ``magpy_monitor/cpython``).

Instructions reach the monitor in one *neutral* vocabulary (``cpython/code.py``): 3.11's names
where the semantics are 3.11's (``LOAD_METHOD`` for 3.12's ``LOAD_ATTR`` with the method bit,
``POP_JUMP_FORWARD_IF_TRUE`` for ``POP_JUMP_IF_TRUE`` forward), and the version's own name where
the instruction is new (``BINARY_SLICE``, ``LOAD_FAST_AND_CLEAR``, ``TO_BOOL``). What differs in
the *stack* is said here: where a call's NULL sits, whether a ``PRECALL`` precedes ``CALL``.
A 3.14 port is a new module beside these (its decoder renames and its frame layout), not a new
monitor: see docs/cpython.md.
"""

from __future__ import annotations

import dataclasses
import dis
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Interpreter", "Renamed"]

T = TypeVar("T")

#: ``rename(instruction) -> (opname, argval)`` or None to keep dis's name and argval
Renamed = Callable[[dis.Instruction], "tuple[str, object] | None"]


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """What one CPython version does that MagPy has to know."""

    version: tuple[int, int]
    #: the frame's ``stacktop`` holds the stack pointer during a trace callback (3.11); later
    #: versions keep it in a register, and the depth comes from ``cpython/stackdepth.py``
    stacktop_in_frame: bool
    #: a ``PRECALL n`` precedes each ``CALL n`` (3.11)
    precall: bool
    #: the NULL of a call sits *above* the callable (3.13: ``[callable, NULL, args...]``);
    #: below it before (``[NULL, callable, args...]``)
    null_above_callable: bool
    #: ``CALL_KW`` takes the keyword names from the stack (3.13); before, ``KW_NAMES`` names them
    kwnames_on_stack: bool
    #: how many code units past a ``FOR_ITER``'s target an exhausted loop lands (3.11: 0; 3.12
    #: skips ``END_FOR``; 3.13 skips ``END_FOR`` and the ``POP_TOP`` after it)
    for_iter_exit_skip: int
    #: the names of the conditional forward jump the site blocks use
    jump_if_true: str
    #: the monitor's trace events come from ``sys.monitoring`` under MagPy's own tool id
    #: (``cpython/events.py``), not from ``sys.settrace`` (3.12+, where ``sys.settrace`` runs
    #: on ``sys.monitoring`` and instruments every code object while it is installed)
    events_from_monitoring: bool
    #: every change of an instance's ``__dict__`` gives the dict a new version tag; 3.13 stores
    #: an attribute of an object whose values live inline without a new tag (or a watcher
    #: event, on 3.13.0), so the guard memo checks such a dict's entries one by one
    instance_dict_tags_exact: bool
    #: the guard memo's C check (``_snapcheck.c``) is written for this version (its dict
    #: versions: 3.11's ``ma_version_tag``; a dict watcher from 3.12, where PEP 699 deprecated
    #: the tag)
    c_snapshot_check: bool
    #: the bit of ``COMPARE_OP``'s argument that makes it push ``bool(result)`` (3.13; 0
    #: before: a ``TO_BOOL`` or the jump itself takes the truth)
    compare_bool_bit: int
    #: a ``SEND`` whose delegate returned drops the delegate itself (3.11); later it leaves
    #: ``[delegate, value]`` for the ``END_SEND`` at its target
    send_pops_receiver: bool
    #: a generator that returns into a ``FOR_ITER`` or ``SEND`` is reported to the trace
    #: function as a ``StopIteration`` "exception" event that is never raised (3.12+'s
    #: ``STOP_ITERATION`` monitoring event); no handler runs
    stop_iteration_event: bool
    #: an ``EXTENDED_ARG`` prefix gets an opcode event of its own, and the instruction it
    #: extends gets one too (3.12+); on 3.11 only the first prefix gets one
    prefix_has_own_event: bool
    #: ``sys.getrecursionlimit()`` counts a Python function called from C (through
    #: ``functools.partial``, a slot) as two units (3.11); from 3.12 it counts Python frames
    #: only, one each, and C recursion has a limit of its own
    recursion_limit_counts_c_calls: bool
    #: version-specific renames into the neutral vocabulary
    rename: Renamed

    def call_ops(self, n: int) -> list[tuple[str, int]]:
        """The instructions that call a callable with ``n`` positional arguments."""
        return [("PRECALL", n), ("CALL", n)] if self.precall else [("CALL", n)]

    def for_iter_exit(self, target: int) -> int:
        """Where an exhausted ``FOR_ITER`` whose target is ``target`` continues."""
        return target + 2 * self.for_iter_exit_skip

    def call_split(self, parts: list[T], is_null: Callable[[T], bool]) -> tuple[T, list[T]]:
        """``(callable, arguments)`` of a call whose stack slots (bottom first) are ``parts``:
        the two call slots, then the arguments. A ``self`` in the slot beside the callable
        becomes the first argument."""
        a, b, args = parts[0], parts[1], parts[2:]
        if self.null_above_callable:  # [callable, NULL | self, args...]
            return (a, args) if is_null(b) else (a, [b, *args])
        return (b, args) if is_null(a) else (a, [b, *args])  # [NULL | method, callable | self]
