"""torch's higher-order scan, ``torch._higher_order_ops.associative_scan``: one graph node.

``associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise")`` is what code
written for ``torch.compile`` calls while it compiles (Hugging Face's Mamba takes that path when
``torch.compiler.is_compiling()`` is True, which it is while MagPy records). Followed as Python,
its ``generic`` mode runs ``combine_fn`` under ``torch.vmap``, whose batched tensors and
interpreter levels are functorch state no graph of plain operations reproduces. TorchDynamo
traces ``combine_fn`` into a subgraph of the higher-order operator; here the call itself is the
node: its target calls ``associative_scan`` with the same ``combine_fn``, so the eager backend
computes exactly what eager does, and Inductor traces through it (``make_fx`` follows the
vmap). The real call runs natively while recording; nothing in it is followed.

The node may call the first record's ``combine_fn`` on every later call because torch's
contract makes it a pure function of its arguments without lifted values: the monitor holds
it to that where it can tell. ``combine_fn`` is a Python function without closure cells or
defaults (the code of one made by the run is a constant of the code that made it; one from
outside is guarded by identity and code), or a native callable guarded by identity. ``xs`` is
a tensor or a tuple or list of tensors; ``dim``, ``reverse`` and ``combine_mode`` are guarded
by value.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import torch
from torch._higher_order_ops.associative_scan import associative_scan

from ...core.calls import function_source, guard_code
from ...core.frame import FrameMonitor, Inst
from ...core.registry import register_builtin
from ...core.values import MadeFunction, Val

__all__ = ["scan_target"]

_SIGNATURE = inspect.signature(associative_scan)


def scan_target(combine_fn: Any) -> Callable[..., Any]:
    """The graph node's target: ``associative_scan`` with this ``combine_fn``."""

    def call(xs: Any, dim: int, reverse: bool, combine_mode: str) -> Any:
        return associative_scan(combine_fn, xs, dim, reverse=reverse, combine_mode=combine_mode)

    call.__name__ = "associative_scan"  # (its qualified name stays a local one: not found by name)
    return call


def _check_combine(m: FrameMonitor, fn_val: Val) -> None:
    """Refuse a ``combine_fn`` a later call could run differently; guard the one kept."""
    fn = fn_val.obj
    if isinstance(fn, types.FunctionType):
        if fn.__closure__ or fn.__defaults__ or fn.__kwdefaults__:
            raise m.unsupported("associative_scan of a combine_fn with free variables or defaults")
        if fn_val.payload(MadeFunction) is None:
            m.cap.observe_identity(fn_val)
            src = function_source(m, fn_val)
            if src is not None:
                guard_code(m.cap, src, fn.__code__)
        return
    if isinstance(fn, types.BuiltinFunctionType) or type(fn).__module__.startswith("torch"):
        m.cap.observe_identity(fn_val)  # torch.add, operator.mul
        return
    raise m.unsupported(f"associative_scan of a {type(fn).__name__} combine_fn")


def _is_leaves(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    return type(obj) in (tuple, list) and all(isinstance(x, torch.Tensor) for x in obj)


@register_builtin(associative_scan)
def _associative_scan(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    try:
        bound = _SIGNATURE.bind(*pos, **kw)
    except TypeError as e:
        raise m.unsupported(f"associative_scan called with other arguments ({e})") from None
    args = bound.arguments
    xs = args["xs"]
    if not _is_leaves(xs.obj):
        raise m.unsupported("associative_scan over a pytree other than a tuple of tensors")
    _check_combine(m, args["combine_fn"])
    cap = m.cap
    options: dict[str, Any] = {}
    for name in ("dim", "reverse", "combine_mode"):
        if name in args:
            cap.observe(args[name])  # (plain values: torch checks their types)
            options[name] = args[name].obj
        else:
            options[name] = _SIGNATURE.parameters[name].default
    target = scan_target(args["combine_fn"].obj)

    def make(real: list[Any]) -> list[Val]:
        node = cap.rec.call("call_function", target, (cap.to_arg(xs),), options)
        return [cap.op_result(real[0], node)]

    m.expect_outputs(inst, 1, make)
