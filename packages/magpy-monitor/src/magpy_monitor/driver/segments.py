"""Segments: monitoring that starts and ends in the middle of a frame (graph breaks).

A *segment* is the part of a frame's execution between two points where the runtime can
intervene: a *site* (the function's entry, or the first instruction after a graph break whose
stack holds no NULL) and its end: the frame's return, the next site, or a *break* — an
instruction the monitor cannot model (``print``, ``.item()``, a branch on a tensor...), which then
runs natively. A break inside an inlined callee ends the segment at the CALL that entered the
callee (state snapshot taken there), and the callees of that chain get their own sites.

After a break, a *finder* traces each affected frame just far enough to reach the next
NULL-free instruction, where the runtime registers a resume site and can start the next
segment in the same call. The monitor never imports the runtime: it reports through the
``SegmentHost`` callbacks the runtime provides.
"""

from __future__ import annotations

import dis
import threading
import types
import weakref
from typing import Any, Protocol

import attrs
import torch.fx as fx

from magpy_refgraph import Local, MagPyError, Plan, Unsupported, iter_remaining

from ..bytecode.closures import frame_cells
from ..bytecode.iteration import AheadIterator
from ..core.capture import Capture
from ..core.frame import (
    CalleeSite,
    CellBox,
    FrameKind,
    FrameMonitor,
    LoopHead,
    SegmentEnd,
    segment_fast,
)
from ..core.values import UNBOUND, Val
from ..cpython.code import localsplus_names, prefix_event, real_offset
from ..cpython.current import (
    INTERP,
    frame_trace,
    gettrace,
    opcode_trace_off,
    opcode_trace_on,
    set_frame_trace,
    settrace,
)
from ..cpython.frameio import NULL, StackView
from .planner import build_plan
from .tracer import Monitor, TraceFn

__all__ = ["CodeInfo", "Segment", "SegmentHost", "is_monitoring", "start_segment"]


@attrs.define
class CodeInfo:
    """What the monitor needs to know about an instrumented code object."""

    original: types.CodeType
    injected: frozenset[int]
    to_original: dict[int, int]
    block_sites: dict[int, int]  # new offset of a site block's first instruction -> site offset


@attrs.define
class Segment:
    """A committed segment: the plan of its record and where it starts and ends."""

    code: types.CodeType  # the original code object
    site: int  # original offset the segment starts at
    end: int | None  # original offset it continues at (None: the frame returns)
    stores: tuple[tuple[str, str], ...]
    nulls: tuple[bool, ...]
    plan: Plan
    graph: fx.Graph
    example_inputs: list[Any]
    capture: Capture


class SegmentHost(Protocol):
    """Callbacks the runtime gives the monitor."""

    def code_info(self, code: types.CodeType) -> CodeInfo | None: ...

    def on_segment(self, seg: Segment) -> None: ...

    def on_break(self, reason: Unsupported, chain: list[tuple[types.CodeType, Any]]) -> None: ...

    def on_callee_site(self, chain: list[tuple[types.CodeType, Any]]) -> None: ...

    def split_loops(self, code: types.CodeType) -> bool: ...

    def on_callee_pieces(
        self, pieces: list[tuple[Any, fx.GraphModule, dict[str, Any]]]
    ) -> None: ...

    def on_failure(self, code: types.CodeType, site: int, exc: BaseException) -> None: ...

    def on_empty(self, code: types.CodeType, site: int) -> None: ...

    def dynamic_for(self, code: types.CodeType, site: int) -> tuple[frozenset[Any], bool]: ...

    def speculate_for(self, code: types.CodeType, site: int) -> bool: ...

    def verify_graphs(self) -> bool:
        """Whether a segment's RefGraph is checked after every mutation."""
        ...

    def resume(
        self, frame: types.FrameType, code: types.CodeType, offset: int, stack: tuple[Any, ...]
    ) -> TraceFn | None: ...


_local = threading.local()
_RANGE_ITERATOR = type(iter(range(0)))
# the most iterations of a split loop that one segment takes (a power of two), and the fewest
# that are a chunk: fewer left are the loop's tail, which one segment takes with what follows
LOOP_CHUNK = 16
LOOP_TAIL = 4


def _chunk_done(ahead: AheadIterator, it: Any) -> bool:
    """Whether a segment that started at a split loop's head has taken its chunk of
    iterations: the largest power of two up to ``LOOP_CHUNK`` of the values the iterator had
    when the segment started. Fewer than ``LOOP_TAIL`` values are the loop's tail: the segment
    takes them all and goes on after the loop. So a loop of ``n`` iterations is a few
    segments (``n = 13``: 8, 4, then the tail of 1 with what follows the loop), each served by
    one of a few records that each unroll a fixed count."""
    taken = ahead.pos
    total = taken + len(iter_remaining(it))
    if total < LOOP_TAIL:
        return False
    chunk = min(LOOP_CHUNK, 1 << (total.bit_length() - 1))
    if taken < chunk:
        return False
    ahead.below = 2 * chunk if chunk < LOOP_CHUNK else None
    return True


def _original(host: SegmentHost, code: types.CodeType) -> tuple[types.CodeType, CodeInfo | None]:
    info = host.code_info(code)
    return (info.original if info is not None else code), info


class SegmentMonitor(Monitor):
    """Monitors one segment of one frame, from a site to the segment's end."""

    def __init__(
        self,
        host: SegmentHost,
        frame: types.FrameType,
        site: int,
        stack: tuple[Any, ...],
        *,
        dry: bool = False,
    ) -> None:
        cap = Capture(frame.f_code.co_qualname, verify=host.verify_graphs())
        cap.code_info = host.code_info
        cap.dynamic_paths, cap.promote_all = host.dynamic_for(frame.f_code, site)
        cap.speculate = host.speculate_for(frame.f_code, site)
        super().__init__(cap, frame.f_code)
        self.host = host
        self.site = site
        self.frame = frame
        self.code, self.info = _original(host, frame.f_code)
        fast = segment_fast(cap, frame, at_entry=site < 0)
        mon = FrameMonitor(cap, frame, fast, kind=FrameKind.SEGMENT)
        mon.stack = [cap.root(Local(f"$s{i}"), v) for i, v in enumerate(stack)]
        self.root = mon
        self.finished_segment = False
        # a dry segment only follows the frame to its next break (where finders take over); a
        # record the site already has covers it, so its commit stores nothing
        self.dry = dry
        if host.split_loops(frame.f_code):
            cap.loop_head = self._at_loop_head
        cap.end_at_callee_site = self._can_end_at_call

    def start(self, *, now: bool = False) -> TraceFn:
        """Start tracing the frame (from a function it called, or from its trace callback).

        ``now``: the frame is at the segment's first instruction in an opcode event already
        being handled (a finder): process that instruction immediately.
        """
        self._prev = gettrace()
        self._begin_compiling()
        local = self._attach(self.root)
        set_frame_trace(self.frame, local)
        settrace(self._global)
        if now:
            local(self.frame, "opcode", None)
        return local

    # ------------------------------------------------------------------ endings
    def _on_return(self, mon: FrameMonitor, value: Any) -> None:
        if mon is not self.root:
            super()._on_return(mon, value)
            return
        self.cap.frames.pop()
        # the frame is leaving: its events go off here, as for every frame a monitor follows
        # (``_stop`` turns off only the frames still on the stack; 3.13's instruction events
        # would otherwise keep following, and keep alive, a finished frame)
        opcode_trace_off(mon.frame)
        if mon.unwinding:
            self._stop()
            return
        (val,) = mon.pop()
        try:
            self._commit(mon, None, val, mon.stack)
        except Unsupported as exc:  # the return cannot be replayed (what it gives out)
            self.host.on_break(exc, [(self.code, None)])
            self.host.on_empty(self.code, self.site)
        except MagPyError as err:
            self.failure = err
            self.host.on_failure(self.code, self.site, err)
        self._stop()

    def _fail(self, exc: BaseException, *, user: bool = False) -> None:
        if self.failure is not None or self.finished_segment:
            return
        root = self.root
        chain = [(m.code, m.func) for m in self.cap.frames]
        frames = [m.frame for m in self.cap.frames]
        try:
            if isinstance(exc, SegmentEnd):
                self._commit_at_site(root)
            elif isinstance(exc, LoopHead):
                # one loop iteration ends here; the next one is a segment of its own
                offset = root.original_offset(exc.args[0])
                self._commit(root, offset, None, root.stack, looped=True)
                self._stop()
                self.host.resume(self.frame, self.code, offset, tuple(v.obj for v in root.stack))
                return
            elif isinstance(exc, CalleeSite):
                # the innermost frame runs its own entry site natively; the frames above it
                # continue with segments after the call returns
                self.host.on_callee_site(chain)
                self._commit_at_pre(root)
                self._stop()
                for frame in reversed(frames[:-1]):
                    _arm_finder(self.host, frame)
                return
            elif isinstance(exc, Unsupported):
                try:
                    self._commit_at_break(root, exc, chain)
                except Unsupported:  # no record from this site; the frames still go on
                    self.host.on_empty(self.code, self.site)
                self._stop()
                for frame in reversed(frames):
                    _arm_finder(self.host, frame)
                return
            else:
                self.failure = exc
                self.host.on_failure(self.code, self.site, exc)
        except Unsupported:
            self.host.on_empty(self.code, self.site)
        except MagPyError as err:
            self.failure = err
            self.host.on_failure(self.code, self.site, err)
        self._stop()

    def _stop(self) -> None:
        self.finished_segment = True
        prev = self._prev
        if prev is _finder_global and getattr(_local, "finders", 0) == 0:
            prev = getattr(_local, "prev", None)
        settrace(prev)
        self._detach()

    def _commit_at_site(self, root: FrameMonitor) -> None:
        lasti = real_offset(self.frame.f_code, self.frame.f_lasti)
        assert self.info is not None
        end = self.info.block_sites[lasti]
        # back at its own site: a loop went round once (SegmentEnd needs a step taken)
        self._commit(root, end, None, root.stack, looped=True)

    def _commit_at_break(
        self, root: FrameMonitor, exc: Unsupported, chain: list[tuple[types.CodeType, Any]]
    ) -> None:
        self.host.on_break(exc, chain)
        self._report_callee_pieces()
        if root.pre is None:
            self.host.on_empty(self.code, self.site)
            return
        self._commit_at_pre(root)

    def _report_callee_pieces(self) -> None:
        """Tell the host which operations of the inlined callees the cut drops.

        The break is inside a chain of inlined callees: the segment ends at the call into the
        first one, and on later calls each callee of the chain runs its entry segment, up to
        the call into the next one (or up to the break), as a graph of its own. The operations
        of those pieces were recorded here; the host may show them (``magpy.explain``).
        """
        frames = self.cap.frames
        pieces: list[tuple[Any, fx.GraphModule, dict[str, Any]]] = []
        for i, mon in enumerate(frames[1:], start=1):
            end = frames[i + 1].entry_mark if i + 1 < len(frames) else len(self.cap.rec.created)
            gm = self.cap.rec.extract(mon.entry_mark, end)
            if gm is not None:
                names = localsplus_names(mon.code)
                entry = {
                    names[j]: v.obj
                    for j, v in enumerate(mon.entry_fast)
                    if isinstance(v, Val) and v.obj is not UNBOUND
                }
                pieces.append((mon.func, gm, entry))
        if pieces:
            self.host.on_callee_pieces(pieces)

    def _at_loop_head(self, mon: FrameMonitor, exhausted: Any) -> bool:
        """Whether to end the segment here: at a FOR_ITER of its frame over a range
        (``exhausted`` None), or right after such a loop ended (``exhausted`` its iterator)."""
        if mon is not self.root:
            return False
        if exhausted is not None:
            return type(exhausted) is _RANGE_ITERATOR
        if not (mon.stack and type(mon.stack[-1].obj) is _RANGE_ITERATOR):
            return False
        ahead = mon.stack[-1].payload(AheadIterator)
        return ahead is None or _chunk_done(ahead, mon.stack[-1].obj)

    def _can_end_at_call(self) -> bool:
        """Whether the segment can end at the root frame's current cut point (``pre``).

        Asked when an inlined callee reaches its entry site. Where the cut would give an empty
        or effect-losing record, the callee is inlined instead, as before it had a site.
        """
        root = self.root
        if root.pre is None or self.failure is not None or self.finished_segment:
            return False
        _stack, mark, lasti, kwnames = root.pre
        return (
            not kwnames
            and root.cap.mark()[1:4] == mark[1:4]
            and root.original_offset(lasti) != self._start_offset()
        )

    def _commit_at_pre(self, root: FrameMonitor) -> None:
        """Commit the segment at the root frame's last cut point, dropping later operations."""
        assert root.pre is not None
        stack, mark, lasti, kwnames = root.pre
        if kwnames:
            raise Unsupported("graph break right after KW_NAMES")
        if root.cap.mark()[1:4] != mark[1:4]:
            # effects happened between the cut point and the break: no record from this site
            self.host.on_empty(self.code, self.site)
            return
        root.cap.cut(mark)
        root.pending = None
        self._commit(root, root.original_offset(lasti), None, stack, exc=root.pre_exc)

    def _start_offset(self) -> int:
        """Original offset of the segment's first instruction (the entry site's is computed)."""
        if self.site >= 0:
            return self.site
        for ins in dis.get_instructions(self.code):
            if ins.opname not in ("RESUME", "MAKE_CELL", "COPY_FREE_VARS", "NOP", "EXTENDED_ARG"):
                return ins.offset
        return -1

    def _commit(
        self,
        root: FrameMonitor,
        end: int | None,
        ret: Val | None,
        stack: list[Val],
        *,
        looped: bool = False,
        exc: tuple[int, bool] | None = None,
    ) -> None:
        self.finished_segment = True
        cap = self.cap
        if self.dry:
            return
        if (exc if exc is not None else root.exc_state) != (0, False):
            # the mock would skip a PUSH_EXC_INFO or POP_EXCEPT: sys.exc_info() after it
            # would differ from eager's
            raise Unsupported("a segment that enters or leaves an exception handler")
        if end is not None and end == self._start_offset() and not looped:
            # nothing ran before the segment ended: a record would jump back to its own site
            self.host.on_empty(self.code, self.site)
            return
        if end is None:
            assert ret is not None
            cap.result = ret
            nulls: tuple[bool, ...] = ()
            # the cells the segment wrote outlive the frame: stored before it returns (not
            # from a segment that began at the entry: a closure holding one of its cells was
            # made in the run, and the mock makes it again with what it holds)
            stores, values = _stored_locals(root, cells_only=True) if self.site >= 0 else ((), [])
            if stores:
                cells_t = Val(tuple(v.obj for v in values), items=list(values))
                cap.result = Val((ret.obj, cells_t.obj), items=[ret, cells_t])
        else:
            stores, values = _stored_locals(root)
            nulls = tuple(v.obj is NULL for v in stack)
            stack_vals = [v for v in stack if v.obj is not NULL]
            locals_t = Val(tuple(v.obj for v in values), items=list(values))
            stack_t = Val(tuple(v.obj for v in stack_vals), items=stack_vals)
            cap.result = Val((locals_t.obj, stack_t.obj), items=[locals_t, stack_t])
        # a frame that goes on holds its cells: a closure the segment made must hold them too
        live = [] if end is None else [root.fast[i] for i in _cell_slots(root.code)]
        in_locals = {id(v) for v in root.fast if isinstance(v, Val)}
        loop_iterators = frozenset(id(v) for v in stack if id(v) not in in_locals)
        with frame_cells(live):
            plan, outputs = build_plan(cap, loop_iterators)
        graph = cap.rec.finish(outputs)
        seg = Segment(
            self.code, self.site, end, stores, nulls, plan, graph, list(cap.rec.example_inputs), cap
        )
        self.host.on_segment(seg)


def _cell_slots(code: types.CodeType) -> list[int]:
    cells = set(code.co_cellvars)
    return [i for i, name in enumerate(localsplus_names(code)) if name in cells]


def _stored_locals(
    root: FrameMonitor, *, cells_only: bool = False
) -> tuple[tuple[tuple[str, str], ...], list[Val]]:
    code = root.code
    names = localsplus_names(code)
    free = set(code.co_freevars)
    cells = set(code.co_cellvars)
    stores: list[tuple[str, str]] = []
    values: list[Val] = []
    for i in sorted(root.stored):
        v = root.fast[i]
        name = names[i]
        if name in free or name in cells:
            content = v.require(CellBox).content
            kind = "free" if name in free else "cell"
        elif cells_only:
            continue
        else:
            content, kind = v, "fast"
        if content is UNBOUND:
            if cells_only:  # a cell the returning frame emptied (``del``): nothing to store
                continue
            if kind != "fast":
                raise Unsupported(f"cell {name!r} deleted inside a segment")
            content, kind = root.cap.const(None), "deleted"  # (`del attn_scores`)
        stores.append((name, kind))
        values.append(content)
    return tuple(stores), values


def _arm_finder(host: SegmentHost, frame: types.FrameType) -> None:
    """Trace ``frame`` until its stack holds no NULL, then ask the host to resume there."""
    code, info = _original(host, frame.f_code)
    injected = info.injected if info is not None else frozenset()
    to_original = info.to_original if info is not None else None
    view = StackView(frame)

    def finder(f: types.FrameType, event: str, arg: Any) -> TraceFn | None:
        if event == "return" or event == "exception":
            opcode_trace_off(f)
            _release(epoch)
            return None
        if event != "opcode" or prefix_event(f.f_code, f.f_lasti):
            return finder
        lasti = real_offset(f.f_code, f.f_lasti)
        if lasti in injected:
            if info is not None and lasti in info.block_sites:
                opcode_trace_off(f)  # an existing site takes over from here
                _release(epoch)
                return None
            return finder
        if lasti in _inside_call(f.f_code):
            return finder  # (inside a call's instruction sequence: not a site)
        depth = view.depth()
        stack = tuple(view.peek(i) for i in range(depth - 1, -1, -1))
        if any(x is NULL for x in stack):
            return finder
        opcode_trace_off(f)
        _release(epoch)
        offset = to_original[lasti] if to_original is not None else lasti
        try:
            host.resume(f, code, offset, stack)
        except Exception as exc:  # never reach the program
            host.on_failure(code, offset, exc)
            return None
        # whatever tracing resume left on the frame (a segment monitor, or a new finder armed
        # because that segment broke at once) must stay: our return value would replace it
        return frame_trace(f)

    current = gettrace()
    if getattr(_local, "finders", 0) == 0 or current is not _finder_global:
        # The first finder, or the finders counted so far lost the global trace function
        # their events need: CPython drops it when a trace callback raises (a warning the
        # program's filters make an error), and the program may replace it. Those finders
        # will never all release, so the count starts again; their late releases are ignored.
        _local.epoch = getattr(_local, "epoch", 0) + 1
        _local.finders = 0
        if current is not _finder_global:
            _local.prev = current
        settrace(_finder_global)
    epoch = _local.epoch
    _local.finders += 1
    opcode_trace_on(frame, finder)


_CALL_TAILS: weakref.WeakKeyDictionary[types.CodeType, frozenset[int]] = weakref.WeakKeyDictionary()


def _inside_call(code: types.CodeType) -> frozenset[int]:
    """Offsets inside a call's instruction sequence in ``code``, where no site may sit.

    After a ``KW_NAMES`` the call's keyword names live outside the stack; and where a call is
    more than one instruction (3.11's ``PRECALL``, ``CALL``) the ones after the first see a
    stack the compiler counts as already shortened (``bytecode`` computes a negative depth
    for a site block there, and a jump into the pair would skip the method unbinding).
    """
    found = _CALL_TAILS.get(code)
    if found is None:
        ops = [name for name, _ in INTERP.call_ops(0)]
        tails: set[int] = set()
        insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
        for i, inst in enumerate(insts):
            if inst.opname == "KW_NAMES":
                tails.update(x.offset for x in insts[i + 1 : i + 1 + len(ops)])
            elif len(ops) > 1 and inst.opname == ops[0]:
                tails.update(x.offset for x in insts[i + 1 : i + len(ops)])
        found = _CALL_TAILS[code] = frozenset(tails)
    return found


def _finder_global(frame: types.FrameType, event: str, arg: Any) -> None:
    return None


def _release(epoch: int) -> None:
    """One finder of count ``epoch`` lets go; the last restores the trace function before."""
    if epoch != getattr(_local, "epoch", 0):
        return
    _local.finders = max(0, getattr(_local, "finders", 0) - 1)
    if _local.finders == 0 and gettrace() is _finder_global:
        settrace(getattr(_local, "prev", None))


def start_segment(
    host: SegmentHost,
    frame: types.FrameType,
    site: int,
    stack: tuple[Any, ...],
    *,
    now: bool = False,
    dry: bool = False,
) -> TraceFn:
    """Monitor ``frame`` from original offset ``site`` (its stack values given).

    ``dry``: follow the frame only to find its next break; the segment records nothing.
    """
    return SegmentMonitor(host, frame, site, stack, dry=dry).start(now=now)


def is_monitoring() -> bool:
    """True while a monitor traces this thread (sites then stay out of its way)."""
    tracer = gettrace()
    return isinstance(getattr(tracer, "__self__", None), Monitor)
