"""``python -m magpy`` / the ``magpy`` command: ``magpy demo``, ``bench``, ``explain``,
``cache`` and ``run``.

The implementation lives in :mod:`magpy._cli`.
"""

from __future__ import annotations

import sys

from magpy._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
