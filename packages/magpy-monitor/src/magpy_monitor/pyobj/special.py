"""Special callables: ``super()``, ``torch.autograd.Variable``, opaque leaf modules (RNNs).

- ``super()`` with no arguments reads the ``__class__`` cell and the first argument of the
  calling frame; attribute reads on the super object give methods bound to the same ``self``.
- ``Variable(t, requires_grad=b)`` is ``t.detach()`` (then ``requires_grad_(b)``) in the graph.
- ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (and their cells) are recorded as one graph node calling
  the module (its identity and parameters guarded) instead of following their Python code.

numpy's functions are modelled in ``_ndarrays``.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from magpy_refgraph import Attr, GuardKind, ModuleCall, ModuleNoHooks

from ..core.attributes import guard_class_attr
from ..core.frame import CellBox, FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, opcode, register_builtin
from ..core.speculation import python_number, speculate_read
from ..core.values import BoundMethod, Payload, Val
from ..cpython.frameio import NULL
from .objects import python_tuple_new

__all__ = ["OPAQUE_FORWARDS", "OPAQUE_MODULES", "SuperProxy", "opaque_module_call"]

# (``nn.LSTMCell``/``GRUCell``/``RNNCell`` are followed: their ``forward`` is one
# ``torch.lstm_cell``-like call, which then reads the weights as graph inputs, so a graph of
# cells is keyed by AOTAutograd's cache and shared by instances, as a closure over the module
# is not)
OPAQUE_MODULES: tuple[type, ...] = (
    torch.nn.RNNBase,
    torch.nn.MultiheadAttention,
)


class SuperProxy(Payload):
    """A ``super()`` object made in the run: the shadow of the ``self`` it binds methods to."""

    __slots__ = ("cls", "self_val")

    def __init__(self, self_val: Val, cls: Any) -> None:
        self.self_val = self_val
        self.cls = cls  # the class whose MRO successors the lookups start at


@register_builtin(super)
def _super(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if pos:
        cls_val, self_val = pos[0], pos[1]
        cap.observe(cls_val)
    else:
        names = m.names
        if "__class__" not in names or m.code.co_argcount == 0:
            raise m.unsupported("super() outside a method")
        cell_val = m.fast[names.index("__class__")]
        cls_val = cap.const(cell_val.obj.cell_contents)
        first = m.load_fast(0)  # LAZY in a segment that starts mid-method
        cell = first.payload(CellBox)  # (``self`` is a cell when a closure uses it)
        self_val = cell.content if cell is not None else first
    cls = cls_val.obj
    del cls_val
    if self_val.external:
        cap.observe_type(self_val)
    m.expect_outputs(inst, 1, lambda real: [cap.new(real[0], payload=SuperProxy(self_val, cls))])


def super_attr(m: FrameMonitor, base: Val, name: str, real: Any) -> Val:
    """``super().name``: a method bound to the same ``self``, or a class attribute.

    CPython looks ``name`` up in the MRO after the method's class on every call: what it
    finds there is guarded (``guard_class_attr`` on the next class), so a base method
    replaced after the first call misses."""
    proxy = base.require(SuperProxy)
    self_val = proxy.self_val
    _guard_super_lookup(m, proxy, name)
    if type(real) is types.MethodType and real.__self__ is self_val.obj:
        return Val(real, payload=BoundMethod(self_val))
    if type(real) is types.MethodWrapperType and real.__self__ is self_val.obj:
        return Val(real, payload=BoundMethod(self_val))  # super().__setitem__, a native slot
    return m.cap.new(real, const=True)


def _guard_super_lookup(m: FrameMonitor, proxy: SuperProxy, name: str) -> None:
    obj = proxy.self_val.obj
    mro = (obj if isinstance(obj, type) else type(obj)).__mro__
    if proxy.cls in mro and mro.index(proxy.cls) + 1 < len(mro):
        guard_class_attr(m.cap, mro[mro.index(proxy.cls) + 1], name)


@opcode("LOAD_SUPER_ATTR")
def _load_super_attr(m: FrameMonitor, inst: Inst) -> None:
    """``super().name`` in one instruction (3.12): ``[super, class, self]`` gives the attribute,
    or with the method bit the two slots ``LOAD_METHOD`` gives (a function and ``self``, or the
    attribute and a NULL)."""
    cap = m.cap
    sup, cls_val, self_val = m.pop(3)
    if sup.obj is not super:
        raise m.unsupported("super() where `super` is not the builtin")
    cap.observe(sup)
    if self_val.external:
        cap.observe_type(self_val)
    proxy = SuperProxy(self_val, cls_val.obj)
    base = cap.new(super(cls_val.obj, self_val.obj), payload=proxy)
    name = inst.argval

    def make(real: list[Any]) -> list[Val]:
        if len(real) == 1:
            return [super_attr(m, base, name, real[0])]
        if real[0] is NULL:
            return [Val(NULL, const=True), super_attr(m, base, name, real[1])]
        if real[1] is NULL:
            return [super_attr(m, base, name, real[0]), Val(NULL, const=True)]
        _guard_super_lookup(m, proxy, name)
        return [cap.const(real[0]), self_val]

    m.expect_outputs(inst, 2 if inst.arg & 1 else 1, make)


def _variable(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    cap = m.cap
    if not pos or not isinstance(pos[0].obj, torch.Tensor):
        raise m.unsupported("Variable() of a non-tensor")
    requires_grad = kw.get("requires_grad", pos[1] if len(pos) > 1 else None)
    if requires_grad is not None:
        cap.observe(requires_grad)
    if set(kw) - {"requires_grad", "volatile"}:
        raise m.unsupported("Variable() with unusual arguments")

    def make(real: list[Any]) -> list[Val]:
        node = cap.rec.call("call_method", "detach", (cap.tensor_node(pos[0]),), {})
        if requires_grad is not None and requires_grad.obj:
            node = cap.rec.call("call_method", "requires_grad_", (node, True), {})
        return [cap.op_result(real[0], node)]

    m.expect_outputs(inst, 1, make)


BUILTIN_HANDLERS[id(torch.autograd.Variable)] = (torch.autograd.Variable, _variable)


# the forwards of torch's opaque modules, called as ``super().forward(x)`` by a subclass
OPAQUE_FORWARDS: frozenset[Any] = frozenset(
    vars(cls)["forward"]
    for cls in vars(torch.nn).values()
    if isinstance(cls, type) and issubclass(cls, OPAQUE_MODULES) and "forward" in vars(cls)
)


def opaque_module_call(
    m: FrameMonitor,
    inst: Inst,
    fn_val: Val,
    pos: list[Val],
    kwargs: dict[str, Val],
    *,
    forward: Any = None,
) -> None:
    """Record a call of a module whose code we do not follow as one graph node
    (``forward``: that function of its class, called on it, instead of the whole call)."""
    cap = m.cap
    mod = fn_val.obj
    cap.observe_identity(fn_val)
    if fn_val.node is not None:
        cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleCall())
        cap.graph.observe(fn_val.node, GuardKind.CUSTOM, ModuleNoHooks())
    for name, p in mod.named_parameters(recurse=True):
        owner_val = fn_val
        parts = name.split(".")
        for part in parts[:-1]:
            owner_val = cap.child(owner_val, Attr(part), getattr(owner_val.obj, part))
        pv = cap.child(owner_val, Attr(parts[-1]), p)
        cap.guard_meta(pv)
    for k in ("training",):
        cap.observe(cap.child(fn_val, Attr(k), getattr(mod, k)))

    # a PackedSequence argument travels as the tuple of its fields, rebuilt for the call
    packed = {i: type(a.obj) for i, a in enumerate(pos) if _packed(a)}

    def call_module(*args: Any, **kw: Any) -> Any:
        if packed:
            args = tuple(
                tuple.__new__(packed[i], a) if i in packed else a for i, a in enumerate(args)
            )
        return mod(*args, **kw) if forward is None else forward(mod, *args, **kw)

    call_module.__name__ = f"call_{type(mod).__name__}"
    # (the module it calls: a joint trace reads its parameters from the graph's inputs)
    call_module._magpy_module = mod  # type: ignore[attr-defined]

    def make(real: list[Any]) -> list[Val]:
        args = tuple(
            tuple(cap.to_arg(x) for x in a.items) if i in packed else cap.to_arg(a)
            for i, a in enumerate(pos)
        )
        kw = {k: cap.to_arg(v) for k, v in kwargs.items()}
        node = cap.rec.call("call_function", call_module, args, kw)
        return [_structured_result(m, real[0], node)]

    m.expect_outputs(inst, 1, make)


def _packed(v: Val) -> bool:
    """A ``PackedSequence`` (a tuple subclass with a Python ``__new__``) of known fields."""
    return python_tuple_new(type(v.obj)) is not None and isinstance(v.items, list)


def _structured_result(m: FrameMonitor, obj: Any, node: Any) -> Val:
    """Results like ``(output, (h, c))``: nested tuples of tensors become getitem nodes."""
    cap = m.cap
    if isinstance(obj, torch.Tensor):
        return cap.op_result(obj, node)
    if isinstance(obj, tuple | list):
        items = [_structured_result(m, x, cap.rec.getitem(node, i)) for i, x in enumerate(obj)]
        return cap.new(obj, items=items)
    if obj is None:
        return cap.const(None)
    raise m.unsupported(f"module returned a {type(obj).__name__}")


@register_builtin(torch.equal)
def _equal(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
    """``torch.equal(a, b)``: a Python bool read from tensor values. Of tensors that differ in
    shape, dtype or device (guarded) it is False without reading them; otherwise it is
    ``(a == b).all()`` in the graph, read like ``.item()`` (see ``_speculation``)."""
    cap = m.cap
    if kw or len(pos) != 2 or not all(isinstance(v.obj, torch.Tensor) for v in pos):
        raise m.unsupported("torch.equal of unusual arguments")
    a, b = pos
    for v in pos:
        cap.guard_meta(v)
    same_meta = (a.obj.shape, a.obj.dtype, a.obj.device) == (b.obj.shape, b.obj.dtype, b.obj.device)

    def make(real: list[Any]) -> list[Val]:
        if not same_meta:
            return [cap.const(real[0])]
        node = cap.rec.call("call_function", torch.eq, (cap.tensor_node(a), cap.tensor_node(b)), {})
        node = cap.rec.call("call_method", "all", (node,), {})
        reason = "torch.equal reads tensor values into Python"
        return [speculate_read(cap, python_number(cap, node, bool, False), real[0], reason)]

    m.expect_outputs(inst, 1, make)
