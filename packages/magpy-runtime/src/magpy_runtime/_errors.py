"""What the runtime raises and warns: ``FullGraphError`` and ``MagPyWarning``."""

from __future__ import annotations

from magpy_refgraph import Unsupported

__all__ = ["FullGraphError", "MagPyWarning"]


class FullGraphError(Unsupported, RuntimeError):
    """``fullgraph=True`` and the program could not be captured as one graph."""


class MagPyWarning(RuntimeWarning):
    """MagPy ran something eagerly instead of compiled (results are unaffected)."""
