"""The attribute rule of numpy arrays made by the run (see ``core.registry``)."""

from __future__ import annotations

from ...core.attributes import Read, attr_rule
from ...core.frame import FrameMonitor
from ...core.registry import OUTSIDE_ARRAY
from ...core.values import Val
from .ndarrays import array_attr, is_array, outside_array

__all__: list[str] = []


@attr_rule("array made by the run", lambda r: r.base.const and is_array(r.obj))
def _array_attr(m: FrameMonitor, r: Read) -> Val:
    return array_attr(m, r.base, r.name, r.real)  # a.T, a.shape of an array made by the run


OUTSIDE_ARRAY.provide(outside_array)
