"""Functions made during the run (a nested ``def``, a ``lambda``) that leave it.

MAKE_FUNCTION gives a new function object on every call, and a closure holds the cells of *this*
call's frame: ``return lambda t: t * k`` must give a function that multiplies by this call's
``k``. So the mock never hands out the recorded run's function: it builds a new one from the same
code object, globals, defaults and annotations, with new cells holding the contents the run left
in them (one cell per shadow cell, so closures that share a variable share it again). A cell of
an outer function that existed before the run (a callee's closure) is the very cell.

The rebuilt function is checked against the real one when the record is made; anything the
monitor did not see (attributes stored on the function, ``functools.wraps``) makes the record
fail rather than differ.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from magpy_refgraph import Build, BuildKind, Cell, Constant, Recipe, Unsupported

from ..core.capture import Write
from ..core.frame import LAZY, CellBox, FrameMonitor, Inst
from ..core.registry import opcode
from ..core.values import UNBOUND, MadeFunction, Val

__all__ = ["frame_cells", "function_recipe", "is_made_function", "store_outer_cell"]

_local = threading.local()  # the functions whose recipes are being made (a cycle is refused)


@opcode("MAKE_FUNCTION")
def _make_function(m: FrameMonitor, inst: Inst) -> None:
    flags = inst.arg
    n = 1 + sum(bool(flags & b) for b in (0x01, 0x02, 0x04, 0x08))
    parts = m.pop(n)
    given: dict[str, Val | None] = {"defaults": None, "kwdefaults": None, "closure": None}
    i = 0
    for bit, key in (
        (0x01, "defaults"),
        (0x02, "kwdefaults"),
        (0x04, "annotations"),
        (0x08, "closure"),
    ):
        if flags & bit:
            given[key] = parts[i]
            i += 1

    def make(real: list[Any]) -> list[Val]:
        closure = given["closure"]
        cells = list(closure.items) if closure is not None else None
        made = MadeFunction(cells, given["defaults"], given["kwdefaults"])
        return [m.cap.new(real[0], payload=made)]

    m.expect_outputs(inst, 1, make)


@opcode("SET_FUNCTION_ATTRIBUTE")
def _set_function_attribute(m: FrameMonitor, inst: Inst) -> None:
    """3.13 makes a function in two steps: ``MAKE_FUNCTION`` from the code alone, then one of
    these per part (defaults, keyword defaults, annotations, closure) on the same function."""
    value, fn = m.pop(2)
    made = fn.require(MadeFunction)
    if inst.arg == 0x01:
        made.defaults = value
    elif inst.arg == 0x02:
        made.kwdefaults = value
    elif inst.arg == 0x08:
        made.cells = list(value.items) if isinstance(value.items, list) else None
    m.push(fn)


def store_outer_cell(m: FrameMonitor, cell: Val, box: CellBox, value: Val) -> None:
    """``nonlocal n; n = value`` on a cell of a function from outside the run (the compiled
    function's own free variable, or an inlined callee's): the cell outlives the run, so the
    mock writes the very cell (``cell_contents``) as the program did, in program order."""
    cap = m.cap
    access = Cell(box.name, scope=box.scope)
    root = cap.graph.root
    cap.graph.write(root, access, cap.node_of(value))
    cap.written.add((root, access))
    cap.writes.append(Write("setcell", Val(cell.obj, const=True), "cell_contents", value))
    box.content = value


@contextlib.contextmanager
def frame_cells(cells: list[Any]) -> Iterator[None]:
    """While a segment's plan is made: the cells of its frame, which goes on running after
    the segment. A new cell would split the variable in two (the frame's and the closure's),
    and the mock cannot reach the frame's own: a closure over one is no record."""
    saved = _local.__dict__.get("frame_cells", frozenset())
    _local.frame_cells = frozenset(id(c) for c in cells)
    try:
        yield
    finally:
        _local.frame_cells = saved


def is_made_function(v: Val) -> bool:
    """``v`` is a function MAKE_FUNCTION made during the run."""
    return isinstance(v.obj, types.FunctionType) and v.payload(MadeFunction) is not None


def function_recipe(v: Val, recipe: Callable[[Val], Recipe]) -> Recipe:
    """The mock's recipe for a function made during the run: a new function like it."""
    fn: types.FunctionType = v.obj
    name = fn.__qualname__
    building: set[int] = _local.__dict__.setdefault("building", set())
    if id(v) in building:  # (a recipe cannot make a cycle: the cell would need the function)
        raise Unsupported(f"{name} closes over itself (a recursive nested function)")
    building.add(id(v))
    try:
        return _function_recipe(v, fn, name, recipe)
    finally:
        building.discard(id(v))


def _function_recipe(
    v: Val, fn: types.FunctionType, name: str, recipe: Callable[[Val], Recipe]
) -> Recipe:
    made = v.require(MadeFunction)
    cells = made.cells or []
    real_cells = fn.__closure__ or ()
    if len(cells) != len(real_cells) or any(
        c.obj is not r for c, r in zip(cells, real_cells, strict=False)
    ):
        raise Unsupported(f"the cells of {name} disagree with the shadow")
    annotations = tuple(fn.__annotations__.items())
    probe = _rebuild_function(
        fn.__code__, fn.__globals__, fn.__defaults__, fn.__kwdefaults__, annotations, *real_cells
    )
    if fn.__dict__ or any(
        getattr(fn, a) != getattr(probe, a) for a in ("__name__", "__qualname__", "__doc__")
    ):
        raise Unsupported(f"{name} was changed after it was made (attributes, functools.wraps)")
    parts: list[Recipe] = [Constant(_rebuild_function), Constant(fn.__code__)]
    parts.append(Constant(fn.__globals__))  # the module's namespace: the same for every call
    for key, shadow, real in (
        ("defaults", made.defaults, fn.__defaults__),
        ("kwdefaults", made.kwdefaults, fn.__kwdefaults__),
    ):
        if shadow is None:
            if real is not None:
                raise Unsupported(f"the {key} of {name} disagree with the shadow")
            parts.append(Constant(None))
        elif shadow.obj is not real:
            raise Unsupported(f"the {key} of {name} disagree with the shadow")
        else:
            parts.append(recipe(shadow))
    parts.append(Constant(annotations))
    parts += [_cell_recipe(c, recipe, name) for c in cells]
    return Build(id(v), BuildKind.CALL, tuple(parts))


def _cell_recipe(cell: Val, recipe: Callable[[Val], Recipe], fn_name: str) -> Recipe:
    box = cell.payload(CellBox)
    if box is None:
        raise Unsupported(f"a cell of {fn_name} has no shadow")
    if box.scope is not None:  # a cell of a function from outside the run: the very cell
        return Constant(cell.obj)
    if id(cell) in _local.__dict__.get("frame_cells", ()):
        raise Unsupported(f"{fn_name} closes over {box.name!r}, a variable of a frame that goes on")
    if not box.fresh or box.content is LAZY:
        raise Unsupported(f"{fn_name} closes over a variable of a frame the run did not start")
    try:
        real = cell.obj.cell_contents
    except ValueError:
        real = UNBOUND
    if box.content is UNBOUND:
        if real is not UNBOUND:
            raise Unsupported(f"the cell {box.name!r} of {fn_name} disagrees with the shadow")
        return Build(id(cell), BuildKind.CALL, (Constant(types.CellType),))
    if box.content.obj is not real:
        raise Unsupported(f"the cell {box.name!r} of {fn_name} disagrees with the shadow")
    return Build(id(cell), BuildKind.CALL, (Constant(types.CellType), recipe(box.content)))


def _rebuild_function(
    code: types.CodeType,
    globals_: dict[str, Any],
    defaults: tuple[Any, ...] | None,
    kwdefaults: dict[str, Any] | None,
    annotations: tuple[tuple[str, Any], ...],
    *cells: Any,
) -> types.FunctionType:
    """What MAKE_FUNCTION would make of ``code`` with these parts (name and qualified name come
    from the code object, the module from the globals)."""
    fn = types.FunctionType(code, globals_, None, defaults, cells or None)
    if kwdefaults is not None:
        fn.__kwdefaults__ = kwdefaults
    if annotations:
        fn.__annotations__ = dict(annotations)
    return fn
