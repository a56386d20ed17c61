"""Modules built inside forward: ``nn.ReLU(inplace=True)(x)``, ``Regression(self.n)(x)``.

A module class whose ``__init__`` is a library's (torch's ``nn.ReLU``, ``nn.Upsample``) is built
natively and becomes a constant of the record (the mock never returns it) when each call would
build an equal one:

* it holds no parameters, buffers or submodules (those are initialised afresh on every call);
* building it drew no random numbers: the global random states of torch, ``random`` and
  numpy are the same before and after;
* a tensor it keeps as a plain attribute is fresh: referenced by the module alone (and a view,
  its base too), not requiring grad, contiguous and small; and then every constructor argument
  is a plain value (guarded by value). Such a tensor is read as a ``torch.tensor(values)`` node
  of the graph, so each call builds it anew, as eager does.

A library's module built from tensors of the graph (``return nn.ReLU(self.conv(x))``, a slip
for ``nn.ReLU()(...)``) is no constant: the mock builds it again on every call from that call's
tensors (``Construction``), under the same conditions (no state, no random numbers) and keeping
only its arguments or plain values; calling such a module is a break.

The library's constructor is taken to be a deterministic function of its arguments; a frame of
the program's own Python it starts (a metaclass ``__call__``, a ``__setattr__`` override) is a
break (``core.programcode``).

A class whose ``__init__`` is the program's own (``Regression``) has it followed like any call,
with ``self`` bound to the new module's shadow (``ModuleBuild``): what it reads (a global, a
class attribute) is guarded, what it does to the outside (``Layer.made.append(self)``) is
replayed, and the attributes it stores are the shadow's (a tensor it makes is a node of the
graph). Library code it calls on the module (``super().__init__()``) runs natively, as above.
The same conditions then hold of the module built: no state of its own, no random numbers, no
tensor from outside, and no attribute the monitor did not see stored. A class of the program's
that overrides ``__new__`` or attribute access (``__setattr__``, ``__getattr__``...) is a break.
"""

from __future__ import annotations

import random
import sys
import types
from typing import Any

import torch

from ...core.attributes import guard_class_attr
from ...core.frame import FrameMonitor, Inst
from ...core.programcode import program_frames, program_function
from ...core.values import Construction, Payload, Val
from ...core.valuetypes import is_value_type
from ...pyobj.instances import follow_init, lookup

__all__ = ["MODULE_INTERNALS", "ModuleBuild", "construct_module"]

MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
_MAX_NUMEL = 4096  # the values of a kept tensor are written into the graph
# what the program may not override in a module class whose __init__ is followed: the native
# steps of the construction (object.__new__, a STORE_ATTR's Module.__setattr__) would run it
_NOT_FOLLOWED = ("__new__", "__setattr__", "__getattr__", "__getattribute__", "__delattr__")


class ModuleBuild(Payload):
    """A module built in the run: the shadow of its class as the program named it (its class
    attributes are read through it)."""

    __slots__ = ("building", "cls_val")

    def __init__(self, cls_val: Val, *, building: bool = False) -> None:
        self.cls_val = cls_val
        self.building = building  # its followed ``__init__`` has not returned yet


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


def _check_stateless(m: FrameMonitor, mod: torch.nn.Module, before: tuple[Any, ...]) -> None:
    """A module built in the run holds no state of its own and drew no random numbers."""
    name = type(mod).__name__
    buffers = any(b is not None for b in mod._buffers.values())  # None: no tensor
    if mod._parameters or buffers or mod._modules:
        raise m.unsupported(f"{name} with parameters built inside forward")
    if _rng_fingerprint() != before:
        raise m.unsupported(f"{name} draws random numbers when built inside forward")


def construct_module(
    m: FrameMonitor, inst: Inst, cls_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """``cls(*pos, **kwargs)`` of an ``nn.Module`` class inside the run."""
    cls = cls_val.obj
    init = lookup(cls, "__init__")
    if program_function(init):
        _follow_init(m, inst, cls_val, init, pos, kwargs)
        return
    cap = m.cap
    guard_class_attr(cap, cls, "__init__")  # (the one the class holds now)
    args = [*pos, *kwargs.values()]
    if any(v.fx is not None for v in args):
        # (its attribute is another tensor on every call: no constant of the record)
        _built_from_graph(m, inst, cls_val, pos, kwargs)
        return
    for v in args:
        cap.observe(v)
    before = _rng_fingerprint()

    def make(real: list[Any]) -> list[Val]:
        mod = real[0]
        _check_stateless(m, mod, before)
        val = cap.new(mod, const=True, payload=ModuleBuild(cls_val))
        kept = [k for k, x in vars(mod).items() if isinstance(x, torch.Tensor)]
        if kept:
            if not all(_plain(v.obj) for v in args):
                raise m.unsupported(
                    f"{cls.__name__} built inside forward keeps tensors made from arguments "
                    "that are not plain values"
                )
            val.attrs = {k: _kept_tensor(m, mod, k) for k in kept}
        return [val]

    p = m.expect_outputs(inst, 1, make)
    p.calls_back = program_frames()  # (the program's Python, run natively: unseen)


def _built_from_graph(
    m: FrameMonitor, inst: Inst, cls_val: Val, pos: list[Val], kwargs: dict[str, Val]
) -> None:
    """A library's module built from tensors of the graph (``nn.ReLU(self.conv(x))``: a
    program that returns the module by mistake): a new object on every call, which the mock
    builds again from this call's tensors (``Construction``), as eager builds it. The same
    conditions as a constant's: no state of its own, no random numbers drawn; and what it keeps
    is its arguments themselves or plain values. It is never a constant: calling it is a break
    (``hooks.module_call``)."""
    cap, cls = m.cap, cls_val.obj
    for v in (*pos, *kwargs.values()):
        if v.fx is None and not isinstance(v.obj, torch.Tensor):
            cap.observe(v)
        elif v.fx is None:  # (a tensor from outside: the mock would share it)
            raise m.unsupported(f"{cls.__name__} built inside forward from a tensor from outside")
    args = {id(v.obj): v for v in (*pos, *kwargs.values()) if v.fx is not None}
    before = _rng_fingerprint()

    def make(real: list[Any]) -> list[Val]:
        mod = real[0]
        _check_stateless(m, mod, before)
        kept = {}
        for k, x in vars(mod).items():
            if k in MODULE_INTERNALS and k != "training":
                continue
            if isinstance(x, torch.Tensor) and id(x) in args and args[id(x)].obj is x:
                kept[k] = args[id(x)]
            elif not _plain(x):
                raise m.unsupported(
                    f"{cls.__name__} built inside forward from a tensor of the graph keeps a "
                    f"{type(x).__name__} of its own"
                )
        val = cap.new(mod, payload=Construction(cls, list(pos), dict(kwargs)))
        val.attrs = kept
        return [val]

    p = m.expect_outputs(inst, 1, make)
    p.calls_back = program_frames()


def _follow_init(
    m: FrameMonitor,
    inst: Inst,
    cls_val: Val,
    init: types.FunctionType,
    pos: list[Val],
    kwargs: dict[str, Val],
) -> None:
    """``cls(...)`` of a module class whose ``__init__`` is the program's: followed."""
    cap, cls = m.cap, cls_val.obj
    own = next((n for n in _NOT_FOLLOWED if program_function(lookup(cls, n))), None)
    if own is not None:
        raise m.unsupported(f"{cls.__name__} built inside forward defines its own {own}")
    guard_class_attr(cap, cls, "__init__")  # (the one the class holds now)
    before = _rng_fingerprint()

    def shadow(obj: Any) -> Val:
        made = cap.new(obj, const=True, payload=ModuleBuild(cls_val, building=True))
        made.attrs = {}
        return made

    def finish(made: Val) -> None:
        made.require(ModuleBuild).building = False
        _check_stateless(m, made.obj, before)
        _check_stored(m, made)

    p = follow_init(m, inst, cls, init, pos, kwargs, shadow, finish)
    p.calls_back = program_frames()  # (a metaclass's __call__, run natively: unseen)


def _check_stored(m: FrameMonitor, val: Val) -> None:
    """Every attribute of a module whose ``__init__`` was followed is one the monitor saw
    stored, or a value library code stored from guarded arguments; a tensor among them was
    made by the run (a node of the graph, rebuilt on every call)."""
    mod, attrs = val.obj, val.attrs or {}
    name = type(mod).__name__
    for k, x in vars(mod).items():
        shadow = attrs.get(k)
        if shadow is None:
            if k in MODULE_INTERNALS or x is None or is_value_type(x):
                continue
            raise m.unsupported(f"{name}.{k}: stored where the monitor did not see it")
        if shadow.obj is not x and not (is_value_type(x) and shadow.obj == x):
            raise m.unsupported(f"{name}.{k}: changed where the monitor did not see it")
        if isinstance(x, torch.Tensor) and (shadow.external or x.requires_grad):
            raise m.unsupported(
                f"{name}.{k}: a tensor a module built inside forward keeps "
                "(shared, large, a view or requiring grad)"
            )


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
