"""The monitor's entry point: run one call under monitoring and return what was captured."""

from __future__ import annotations

from typing import Any

import attrs
import torch
import torch.fx as fx

from magpy_refgraph import InternalError, MagPyError, Plan

from ..core.capture import Capture
from .planner import build_plan
from .tracer import Monitor

__all__ = ["CaptureResult", "capture", "entry", "finish", "prepare"]


def entry(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The root frame of every monitored call: the program's call as the user wrote it."""
    return fn(*args, **kwargs)


@attrs.define
class CaptureResult:
    """Outcome of one monitored call.

    ``value``: the program's real result. ``failure``: why capture stopped (an ``Unsupported``
    graph break or an ``InternalError``), or None. ``plan``/``graph``/``example_inputs``: the
    record to compile when capture succeeded.
    """

    value: Any
    capture: Capture
    failure: MagPyError | None = None
    chain: list[Any] = attrs.field(factory=list)
    plan: Plan | None = None
    graph: fx.Graph | None = None
    example_inputs: list[Any] = attrs.field(factory=list)


def capture(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    name: str = "",
    dynamic_paths: Any = frozenset(),
    promote_all: bool = False,
    speculate: bool = True,
    verify: bool = False,
) -> CaptureResult:
    """Call ``fn(*args, **kwargs)`` under monitoring.

    The program's own exceptions propagate unchanged. The result is returned whether or not
    capture succeeded; on success the plan and the finished fx graph are attached. ``verify``:
    check the capture's RefGraph after every mutation (the runtime's ``config.verify``).
    """
    mon = prepare(
        name=name,
        dynamic_paths=dynamic_paths,
        promote_all=promote_all,
        speculate=speculate,
        verify=verify,
    )
    value = mon.run(entry, fn, args, kwargs)
    return finish(mon, value)


def prepare(
    *,
    name: str = "",
    dynamic_paths: Any = frozenset(),
    promote_all: bool = False,
    speculate: bool = True,
    verify: bool = False,
    entry_fn: Any = entry,
    stop_at_break: Any = None,
) -> Monitor:
    """A monitor for one call, not started: ``capture`` in parts, for a caller that puts no
    frame of its own between its caller and the program. It calls ``mon.trace_on()``, then
    ``entry_fn(fn, args, kwargs)`` (``entry`` or a function with the same body, whose frame
    becomes the root), then ``mon.trace_off()`` (also when the call raised) and ``finish``."""
    cap = Capture(name, verify=verify)
    cap.dynamic_paths = frozenset(dynamic_paths)
    cap.promote_all = promote_all
    cap.speculate = speculate
    mon = Monitor(cap, entry_fn.__code__)
    mon.stop_at_break = stop_at_break  # (fullgraph=True: raise at the break, see Monitor)
    return mon


def finish(mon: Monitor, value: Any) -> CaptureResult:
    """What the stopped monitor ``mon`` captured of the call that returned ``value``."""
    cap = mon.cap
    out = CaptureResult(value=value, capture=cap, chain=list(mon.chain))
    if mon.failure is not None:
        failure = mon.failure
        out.failure = failure if isinstance(failure, MagPyError) else None
        return out
    try:
        with torch._C.DisableTorchFunction():  # (MagPy's reads: no program hook sees them)
            plan, outputs = build_plan(cap)
            out.graph = cap.rec.finish(outputs)
    except MagPyError as exc:
        out.failure = exc
        return out
    except Exception as exc:  # a planner bug must not reach the program: this call is eager
        out.failure = InternalError(f"planning failed: {type(exc).__name__}: {exc}")
        return out
    out.plan = plan
    out.example_inputs = list(cap.rec.example_inputs)
    return out
