"""The one place that reads which CPython MagPy runs on.

Everything the monitor, codegen and the runtime need to know about one interpreter version is
an attribute of ``INTERP`` (``cpython/interp.py``: the interface; ``py311.py``, ``py312.py``,
``py313.py``: the implementations), chosen here, once, at import. Any other version or
implementation fails here with a clear message.
"""

from __future__ import annotations

import sys

SUPPORTED = ((3, 11), (3, 12), (3, 13))
VERSION: tuple[int, int] = (sys.version_info[0], sys.version_info[1])

if VERSION not in SUPPORTED:  # pragma: no cover - exercised only on other Pythons
    raise ImportError(
        f"magpy-monitor supports CPython 3.11, 3.12 and 3.13; this is "
        f"{sys.implementation.name} {sys.version.split()[0]}."
    )
if sys.implementation.name != "cpython":  # pragma: no cover
    raise ImportError("magpy-monitor needs CPython (it reads interpreter frames)")
if getattr(sys, "_is_gil_enabled", lambda: True)() is False:  # pragma: no cover
    raise ImportError("magpy-monitor does not support free-threaded CPython builds")

__all__ = ["SUPPORTED", "VERSION"]
