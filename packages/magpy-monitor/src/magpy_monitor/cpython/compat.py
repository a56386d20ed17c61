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

__all__ = ["SUPPORTED", "set_compiling"]


def set_compiling(value: bool) -> bool:
    """Set what ``torch.compiler.is_compiling()`` answers; return what it answered before.

    While MagPy monitors a run it compiles that run, so the program sees ``True`` there, as it
    does under TorchDynamo (which holds the same flag for its compile session): code such as
    transformers' mask helpers then takes its compile-friendly path instead of reading tensor
    values. Like Dynamo's, the flag is process-wide.
    """
    import torch.compiler

    old = bool(torch.compiler._is_compiling_flag)
    torch.compiler._is_compiling_flag = value
    return old
