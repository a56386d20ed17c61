"""What a compiled callable's stored records are keyed by (``_store``): its code (module,
qualified name and a digest of the code: never a file's path, so that another checkout, or a
bundle loaded on another machine, finds them); its settings are `Settings.stored_key`."""

from __future__ import annotations

import types
from typing import Any

import torch

from ._persist import function_digest

__all__ = ["code_key"]


def code_key(model: Any) -> dict[str, Any] | None:
    """The code of ``model`` as a key's part (None: it cannot be found again by name)."""
    if isinstance(model, torch.nn.Module):
        cls = type(model)
        target, kind = getattr(cls, "forward", None), "module"
        module: str | None = cls.__module__
        qualname = cls.__qualname__
    else:
        target, kind = getattr(model, "__func__", model), "function"
        module = getattr(target, "__module__", None)
        qualname = str(getattr(target, "__qualname__", ""))
    if not isinstance(target, types.FunctionType) or not isinstance(module, str):
        return None
    if "<" in qualname:
        return None  # a local function or class, or a lambda: not found again by name
    # (no file path: a checkout elsewhere, or a bundle loaded on another machine, finds the
    # same module, name and code under another path)
    code = function_digest(target)
    return {"kind": kind, "module": module, "qualname": qualname, "code": code}
