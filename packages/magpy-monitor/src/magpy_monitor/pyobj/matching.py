"""Which shadow stands for which real object, when native code hands back objects it made
anew or rearranged (``sorted``, ``filter``, a callback's arguments)."""

from __future__ import annotations

from typing import Any

from magpy_refgraph import InternalError

from ..core.values import Val
from ..core.valuetypes import is_value_type

__all__ = ["match_order", "same_value", "stands_for"]


def same_value(a: Any, b: Any) -> bool:
    """Equal values of one type (NaN: equal to nothing, itself included, so both NaN)."""
    return type(a) is type(b) and (a == b or (a != a and b != b))


def stands_for(v: Val, obj: Any) -> bool:
    """``v`` stands for ``obj``: the same object, or an equal value of a value type (an int
    above 256 or a float that the consumer's own iteration made anew: ``sorted(range(300,
    310))`` gets other int objects than the monitor's walk over the same range), or a tuple the
    monitor built (``dict.items()``, ``zip``) standing for the real, equal one."""
    if v.obj is obj:
        return True
    if is_value_type(obj):
        return same_value(v.obj, obj)
    if type(obj) is not tuple or not isinstance(v.items, list) or len(v.items) != len(obj):
        return False
    return all(stands_for(x, y) for x, y in zip(v.items, obj, strict=True))


def match_order(items: list[Val], result: list[Any]) -> list[Val]:
    """The shadows of ``result``'s elements, taken from ``items`` (sorted/filter): the first
    one that stands for each (equal elements keep their order, as a stable sort keeps it)."""
    pool = list(items)
    out = []
    for obj in result:
        for i, v in enumerate(pool):
            if stands_for(v, obj):
                out.append(pool.pop(i))
                break
        else:
            raise InternalError(f"a {type(obj).__name__} in the result is not among the inputs")
    return out
