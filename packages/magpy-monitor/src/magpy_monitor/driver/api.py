"""The monitor's entry point: run one call under monitoring and return what was captured."""

from __future__ import annotations

from typing import Any

import attrs
import torch.fx as fx

from magpy_refgraph import InternalError, MagPyError, Plan

from ..core.capture import Capture
from .planner import build_plan
from .tracer import Monitor

__all__ = ["CaptureResult", "capture", "entry"]


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
) -> CaptureResult:
    """Call ``fn(*args, **kwargs)`` under monitoring.

    The program's own exceptions propagate unchanged. The result is returned whether or not
    capture succeeded; on success the plan and the finished fx graph are attached.
    """
    cap = Capture(name)
    cap.dynamic_paths = frozenset(dynamic_paths)
    cap.promote_all = promote_all
    cap.speculate = speculate
    mon = Monitor(cap, entry.__code__)
    value = mon.run(entry, fn, args, kwargs)
    out = CaptureResult(value=value, capture=cap, chain=list(mon.chain))
    if mon.failure is not None:
        failure = mon.failure
        out.failure = failure if isinstance(failure, MagPyError) else None
        return out
    try:
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
