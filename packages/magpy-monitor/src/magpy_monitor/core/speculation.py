"""Speculated tensor-value reads: ``if t.any():``, ``t.item() > 0``, ``int(t.sum())``.

Reading a tensor's value into Python ends the graph in a plain tracer: the value is not known
until the graph runs. MagPy records the value the run saw instead and lets the graph output
it; the mock compares it before building or writing anything (``Plan.checks``), so a call
whose value differs leaves no trace and runs the program again (``SpeculationMiss``). Most
such reads in model code take the same value call after call (an ``assert`` on NaNs, an empty
mask test), and the graph stays whole.

What is assumed is as little as the program used:

- a branch on a tensor (``if t:``, ``assert t``) assumes the outcome only;
- ``t.item()``, ``int(t)``, ``float(t)``, ``bool(t)`` give a Python number that stays in the
  graph (a detached 0-d tensor of Python's precision) while it only feeds tensor arithmetic or
  the outputs; a branch on arithmetic over it assumes the outcome; any other use of its value
  (a shape, a dict key, an effect) assumes the exact value.

A graph that updates a tensor from outside in place could not be run a second time after a
miss without changing what eager would do: there a value read stays a graph break. A graph that
draws random numbers is fine: its record saves the default generators' state before the graph
runs and puts it back on a miss (``draws_random``), so the program run again draws what eager
draws.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import attrs
import torch

from magpy_refgraph import Unsupported

from .values import ScalarFx, Val

if TYPE_CHECKING:
    from .capture import Capture

__all__ = [
    "Assumption",
    "Speculated",
    "assume_outcome",
    "draws_random",
    "is_random",
    "pin",
    "predicate_read",
    "python_number",
    "read_list",
    "read_value",
    "speculated",
    "truth_of_tensor",
]


class Speculated(ScalarFx):
    """A tensor's value read into Python (``t.item()``), not yet assumed: ``fx`` is the graph
    node that computes it, ``reason`` the graph break it would be without speculation, where."""

    __slots__ = ("reason",)

    def __init__(self, fx: Any, reason: str) -> None:
        super().__init__(fx)
        self.reason = reason


@attrs.define
class Assumption:
    """The value (``truth``: the truth value) the run saw of graph node ``node``."""

    node: Any
    expected: Any
    truth: bool
    where: str


# torch functions, Tensor methods and modules' functional forms that draw from an RNG
_RANDOM = frozenset(
    """rand rand_like randn randn_like randint randint_like randperm normal bernoulli
    multinomial poisson binomial uniform_ normal_ bernoulli_ exponential_ geometric_ cauchy_
    log_normal_ random_ dropout dropout_ dropout1d dropout2d dropout3d alpha_dropout
    feature_alpha_dropout feature_dropout native_dropout rrelu rrelu_ gumbel_softmax
    fused_dropout""".split()
)


def is_random(
    target: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
) -> bool:
    """Whether a call of fx target ``target`` may draw random numbers (by name: conservative).
    A dropout with ``training=False`` (or ``p=0``) does not."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name not in _RANDOM:
        return False
    if "dropout" in name and name.startswith(("dropout", "alpha", "feature")):
        kwargs = kwargs or {}
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
        if training is False or p == 0:
            return False
    return True


def speculated(val: Val) -> bool:
    """``val`` is a speculated read not yet assumed, or Python arithmetic over one."""
    if val.const:
        return False
    if val.payload(Speculated) is not None:
        return True
    return val.expr is not None and any(speculated(a) for a in val.expr[1])


def read_value(cap: Capture, t: Val, result: Any, reason: str) -> Val:
    """The Python scalar ``result`` that ``t.item()``/``int(t)``/``float(t)``/``bool(t)`` gave.

    ``reason`` is the graph break to report where speculation is not possible.
    """
    if type(result) not in (int, float, bool) or not _plain(t.obj) or not cap.speculate:
        raise _break(cap, reason)  # complex, sparse...; or speculation is off here
    rec = cap.rec
    x = rec.call("call_method", "detach", (cap.to_arg(t),), {})
    x = rec.call("call_method", "reshape", (x, ()), {})
    if t.obj.device.type != "cpu":
        x = rec.call("call_method", "cpu", (x,), {})  # a Python number lives on the host
    x = python_number(cap, x, type(result), t.obj.is_floating_point())
    return speculate_read(cap, x, result, reason)


def speculate_read(cap: Capture, node: Any, result: Any, reason: str) -> Val:
    """The Python number ``result`` read from the graph's 0-d (CPU) node ``node``. Nothing is
    assumed yet: only a use of the value that leaves the graph assumes it."""
    if not cap.speculate:
        raise _break(cap, reason)
    file, line = cap.location or ("", 0)
    return Val(result, payload=Speculated(node, f"{reason} ({file}:{line})"))


# tensor operations that answer a Python bool from tensor values: ``t.is_nonzero()`` is
# ``bool(t)`` of a one-element tensor (any other raised natively, and the shape is guarded);
# ``torch.allclose(a, b, ...)`` is ``torch.isclose(a, b, ...).all()`` (the same broadcasting,
# dtype rules and tolerances: ATen defines it so)
_PREDICATES = frozenset({"is_nonzero", "allclose"})


def predicate_read(
    cap: Capture, name: str, pos: list[Val], kw: dict[str, Val], result: Any
) -> Val | None:
    """``t.is_nonzero()``, ``torch.allclose(a, b)``: a Python bool read from tensor values, a
    speculated read of the graph's 0-d answer (see ``read_value``); None for other operations
    (their result stays a break)."""
    if name not in _PREDICATES or type(result) is not bool or not pos or not cap.speculate:
        return None  # (without speculation: the break it always was)
    if not all(isinstance(v.obj, torch.Tensor) and _plain(v.obj) for v in pos[:2]):
        return None
    rec = cap.rec
    args = tuple(cap.to_arg(v) for v in pos)
    kwargs = {k: cap.to_arg(v) for k, v in kw.items()}
    if name == "is_nonzero":
        x = rec.call("call_method", "detach", args, {})
        x = rec.call("call_method", "reshape", (x, ()), {})
    else:
        x = rec.call("call_function", torch.isclose, args, kwargs)
        x = rec.call("call_method", "all", (x,), {})
    if pos[0].obj.device.type != "cpu":
        x = rec.call("call_method", "cpu", (x,), {})
    x = python_number(cap, x, bool, False)
    return speculate_read(cap, x, result, f"{name} reads a tensor's value into Python")


_MAX_LIST = 64  # elements of a ``t.tolist()`` read one by one (each may become a check)


def read_list(cap: Capture, t: Val, result: Any, reason: str) -> Val:
    """``t.tolist()`` of a small tensor (``torch.tensor(x.shape[2:]).tolist()``): nested lists
    of numbers, each a read of one element (see ``read_value``)."""
    obj = t.obj
    if obj.ndim == 0:
        return read_value(cap, t, result, reason)
    if obj.ndim > 2 or obj.numel() > _MAX_LIST or not _plain(obj) or not cap.speculate:
        raise _break(cap, reason)
    file, line = cap.location or ("", 0)
    where = f"{reason} ({file}:{line})"
    rec = cap.rec
    base = rec.call("call_method", "detach", (cap.to_arg(t),), {})
    if obj.device.type != "cpu":
        base = rec.call("call_method", "cpu", (base,), {})
    floating = obj.is_floating_point()

    def element(index: tuple[int, ...], value: Any) -> Val:
        x = rec.call("call_function", operator.getitem, (base, index), {})
        x = python_number(cap, x, type(value), floating)
        return Val(value, payload=Speculated(x, where))

    if obj.ndim == 1:
        items = [element((i,), v) for i, v in enumerate(result)]
    else:
        rows = [[element((i, j), v) for j, v in enumerate(row)] for i, row in enumerate(result)]
        items = [cap.new(real, items=row) for real, row in zip(result, rows, strict=True)]
    return cap.new(result, items=items)


def python_number(cap: Capture, x: Any, kind: type, floating: bool) -> Any:
    """0-d tensor node ``x`` converted as ``kind(x)`` converts a Python number: to a double,
    an int64 (truncated, from a floating ``x``) or a bool."""
    rec = cap.rec
    if kind is bool:
        return rec.call("call_function", torch.ne, (x, 0), {})
    if kind is float:
        return rec.call("call_method", "to", (x, torch.float64), {})
    if floating:
        x = rec.call("call_function", torch.trunc, (x,), {})  # int(2.7) == 2, int(-2.7) == -2
    return rec.call("call_method", "to", (x, torch.int64), {})


def truth_of_tensor(cap: Capture, t: Val, reason: str) -> bool:
    """The program branches on ``bool(t)``: assume the outcome the run took."""
    obj = t.obj
    if obj.numel() != 1 or not _plain(obj):
        raise _break(cap, reason)  # bool() raises (the program sees its own error); sparse
    outcome = bool(obj)
    _check_possible(cap, reason)
    rec = cap.rec
    x = rec.call("call_method", "detach", (cap.to_arg(t),), {})
    x = rec.call("call_method", "reshape", (x, ()), {})
    assume(cap, rec.call("call_function", torch.ne, (x, 0), {}), outcome, reason, truth=True)
    return outcome


def pin(cap: Capture, val: Val) -> None:
    """A use of speculated ``val``'s exact value outside the graph: assume that value."""
    read = val.require(Speculated)
    assume(cap, read.fx, val.obj, read.reason, truth=False)
    cap.assumed_const(val)


def assume_outcome(cap: Capture, val: Val) -> bool:
    """A branch on ``val`` (a speculated read, or arithmetic over reads the graph can do):
    assume the outcome. False when the arithmetic cannot be a graph node."""
    node = cap.dynamic_scalar(val)
    if node is None:
        return False
    leaf = _first_read(val)
    assume(cap, node, bool(val.obj), f"a branch on {leaf.require(Speculated).reason}", truth=True)
    if type(val.obj) is bool:
        cap.assumed_const(val)  # the outcome is the value
    return True


_SHAPE_READ = "reads the shape of a tensor whose shape depends on tensor values"


def assume_shape(cap: Capture, val: Val) -> None:
    """The program reads the shape of ``val``, a tensor whose shape depends on tensor values
    (``y = y[mask]; len(y)``): assume the shape the run saw, checked in the graph."""
    node = val.fx
    done = cap.assumed_shapes.get(node)
    if done is not None and done in cap.assumptions:
        return  # (unless a segment cut dropped it)
    shape = list(val.obj.shape)
    rec = cap.rec
    if not cap.speculate:
        raise _break(cap, _SHAPE_READ)
    sizes = rec.call("call_function", torch._shape_as_tensor, (node,), {})
    want = rec.call("call_method", "new_tensor", (sizes, shape), {})
    same = rec.call("call_method", "eq", (sizes, want), {})
    same = rec.call("call_method", "all", (same,), {})
    assume(cap, same, True, f"{_SHAPE_READ} (shape {tuple(shape)})", truth=True)
    cap.assumed_shapes[node] = cap.assumptions[-1]
    node.meta["shape_checked"] = True  # (a segment cut that drops the check ends the capture)


def _first_read(val: Val) -> Val:
    if val.payload(Speculated) is not None:
        return val
    assert val.expr is not None
    return next(_first_read(a) for a in val.expr[1] if speculated(a))


def assume(cap: Capture, node: Any, expected: Any, reason: str, *, truth: bool) -> None:
    """Record that graph node ``node`` had ``expected`` (its truth value, with ``truth``)."""
    _check_possible(cap, reason)
    file, line = cap.location or ("", 0)
    cap.assumptions.append(Assumption(node, expected, truth, f"{file}:{line}"))


def _check_possible(cap: Capture, reason: str) -> None:
    if not cap.speculate:
        raise _break(cap, f"{reason} (not assumed here: turned off, or values kept changing)")
    if cap.updated_unknown:
        raise _break(cap, f"{reason}, in a graph that updates a tensor without storage in place")
    # (a miss leaves no trace: the mock copies the inputs the graph updates in place and the
    # default generators' state before the graph runs, and puts them back; see
    # Capture.mutated_inputs and draws_random. A torch.Generator the program passes is a break)


def draws_random(cap: Capture) -> bool:
    """The graph draws random numbers: a record that checks assumptions saves the default
    generators' state before its graph runs and puts it back on a miss, so running the program
    again draws what eager draws."""
    return any(is_random(n.target, n.args, n.kwargs) for n in cap.rec.created)


def _plain(t: torch.Tensor) -> bool:
    """A dense tensor of a real dtype, whose value the graph can hand back as a 0-d tensor."""
    return t.layout is torch.strided and not t.is_complex() and not t.is_quantized


def _break(cap: Capture, reason: str) -> Unsupported:
    file, line = cap.location or (None, None)
    return Unsupported(reason, file, line)
