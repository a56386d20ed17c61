"""numpy's error state (``np.errstate``, ``np.seterr``): library state that decides a result.

numpy arithmetic that meets a floating-point condition (a division by zero, an overflow, an
invalid operation, an underflow) gives ``inf``/``nan``/``0`` where the state says ``"ignore"``,
warns (``RuntimeWarning``) under ``"warn"``, raises ``FloatingPointError`` under ``"raise"``, and
calls or prints under ``"call"``/``"print"``/``"log"``. What the monitor keeps of numpy
arithmetic over guarded values is a constant of the record; where the arithmetic met such a
condition, that constant holds only under the state it was made in. So:

- the state the record was made in is guarded (``ErrorState``: ``np.geterr()`` read again by the
  guard), and a program that sets ``np.errstate(divide="raise")`` between calls misses and runs
  the operation natively (it raises there, as in eager);
- a warning it issued makes the instruction a break anyway (``libs.stdlib.warnspy``);
- a state that calls back or prints (``"call"``, ``"print"``, ``"log"``) is a break: the mock
  would not do it again.

Whether the condition was met is asked by running the operation again, once, under
``np.errstate(all="raise")`` (numpy's functions and operators the monitor folds are pure); no
condition, no guard: the same inputs meet none on any call.
"""

from __future__ import annotations

import importlib
from typing import Any

import attrs

from magpy_refgraph import Const, GuardKind, Outcome

from ...core import registry
from ...core.frame import FrameMonitor

__all__ = ["ErrorState", "check_error_state", "numpy_involved"]

try:
    np: Any = importlib.import_module("numpy")
except ImportError:  # numpy is optional
    np = None

_CALLS_OUT = ("call", "print", "log")


@attrs.frozen
class ErrorState:
    """``np.geterr()``, as a sorted tuple of items (a guard's outcome function)."""

    def __call__(self, _: Any) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(np.geterr().items()))


def numpy_involved(args: list[Any], result: Any) -> bool:
    """A numpy array or scalar among the operands or as the result."""
    if np is None:
        return False
    kinds = (np.ndarray, np.generic)
    return isinstance(result, kinds) or any(isinstance(a, kinds) for a in args)


def _meets_condition(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    try:
        with np.errstate(all="raise"):
            fn(*args, **kwargs)
    except FloatingPointError:
        return True
    except Exception:  # (it fails otherwise: no floating-point condition decided it)
        return False
    return False


@registry.NUMPY_ERROR_STATE.provide
def check_error_state(
    m: FrameMonitor, fn: Any, args: list[Any], kwargs: dict[str, Any], result: Any
) -> None:
    """``fn(*args, **kwargs)`` gave ``result`` natively: where numpy arithmetic met a
    floating-point condition, guard the error state it ran under (see the module doc)."""
    if not numpy_involved([*args, *kwargs.values()], result):
        return
    if not _meets_condition(fn, args, kwargs):
        return
    modes = np.geterr()
    if any(mode in _CALLS_OUT for mode in modes.values()):
        raise m.unsupported(f"numpy error handling {modes} calls out or prints")
    cap = m.cap
    root = cap.root(Const(np.geterr), np.geterr)
    assert root.node is not None
    cap.graph.observe(root.node, GuardKind.CUSTOM, Outcome(ErrorState(), ErrorState()(None)))
