"""One monitored frame: shadow value stack, shadow locals, and the two-step instruction protocol.

At the opcode event of instruction *I* the monitor first binds the outputs of the previous
instruction (reading them off the real stack with ctypes), then applies *I* to the shadow state:
shuffles and loads are applied at once; everything else pops its inputs and leaves a
``Pending`` describing how to build its outputs once they exist. Handlers live in
``bytecode/``; this module holds the frame state and the protocol.
"""

from __future__ import annotations

import enum
import types
import weakref
from collections.abc import Callable
from typing import Any

from magpy_refgraph import InternalError, Local, Unsupported

from ..cpython.code import Inst, decode, localsplus_names, positional_count, prefix_offsets
from ..cpython.current import INTERP
from ..cpython.frameio import NULL, StackView, nlocalsplus
from .capture import Capture
from .registry import OPCODE_HANDLERS
from .values import UNBOUND, Payload, Val
from .valuetypes import is_value_type

__all__ = [
    "LAZY",
    "WARNS_NATIVELY",
    "Callback",
    "CalleeSite",
    "CellBox",
    "FrameKind",
    "FrameMonitor",
    "Inst",
    "LoopHead",
    "Pending",
    "SegmentEnd",
    "decode",
]


class FrameKind(enum.Enum):
    """Why a frame is monitored, which decides what its return means."""

    ROOT = "root"  #: the monitored call itself (its return is the record's result)
    CALLEE = "callee"  #: a Python function the program called, inlined
    CALLBACK = "callback"  #: a Python callable native code called (a key function, a hook)
    GENERATOR = "generator"  #: a generator's frame, resumed by the frame driving it
    SEGMENT = "segment"  #: the frame of a segment that starts inside it (after a break)


class SegmentEnd(Exception):
    """The monitored segment reached the start of another site: commit it here."""


class CalleeSite(Exception):
    """An inlined callee reached its own entry site: end the segment at the call into it."""


class LoopHead(Exception):
    """The segment's frame is back at the head of a loop that is split per iteration."""


# instructions before a function's entry site (a site block reached after only these is the
# entry site's)
_PROLOGUE = frozenset(("RESUME", "MAKE_CELL", "COPY_FREE_VARS", "NOP", "EXTENDED_ARG"))


_RANGE_ITERATOR = type(iter(range(0)))


class _Lazy:
    def __repr__(self) -> str:
        return "LAZY"


LAZY: Any = _Lazy()


class CellBox(Payload):
    """The shadow of a closure cell: the ``Val`` it holds (or ``UNBOUND``).

    ``scope`` is the function from outside the run whose closure holds the cell; ``fresh``
    says the cell was made when a frame of the run started (a cell variable of its code).
    """

    __slots__ = ("content", "fresh", "name", "scope")

    def __init__(
        self, content: Any, name: str = "", scope: Any = None, *, fresh: bool = False
    ) -> None:
        self.content, self.name, self.scope, self.fresh = content, name, scope, fresh


class Callback(Payload):
    """The shadow of a Python callable native code will call back (``Pending.callbacks``):
    ``bind(frame)`` gives the shadows of the callee frame's arguments."""

    __slots__ = ("bind",)

    def __init__(self, bind: Callable[[types.FrameType], dict[str, Val]]) -> None:
        self.bind = bind


class Pending:
    """What the previous instruction will leave on the stack, bound at the next event.

    ``make(real)`` receives the real top ``n_out`` values (bottom first) and returns their
    ``Val``s. ``n_out`` may depend on where execution went (``FOR_ITER`` exhaustion).
    ``expect`` names a Python code object the instruction will enter and how to bind its frame
    (inlined callees); ``opaque`` says nested Python frames belong to native code and are not
    monitored. An inlined callee's return value arrives in ``result``; values yielded by a
    generator this instruction drives arrive in ``yields`` (its return value in ``result``).
    """

    __slots__ = (
        "callback_results",
        "callbacks",
        "calls_back",
        "expect",
        "gen",
        "inst",
        "make",
        "n_out",
        "on_gen_return",
        "on_raise",
        "on_result",
        "opaque",
        "raised",
        "result",
        "yields",
    )

    def __init__(
        self,
        inst: Inst,
        n_out: int | Callable[[int], int],
        make: Callable[[list[Any]], list[Val]],
        *,
        opaque: bool = True,
    ) -> None:
        self.inst, self.n_out, self.make, self.opaque = inst, n_out, make, opaque
        # for an opaque call: whether a Python frame it starts is the program's code called
        # back (a break), not one of its own or an unrelated one (a gc callback, a finalizer)
        self.calls_back: Callable[[types.FrameType], bool] | None = None
        self.expect: tuple[types.CodeType, Callable[[types.FrameType], FrameMonitor]] | None = None
        self.gen: Val | None = None
        self.result: Val | None = None
        self.yields: list[Val] = []
        self.callbacks: dict[types.CodeType, Val] = {}
        self.callback_results: list[Val] = []
        self.on_result: Callable[[Val], None] | None = None
        # ``gen`` returned (it was run to its end): the instruction goes on (``f(*gen)`` calls f)
        self.on_gen_return: Callable[[], None] | None = None
        # the instruction raising: ``on_raise(exc)`` guards what made it raise; ``raised``: the
        # exception a followed callee was left by (what made it raise is guarded there)
        self.on_raise: Callable[[BaseException], None] | None = None
        self.raised: BaseException | None = None

    def settled(self) -> None:
        """Its outputs are made: drop the callables. They are closures that often hold the
        ``Pending`` itself (a reference cycle), which would keep it, the callee's result and
        the values they refer to alive until the GC runs, not until eager lets go of them."""
        self.make = _settled
        self.on_result = self.on_gen_return = self.on_raise = self.calls_back = None
        self.expect = None


def _settled(real: list[Any]) -> list[Val]:
    raise InternalError("a settled pending instruction made its outputs again")


# original code -> offsets of the instructions whose native run issued a warning: they run
# natively from then on (``libs.stdlib.warnspy``; a warning shown once at a place under the
# "default" filter is not seen again there, so a later run could not tell)
WARNS_NATIVELY: weakref.WeakKeyDictionary[types.CodeType, set[int]] = weakref.WeakKeyDictionary()


class FrameMonitor:
    """Shadow state of one monitored frame."""

    def __init__(
        self,
        cap: Capture,
        frame: types.FrameType,
        fast: list[Any],
        *,
        kind: FrameKind = FrameKind.CALLEE,
    ) -> None:
        self.cap = cap
        self.frame = frame
        self.code = frame.f_code
        self.insts = decode(self.code)
        self.real = prefix_offsets(self.code)
        self.names = localsplus_names(self.code)
        self.view = StackView(frame)
        self.stack: list[Val] = []
        self.fast = fast
        self.kind = kind
        self.pending: Pending | None = None
        self.kwnames: tuple[str, ...] = ()
        self.last: Inst | None = None
        self.popped: list[Val] = []
        self.unwinding = False
        self.raised: BaseException | None = None  # the exception it is left by
        self.stored: set[int] = set()
        self.pre: tuple[Any, ...] | None = None
        self.func: Any = None
        self.namespace: Val | None = None  # a class body's namespace (LOAD_NAME/STORE_NAME)
        # (handlers entered by PUSH_EXC_INFO and not left by POP_EXCEPT, whether a POP_EXCEPT
        # left one entered before the frame was monitored): a record must not change either
        self.exc_state = (0, False)
        self.pre_exc = self.exc_state
        self.entry_mark = len(cap.rec.created)  # operations recorded before this frame began
        self.exhausted: Any = None  # the iterator a FOR_ITER of this frame last found empty
        self.entry_fast = list(fast)  # the locals it began with (a callee piece's inputs)
        info = cap.code_info(self.code) if cap.code_info is not None else None
        self.injected: frozenset[int] = info.injected if info is not None else frozenset()
        self.block_sites: dict[int, int] = info.block_sites if info is not None else {}
        self.to_original: dict[int, int] | None = info.to_original if info is not None else None
        self.original = info.original if info is not None else self.code

    def release(self) -> None:
        """The frame returned for good (not a generator's, which resumes): drop its shadow
        state. The monitor may stay reachable a while (closures of pending calls hold it in
        reference cycles until the GC runs); what only its stack and locals held must die when
        eager lets go of it, not when the capture ends. Its ``frame`` is gone too."""
        self.stack = []
        self.popped = []
        self.pre = None
        self.fast = []
        self.entry_fast = []
        self.pending = None
        self.exhausted = None
        # (a finished frame object owns its locals: it must not outlive the frame's callers)
        del self.frame, self.view

    def in_chunk(self) -> bool:
        """At the site of a split loop's head whose chunk of iterations the segment has not
        finished taking (``cap.loop_head``): the segment goes on past the site."""
        return (
            self.cap.loop_head is not None
            and bool(self.stack)
            and type(self.stack[-1].obj) is _RANGE_ITERATOR
            and not self.cap.loop_head(self, None)
        )

    # ------------------------------------------------------------------ protocol
    def on_opcode(self) -> None:
        """Handle the opcode event of the instruction at ``f_lasti``."""
        lasti = self.frame.f_lasti
        if lasti in self.real and INTERP.prefix_has_own_event:
            return  # (the extended instruction's own event follows)
        lasti = self.real.get(lasti, lasti)
        if self.pending is not None:
            self.bind(lasti)
        if lasti in self.injected:
            if self.kind is FrameKind.SEGMENT and self.last is not None and not self.in_chunk():
                raise SegmentEnd("reached another site")
            if (
                self.kind is not FrameKind.SEGMENT
                and lasti in self.block_sites
                and (self.last is None or self.last.opname in _PROLOGUE)
                # a recursive call (Hourglass.forward inside Hourglass.forward) is inlined: the
                # outer call's record covers it
                and not any(f.code is self.code for f in self.cap.frames if f is not self)
                and self.cap.end_at_callee_site is not None
                and self.cap.end_at_callee_site()
            ):
                raise CalleeSite(self.code.co_qualname)
            return
        inst = self.insts.get(lasti)
        if inst is None or inst.opname in ("EXTENDED_ARG", "CACHE"):
            return
        if (
            self.kind is FrameKind.SEGMENT
            and self.last is not None
            and self.cap.loop_head is not None
        ):
            if inst.opname == "FOR_ITER" and self.cap.loop_head(self, None):
                raise LoopHead(lasti)  # back at the head of a split loop
            if (
                self.last.opname == "FOR_ITER"
                and lasti == self.last.argval
                and self.cap.loop_head(self, self.exhausted)
            ):
                raise LoopHead(lasti)  # just left a split loop: what follows is a segment
        if self.kind is FrameKind.SEGMENT and not (
            # a cut point is before the call's first instruction: 3.11's PRECALL, not its CALL;
            # before a KW_NAMES, not between it and its call
            (inst.opname == "CALL" and INTERP.precall)
            or (self.last is not None and self.last.opname == "KW_NAMES")
        ):
            self.pre = (list(self.stack), self.cap.mark(), lasti, self.kwnames)
            self.pre_exc = self.exc_state
        self.last = inst
        self.popped = []
        self.cap.location = (self.code.co_filename, inst.line or self.code.co_firstlineno)
        if WARNS_NATIVELY and self.original_offset(lasti) in WARNS_NATIVELY.get(self.original, ()):
            raise self.unsupported(f"{inst.opname} issued a warning before: it runs natively")
        handler = OPCODE_HANDLERS.get(inst.opname)
        if handler is None:
            raise Unsupported(
                f"instruction {inst.opname} is not supported yet", self.code.co_filename, inst.line
            )
        handler(self, inst)

    def bind(self, lasti: int) -> None:
        """Attach the previous instruction's outputs, read from the real stack."""
        p = self.pending
        assert p is not None
        self.pending = None
        n = p.n_out(lasti) if callable(p.n_out) else p.n_out
        real = [self.view.peek(i) for i in range(n - 1, -1, -1)]
        vals = p.make(real)
        p.settled()
        if len(vals) != n:
            raise InternalError(f"{p.inst}: made {len(vals)} values for {n} outputs")
        if any(v.obj is not r for v, r in zip(vals, real, strict=True)):
            # (a make may have put another object on the stack: ``f.__code__``'s original)
            real = [self.view.peek(i) for i in range(n - 1, -1, -1)]
        for v, r in zip(vals, real, strict=True):
            if v.obj is not r and not (
                r is not NULL
                and ((is_value_type(r) and _same_value(v.obj, r)) or _same_tuple(v, r))
            ):
                raise InternalError(f"{p.inst}: shadow {v!r} does not match real {r!r}")
            v.obj = r  # equal value types: keep the real object
        self.stack.extend(vals)
        depth = self.view.depth()
        if depth != len(self.stack):
            raise InternalError(
                f"{p.inst}: shadow stack depth {len(self.stack)} != real depth {depth} "
                f"in {self.code.co_qualname}"
            )

    def unsupported(self, reason: str) -> Unsupported:
        """An ``Unsupported`` located at the current instruction."""
        line = self.last.line if self.last is not None else self.code.co_firstlineno
        return Unsupported(reason, self.code.co_filename, line)

    # ------------------------------------------------------------------ stack helpers
    def pop(self, n: int = 1) -> list[Val]:
        """Pop ``n`` values (returned bottom first)."""
        if n == 0:
            return []
        if n > len(self.stack):
            raise InternalError(f"shadow stack underflow in {self.code.co_qualname}")
        out = self.stack[-n:]
        del self.stack[-n:]
        self.popped.extend(out)
        return out

    def push(self, *vals: Val) -> None:
        """Push known values."""
        self.stack.extend(vals)

    def expect_outputs(
        self,
        inst: Inst,
        n: int | Callable[[int], int],
        make: Callable[[list[Any]], list[Val]],
        *,
        opaque: bool = True,
    ) -> Pending:
        """Leave a ``Pending`` for the outputs of ``inst``."""
        p = Pending(inst, n, make, opaque=opaque)
        self.pending = p
        return p

    def original_offset(self, lasti: int) -> int:
        """The original code's offset of the instruction at ``lasti``."""
        return self.to_original[lasti] if self.to_original is not None else lasti

    def lazy_local(self, name: str) -> Val:
        """Read local ``name`` from the frame as an entry value (segments start mid-frame)."""
        f_locals = self.frame.f_locals
        if name not in f_locals:
            raise self.unsupported(f"local {name!r} is unbound")
        return self.cap.root(Local(name), f_locals[name])

    def load_fast(self, index: int) -> Val:
        """The shadow of local slot ``index`` (an argument read lazily for the root frame)."""
        v = self.fast[index]
        if v is LAZY:
            v = self.fast[index] = self.lazy_local(self.names[index])
        if v is UNBOUND:
            raise self.unsupported(f"local {self.names[index]!r} is unbound")
        if isinstance(v, Val):
            return v
        raise InternalError(f"local slot {index} holds {v!r}")

    def cell(self, index: int) -> CellBox:
        """The ``CellBox`` of deref slot ``index``."""
        box = self.fast[index]
        if isinstance(box, Val) and (cell := box.payload(CellBox)) is not None:
            return cell
        raise InternalError(f"slot {index} ({self.names[index]}) is not a cell")


def _same_tuple(v: Val, r: Any) -> bool:
    """A tuple the monitor built (``enumerate``/``zip`` items) equal to the real one item-wise.

    Nested tuples count too (``enumerate(list(zip(a, b)))`` yields ``(i, (x, y))`` whose inner
    tuple the monitor built when ``zip`` ran); a matching inner shadow then takes the real tuple.
    """
    if type(r) is not tuple or not isinstance(v.items, list) or len(v.items) != len(r):
        return False
    if not all(
        x.obj is y or (is_value_type(y) and _same_value(x.obj, y)) or _same_tuple(x, y)
        for x, y in zip(v.items, r, strict=True)
    ):
        return False
    for x, y in zip(v.items, r, strict=True):
        if type(y) is tuple:
            x.obj = y
    return True


def _same_value(a: Any, b: Any) -> bool:
    try:
        return (type(a) is type(b) and bool(a == b)) or (a != a and b != b)
    except Exception:
        return False


def initial_fast(
    cap: Capture,
    frame: types.FrameType,
    args: dict[str, Val] | None,
    closure: list[Val] | None,
    *,
    root_scope: Any = None,
) -> list[Any]:
    """Shadow locals for a frame about to run: bound arguments, cells, free variables.

    For the root frame (``args is None``) arguments are read from SN#0 as ``Local`` accesses.
    """
    code = frame.f_code
    names = localsplus_names(code)
    view = StackView(frame)
    n_args = positional_count(code)
    argnames = code.co_varnames[:n_args]
    fast: list[Any] = [UNBOUND] * nlocalsplus(code)
    for i, name in enumerate(argnames):
        if args is None:
            fast[i] = cap.root(Local(name), frame.f_locals[name])
        else:
            fast[i] = args[name]
    cellvars = set(code.co_cellvars)
    n_free = len(code.co_freevars)
    first_free = len(names) - n_free
    for i, name in enumerate(names):
        if i >= first_free:
            j = i - first_free
            real_cell = view.local(i)
            if closure is not None:
                fast[i] = closure[j]
            else:
                box = CellBox(UNBOUND, name, root_scope)
                fast[i] = cap.new(real_cell, payload=box)
        elif name in cellvars:
            real_cell = view.local(i)
            content = fast[i] if i < len(argnames) else UNBOUND
            fast[i] = cap.new(real_cell, payload=CellBox(content, name, fresh=True))
    return fast


def segment_fast(cap: Capture, frame: types.FrameType, *, at_entry: bool = False) -> list[Any]:
    """Shadow locals for a segment starting mid-frame: every local is read lazily from SN#0.

    A segment starting at the function's entry (``at_entry``) owns its frame's cell variables
    as a whole-call run does: nothing else can have captured them yet.
    """
    code = frame.f_code
    names = localsplus_names(code)
    view = StackView(frame)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    n_args = positional_count(code)
    fast: list[Any] = []
    for i, name in enumerate(names):
        if at_entry and name in code.co_cellvars:
            content = cap.root(Local(name), frame.f_locals[name]) if i < n_args else UNBOUND
            fast.append(cap.new(view.local(i), payload=CellBox(content, name, fresh=True)))
        elif name in cells:
            fast.append(cap.new(view.local(i), payload=CellBox(LAZY, name)))
        else:
            fast.append(LAZY)
    return fast
