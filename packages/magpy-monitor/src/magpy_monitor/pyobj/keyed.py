"""``min``/``max`` with a Python ``key`` (native code calling the key back on every item):
the calls are followed, as ``sorted``'s are (``highorder``)."""

from __future__ import annotations

from typing import Any

import torch

from ..bytecode.iteration import consume_items
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS
from ..core.values import Val
from . import builtins as _builtins  # noqa: F401  (its min/max handlers, wrapped below)
from .highorder import _is_python, follow_callbacks

__all__: list[str] = []


def _keyed_extreme(plain: Any) -> Any:
    """``min``/``max`` with a Python ``key``: native code calls the key back on every item, in
    order, and the key may read state (``max(names, key=lambda n: weights[n])``). The calls are
    followed as ``sorted``'s are, what they return is guarded, and the result is the item it
    picked; without a Python key, ``plain`` (the handler of ``pyobj/builtins``)."""

    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        key = kw.get("key")
        if key is None or key.obj is None or not _is_python(key.obj):
            plain(m, inst, pos, kw)
            return
        cap = m.cap
        if set(kw) - {"key", "default"}:
            raise m.unsupported("min()/max() with unusual keywords")
        items = consume_items(m, pos[0]) if len(pos) == 1 else list(pos)
        if items is None:
            raise m.unsupported("min()/max() with a key over an iterable of unknown contents")
        default = kw.get("default")

        def make(real: list[Any]) -> list[Val]:
            for r in p.callback_results:
                if isinstance(r.obj, torch.Tensor):
                    raise m.unsupported("min()/max() by tensor values")
                cap.observe(r)
            for v in items:
                if v.obj is real[0]:
                    return [v]
            if default is not None and default.obj is real[0]:
                return [default]
            raise m.unsupported("min()/max() gave an object the monitor did not see")

        p = m.expect_outputs(inst, 1, make)
        follow_callbacks(m, p, key, lambda k: [items[k]] if k < len(items) else [])

    return handle


for _extreme in (min, max):
    BUILTIN_HANDLERS[id(_extreme)] = (_extreme, _keyed_extreme(BUILTIN_HANDLERS[id(_extreme)][1]))
