"""fx keeps the source of each GraphModule's ``forward`` for good: in its loader's cache and as a
lazy linecache entry, under a key that is the code's filename. ``tie_fx_source`` ties both to
the code object, so that both go when it does (a dropped record's graph takes them along)."""

from __future__ import annotations

import functools
import linecache
import types
import weakref
from typing import Any

import torch.fx as fx
from torch.fx import graph_module as fx_graph_module

__all__ = ["tie_fx_source"]

_fx_sources: dict[str, weakref.ref[types.CodeType]] = {}


def tie_fx_source(gm: fx.GraphModule) -> None:
    code = getattr(getattr(type(gm), "forward", None), "__code__", None)
    cache = getattr(getattr(fx_graph_module, "_loader", None), "eval_cache", None)
    if not isinstance(code, types.CodeType) or not isinstance(cache, dict):
        return
    key = code.co_filename
    if key in cache and key not in _fx_sources:
        _fx_sources[key] = weakref.ref(code, functools.partial(_forget_fx_source, key, cache))


def _forget_fx_source(key: str, cache: dict[str, Any], _ref: Any) -> None:
    _fx_sources.pop(key, None)
    cache.pop(key, None)
    linecache.cache.pop(key, None)
