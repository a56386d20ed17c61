"""The value-stack depth before each instruction of a code object, computed from its bytecode.

CPython's compiler gives every instruction one stack depth, whatever path reaches it (the
``stackdepth`` pass of the compiler relies on it; ``bytecode``, our instrumentation's builder,
keeps it). From 3.12 on, the interpreter does not store its stack pointer in the frame before
a trace or monitoring callback (``stacktop`` reads -1 on 3.13, and is stale on 3.12), but the
slots themselves are in the frame's memory: so the depth is taken from this table instead.

Jumps and exception handlers are followed with ``dis``'s own stack effects and targets; a
handler is entered at its table depth, plus the offset of the raising instruction when the
entry says ``lasti``, plus the exception.
"""

from __future__ import annotations

import dis
import itertools
import types
import weakref

__all__ = ["stack_depths"]

_ENDS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "INTERPRETER_EXIT"})
_UNCONDITIONAL = frozenset(
    {
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "JUMP",
        "JUMP_NO_INTERRUPT",
        "JUMP_ABSOLUTE",
    }
)
_JUMPS = frozenset(dis.hasjrel + dis.hasjabs)
_cache: weakref.WeakKeyDictionary[types.CodeType, dict[int, int]] = weakref.WeakKeyDictionary()


def stack_depths(code: types.CodeType) -> dict[int, int]:
    """``{offset: depth before the instruction}`` for every reachable instruction of ``code``
    (``EXTENDED_ARG`` prefixes get the depth of the instruction they extend)."""
    found = _cache.get(code)
    if found is None:
        found = _cache[code] = _compute(code)
    return found


def _compute(code: types.CodeType) -> dict[int, int]:
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    by_offset = {i.offset: i for i in insts}
    following = {a.offset: b.offset for a, b in itertools.pairwise(insts)}
    handlers = list(dis._parse_exception_table(code))  # type: ignore[attr-defined]
    depth: dict[int, int] = {}
    todo = [(insts[0].offset, 0)] if insts else []
    while todo:
        offset, d = todo.pop()
        known = depth.get(offset)
        if known is not None:
            continue
        depth[offset] = d
        ins = by_offset[offset]
        for entry in handlers:
            if entry.start <= offset < entry.end:
                todo.append((entry.target, entry.depth + entry.lasti + 1))
                break
        if ins.opname in _ENDS:
            continue
        arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
        if ins.opcode in _JUMPS:
            todo.append((ins.argval, d + dis.stack_effect(ins.opcode, arg, jump=True)))
            if ins.opname in _UNCONDITIONAL:
                continue
        nxt = following.get(offset)
        if nxt is not None:
            effect = dis.stack_effect(ins.opcode, arg, jump=False)
            if ins.opname == "RETURN_GENERATOR":  # resumed with the value of the first send
                effect = max(effect, 1)  # (3.12's dis counts 0; 3.13's 1)
            todo.append((nxt, d + effect))
    return depth
