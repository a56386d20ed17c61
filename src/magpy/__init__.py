"""MagPy: a JIT compiler for PyTorch.

This meta-package only re-exports the public API of ``magpy_runtime`` (``compile``, ``explain``,
``reset``, ``stats``, ``annotate``, ...). Everything is defined in the ``magpy-*`` packages.
"""

import magpy_runtime as _runtime
from magpy_runtime import *  # noqa: F403  (the surface is defined once, in magpy_runtime.__all__)

__version__ = "0.1.0"
__all__ = list(_runtime.__all__)
