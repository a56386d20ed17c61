"""Identity tests: ``a is b``, and ``a == b`` / ``a != b`` where equality is identity.

Whether two shadows name one object is decided by the record's guards as follows:

* a value (int, str, None, ...) is guarded by value, as any read value;
* a class, function, module or code object is guarded by identity (``observe``);
* an entry tensor is a graph input (inputs are kept pairwise distinct);
* for other objects (instances), which ones are the same is kept by the alias guards (two reads
  of one object share one node) and, when they differ, by requiring the two entry objects to
  stay distinct (``Capture.distinct_nodes``). An object made during the run is never an entry
  object. An entry object compared with a constant object of the same type is pinned by
  identity.

``==`` of two objects whose classes keep ``object.__eq__``/``object.__ne__`` (modules, plain
instances, classes) is ``is``; so is ``==`` of such an object and a builtin value
(``module == "focal_loss"``): both sides answer NotImplemented and Python falls back to identity.
The classes are guarded with the objects, so the record holds on every call it admits.
"""

from __future__ import annotations

import operator
import types
from typing import Any

import torch

from ..core.capture import is_value_type
from ..core.frame import FrameMonitor, Inst
from ..core.values import Val

__all__ = ["guard_identity", "identity_compare"]

# exact types whose ``__eq__``/``__ne__`` answer NotImplemented for an object of another type
_FOREIGN_NOT_EQUAL = (str, bytes, int, float, complex, bool, tuple, frozenset)
_BY_IDENTITY = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    types.CodeType,
    type,
)


def _identity_eq(obj: Any) -> bool:
    """True when ``==``/``!=`` on ``obj`` fall back to identity (no class overrides them)."""
    t: Any = type(obj)
    return bool(t.__eq__ is object.__eq__ and t.__ne__ is object.__ne__)


def identity_compare(m: FrameMonitor, inst: Inst, fn: Any, args: list[Val]) -> bool:
    """``a == b`` / ``a != b`` decided by identity: model it as ``a is b``. False: it is not
    such a comparison (the caller models it otherwise)."""
    if fn not in (operator.eq, operator.ne) or len(args) != 2:
        return False
    if not all(_identity_eq(v.obj) or type(v.obj) in _FOREIGN_NOT_EQUAL for v in args):
        return False  # a class of its own __eq__ (tensors included) decides
    if all(is_value_type(v.obj) or v.obj is None for v in args):
        return False  # values: the scalar model covers them
    guard_identity(m, *args)
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])
    return True


def _pinned(obj: Any) -> bool:
    """Guarded by value or by identity when observed."""
    return obj is None or is_value_type(obj) or isinstance(obj, _BY_IDENTITY)


def guard_identity(m: FrameMonitor, a: Val, b: Val) -> None:
    """The program depends on whether ``a is b``: guard what decides it."""
    cap = m.cap
    for v in (a, b):
        if _pinned(v.obj):
            cap.observe(v)
        elif isinstance(v.obj, torch.Tensor):
            if v.external and v.node is not None:
                cap.tensor_node(v)  # (the graph inputs are kept pairwise distinct)
        else:
            cap.observe_type(v)
    if _pinned(a.obj) or _pinned(b.obj) or type(a.obj) is not type(b.obj):
        return  # one side is pinned, or their (guarded) classes differ
    ext = [v for v in (a, b) if v.external and v.node is not None]
    if isinstance(a.obj, torch.Tensor) and len(ext) < 2 and (a.const or b.const):
        raise m.unsupported("identity test of a tensor and a constant tensor")
    if a.obj is b.obj:
        if len(ext) == 2 and a.node is b.node:
            return  # one entry object: the alias guards keep its paths one object
        for v in ext:
            cap.observe_identity(v)  # the same object as a constant of the record
        return
    if len(ext) == 2:
        for v in ext:
            assert v.node is not None
            cap.distinct_nodes.setdefault(v.node, None)
    elif ext and (a.const or b.const):
        cap.observe_identity(ext[0])  # it must not become that constant object
