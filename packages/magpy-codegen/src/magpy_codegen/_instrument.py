"""Instrumented code objects: the original code plus *site blocks* that resume in the same frame.

A site sits right before an original instruction (its offset in the original code names it).
Its block packs the live stack into a tuple, calls ``__magpy_site(key, stack)`` (a builtin the
runtime installs) and dispatches on the returned ``(variant, values)``:

- variant 0 (miss, or the runtime inactive): restore the stack and run the original instruction;
- variant k: a record's mock ran; store the locals it produced, rebuild the stack at the record's
  end (``PUSH_NULL`` where the layout has NULL slots), and jump to the end instruction — or
  return the value, for records that end the function.

Jumps that targeted the original instruction now reach the site block; exception-table ranges
are kept by the ``bytecode`` package (3.11 exception handling is table-driven, so jumping into
the middle of a ``with`` or ``try`` body with the right stack depth is legal). The block adds no
locals, so cell and free-variable indices are untouched. See DESIGN.md section 3.7.
"""

from __future__ import annotations

import dis
import types
from typing import Any

import attrs
from bytecode import Bytecode, Compare, ControlFlowGraph, Instr, Label
from bytecode.instr import (  # defined here; not in bytecode's __all__
    CellVar,
    FreeVar,
    TryBegin,
    TryEnd,
)

from magpy_monitor import INTERP
from magpy_refgraph import InternalError

__all__ = ["Instrumented", "Layout", "instrument", "site_name"]

SITE_FUNCTION = "__magpy_site"


def site_name() -> str:
    """The builtin name the site blocks call."""
    return SITE_FUNCTION


@attrs.frozen
class Layout:
    """How a record's mock hands its results back to the frame.

    ``end``: original offset of the instruction to continue at, or None for "return the value".
    ``stores``: local names to store, in order (``(name, kind)``, kind ``fast``/``cell``/``free``,
    or ``deleted``: a local the segment deleted, unbound again after the store).
    ``nulls``: one flag per stack slot at ``end`` (bottom first): True for a NULL slot.
    """

    end: int | None
    stores: tuple[tuple[str, str], ...] = ()
    nulls: tuple[bool, ...] = ()


@attrs.define
class Instrumented:
    """An instrumented code object and the maps between its offsets and the original's."""

    code: types.CodeType
    original: types.CodeType
    to_original: dict[int, int]  # new offset -> original offset (original instructions only)
    injected: frozenset[int]  # new offsets of instructions the site blocks added
    site_offsets: dict[int, int]  # original site offset -> new offset of its block's first instr


def _real_instrs(bc: Bytecode) -> list[Instr]:
    return [i for i in bc if isinstance(i, Instr)]


def _dis_offsets(code: types.CodeType) -> list[tuple[int, str]]:
    return [(i.offset, i.opname) for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]


def _store(name: str, kind: str) -> list[Instr]:
    if kind == "cell":
        return [Instr("STORE_DEREF", CellVar(name))]
    if kind == "free":
        return [Instr("STORE_DEREF", FreeVar(name))]
    if kind == "deleted":  # a local the segment deleted (stored first: it may be unbound)
        return [Instr("STORE_FAST", name), Instr("DELETE_FAST", name)]
    return [Instr("STORE_FAST", name)]


def _variant_block(layout: Layout, pre: dict[int, Label]) -> list[Any]:
    out: list[Any] = [Instr("POP_TOP")]  # the variant number
    if layout.end is None:  # (value, cells) where the segment wrote cells, else the value
        if layout.stores:
            out += [Instr("UNPACK_SEQUENCE", 2), Instr("SWAP", 2)]
            out += [Instr("UNPACK_SEQUENCE", len(layout.stores))]
            out += [i for n, k in layout.stores for i in _store(n, k)]
        return [*out, Instr("RETURN_VALUE")]
    out += [Instr("UNPACK_SEQUENCE", 2), Instr("UNPACK_SEQUENCE", len(layout.stores))]
    out += [i for n, k in layout.stores for i in _store(n, k)]
    k = 0
    for is_null in layout.nulls:
        if is_null:
            out += [Instr("PUSH_NULL"), Instr("SWAP", 2)]
        else:
            out += [
                Instr("COPY", 1),
                Instr("LOAD_CONST", k),
                Instr("BINARY_SUBSCR"),
                Instr("SWAP", 2),
            ]
            k += 1
    out += [Instr("POP_TOP"), Instr("JUMP_FORWARD", pre[layout.end])]
    return out


def _site_block(
    key: Any, depth: int, variants: list[Layout], orig: Label, pre: dict[int, Label]
) -> list[Any]:
    block: list[Any] = [
        Instr("BUILD_TUPLE", depth),
        Instr("LOAD_GLOBAL", (True, SITE_FUNCTION)),  # (a NULL below or above it)
        Instr("LOAD_CONST", key),
        Instr("COPY", 4),
        *(Instr(name, n) for name, n in INTERP.call_ops(2)),
        Instr("SWAP", 2),
        Instr("POP_TOP"),
        Instr("UNPACK_SEQUENCE", 2),
    ]
    labels = [Label() for _ in variants]
    for number, label in enumerate(labels, start=1):
        block += [
            Instr("COPY", 1),
            Instr("LOAD_CONST", number),
            Instr("COMPARE_OP", Compare.EQ),
            Instr(INTERP.jump_if_true, label),
        ]
    block += [Instr("POP_TOP"), Instr("UNPACK_SEQUENCE", depth), Instr("JUMP_FORWARD", orig)]
    for label, layout in zip(labels, variants, strict=True):
        block += [label, *_variant_block(layout, pre)]
    return block


def _fix_jump_directions(items: list[Any]) -> None:
    where = {id(x): i for i, x in enumerate(items) if isinstance(x, Label)}
    for i, x in enumerate(items):
        if isinstance(x, Instr) and x.name in ("JUMP_FORWARD", "JUMP_BACKWARD"):
            target = where[id(x.arg)]
            name = "JUMP_FORWARD" if target > i else "JUMP_BACKWARD"
            if name != x.name:
                items[i] = Instr(name, x.arg, location=x.location)


def instrument(
    code: types.CodeType, sites: dict[int, tuple[Any, int, list[Layout]]]
) -> Instrumented:
    """Insert a site block before each original offset in ``sites``.

    ``sites[offset] = (key, stack_depth, layouts)``: the constant passed to ``__magpy_site``,
    the stack depth there (no NULL slots allowed), and the record layouts it can dispatch to.
    """
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    real = _real_instrs(bc)
    offsets = _dis_offsets(code)
    if len(real) != len(offsets) or any(
        r.name != o[1] for r, o in zip(real, offsets, strict=False)
    ):
        raise InternalError(f"cannot align the instructions of {code.co_qualname}")
    offset_of = {id(r): o[0] for r, o in zip(real, offsets, strict=True)}
    ends = {lay.end for _, _, lays in sites.values() for lay in lays if lay.end is not None}
    pre = {p: Label() for p in (set(sites) | ends)}
    items: list[Any] = []
    injected_ids: set[int] = set()
    handlers = _Handlers()
    for x in bc:
        p = offset_of.get(id(x)) if isinstance(x, Instr) else None
        if p is not None and p in pre:
            items.append(pre[p])
            if p in sites:
                key, depth, layouts = sites[p]
                orig = Label()
                block = _site_block(key, depth, layouts, orig, pre)
                injected_ids.update(id(b) for b in block if isinstance(b, Instr))
                items += [*handlers.leave(), *block, orig, *handlers.reenter()]
        items.append(handlers.follow(x))
    _fix_jump_directions(items)
    injected_ids |= {id(x) for x in items if isinstance(x, Instr) and id(x) not in offset_of}
    new_bc = Bytecode(items)
    new_bc._copy_attr_from(bc)
    new_code = _fit_locations(
        new_bc.to_code(
            stacksize=_stacksize(new_bc, code, sites), compute_exception_stack_depths=False
        )
    )
    _check_handler_depths(new_code)
    return _maps(code, new_code, items, offset_of, injected_ids, set(sites))


class _Handlers:
    """Keeps site blocks outside every exception-table range.

    A block packs the whole stack into one tuple, so inside it the stack can be shallower than
    the depth the covering handler unwinds to: an exception there (a ``KeyboardInterrupt`` in
    ``__magpy_site``) would run the handler on slots that are not there. So the range is ended
    before each block and begun again, with the same handler, depth and lasti flag, right after
    it. 3.11's table is flat: at most one range covers a point.
    """

    def __init__(self) -> None:
        self.active: TryBegin | None = None
        self.renamed: dict[int, TryBegin] = {}  # id(original TryBegin) -> the one now open

    def follow(self, x: Any) -> Any:
        if isinstance(x, TryBegin):
            self.active = x
        elif isinstance(x, TryEnd):
            self.active = None
            return TryEnd(self.renamed.get(id(x.entry), x.entry))
        return x

    def leave(self) -> list[Any]:
        if self.active is None:
            return []
        return [TryEnd(self.renamed.get(id(self.active), self.active))]

    def reenter(self) -> list[Any]:
        if self.active is None:
            return []
        tb = self.active
        again = TryBegin(tb.target, tb.push_lasti, tb.stack_depth)
        self.renamed[id(tb)] = again
        return [again]


def _stacksize(bc: Bytecode, code: types.CodeType, sites: dict[int, Any]) -> int:
    """A ``co_stacksize`` that covers every path, also the ones ``bytecode`` does not follow.

    The handler depths stay the original's (``Bytecode.from_code`` read them from the
    original table; ``compute_exception_stack_depths=False`` keeps them). ``bytecode``'s own
    computation would lose them: a site's variant that jumps into the middle of a ``try`` or
    ``with`` body from outside it (an entry site resuming before a call inside the body)
    reaches that body first without its ``TryBegin``, so the handler block is never visited,
    keeps the placeholder depth 32768 and is left out of the stack size. An exception there
    then unwinds nothing and the handler runs on stale stack slots (a segfault). For the
    same reason the computed size can miss the handlers' own needs: the original size plus
    the most a site block adds bounds it.
    """
    computed = ControlFlowGraph.from_bytecode(bc).compute_stacksize(
        compute_exception_stack_depths=False
    )
    extra = max(
        (
            depth + len(lay.stores) + len(lay.nulls) + _BLOCK_TEMPS
            for _, depth, layouts in sites.values()
            for lay in [*layouts, Layout(None)]
        ),
        default=0,
    )
    return max(computed, code.co_stacksize + extra)


_BLOCK_TEMPS = 6  # most temporaries a site block holds above the stack it packs


def _check_handler_depths(code: types.CodeType) -> None:
    for entry in dis._parse_exception_table(code):  # type: ignore[attr-defined]
        if entry.depth + entry.lasti + 1 > code.co_stacksize:
            raise InternalError(
                f"instrumented {code.co_qualname}: a handler at depth {entry.depth} "
                f"exceeds the stack size {code.co_stacksize}"
            )


def _maps(
    code: types.CodeType,
    new_code: types.CodeType,
    items: list[Any],
    offset_of: dict[int, int],
    injected_ids: set[int],
    sites: set[int],
) -> Instrumented:
    real = [x for x in items if isinstance(x, Instr)]
    new_offsets = _dis_offsets(new_code)
    if len(real) != len(new_offsets):
        raise InternalError(f"instrumented {code.co_qualname} does not align")
    to_original: dict[int, int] = {}
    injected: set[int] = set()
    for x, (new_off, _) in zip(real, new_offsets, strict=True):
        if id(x) in injected_ids:
            injected.add(new_off)
        elif id(x) in offset_of:
            to_original[new_off] = offset_of[id(x)]
    # the first injected instruction of each block precedes the original instruction it guards
    first_of_block: dict[int, int] = {}
    prev_injected_start: int | None = None
    for x, (new_off, _) in zip(real, new_offsets, strict=True):
        if id(x) in injected_ids:
            if prev_injected_start is None:
                prev_injected_start = new_off
        else:
            orig = offset_of.get(id(x))
            if prev_injected_start is not None and orig in sites:
                first_of_block[orig] = prev_injected_start
            prev_injected_start = None
    return Instrumented(new_code, code, to_original, frozenset(injected), first_of_block)


# ------------------------------------------------------------------------------ location table
def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 64:
        out.append(0x40 | (n & 63))
        n >>= 6
    out.append(n)
    return bytes(out)


def _svarint(n: int) -> bytes:
    return _varint((-n << 1) | 1 if n < 0 else n << 1)


def _fit_locations(code: types.CodeType) -> types.CodeType:
    """``code`` with a location table that covers exactly its instructions.

    ``bytecode`` sometimes emits a table a few code units longer than ``co_code`` (when it
    resizes ``EXTENDED_ARG`` prefixes). CPython 3.11 sizes the per-instruction line array it
    builds for tracing by ``co_code`` and fills it from the table, so a longer table writes past
    that array and corrupts the heap once the code runs under ``sys.settrace``. The table is
    then re-encoded (long form) from ``co_positions()``, which stops at the last instruction.
    """
    units = len(code.co_code) // 2
    if max((end for _, end, _ in code.co_lines()), default=0) // 2 == units:
        return code
    positions = list(code.co_positions())[:units]
    table = bytearray()
    prev_line = code.co_firstlineno
    i = 0
    while i < len(positions):
        pos = positions[i]
        n = 1
        while n < 8 and i + n < len(positions) and positions[i + n] == pos:
            n += 1
        line, end_line, col, end_col = pos
        if line is None:
            table.append(0x80 | (15 << 3) | (n - 1))  # no location
        else:
            table.append(0x80 | (14 << 3) | (n - 1))  # long form
            table += _svarint(line - prev_line)
            table += _varint((end_line if end_line is not None else line) - line)
            table += _varint(col + 1 if col is not None else 0)
            table += _varint(end_col + 1 if end_col is not None else 0)
            prev_line = line
        i += n
    return code.replace(co_linetable=bytes(table))
