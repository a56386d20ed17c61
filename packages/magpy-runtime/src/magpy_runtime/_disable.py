"""``magpy.disable``: code that runs uncompiled, as ``torch.compiler.disable`` asks of
TorchDynamo.

- ``@magpy.disable`` on a function: called from a compiled function, the call is a graph break
  and the function runs natively, never compiled (MagPy's monitor does not follow it); any
  compiled callable it calls runs its original code. ``torch.compiler.disable(fn)`` gets the
  same treatment (``recursive=False`` too: the function and what it calls run natively).
- ``with magpy.disable():``: on this thread, every compiled callable called inside runs its
  original code, and the sites of split programs step aside.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["disable", "disabled"]

_LOCAL = threading.local()
MARK = "_magpy_disable"  # the attribute the monitor looks for (it cannot import this package)


def disabled() -> bool:
    """MagPy steps aside on this thread (inside ``magpy.disable``)."""
    return getattr(_LOCAL, "depth", 0) > 0


class Disabled:
    """``with magpy.disable():`` (and, called on a function, the decorator)."""

    def __enter__(self) -> Disabled:
        _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
        return self

    def __exit__(self, *exc: object) -> None:
        _LOCAL.depth -= 1

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return disable(fn)


def disable(fn: Callable[..., Any] | None = None) -> Any:
    """``magpy.disable(fn)`` / ``@magpy.disable``: ``fn`` runs uncompiled (see the module's
    docstring); ``magpy.disable()``: a context manager doing the same for a block."""
    if fn is None:
        return Disabled()
    if not callable(fn):
        raise TypeError(f"magpy.disable needs a function, got {type(fn).__name__}")

    @functools.wraps(fn)
    def uncompiled(*args: Any, **kwargs: Any) -> Any:
        with Disabled():
            return fn(*args, **kwargs)

    setattr(uncompiled, MARK, True)
    return uncompiled
