"""``warnings.warn(...)``: an effect the mock replays as eager would issue it.

At record time the warning is issued natively (the monitored run is the real one). The record then
holds a write-back that, on every later hit, calls ``warnings.warn_explicit`` with what
``warnings.warn`` computed for its ``stacklevel`` at record time: the message, the category, and
the file, line, module name and module globals of the frame the warning is attributed to. The
registry is looked up in those globals at replay time (``__warningregistry__``, created if
missing, as ``warnings.warn`` does), so the ``"default"``/``"once"``/``"module"`` filters, a
``catch_warnings(record=True)``, a custom ``showwarning`` and ``filterwarnings`` calls made between
two calls behave as in eager.

Faithful when the attribution is the same on every call: the warning names a frame of the
recorded code (the calling frame or one of the monitored frames above it, and the Python glue
between them, such as ``Module._call_impl``). A ``stacklevel`` that reaches past the compiled
function (``warn(..., stacklevel=2)`` in it; torch's ``nn.Softmax()`` without a dim compiled
itself, whose ``stacklevel=5`` names the ``_call_impl`` that called it) names a frame that may be
another on every call: the record keeps how many levels above the compiled call's caller it is
(``_hops_above``: as eager counts them, MagPy's own frames not counted), and the mock finds the
frame at that place on every hit and warns from there (``replay_warning_above``: its file, line,
module and registry then); since that module may change, the record is guarded on no filter
turning the text into an exception for any module.

A filter that turns the warning into an exception would raise it in eager where the program
calls ``warn``, before the rest of the program's effects; the mock replays write-backs after the
graph ran, so the record is guarded on the filters not saying ``"error"`` for this warning (a
miss re-records, and the recording run raises as eager does).

A ``warnings.catch_warnings()`` block and a replayed warning never share a record (the mock does
not replay the block's filters; it replays its reset of every registry, ``pyobj.contexts``, but a
warning replayed after it is kept simple): the second one is a break.

The write-back reuses ``CallMethod``: ``replay_warning.__call__((message, category, filename,
lineno, module, module_globals))`` on a constant root, in program order with the other writes.
"""

from __future__ import annotations

import _warnings
import sys
import types
import warnings
import weakref
from typing import Any, cast

import attrs

from magpy_refgraph import Const, GuardKind, Outcome

from ...core import registry
from ...core.capture import Capture, Write
from ...core.frame import FrameKind, FrameMonitor, Inst
from ...core.registry import BUILTIN_HANDLERS
from ...core.values import Val
from . import warnspy
from .warnspy import target_frame as _target_frame

__all__ = [
    "SYNTHETIC_CODES",
    "note_catch_warnings",
    "record_warning",
    "record_warning_above",
    "replay_library_warnings",
    "replay_warning",
    "replay_warning_above",
]

_WARN_PARAMS = ("message", "category", "stacklevel", "source")
# code of MagPy's own stand-ins that a call was given instead of the program's callable (see
# ``_checkpoint``): eager has another frame there, so a warning naming one is a break
SYNTHETIC_CODES: set[types.CodeType] = set()
# captures that replay a warning / that entered a ``catch_warnings`` block: the mock does not
# replay the block's filters, so the two never meet in one record
_WARNED: weakref.WeakSet[Capture] = weakref.WeakSet()
_BLOCKS: weakref.WeakSet[Capture] = weakref.WeakSet()


@registry.NOTE_CATCH_WARNINGS.provide
def note_catch_warnings(m: FrameMonitor) -> None:
    """A ``warnings.catch_warnings()`` block is about to be made in this capture."""
    if m.cap in _WARNED:
        raise m.unsupported("warnings.catch_warnings() after a replayed warning")
    _BLOCKS.add(m.cap)


@registry.NATIVE_WARNING_REPLAYED.provide
def replay_native_warning(m: FrameMonitor, prefix: str) -> None:
    """The instruction of ``m`` that ran last issued, natively, the one warning starting with
    ``prefix`` (a UserWarning of torch's ``TORCH_WARN``, issued on every execution from the
    program's frame): the mock replays it. Its whole text is known only where the filters saw
    it (``warnspy.last_seen``): one a registry kept from them leaves the instruction a break."""
    texts = [t for t in warnspy.last_seen() if t.startswith(prefix)]
    if len(texts) != 1:
        raise m.unsupported(f"a native warning ({prefix!r}) the run did not see")
    record_warning(m, texts[0], UserWarning, m.frame, ran=True)


def replay_warning(args: tuple[Any, ...]) -> None:
    """Issue the warning ``warnings.warn`` issued at record time (called by the mock)."""
    message, category, filename, lineno, module, module_globals = args
    if "__warningregistry__" not in module_globals:
        module_globals["__warningregistry__"] = {}
    registry = module_globals["__warningregistry__"]
    _warnings.warn_explicit(message, category, filename, lineno, module, registry)


@attrs.frozen
class WarningRaises:
    """Whether the filters of warnings module ``w`` turn this warning into an exception (the
    filter lookup of ``warnings.warn_explicit``)."""

    text: str
    category: type
    module: Any
    lineno: int

    def __call__(self, w: Any) -> bool:
        for action, msg, cat, mod, ln in w.filters:
            if (
                _matches(msg, self.text)
                and issubclass(self.category, cat)
                and _matches(mod, self.module)
                and (ln == 0 or ln == self.lineno)
            ):
                return bool(action == "error")
        return bool(w.defaultaction == "error")


_ANY = object()  # (a module ``WarningRaises`` matches whatever the filter says of it)


def _matches(pattern: Any, arg: Any) -> bool:
    if pattern is None or arg is _ANY:
        return True
    if type(pattern) is str:  # an exact-text filter (the interpreter's own defaults)
        return bool(pattern == arg)
    return bool(pattern.match(arg))


def _bind(m: FrameMonitor, pos: list[Val], kw: dict[str, Val]) -> dict[str, Val]:
    if len(pos) > len(_WARN_PARAMS) or set(kw) - set(_WARN_PARAMS):
        raise m.unsupported("warnings.warn with unusual arguments")
    bound = dict(zip(_WARN_PARAMS, pos, strict=False))
    for k, v in kw.items():
        if k in bound:
            raise m.unsupported("warnings.warn with unusual arguments")
        bound[k] = v
    if "message" not in bound:
        raise m.unsupported("warnings.warn without a message")
    return bound


def _within(m: FrameMonitor, target: types.FrameType) -> bool:
    """``target`` is the calling frame or a frame between it and the capture's first frame."""
    root = m.cap.frames[0].frame if m.cap.frames else m.frame
    f: types.FrameType | None = m.frame
    while f is not None:
        if f is target:
            return True
        if f is root:
            return False
        f = f.f_back
    return False


def _warn(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if cap in _BLOCKS:
        # the block's filters are not replayed by the mock
        raise m.unsupported("warnings.warn in a record with a `warnings.catch_warnings()` block")
    bound = _bind(m, pos, kw)
    for v in bound.values():
        cap.observe(v)
    message = bound["message"].obj
    category = bound["category"].obj if "category" in bound else None
    stacklevel = bound["stacklevel"].obj if "stacklevel" in bound else 1
    if type(message) is not str:
        raise m.unsupported(f"warnings.warn of a {type(message).__name__}")
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise m.unsupported("warnings.warn with a category that is no Warning class")
    if type(stacklevel) is not int or ("source" in bound and bound["source"].obj is not None):
        raise m.unsupported("warnings.warn with unusual arguments")
    target = _target_frame(m.frame, stacklevel)
    hops = _hops_above(m, m.frame, stacklevel)
    if hops is not None:
        record_warning_above(m, message, category, hops)
        m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])
        return
    if target is None or not _within(m, target) or target.f_code in SYNTHETIC_CODES:
        raise m.unsupported(
            f"warnings.warn(stacklevel={stacklevel}) names a frame outside the compiled code"
        )
    record_warning(m, message, category, target)
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


def record_warning(
    m: FrameMonitor,
    message: str,
    category: type[Warning],
    target: types.FrameType,
    lineno: int | None = None,
    *,
    ran: bool = False,
) -> None:
    """The run issued ``message`` attributed to ``target`` (a monitored frame): the mock
    replays it on every hit (see the module doc). ``ran``: issued by the instruction whose
    outputs are being made, which has already run natively (not the one being handled now,
    which is then still watched: ``warnspy.note_replay``)."""
    cap = m.cap
    if cap in _BLOCKS:
        raise m.unsupported("a warning in a record with a `warnings.catch_warnings()` block")
    glob = target.f_globals
    module = glob.get("__name__")
    if "__name__" not in glob or not (module is None or isinstance(module, str)):
        module = "<string>"
    filename = target.f_code.co_filename
    if lineno is None:  # (the line the frame is at: it waits at the call that warned)
        lineno = target.f_lineno
    wmod = sys.modules["warnings"]
    raises = WarningRaises(message, category, module, lineno)
    if raises(wmod):
        raise m.unsupported("a warning the filters turn into an exception")
    guard = cap.root(Const(wmod), wmod)
    assert guard.node is not None
    cap.graph.observe(guard.node, GuardKind.CUSTOM, Outcome(raises, False))
    fields = (message, category, filename, lineno, module, glob)
    items = [cap.const(x) for x in fields[:5]] + [cap.root(Const(glob), glob)]
    target_fn = cap.root(Const(replay_warning), replay_warning)
    cap.writes.append(Write("callmethod", target_fn, "__call__", cap.new(fields, items=items)))
    _WARNED.add(cap)
    if not ran:
        warnspy.note_replay()  # (the warning the instruction issues natively is this one)


def _started_by(frame: types.FrameType, target: types.FrameType) -> bool:
    """``target`` is a frame the instruction running in ``frame`` started (the library's own:
    the same file and line on every call that takes the same path)."""
    f = target.f_back
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def replay_library_warnings(m: FrameMonitor, seen: list[str], calls: list[Any]) -> bool:
    """The instruction of ``m`` ran natively and issued warnings (``seen``: their texts, as the
    filters saw them; ``calls``: the ``warnings.warn`` calls noted meanwhile, ``warnspy``).
    When every one came from such a call that names a frame of the recorded code or one the
    instruction started, the mock replays them all (True); otherwise nothing is recorded (False:
    the instruction is a break)."""
    texts = {call.message for call in calls if call.target is not None}
    if m.cap in _BLOCKS or any(c.target is None for c in calls) or set(seen) - texts:
        return False
    replayed = []
    for call in calls:
        category = UserWarning if call.category is None else call.category
        if not (isinstance(category, type) and issubclass(category, Warning)):
            return False
        target = call.target
        if target is None or target.f_code in SYNTHETIC_CODES:
            return False
        if _within(m, target) or _started_by(m.frame, target):
            replayed.append((call.message, category, target, call.lineno))
            continue
        # (a frame above the compiled code: found again on every call, from the mock)
        hops = _hops_above(m, call.caller, call.stacklevel)
        if hops is None:
            return False
        replayed.append((call.message, category, hops, None))
    for message, category, target, lineno in replayed:
        if isinstance(target, int):
            record_warning_above(m, message, category, target)
        else:
            record_warning(m, message, category, target, lineno)
    return True


# ------------------------------------------------------------ warnings naming a frame above
_MAGPY_ROOTS = frozenset(
    ("magpy", "magpy_refgraph", "magpy_monitor", "magpy_codegen", "magpy_runtime")
)


def _own(f: types.FrameType) -> bool:
    """A frame of MagPy's: its packages' code, or code it generated (a mock, a guard)."""
    name = f.f_globals.get("__name__")
    if f.f_code.co_filename.startswith("<magpy-"):
        return True
    return isinstance(name, str) and name.split(".")[0] in _MAGPY_ROOTS


def _up(f: types.FrameType | None) -> types.FrameType | None:
    """One level of ``stacklevel`` up (``warnings`` skips importlib's bootstrap frames)."""
    f = f.f_back if f is not None else None
    while f is not None and warnspy.is_internal(f):
        f = f.f_back
    return f


def _past_magpy(f: types.FrameType | None) -> types.FrameType | None:
    """``f``, or the first frame above it that is not MagPy's."""
    while f is not None and _own(f):
        f = _up(f)
    return f


def _hops_above(m: FrameMonitor, start: types.FrameType | None, stacklevel: int) -> int | None:
    """The frame ``warnings.warn(stacklevel=...)`` called in ``start`` names in eager, where it
    is above the capture's first frame: how many levels above the first frame that is not
    MagPy's there (the compiled call's caller, ``hops`` 0). MagPy's frames above the capture
    are not counted (eager has none; ``explain`` runs the program under a few); None where the
    frame is inside the compiled code, or a frame of MagPy's is met inside it."""
    if start is None or type(stacklevel) is not int or stacklevel < 1 or warnspy.is_internal(start):
        return None
    root = m.cap.frames[0].frame if m.cap.frames else m.frame
    inside: set[int] = set()  # (the frames from ``start`` to the capture's first one)
    g: types.FrameType | None = start
    while g is not None and g is not root:
        inside.add(id(g))
        g = g.f_back
    if g is None:
        return None
    inside.add(id(root))
    f: types.FrameType | None = start
    hops: int | None = None
    for _ in range(stacklevel - 1):
        if hops is None:
            if f is None or _own(f):
                return None
            f = _up(f)
            if f is not None and id(f) not in inside:
                f, hops = _past_magpy(f), 0
        else:
            f, hops = _past_magpy(_up(f)), hops + 1
        if f is None:
            return None
    if hops is None or hops >= _MAX_HOPS or f is None or f.f_code in SYNTHETIC_CODES:
        return None
    return hops


_MAX_HOPS = 64


def record_warning_above(
    m: FrameMonitor, message: str, category: type[Warning], hops: int, *, ran: bool = False
) -> None:
    """The run issued ``message`` attributed to a frame ``hops`` levels above the compiled
    call's caller (``_hops_above``): the mock replays it on every hit, attributed to the frame
    at that place on that call (``replay_warning_above``), as eager's ``warnings.warn`` finds
    it. Which module that is may change from call to call, so the record is guarded on no
    filter turning this text and category into an exception for any module or line."""
    cap = m.cap
    if cap in _BLOCKS:
        raise m.unsupported("a warning in a record with a `warnings.catch_warnings()` block")
    wmod = sys.modules["warnings"]
    raises = WarningRaises(message, category, _ANY, 0)
    if raises(wmod):
        raise m.unsupported("a warning the filters may turn into an exception")
    guard = cap.root(Const(wmod), wmod)
    assert guard.node is not None
    cap.graph.observe(guard.node, GuardKind.CUSTOM, Outcome(raises, False))
    site = bool(cap.frames) and cap.frames[0].kind is FrameKind.SEGMENT
    fields = (message, category, hops, site)
    items = [cap.const(x) for x in fields]
    target_fn = cap.root(Const(replay_warning_above), replay_warning_above)
    cap.writes.append(Write("callmethod", target_fn, "__call__", cap.new(fields, items=items)))
    _WARNED.add(cap)
    if not ran:
        warnspy.note_replay()  # (as ``record_warning``)


def replay_warning_above(args: tuple[Any, ...]) -> None:
    """Issue a warning recorded by ``record_warning_above`` (called by the mock): attributed
    to the frame ``hops`` levels above the compiled call's caller (``site``: the mock runs in
    the program's frame, whose caller that is), MagPy's frames not counted."""
    message, category, hops, site = args
    f = _past_magpy(sys._getframe(1))
    if site:
        f = _past_magpy(_up(f))
    for _ in range(hops):
        f = _past_magpy(_up(f))
    if f is None:  # (a shorter stack than at record time: CPython's own fallback)
        depth, g = 1, cast(types.FrameType | None, sys._getframe(0))
        while g is not None:
            depth, g = depth + 1, g.f_back
        _warnings.warn(message, category, depth + 1)
        return
    glob = f.f_globals
    module = glob.get("__name__")
    if "__name__" not in glob or not (module is None or isinstance(module, str)):
        module = "<string>"
    if "__warningregistry__" not in glob:
        glob["__warningregistry__"] = {}
    registry = glob["__warningregistry__"]
    _warnings.warn_explicit(message, category, f.f_code.co_filename, f.f_lineno, module, registry)


BUILTIN_HANDLERS[id(warnings.warn)] = (warnings.warn, _warn)
