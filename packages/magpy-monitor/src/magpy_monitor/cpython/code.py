"""Code objects: decoded instructions, localsplus slots, argument counts.

The monitor reads a code object's instructions from the de-specialised ``co_code`` through
``dis``, renamed into the neutral vocabulary (``INTERP.rename``: 3.11's names where the
semantics are 3.11's). What the layout implies (``EXTENDED_ARG`` prefixes get the opcode event
of the instruction they extend, ``KW_NAMES`` names a constant, an exhausted ``FOR_ITER``
continues at ``INTERP.for_iter_exit`` of its target, cells and free variables follow the
varnames in ``localsplus``) is decided here, once.
"""

from __future__ import annotations

import dis
import types
from typing import Any

from .current import INTERP

__all__ = [
    "CO_VARARGS",
    "CO_VARKEYWORDS",
    "Inst",
    "decode",
    "localsplus_names",
    "positional_count",
    "prefix_event",
    "real_offset",
]

CO_VARARGS = 0x04
CO_VARKEYWORDS = 0x08


def positional_count(code: types.CodeType) -> int:
    """How many leading ``co_varnames`` hold arguments: positional and keyword-only ones,
    then ``*args`` and ``**kwargs`` when the function has them."""
    n = code.co_argcount + code.co_kwonlyargcount
    return n + bool(code.co_flags & CO_VARARGS) + bool(code.co_flags & CO_VARKEYWORDS)


class Inst:
    """A decoded instruction (``EXTENDED_ARG`` merged, ``KW_NAMES`` resolved)."""

    __slots__ = ("arg", "argval", "line", "offset", "opname")

    opname: str
    arg: int  # 0 for opcodes without an argument (dis gives None); handlers only read real args
    argval: Any
    offset: int
    line: int | None

    def __init__(self, i: dis.Instruction, line: int | None) -> None:
        arg = i.arg if i.arg is not None else 0
        self.opname, self.arg, self.argval, self.offset = i.opname, arg, i.argval, i.offset
        renamed = INTERP.rename(i)
        if renamed is not None:
            self.opname, self.argval = renamed
        self.line = line

    @classmethod
    def synthetic(cls, opname: str, offset: int) -> Inst:
        """An instruction the interpreter runs without one in the code (a handler's entry)."""
        inst = cls.__new__(cls)
        inst.opname, inst.arg, inst.argval, inst.offset, inst.line = opname, 0, None, offset, None
        return inst

    def __repr__(self) -> str:
        return f"{self.offset} {self.opname} {self.argval!r}"


_decoded: dict[types.CodeType, dict[int, Inst]] = {}


def decode(code: types.CodeType) -> dict[int, Inst]:
    """Offset -> instruction for ``code`` (decoded once from the de-specialised ``co_code``).

    In 3.11 the opcode event of an instruction with ``EXTENDED_ARG`` prefixes fires at the
    first prefix (the instruction itself gets no event), and jumps land on the prefix: so the
    prefixes' offsets map to the instruction they extend, and jump targets are normalised the
    same way (see ``real_offset``).
    """
    table = _decoded.get(code)
    if table is None:
        table = {}
        real = _real_offsets.setdefault(code, {})
        prefixes: list[int] = []
        line = code.co_firstlineno
        for ins in dis.get_instructions(code):
            line = _line_of(ins, line)
            if ins.opname == "EXTENDED_ARG":
                prefixes.append(ins.offset)
                continue
            inst = Inst(ins, line)
            table[ins.offset] = inst
            for p in prefixes:
                real[p] = ins.offset
                table[p] = inst
            prefixes = []
        for inst in set(table.values()):
            if inst.opname == "KW_NAMES":
                inst.argval = code.co_consts[inst.arg]
            elif inst.opname in _JUMPS and isinstance(inst.argval, int):
                if inst.opname == "FOR_ITER":  # (where the exhausted loop lands, maybe a prefix)
                    inst.argval = INTERP.for_iter_exit(inst.argval)
                inst.argval = real.get(inst.argval, inst.argval)
        _decoded[code] = table
    return table


_real_offsets: dict[types.CodeType, dict[int, int]] = {}
_JUMPS = frozenset(dis.opname[op] for op in dis.hasjrel + dis.hasjabs) | {
    f"POP_JUMP_{way}_IF_{cond}"
    for way in ("FORWARD", "BACKWARD")
    for cond in ("TRUE", "FALSE", "NONE", "NOT_NONE")
}


def _line_of(ins: dis.Instruction, current: int) -> int:
    """The source line of ``ins`` (3.13's ``dis`` says it in ``line_number``; before, a line's
    first instruction carries it in ``starts_line``)."""
    number = getattr(ins, "line_number", None)
    if number is not None:
        return int(number)
    starts = ins.starts_line
    return starts if isinstance(starts, int) and not isinstance(starts, bool) else current


def prefix_offsets(code: types.CodeType) -> dict[int, int]:
    """``{offset of an EXTENDED_ARG prefix: offset of the instruction it extends}``."""
    decode(code)
    return _real_offsets[code]


def prefix_event(code: types.CodeType, lasti: int) -> bool:
    """Whether the opcode event at ``lasti`` is an ``EXTENDED_ARG`` prefix's own (3.12+): the
    instruction it extends gets its own event next, and that one is the instruction's."""
    return INTERP.prefix_has_own_event and lasti in prefix_offsets(code)


def real_offset(code: types.CodeType, lasti: int) -> int:
    """The offset of the instruction executing at ``lasti`` (past any EXTENDED_ARG prefix)."""
    decode(code)
    return _real_offsets[code].get(lasti, lasti)


def localsplus_names(code: types.CodeType) -> list[str]:
    """Names of the ``localsplus`` slots in order (varnames, extra cells, free variables)."""
    varnames = code.co_varnames
    cells = [c for c in code.co_cellvars if c not in varnames]
    return [*varnames, *cells, *code.co_freevars]
