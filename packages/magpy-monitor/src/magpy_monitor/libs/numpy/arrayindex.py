"""numpy arrays in a tensor subscript (``x[:, self.indices]``, ``x[mask]``): constant tensors.

Torch turns an ndarray in an index into the tensor of its values (an integer array indexes,
a bool array masks), so the graph indexes with a constant tensor of the same values, built on
every call. The values are the record's: an array the run made from guarded values is a
constant already (``ndarrays``); one from outside is guarded by its contents (``outside``).
Only int64 and bool arrays are taken (those index the same way as the tensor of their values);
any other dtype, or an outside array that cannot be guarded, stays a break.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from magpy_refgraph import Unsupported

from ...core import registry
from ...core.capture import Capture
from ...core.values import Val
from .ndarrays import constant_tensor, is_fresh_array
from .outside import guard_outside

__all__ = ["array_index"]

try:
    np: Any = importlib.import_module("numpy")
except ImportError:  # numpy is optional
    np = None


@registry.ARRAY_INDEX.provide
def array_index(cap: Capture, key: Val) -> Val | None:
    """``key`` with its arrays replaced by constant tensors; None where it holds none."""
    if np is None:
        return None
    if type(key.obj) is np.ndarray:
        return _index_tensor(cap, key)
    if type(key.obj) is not tuple or not any(type(x) is np.ndarray for x in key.obj):
        return None
    if isinstance(key.items, list):
        parts = key.items
    elif key.const:  # (a tuple of constants: run-made arrays among them are known)
        parts = [cap.known(x) or cap.const(x) for x in key.obj]
    else:
        return None
    items = [_index_tensor(cap, x) if type(x.obj) is np.ndarray else x for x in parts]
    return cap.new(tuple(x.obj for x in items), items=items)


def _index_tensor(cap: Capture, v: Val) -> Val:
    arr = v.obj
    if arr.dtype not in (np.dtype(np.int64), np.dtype(np.bool_)):
        raise Unsupported(f"a {arr.dtype} ndarray as a tensor index")
    if not is_fresh_array(cap, v) and not guard_outside(cap, v):
        raise Unsupported("a ndarray read from outside as a tensor index (its contents unguarded)")
    t = torch.from_numpy(arr.copy())
    return cap.op_result(t, constant_tensor(cap, t, "a numpy index"))
