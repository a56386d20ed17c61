"""The plan: what the monitor hands to codegen for one record.

A plan says, without any torch object in it, how to check that a later call may reuse a record
(the guard requirements), which external values feed the operator graph (its inputs, in order),
and how to rebuild the program's effects from the graph's outputs (the mock): the return value
and every write-back into pre-existing objects, as small recipes.

Recipes are a tiny expression language evaluated by the generated mock:

- ``FromPath(path)``: the object reachable at entry along ``path`` (identity preserved);
- ``Constant(value)``: a constant captured at record time (guards make it valid);
- ``GraphOut(i)``: the ``i``-th output of the compiled operator graph;
- ``Build(key, kind, parts, extra)``: a new object created during the run; ``key`` names it so
  that one object referenced twice is built once (aliasing preserved);
- ``Apply(fn, args)``: replay a pure function on recipes (``operator.add(self.calls, 1)``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ._access import Path

__all__ = [
    "AdvanceIter",
    "AppendItem",
    "Apply",
    "Build",
    "BuildKind",
    "CallMethod",
    "Check",
    "Constant",
    "DelAttr",
    "DelItem",
    "FromPath",
    "GraphOut",
    "Plan",
    "Recipe",
    "ReplaceContents",
    "SetAttr",
    "SetItem",
    "WriteBack",
]


@attrs.frozen
class FromPath:
    """The object found at ``path`` in the entry state."""

    path: Path


@attrs.frozen(eq=False)
class Constant:
    """A constant value captured while monitoring (compared by identity)."""

    value: Any


@attrs.frozen
class GraphOut:
    """Output ``index`` of the compiled operator graph."""

    index: int


class BuildKind:
    """Names of the constructors a ``Build`` recipe can use (plain strings, for readability)."""

    TUPLE = "tuple"
    LIST = "list"
    DICT = "dict"  # parts = (k0, v0, k1, v1, ...); extra = (dict_type,)
    SET = "set"
    FROZENSET = "frozenset"
    SLICE = "slice"
    NAMEDTUPLE = "namedtuple"  # extra = (cls,)
    OBJECT = "object"  # extra = (cls, attr names...); parts = attr values; built by __new__
    DEQUE = "deque"  # extra = (maxlen,)
    CALL = "call"  # extra = (); parts = (callable, *args) for objects rebuilt by a call
    ITER = "iter"  # parts = (iterable,); extra = (position,): iter(x) advanced to position


@attrs.frozen
class Build:
    """A new object built by the mock from ``parts``; ``key`` identifies it within a plan."""

    key: int
    kind: str
    parts: tuple[Recipe, ...] = ()
    extra: tuple[Any, ...] = attrs.field(default=(), eq=False)


@attrs.frozen
class Apply:
    """Replays ``fn(*args)`` in the mock (only for pure functions of entry values)."""

    fn: Recipe
    args: tuple[Recipe, ...]


Recipe = FromPath | Constant | GraphOut | Build | Apply


@attrs.frozen
class SetAttr:
    """``setattr(target, name, value)`` on a pre-existing object."""

    target: Recipe
    name: str
    value: Recipe


@attrs.frozen
class DelAttr:
    """``delattr(target, name)`` on a pre-existing object."""

    target: Recipe
    name: str


@attrs.frozen
class SetItem:
    """``target[key] = value`` on a pre-existing container."""

    target: Recipe
    key: Recipe
    value: Recipe


@attrs.frozen
class DelItem:
    """``del target[key]`` on a pre-existing container."""

    target: Recipe
    key: Recipe


@attrs.frozen
class ReplaceContents:
    """Give a pre-existing list/dict/set/deque exactly the contents in ``parts`` (in place)."""

    target: Recipe
    kind: str
    parts: tuple[Recipe, ...]


@attrs.frozen
class AdvanceIter:
    """``next(target)`` ``count`` times on a pre-existing iterator (a ``for`` loop's iterator
    that a segment took values from)."""

    target: Recipe
    count: int


@attrs.frozen
class AppendItem:
    """``target.append(value)`` on a pre-existing list whose contents the run never read."""

    target: Recipe
    value: Recipe


@attrs.frozen
class CallMethod:
    """``target.name(*args)`` on a pre-existing object: a change replayed as the very call the
    program made (``s.add(x)``, ``s.discard(x)``, ``s.clear()`` on a set from outside), so the
    object ends up as eager leaves it (a set's layout, hence its iteration order, included)."""

    target: Recipe
    name: str
    args: tuple[Recipe, ...] = ()


@attrs.frozen
class Check:
    """A value the capture assumed of graph output ``output``, checked after the graph ran.

    ``truth``: only ``bool(out)`` was assumed (a branch), to equal ``expected``; otherwise the
    Python value ``out.item()`` must be ``expected`` exactly. ``where`` names the read.
    """

    output: int
    expected: Any
    truth: bool
    where: str = ""


WriteBack = (
    SetAttr | DelAttr | SetItem | DelItem | ReplaceContents | AdvanceIter | AppendItem | CallMethod
)


@attrs.frozen(eq=False)
class Plan:
    """Everything codegen needs to emit one record's guard and mock.

    ``guards`` is a ``GuardSet`` over entry paths; ``aliases`` pairs of entry paths that must (or
    must not, ``distinct``) reach the same object; ``inputs`` the entry paths whose tensors are
    the graph's inputs, in placeholder order; ``result`` the return value's recipe;
    ``writebacks`` the effects on pre-existing state in program order.
    """

    guards: Any
    aliases: tuple[tuple[Path, Path], ...]
    distinct: tuple[Path, ...]
    inputs: tuple[Path, ...]
    result: Recipe
    writebacks: tuple[WriteBack, ...]
    num_outputs: int
    scalar_inputs: frozenset[int] = frozenset()  # inputs that are promoted Python scalars
    array_inputs: frozenset[int] = frozenset()  # inputs that are numpy arrays (from_numpy'd)
    checks: tuple[Check, ...] = ()  # assumed values of tensor reads, checked after the graph
    # native calls the mock makes again itself on every run, in program order, before the
    # graph (draws from a random generator, a reseeding): each an object with ``generator``
    # (whose state the call changes), ``state()``, ``restore(state)`` and ``again()`` (the call
    # once more: True where it gave the recorded value; the record is specialised to it)
    draws: tuple[Any, ...] = ()

    @property
    def speculative(self) -> bool:
        """The record assumes values it checks on every run (tensor reads, random draws)."""
        return bool(self.checks or self.draws)
