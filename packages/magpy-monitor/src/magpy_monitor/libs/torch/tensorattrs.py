"""Attribute writes on tensors: ``p.data = new`` and ``t.requires_grad = flag``.

``p.data = new`` (``Tensor.set_data``) points ``p`` at ``new``'s storage and metadata while ``p``
keeps its identity, autograd metadata and version counter: everything holding the object ``p``
(a module, an optimizer) sees the new values, and ``p`` and ``new`` share storage from then on.
It is recorded as torch.compile's graphs record it: ``p.set_(new)`` with grad mode off (the same
storage swap), then the version counter put back (``set_`` counts as an in-place update, ``.data
=`` does not). The graph replays it on the very object, and ``p`` is marked updated in place.
Only an entry tensor whose metadata (shape, strides, dtype, device, layout) the new value shares
is modelled: a change of metadata would leave the capture's view of ``p`` stale.

``t.requires_grad = flag`` is modelled where eager cannot raise: setting the value a tensor
already has (a leaf, or any tensor for ``False``: nothing changes), ``True`` on a
floating-point or complex tensor that does not require grad (``out = torch.zeros_like(x);
out.requires_grad = True``), and ``False`` on an entry leaf. The change is a write-back the mock
replays on the tensor after the graph ran; so that no later operation of the graph sees the
tensor with its old flag, the tensor's node is sealed (a later operation on it is a graph
break).
"""

from __future__ import annotations

import weakref
from typing import Any

import attrs
import torch

from magpy_refgraph import Const, GuardKind, Outcome

from ...core import registry
from ...core.capture import Write
from ...core.frame import FrameMonitor
from ...core.values import Val
from .autograd import store_grad

__all__ = [
    "lower_version",
    "python_attribute",
    "set_requires_grad",
    "settle_version",
    "store_tensor_attr",
]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


@registry.STORE_TENSOR_ATTR.provide
def store_tensor_attr(m: FrameMonitor, base: Val, name: str, value: Val) -> None:
    """``base.name = value`` on a tensor, about to run natively."""
    if name == "data":
        _set_data(m, base, value)
    elif name == "requires_grad":
        _set_requires_grad(m, base, value)
    elif name == "grad":
        store_grad(m, base, value)
    elif python_attribute(base.obj, name):
        # a Python attribute the program keeps on a tensor (``t.stop_gradient = True``): it
        # goes to the tensor's own ``__dict__``; one from outside gets it back by the mock's
        # write-back, one the graph makes gets it when the mock hands it out
        m.cap.set_attr(base, name, value)
    else:
        raise m.unsupported(f"setting attribute {name!r} of a tensor")


def with_attributes(t: torch.Tensor, names: tuple[str, ...], *values: Any) -> torch.Tensor:
    """The mock's half of a tensor the graph makes that the run gave Python attributes:
    ``t`` with them set, in the run's order. (``grad``: the run called ``t.retain_grad()``;
    so does this, then sets the gradient the record computed.)"""
    for name, value in zip(names, values, strict=True):
        if name == "grad" and t.grad_fn is not None:
            t.retain_grad()
        setattr(t, name, value)
    return t


def python_attribute(t: torch.Tensor, name: str) -> bool:
    """Whether ``t.name`` is (or would be) a plain entry of the tensor's own ``__dict__``: a
    plain tensor, and no attribute of that name on its class (a property, a method)."""
    if type(t) not in _PLAIN or name.startswith("__"):
        return False
    return not any(name in vars(k) for k in type(t).__mro__)


# ---------------------------------------------------------------------- p.data = new
# tensors whose version bump a graph node already took back (by id: tensors compare
# elementwise; entries go with their tensors)
_LOWERED: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


def lower_version(t: torch.Tensor) -> torch.Tensor:
    """Take back the version bump of the ``set_`` that stands for ``t.data = new`` (a graph
    node, right after the ``set_``, so that operations saving ``t`` for backward see the
    version eager has). Run by a graph executed as is; a compiler runs it only while tracing."""
    torch._C._autograd._unsafe_set_version_counter((t,), (max(t._version - 1, 0),))
    _LOWERED[id(t)] = t
    return t


def settle_version(t: torch.Tensor) -> None:
    """After the graph (a write-back): take back the bump of the ``set_`` a compiler's runtime
    applied to its input, unless the graph's own node already did."""
    if _LOWERED.pop(id(t), None) is t:
        return
    torch._C._autograd._unsafe_set_version_counter((t,), (max(t._version - 1, 0),))


def _meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.dtype, t.device, t.layout, tuple(t.shape), tuple(t.stride()))


def _set_data(m: FrameMonitor, p: Val, new: Val) -> None:
    cap = m.cap
    if not isinstance(new.obj, torch.Tensor):
        raise m.unsupported("setting .data of a tensor to a non-tensor (raises TypeError)")
    if not (p.external and p.node is not None):
        raise m.unsupported("setting .data of a tensor created during the run")
    if p in cap.mutated_tensors:
        # a compiler applies one storage swap to its input after the graph: an update of the
        # old storage made before it would be lost
        raise m.unsupported("setting .data of a tensor the run already updated in place")
    if type(p.obj) not in _PLAIN or type(new.obj) not in _PLAIN:
        raise m.unsupported("setting .data of a tensor subclass")
    if p.obj.layout is not torch.strided or _meta(p.obj) != _meta(new.obj):
        raise m.unsupported(
            "setting .data of a tensor to one of another shape, strides, dtype or device"
        )
    cap.guard_meta(p)
    cap.guard_meta(new)  # (the shapes stay equal on every call the record serves)
    rec = cap.rec
    target = cap.tensor_node(p)
    args = (target, cap.to_arg(new))
    grad = torch.is_grad_enabled()
    if grad:
        rec.call("call_function", torch._C._set_grad_enabled, (False,), {}, effect=True)
    node = rec.call("call_method", "set_", args, {}, effect=True)
    if grad:
        rec.call("call_function", torch._C._set_grad_enabled, (True,), {}, effect=True)
    rec.call("call_function", lower_version, (node,), {}, effect=True)
    cap.mutate_tensor(p, node)
    # a compiler (AOTAutograd) replays the swap on its input after the graph instead, with a
    # version bump of its own: taken back by the mock
    settle = cap.root(Const(settle_version), settle_version)
    cap.writes.append(Write("callmethod", settle, "__call__", p))
    # set_ makes no new tensor: later operations read ``p`` itself, as in torch.compile's
    # graphs (a compiler then orders them after the storage swap)
    p.fx = target


# ---------------------------------------------------------------------- t.requires_grad = flag
def set_requires_grad(args: tuple[torch.Tensor, bool]) -> None:
    """``t.requires_grad = flag`` replayed by the mock (a write-back)."""
    t, flag = args
    t.requires_grad = flag


@attrs.frozen
class _IsLeaf:
    """``t.is_leaf`` (a guard on an entry tensor: eager refuses to change a non-leaf's flag)."""

    def __call__(self, t: torch.Tensor) -> bool:
        return bool(t.is_leaf)


def _set_requires_grad(m: FrameMonitor, t: Val, value: Val) -> None:
    cap = m.cap
    cap.observe(value)
    flag = value.obj
    obj = t.obj
    if type(flag) is not bool:
        raise m.unsupported("requires_grad set to a non-bool (raises TypeError)")
    entry = t.external and t.node is not None
    if entry:
        cap.guard_meta(t, sizes=False)  # (requires_grad at entry, before the write runs)
    if not obj.is_leaf:
        raise m.unsupported("setting requires_grad of a non-leaf tensor (raises RuntimeError)")
    if flag and not (obj.is_floating_point() or obj.is_complex()):
        raise m.unsupported("requires_grad=True on a tensor of an integer dtype (raises)")
    if obj.requires_grad and entry:
        assert t.node is not None
        cap.graph.observe(t.node, GuardKind.CUSTOM, Outcome(_IsLeaf(), True))
    elif obj.requires_grad:
        # made by the run and requiring grad: a leaf made with requires_grad=True, which a
        # compiled graph may hand back as a non-leaf
        raise m.unsupported("setting requires_grad of a tensor made requiring grad in the run")
    if flag is obj.requires_grad:
        return  # nothing changes
    node = cap.tensor_node(t)
    write_target = cap.root(Const(set_requires_grad), set_requires_grad)
    pair = cap.new((obj, flag), items=[t, value])
    cap.writes.append(Write("callmethod", write_target, "__call__", pair))
    cap.mutations += 1
    node.meta["sealed"] = (
        "uses a tensor after its requires_grad was changed (the change is replayed after the graph)"
    )
