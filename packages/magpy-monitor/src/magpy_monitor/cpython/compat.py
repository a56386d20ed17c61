"""The one place that knows which CPython MagPy runs on.

The monitor reads interpreter frames with ctypes and decodes 3.11 bytecode; both are specific to
one minor version, so any other version fails here, at import, with a clear message.
"""

from __future__ import annotations

import sys

SUPPORTED = (3, 11)

if sys.version_info[:2] != SUPPORTED:  # pragma: no cover - exercised only on other Pythons
    raise ImportError(
        f"magpy-monitor supports CPython {SUPPORTED[0]}.{SUPPORTED[1]} only; this is "
        f"{sys.implementation.name} {sys.version.split()[0]}. Install MagPy under Python 3.11."
    )
if sys.implementation.name != "cpython":  # pragma: no cover
    raise ImportError("magpy-monitor needs CPython (it reads interpreter frames)")

__all__ = ["SUPPORTED"]
