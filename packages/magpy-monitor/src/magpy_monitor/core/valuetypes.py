"""Which objects are *values* (their identity never matters) and what node kind an object gets.

A value (an int, a str, a dtype, a tuple of values...) is guarded by value and never registered
by identity in the capture's heap; everything else is a heap object, followed by identity. The
modules in ``FROZEN_MODULE_ROOTS`` are libraries: their functions are not followed line by line
where the monitor models them, and what a program reads from them is guarded where it lives
(``core/attributes.py``, "library module").
"""

from __future__ import annotations

import enum
import sys
import types
from typing import Any

import torch

from magpy_refgraph import NodeKind, Unsupported

__all__ = [
    "FROZEN_MODULE_ROOTS",
    "VALUE_TYPES",
    "fx_constant_ok",
    "hashed_by_python",
    "hooked_tensor_type",
    "is_value_type",
    "library_module",
    "node_kind",
    "plain_scalar",
    "tensor_flags",
]

VALUE_TYPES: tuple[type, ...] = (
    int,
    float,
    bool,
    complex,
    str,
    bytes,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
    range,
    slice,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)
# Modules whose attributes are treated as constants once the module object itself is guarded.
FROZEN_MODULE_ROOTS = frozenset(
    "torch math operator builtins functools itertools collections typing enum re string json "
    "numpy copy dataclasses inspect warnings logging abc types cmath numbers".split()
)


def hooked_tensor_type(kind: Any) -> bool:
    """A tensor subclass with a ``__torch_function__`` of its own (``Parameter``'s turns the
    protocol off): MagPy's own reads of such a tensor's metadata must not reach the hook."""
    if not (isinstance(kind, type) and issubclass(kind, torch.Tensor)):
        return False
    hook = kind.__torch_function__
    return hook is not torch._C._disabled_torch_function_impl and (
        getattr(hook, "__func__", None) is not _PLAIN_HOOK
    )


_PLAIN_HOOK = getattr(torch.Tensor.__torch_function__, "__func__", None)


def library_module(module: Any) -> bool:
    """A module (or a module's globals) of torch's, numpy's or the standard library's
    (``FROZEN_MODULE_ROOTS``)."""
    name = module.get("__name__", "") if type(module) is dict else getattr(module, "__name__", "")
    return str(name).split(".")[0] in FROZEN_MODULE_ROOTS


def is_value_type(obj: Any) -> bool:
    """True for immutable values whose identity never matters (ints, strs, dtypes, ...)."""
    if isinstance(obj, (VALUE_TYPES, enum.Enum)):
        return True
    t = type(obj)
    if t in (tuple, frozenset, torch.Size):
        return all(is_value_type(x) for x in obj)
    # numpy scalars (np.int64(3), np.float32(0.5)) are immutable values too; arrays are not
    return t.__module__ == "numpy" and t.__name__ != "ndarray" and getattr(obj, "shape", 1) == ()


def node_kind(obj: Any) -> NodeKind:
    """The RefGraph node kind of ``obj``."""
    if isinstance(obj, torch.Tensor):
        return NodeKind.TENSOR
    if obj is None:
        return NodeKind.NONE
    if isinstance(obj, str | bytes):
        return NodeKind.STRING
    if isinstance(obj, int | float | complex):
        return NodeKind.SCALAR
    if isinstance(obj, tuple):
        return NodeKind.TUPLE
    if isinstance(obj, list):
        return NodeKind.LIST
    if isinstance(obj, dict):
        return NodeKind.DICT
    if isinstance(obj, set | frozenset):
        return NodeKind.SET
    if isinstance(obj, torch.nn.Module):
        return NodeKind.MODULE
    if isinstance(obj, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        return NodeKind.FUNCTION
    if isinstance(obj, type):
        return NodeKind.CLASS
    if isinstance(obj, types.CellType):
        return NodeKind.CELL
    return NodeKind.OBJECT


def plain_scalar(obj: Any) -> Any:
    """A numpy scalar (``x / np.sqrt(d)``) as the Python number torch takes it for: the graph's
    code must not name numpy (``np.float64(2.0)`` is no constant an fx module can print)."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.generic):
        if isinstance(obj, np.bool_):  # torch takes it for a float: x_int * np.True_ is float
            raise Unsupported("numpy bool passed to a tensor operation")
        return obj.item()
    if type(obj) in (list, tuple):
        return type(obj)(plain_scalar(x) for x in obj)
    return obj


def fx_constant_ok(obj: Any) -> bool:
    """``obj`` can be a constant of an fx graph (values, generators, dtype infos, functions)."""
    if is_value_type(obj):
        return True
    if type(obj) in (list, tuple):
        return all(fx_constant_ok(x) for x in obj)
    return isinstance(
        obj,
        torch.Generator
        | torch.finfo
        | torch.iinfo
        | types.FunctionType
        | types.BuiltinFunctionType,
    )


def tensor_flags(t: torch.Tensor, *, offset: bool = False) -> tuple[Any, ...]:
    """The properties of ``t`` beyond class, dtype, device, sizes and strides that a program
    may read as constants: ``(storage_offset, is_leaf, is_inference, is_conj, is_neg, layout,
    names)`` (the end of a TENSOR_META payload, guarded with the rest); the storage offset is
    None unless ``offset`` (the program read an offset: ``Capture.read_offsets``)."""
    names = getattr(t, "names", None)  # (a fake tensor has none)
    if names is not None and all(n is None for n in names):
        names = None
    at = t.storage_offset() if offset and t.layout is torch.strided else None
    return (at, t.is_leaf, t.is_inference(), t.is_conj(), t.is_neg(), t.layout, names)


def hashed_by_python(obj: Any) -> bool:
    """A dict key or set element whose ``__hash__`` or ``__eq__`` is the program's Python: a
    dict runs it natively, unseen, and its answer may change between calls while neither the
    key nor the dict does (it may read any state). An enum member's are fixed by its name."""
    kind = type(obj)
    if isinstance(obj, enum.Enum):
        return False
    return any(
        isinstance(getattr(kind, name, None), types.FunctionType) for name in ("__hash__", "__eq__")
    )
