"""Draws from a random generator: native calls the mock makes again on every run.

``random.randint(1, n)``, ``np.random.normal(size=s)``, ``np.random.seed(0)`` and
``torch.manual_seed(s)`` read and advance a generator's state, which the program does not hold
and no guard can read. The call runs natively at record time; its arguments are guarded by
value and the value it gave is a constant of the record (the record is specialised to it, so a
size, a branch or a list index drawn at random is followed as any constant). The record keeps
the call (a ``Draw``, ``Plan.draws``): the mock makes it again on every later run, in program
order with the record's other draws and before its graph, so each generator advances exactly as
in eager and later draws depend on the earlier ones. Where the call gives another value than the
recorded one, the mock puts every generator back as it found it and misses: another record is
tried, or the program runs again from that state and draws what eager draws (a branch on a
drawn value is never replayed down the wrong side).

Only discrete draws are specialised (integers, choices, integer arrays): a float drawn is one
no unseeded call draws again. Where the generator's kind can make such a value an input of the
graph (``GeneratorKind.drawn``: numpy's float arrays, ``libs.numpy.randomstate``), the mock
draws it again on every call and feeds it to the graph (``Draw.feed``) instead of comparing it,
so the graph computes with this call's values. A Python float drawn (``random.random()``,
``random.uniform(a, b)``, ``np.random.rand()``: ``drawn_float``) is the value read from a 0-d
double fed the same way: a speculated read (``core.speculation``), so while it only feeds
tensor arithmetic the graph computes with this call's value, a branch on it assumes the outcome
(checked after the graph; a miss puts the generators back), and any other use assumes its
exact value. Any other continuous draw stays a break. Draws whose values keep changing
(nobody seeds them) miss on most calls: after
``config.max_assumption_misses`` such misses the cache stops assuming (``Capture.speculate``)
and a draw is a break, as before.

Generators are known by type (``GENERATORS``: Python's ``random.Random``, numpy's
``RandomState`` and ``Generator`` are added by ``libs.numpy``), each with the methods that only
draw (``shuffle``, which permutes its argument in place, is not one) and how its state is saved
and restored; functions by identity (``SEED_FUNCTIONS``: ``torch.manual_seed``, by
``libs.torch``). Arguments are plain values (numbers, strings, None, lists and tuples of them,
arrays the run made from guarded values where numpy accepts them); results are plain values or
what the generator's kind makes of them (numpy's arrays: constants of the record).
"""

from __future__ import annotations

import copy
import random
import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from magpy_refgraph import Attr, Const

from ...core.calls import _name as qualified_name
from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.registry import GENERATOR_CLASSES
from ...core.speculation import speculate_read
from ...core.values import Val, Write
from ...core.valuetypes import is_value_type

__all__ = [
    "GENERATORS",
    "SEED_FUNCTIONS",
    "Draw",
    "DrawHolder",
    "GeneratorKind",
    "add_generator",
    "drawn_float",
    "same_value",
]


class GeneratorKind:
    """A type of random generator: the methods that draw from it, how its state is read and
    put back, and (``result``) the shadow of what a draw returned (None: plain values only);
    ``accept(m, v)`` accepts an argument that is no plain value (None: none is)."""

    __slots__ = ("accept", "drawn", "methods", "restore", "result", "state")

    def __init__(
        self,
        methods: frozenset[str],
        state: Callable[[Any], Any],
        restore: Callable[[Any, Any], None],
        result: Callable[[FrameMonitor, Any], Val] | None = None,
        accept: Callable[[FrameMonitor, Val], Any] | None = None,
        drawn: Callable[[FrameMonitor, Any], tuple[Val, Callable[[Any], bool]] | None]
        | None = None,
    ) -> None:
        self.methods, self.state, self.restore = methods, state, restore
        self.result, self.accept = result, accept
        # a continuous value drawn that can enter the graph as this call's value: its shadow
        # and what feeds the value of a later call to the graph (False: it does not fit)
        self.drawn = drawn


# type of a generator -> its kind (exact types: a subclass may draw from elsewhere)
GENERATORS: dict[type, GeneratorKind] = {}
# id(function) -> (function, its generator, the generator's kind, a check of its arguments
# that raises Unsupported where the call cannot be replayed before the graph)
SEED_FUNCTIONS: dict[int, tuple[Any, Any, GeneratorKind, Callable[[FrameMonitor], None]]] = {}


class Draw:
    """One draw of a record: ``fn(*args, **kwargs)`` gave ``expected`` from ``generator``."""

    __slots__ = ("args", "expected", "feed", "fn", "generator", "kind", "kwargs", "where")

    def __init__(
        self,
        fn: Any,
        generator: Any,
        kind: GeneratorKind,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        expected: Any,
        where: str,
    ) -> None:
        self.fn, self.generator, self.kind = fn, generator, kind
        self.args, self.kwargs, self.expected, self.where = args, kwargs, expected, where
        # (a continuous draw: its value is the graph's on every call, not a constant)
        self.feed: Callable[[Any], bool] | None = None

    def state(self) -> Any:
        return self.kind.state(self.generator)

    def restore(self, state: Any) -> None:
        self.kind.restore(self.generator, state)

    def again(self) -> bool:
        """The call once more (called by the mock): whether it gave the recorded value (a
        continuous draw: whether its value could be fed to the graph)."""
        if self.feed is not None:
            return self.feed(self.fn(*self.args, **self.kwargs))
        return same_value(self.fn(*self.args, **self.kwargs), self.expected)

    def __repr__(self) -> str:
        return f"Draw({self.where})"


def same_value(now: Any, expected: Any) -> bool:
    """``now`` is the value ``expected`` is: same type, and the same bits for numbers and
    arrays (the sign of zero included); other objects by identity."""
    if type(now) is not type(expected):
        return False
    if type(now) in (list, tuple):
        return len(now) == len(expected) and all(map(same_value, now, expected))
    if type(now) is float:
        return now == expected and str(now) == str(expected)  # (-0.0 and 0.0 differ)
    if type(now) in (int, bool, str, bytes) or now is None:
        return bool(now == expected)
    if hasattr(now, "dtype") and hasattr(now, "tobytes"):  # numpy arrays and scalars
        return bool(
            now.dtype == expected.dtype
            and getattr(now, "shape", ()) == getattr(expected, "shape", ())
            and now.tobytes() == expected.tobytes()
        )
    return now is expected


def _continuous(obj: Any) -> bool:
    """A float, or numpy floats (scalar or array), or a list or tuple holding one."""
    if type(obj) in (list, tuple):
        return any(map(_continuous, obj))
    dtype = getattr(obj, "dtype", None)
    return type(obj) in (float, complex) or getattr(dtype, "kind", "") in ("f", "c")


def _snapshot(obj: Any) -> Any:
    """What the mock passes (or expects) on every run: a copy the program cannot change."""
    if type(obj) in (list, tuple) or hasattr(obj, "tobytes"):
        return copy.deepcopy(obj)
    return obj


# ---------------------------------------------------------------------- the call rule
def seed_function(fn: Any) -> tuple[Any, Any, GeneratorKind, Callable[[FrameMonitor], None]] | None:
    """``SEED_FUNCTIONS``' entry of ``fn``, or of the function it wraps (importing TorchDynamo
    replaces ``torch.manual_seed`` by a ``functools.wraps`` wrapper that only turns TorchDynamo
    off around it)."""
    for _ in range(4):
        found = SEED_FUNCTIONS.get(id(fn))
        if found is not None and found[0] is fn:
            return found
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return None
    return None


def _generator_of(c: Call) -> tuple[Any, GeneratorKind, bool] | None:
    """The generator ``c`` draws from, its kind, and whether it is ``c.pos[0]`` (a Python
    method the interpreter unbound: ``Random.randint(rng, a, b)``)."""
    found = seed_function(c.fn)
    if found is not None:
        return found[1], found[2], False
    name = getattr(c.fn, "__name__", None)
    if not isinstance(c.fn, types.MethodType | types.BuiltinMethodType) and c.pos:
        owner = c.pos[0].obj
        kind = GENERATORS.get(type(owner))
        if kind is None or name not in kind.methods or getattr(type(owner), name, None) is not c.fn:
            return None
        return owner, kind, True
    if not isinstance(c.fn, types.MethodType | types.BuiltinMethodType):
        return None
    owner = c.fn.__self__
    kind = GENERATORS.get(type(owner))
    if kind is None or name not in kind.methods:
        return None
    return owner, kind, False


@call_rule("random draw", lambda c: _generator_of(c) is not None)
def _random_draw(m: FrameMonitor, inst: Inst, c: Call) -> None:
    cap = m.cap
    what = qualified_name(c.fn)
    found = _generator_of(c)
    assert found is not None
    generator, kind, unbound = found
    if not cap.speculate:
        raise m.unsupported(f"{what} draws from a random generator (its values kept changing)")
    seeded = seed_function(c.fn)
    if seeded is not None:
        seeded[3](m)
    known = cap.known(generator)
    if known is not None and not known.external and not known.const:
        raise m.unsupported(f"{what} of a random generator made during the run")
    pos = c.pos
    if unbound:  # the function itself is a constant (the class's); its self is the generator
        cap.observe_identity(pos[0])
        pos = pos[1:]
    else:
        _guard_callable(m, c)
    args = tuple(_argument(m, kind, v, what) for v in pos)
    kwargs = {k: _argument(m, kind, v, what) for k, v in c.kwargs.items()}
    if c.fn.__name__ == "seed" and (not args or args[0] is None):
        raise m.unsupported(f"{what}() without a seed (it reads the operating system's entropy)")
    fn = c.fn
    if unbound:
        args = (generator, *args)

    def make(real: list[Any]) -> list[Val]:
        out = real[0]
        fed = None
        if _continuous(out):
            # a record specialised to a float drawn is one no unseeded call draws again; an
            # array of them may enter the graph as an input the mock feeds on every call
            fed = kind.drawn(m, out) if kind.drawn is not None else None
            if fed is None:
                raise m.unsupported(f"{what} draws a continuous value")
            val = fed[0]
        elif kind.result is not None and not is_value_type(out) and out is not None:
            val = kind.result(m, out)
        elif out is None or is_value_type(out) or out is generator:
            val = cap.const(out)
        elif type(out) is list and all(is_value_type(x) for x in out):
            val = cap.new(out, items=[cap.const(x) for x in out])
        else:
            raise m.unsupported(f"{what} gave a {type(out).__name__}")
        line = m.last.line if m.last is not None else m.code.co_firstlineno
        where = f"{what} at {m.code.co_filename}:{line}"
        draw = Draw(fn, generator, kind, args, kwargs, _snapshot(out), where)
        if fed is not None:
            draw.feed = fed[1]
        cap.writes.append(Write("draw", cap.const(generator), draw, None))
        return [val]

    m.expect_outputs(inst, 1, make)


def _guard_callable(m: FrameMonitor, c: Call) -> None:
    """The call reaches the same generator's same method on every run."""
    cap, fn_val = m.cap, c.fn_val
    if not fn_val.external:
        return
    if type(c.fn) is types.MethodType or id(c.fn) in SEED_FUNCTIONS:
        cap.observe(fn_val)  # (a bound method: its function and its self, by identity)
        cap.observe_identity(fn_val)
        return
    owner = cap.child(fn_val, Attr("__self__"), c.fn.__self__)
    cap.observe_identity(owner)
    cap.observe(cap.child(fn_val, Attr("__name__"), c.fn.__name__))


def _argument(m: FrameMonitor, kind: GeneratorKind, v: Val, what: str) -> Any:
    """An argument of a draw, guarded: what the mock passes on every run."""
    obj = v.obj
    if obj is None or is_value_type(obj) or _plain(obj, 0):
        m.cap.observe(v)
        return _snapshot(obj)
    if kind.accept is not None:
        return _snapshot(kind.accept(m, v))
    raise m.unsupported(f"{what} of a {type(obj).__name__}")


def _plain(obj: Any, depth: int) -> bool:
    if obj is None or is_value_type(obj):
        return True
    return type(obj) in (list, tuple) and depth < 4 and all(_plain(x, depth + 1) for x in obj)


class DrawHolder(threading.local):
    """The tensor a continuous draw is fed into, one per thread (the mock's draw and the graph
    run in the calling thread: two threads never share the values)."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.t = torch.empty(shape, dtype=dtype)


def drawn_float(m: FrameMonitor, out: Any) -> tuple[Val, Callable[[Any], bool]] | None:
    """A Python float drawn: the value read (``speculate_read``) from a 0-d double the record
    holds (``holder``, a graph input by a constant path), which the mock's draw on every call
    sets to what it drew before the graph runs. A double holds a Python float exactly."""
    cap = m.cap
    if type(out) is not float or not cap.speculate:
        return None
    holder = DrawHolder((), torch.float64)
    holder.t.fill_(out)
    root = cap.root(Const(holder), holder)
    node = cap.to_arg(cap.child(root, Attr("t"), holder.t))
    node = cap.rec.call("call_method", "clone", (node,), {})
    val = speculate_read(cap, node, out, "a float drawn at random")

    def feed(value: Any) -> bool:
        if type(value) is not float:
            return False
        holder.t.fill_(value)
        return True

    return val, feed


# ---------------------------------------------------------------------- Python's random
def _random_state(g: Any) -> Any:
    return random.Random.getstate(g)


def _random_restore(g: Any, state: Any) -> None:
    random.Random.setstate(g, state)


_RANDOM_METHODS = frozenset(
    "random uniform randint randrange choice choices sample gauss normalvariate lognormvariate "
    "expovariate vonmisesvariate gammavariate betavariate paretovariate weibullvariate "
    "triangular getrandbits binomialvariate seed".split()
)


def add_generator(cls: type, kind: GeneratorKind) -> None:
    """Draws from instances of ``cls`` are modelled as ``kind`` says."""
    GENERATORS[cls] = kind
    GENERATOR_CLASSES.add(cls)


add_generator(
    random.Random,
    GeneratorKind(_RANDOM_METHODS, _random_state, _random_restore, drawn=drawn_float),
)
