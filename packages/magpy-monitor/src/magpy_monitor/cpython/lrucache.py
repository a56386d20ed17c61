"""Reading what a ``functools.lru_cache`` wrapper holds, without calling it.

Calling the wrapper to learn whether it still holds a result is an effect the program can see:
``cache_info()`` counts the call as a hit or a miss, a hit moves the entry to the front of the
LRU order, and a miss runs the function and may evict another entry. A guard must only look.
Python has no API for that, but the C wrapper (``_functools._lru_cache_wrapper``, the same on
3.11-3.13) shows its cache to the garbage collector: ``gc.get_referents(wrapper)`` gives the
wrapper's type, then for each link of a bounded cache (oldest first) its key, its result and
the link's type, then the cache dict (``key -> result`` when unbounded, ``key -> link``
otherwise), then the function, the keyword marker and the rest.

The key is built as the wrapper builds it (``lru_cache_make_key``): the argument itself for one
``int`` or ``str`` argument of an untyped call without keywords, else the argument tuple,
followed for keywords by the marker and the names and values, and for a typed cache by the
types of the arguments and of the keyword values.

``AVAILABLE`` says the layout was found as described (checked once at import on probe caches);
where it is not, the monitor treats a cached call as a break.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

__all__ = ["AVAILABLE", "MISSING", "cache_key", "cached_result"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def _layout(wrapper: Any) -> tuple[list[Any], dict[Any, Any], int] | None:
    """``(referents, cache dict, number of links)``, or None where it is not as described."""
    refs = gc.get_referents(wrapper)
    if not refs or refs[0] is not type(wrapper):
        return None
    i = 1
    while i < len(refs) and type(refs[i]) is not dict:  # (keys are hashable: never a dict)
        i += 3
    if i >= len(refs):
        return None
    cache = refs[i]
    links = (i - 1) // 3
    if links and len(cache) != links:
        return None
    return refs, cache, links


def _marker(wrapper: Any) -> Any:
    found = _layout(wrapper)
    if found is None:
        return None
    refs, _cache, links = found
    i = 1 + 3 * links
    mark = refs[i + 2] if i + 2 < len(refs) else None  # (cache, function, marker)
    return mark if type(mark) is object else None


def cache_key(wrapper: Any, args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...]) -> Any:
    """The key ``wrapper(*args, **dict(kwargs))`` stores its result under (MISSING: unknown)."""
    typed = bool(wrapper.cache_parameters().get("typed"))
    if not typed and not kwargs:
        if len(args) == 1 and type(args[0]) in (int, str):
            return args[0]
        return args
    key: list[Any] = list(args)
    if kwargs:
        mark = _marker(wrapper)
        if mark is None:
            return MISSING
        key.append(mark)
        for name, value in kwargs:
            key += [name, value]
    if typed:
        key += [type(a) for a in args]
        key += [type(v) for _, v in kwargs]
    return tuple(key)


def cached_result(wrapper: Any, key: Any, *, bounded: bool) -> Any:
    """What ``wrapper`` holds under ``key`` (MISSING: nothing, or a layout not understood);
    ``bounded``: its ``maxsize`` is not None."""
    found = _layout(wrapper)
    if found is None:
        return MISSING
    refs, cache, links = found
    if key not in cache:
        return MISSING
    if not bounded:  # the dict holds the results
        return cache[key] if not links else MISSING
    keys = refs[1 : 1 + 3 * links : 3]
    try:
        return refs[2 + 3 * keys.index(key)]
    except ValueError:
        return MISSING


def _self_test() -> bool:
    def twice(n: Any, k: int = 0) -> Any:
        return [n, k]

    try:
        for maxsize, typed in ((None, False), (4, False), (4, True), (None, True)):
            w = functools.lru_cache(maxsize=maxsize, typed=typed)(twice)
            calls = [((3,), ()), (("s",), ()), ((2.5,), ()), ((1,), (("k", 2),))]
            for args, kw in calls:
                w(*args, **dict(kw))
            for args, kw in calls:
                got = cached_result(w, cache_key(w, args, kw), bounded=maxsize is not None)
                if got != twice(*args, **dict(kw)):
                    return False
            if cached_result(w, cache_key(w, (7,), ()), bounded=True) is not MISSING:
                return False
            info = w.cache_info()
            if (info.hits, info.misses) != (0, len(calls)):
                return False
    except Exception:
        return False
    return True


AVAILABLE = _self_test()
