"""Instrumented code objects (``magpy_codegen.instrument``): exception handling as the original.

A site's variant may jump into the middle of a ``try`` or ``with`` body from outside it (an entry
site whose record ends before a call inside the body). The handler that covers the rest of the
body must still unwind to its original depth: a wrong depth leaves stale stack slots under the
handler, and the frame then frees them twice (issue 35's segfault under
``@contextlib.contextmanager``).
"""

from __future__ import annotations

import contextlib
import dis
import itertools
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from magpy_codegen import Layout, instrument
from magpy_monitor import INTERP


def _handlers(code: types.CodeType) -> list[Any]:
    return list(dis._parse_exception_table(code))  # type: ignore[attr-defined]


def _covering(code: types.CodeType, offset: int) -> tuple[int, bool] | None:
    """(depth, lasti) of the innermost handler covering ``offset``, None outside every range."""
    for entry in _handlers(code):
        if entry.start <= offset < entry.end:
            return (entry.depth, entry.lasti)
    return None


_CALL_STARTS = INTERP.call_ops(1)[0][0]  # (3.11's PRECALL, else CALL)


def _first_call_in_a_handler_range(code: types.CodeType) -> dis.Instruction:
    for ins in dis.get_instructions(code):
        if ins.opname == _CALL_STARTS and _covering(code, ins.offset) is not None:
            return ins
    raise AssertionError(f"{code.co_qualname} has no call inside a try body")


def _entry(code: types.CodeType) -> int:
    skip = {"RESUME", "MAKE_CELL", "COPY_FREE_VARS", "NOP"}
    return next(i.offset for i in dis.get_instructions(code) if i.opname not in skip)


def _nulls_before(code: types.CodeType, offset: int) -> tuple[bool, ...]:
    """NULL flags of the stack before the call at ``offset``, bottom first, for straight-line
    code that ends in a one-argument call of a global (``NULL, f, x``; 3.13: ``f, NULL, x``)."""
    depth = sum(
        dis.stack_effect(i.opcode, i.arg if i.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        for i in dis.get_instructions(code)
        if i.offset < offset
    )
    call = (False, True, False) if INTERP.null_above_callable else (True, False, False)
    return (False,) * (depth - 3) + call


def _with_body(x: Any) -> Any:
    with contextlib.suppress(KeyError):
        y = len(x)
    return y


def _try_body(x: Any) -> Any:
    try:
        y = len(x)
    except TypeError:
        y = -1
    return y


@contextlib.contextmanager
def _cm() -> Iterator[None]:
    yield


def _generator_cm_body(x: Any) -> Any:
    with _cm():
        y = len(x)
    return y


@pytest.mark.parametrize(
    "fn", [_with_body, _try_body, contextlib._GeneratorContextManager.__exit__, _generator_cm_body]
)
def test_an_entry_variant_that_jumps_into_a_try_body_keeps_every_handler_depth(
    fn: Callable[..., Any],
) -> None:
    code = fn.__code__
    call = _first_call_in_a_handler_range(code)
    nulls = _nulls_before(code, call.offset)
    spec = {_entry(code): ((1, -1, 1), 0, [Layout(end=call.offset, nulls=nulls)])}
    inst = instrument(code, spec)
    from_original = {o: n for n, o in inst.to_original.items()}
    for ins in dis.get_instructions(code):
        if ins.offset in from_original:
            assert _covering(inst.code, from_original[ins.offset]) == _covering(code, ins.offset), (
                f"{code.co_qualname} offset {ins.offset} ({ins.opname})"
            )
    assert all(e.depth + 2 <= inst.code.co_stacksize for e in _handlers(inst.code))


def test_a_site_at_a_handler_keeps_the_handler_depth_and_room_for_its_block() -> None:
    code = contextlib._GeneratorContextManager.__exit__.__code__
    handler = next(e.target for e in _handlers(code) if e.depth == 0 and not e.lasti)
    inst = instrument(code, {handler: ((1, handler, 1), 1, [Layout(end=None)])})
    assert sorted({(e.depth, e.lasti) for e in _handlers(inst.code)}) == sorted(
        {(e.depth, e.lasti) for e in _handlers(code)}
    )
    assert inst.code.co_stacksize >= code.co_stacksize + 1


def _depths(code: types.CodeType) -> dict[int, int]:
    """The stack depth before each reachable instruction (jumps and handlers followed)."""
    ins = {i.offset: i for i in dis.get_instructions(code)}
    order = sorted(ins)
    after = dict(itertools.pairwise(order))
    handlers = _handlers(code)
    depth: dict[int, int] = {}
    todo = [(order[0], 0)]
    while todo:
        off, d = todo.pop()
        if off in depth:
            continue
        depth[off] = d
        i = ins[off]
        arg = i.arg if i.opcode >= dis.HAVE_ARGUMENT else None
        for e in handlers:
            if e.start <= off < e.end:
                todo.append((e.target, e.depth + e.lasti + 1))
                break
        if i.opname in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE"):
            continue
        if i.opcode in dis.hasjrel or i.opcode in dis.hasjabs:
            todo.append((i.argval, d + dis.stack_effect(i.opcode, arg, jump=True)))
            if i.opname.startswith(("JUMP_FORWARD", "JUMP_BACKWARD")):
                continue
        if off in after:
            todo.append((after[off], d + dis.stack_effect(i.opcode, arg, jump=False)))
    return depth


def _nested_withs(x: Any) -> Any:
    with contextlib.suppress(KeyError):  # noqa: SIM117  (two ranges, one inside the other)
        with _cm():
            print("inner")
            y = len(x)
            if y > 1:
                return y
    try:
        for item in x:
            print(item)
    finally:
        y = 0
    return y


@pytest.mark.parametrize("fn", [_with_body, _try_body, _generator_cm_body, _nested_withs])
def test_a_site_at_any_statement_stays_outside_every_handler_range(
    fn: Callable[..., Any],
) -> None:
    """The block packs the stack into one tuple: inside a range, the stack would be shallower
    than the handler's depth. Each block is outside the ranges, each original instruction is
    covered as before."""
    code = fn.__code__
    depths = _depths(code)
    for line_start in (i for i in dis.get_instructions(code) if i.starts_line and i.offset):
        at = line_start.offset
        if at not in depths:
            continue
        inst = instrument(code, {at: ((1, at, 1), depths[at], [])})
        from_original = {o: n for n, o in inst.to_original.items()}
        for off in depths:
            assert _covering(inst.code, from_original[off]) == _covering(code, off), (at, off)
        for new_off in inst.injected:
            assert _covering(inst.code, new_off) is None, (at, new_off)
