"""``INTERP``: the ``Interpreter`` of the running CPython, chosen once, at import."""

from __future__ import annotations

from . import py311, py312, py313
from .compat import VERSION
from .interp import Interpreter, prime_opcode_events

__all__ = ["INTERP"]

INTERP: Interpreter = {(3, 11): py311.INTERP, (3, 12): py312.INTERP, (3, 13): py313.INTERP}[VERSION]
if INTERP.opcode_events_need_priming:
    prime_opcode_events()
