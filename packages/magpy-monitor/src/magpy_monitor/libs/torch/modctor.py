"""Modules built inside forward: ``nn.ReLU(inplace=True)(x)``, ``Regression(self.n)(x)``.

The construction runs natively and the module becomes a constant of the record (the mock never
returns it) when each call would build an equal one:

* it holds no parameters, buffers or submodules (those are initialised afresh on every call);
* building it drew no random numbers: the global random states of torch, ``random`` and
  numpy are the same before and after;
* a tensor it keeps as a plain attribute (``self.disp = torch.Tensor(np.arange(n))``) is fresh:
  referenced by the module alone (and a view, its base too), not requiring grad, contiguous
  and small; and then
  every constructor argument is a plain value (guarded by value). Such a tensor is read as a
  ``torch.tensor(values)`` node of the graph, so each call builds it anew, as eager does.

As for any module built inside forward, the constructor is taken to be a deterministic
function of its arguments.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import torch

from ...core.frame import FrameMonitor, Inst
from ...core.values import Val
from ...core.valuetypes import is_value_type

__all__ = ["MODULE_INTERNALS", "construct_module"]

MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
_MAX_NUMEL = 4096  # the values of a kept tensor are written into the graph


def _rng_fingerprint() -> tuple[Any, ...]:
    """The global random states a constructor could draw from."""
    parts: list[Any] = [bytes(torch.random.get_rng_state().numpy()), random.getstate()]
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        parts.append((kind, keys.tobytes(), pos, has_gauss, cached))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        parts.extend(bytes(s.numpy()) for s in torch.cuda.get_rng_state_all())
    return tuple(parts)


def _plain(obj: Any) -> bool:
    """A value, or a list/tuple/dict of values (guarded fully by ``observe``)."""
    if obj is None or is_value_type(obj):
        return True
    if type(obj) in (list, tuple):
        return all(_plain(x) for x in obj)
    if type(obj) is dict:
        return all(_plain(k) and _plain(x) for k, x in obj.items())
    return False


def construct_module(
    m: FrameMonitor, inst: Inst, cls: type, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``cls(*pos, **kwargs)`` of an ``nn.Module`` class inside the run."""
    cap = m.cap
    args = [*pos, *kwargs.values()]
    for v in args:
        cap.observe(v)
    before = _rng_fingerprint()

    def make(real: list[Any]) -> list[Val]:
        mod = real[0]
        buffers = any(b is not None for b in mod._buffers.values())  # None: no tensor
        if mod._parameters or buffers or mod._modules:
            raise m.unsupported(f"{cls.__name__} with parameters built inside forward")
        if _rng_fingerprint() != before:
            raise m.unsupported(f"{cls.__name__} draws random numbers when built inside forward")
        val = cap.new(mod, const=True)
        kept = [k for k, x in vars(mod).items() if isinstance(x, torch.Tensor)]
        if kept:
            if not all(_plain(v.obj) for v in args):
                raise m.unsupported(
                    f"{cls.__name__} built inside forward keeps tensors made from arguments "
                    "that are not plain values"
                )
            val.attrs = {k: _kept_tensor(m, mod, k) for k in kept}
        return [val]

    m.expect_outputs(inst, 1, make)


def _ref_counts(mod: torch.nn.Module, name: str) -> tuple[int, int]:
    """The reference counts of tensor attribute ``name`` and of the tensor it views (0: none)."""
    t = vars(mod)[name]
    base = t._base
    return sys.getrefcount(t), (0 if base is None else sys.getrefcount(base))


class _Fresh(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.t = torch.zeros(2)
        self.v = torch.zeros(4).view(2, 2)


def _fresh_counts() -> tuple[int, int]:
    probe = _Fresh()
    return _ref_counts(probe, "t")[0], _ref_counts(probe, "v")[1]


# what `_ref_counts` gives for a tensor (and a view's base) that only the module refers to
_FRESH_COUNTS = _fresh_counts()


def _kept_tensor(m: FrameMonitor, mod: torch.nn.Module, name: str) -> Val:
    """A tensor attribute of a module built during the run, as a ``torch.tensor`` node."""
    cap = m.cap
    refs, base_refs = _ref_counts(mod, name)  # (before `t` holds one more reference)
    t = vars(mod)[name]
    shared = refs > _FRESH_COUNTS[0] or base_refs > _FRESH_COUNTS[1]  # also held elsewhere
    if (
        type(t) is not torch.Tensor
        or t.requires_grad
        or (t._base is not None and cap.known(t._base) is not None)
        or t.layout is not torch.strided
        or t.is_quantized
        or not t.is_contiguous()
        or t.numel() > _MAX_NUMEL
        or shared
        or cap.known(t) is not None
    ):
        raise m.unsupported(
            f"{type(mod).__name__}.{name}: a tensor a module built inside forward keeps "
            "(shared, large, a view or requiring grad)"
        )
    opts = {"dtype": t.dtype, "device": t.device}
    node = cap.rec.call("call_function", torch.tensor, (t.tolist(),), opts)
    return cap.op_result(t, node)
