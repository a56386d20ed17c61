"""``isinstance`` and ``issubclass``: a constant of the record, guarded by the object's type and
the classes; a class whose metaclass answers the question itself (an ABC's ``register()``, a
``runtime_checkable`` Protocol) has its answer asked again by the guard: of the object, or, for an
object the run made, of its class.

torch's metaclasses answer ``isinstance`` from the object itself: a legacy tensor type
(``torch.FloatTensor``: the tensor's dtype, device and layout), ``Variable`` (any tensor),
``Parameter`` (also a tensor flagged ``_is_param``). Asked of the object's class instead, they
answer otherwise (``issubclass(torch.Tensor, torch.FloatTensor)`` is False): for an object the
run made, whose class, dtype, device, layout and attributes the record fixes, their answer is a
constant of the record. Any other metaclass's answer for such an object must be its class's, or
the check is a break."""

from __future__ import annotations

from typing import Any

import torch

from magpy_refgraph import Const, GuardKind, Outcome

from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, BuiltinHandler
from ..core.values import Val
from ..core.valuetypes import is_value_type

__all__ = ["TypeCheck"]

# metaclasses whose ``__instancecheck__`` reads only the object (see the module doc)
_INTRINSIC_METAS = frozenset(
    (type(torch.FloatTensor), type(torch.autograd.Variable), type(torch.nn.Parameter))
)


def _type_check(subclass: bool) -> BuiltinHandler:
    def handle(m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]) -> None:
        _isinstance(m, inst, pos, subclass)

    return handle


def _isinstance(m: FrameMonitor, inst: Inst, pos: list[Val], subclass: bool) -> None:
    obj, cls = pos
    cap = m.cap
    if isinstance(obj.obj, torch.Tensor):
        cap.guard_meta(obj, sizes=False)
    elif obj.obj is None or is_value_type(obj.obj):
        if obj.external and obj.node is not None:
            cap.observe_type(obj)
    else:
        cap.observe_type(obj)
    cap.observe(cls)
    classes = cls.obj if isinstance(cls.obj, tuple) else (cls.obj,)
    hooks = ("__instancecheck__", "__subclasscheck__")
    own = [
        k
        for k in classes
        if isinstance(k, type)
        and any(getattr(type(k), h, None) is not getattr(type, h) for h in hooks)
    ]
    made = not (obj.external and obj.node is not None)
    if own and not (made and not subclass and all(type(k) in _INTRINSIC_METAS for k in own)):
        _check_again(m, inst, obj, cls, subclass)
        return
    m.expect_outputs(inst, 1, lambda real: [cap.const(real[0])])


BUILTIN_HANDLERS[id(isinstance)] = (isinstance, _type_check(False))
BUILTIN_HANDLERS[id(issubclass)] = (issubclass, _type_check(True))


class TypeCheck:
    """``isinstance(obj, classes)`` (``issubclass`` when ``subclass``) asked again by the
    guard: a class whose metaclass answers it (an ABC's ``register()``, a ``runtime_checkable``
    Protocol whose methods appear later) may answer differently for the same type."""

    __slots__ = ("classes", "subclass")

    def __init__(self, classes: Any, subclass: bool) -> None:
        self.classes = classes
        self.subclass = subclass

    def __call__(self, obj: Any) -> bool:
        return issubclass(obj, self.classes) if self.subclass else isinstance(obj, self.classes)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is TypeCheck
            and other.classes is self.classes
            and other.subclass is self.subclass
        )

    def __hash__(self) -> int:
        return hash((TypeCheck, id(self.classes), self.subclass))

    def __repr__(self) -> str:
        return f"{'issubclass' if self.subclass else 'isinstance'}(_, {self.classes!r})"


def _check_again(m: FrameMonitor, inst: Inst, obj: Val, cls: Val, subclass: bool) -> None:
    """``isinstance``/``issubclass`` against a class with its own check: the outcome is
    guarded on the object (one from outside; else its class, which the run's object has)."""
    cap = m.cap
    if obj.external and obj.node is not None:
        node = obj.node
        check = TypeCheck(cls.obj, subclass)
    elif not subclass:
        kind = type(obj.obj)
        node = cap.root(Const(kind), kind).node
        check = TypeCheck(cls.obj, True)  # (the class of an object the run made)
    else:
        raise m.unsupported("issubclass() of a class made during the run, by its own check")
    assert node is not None

    def make(real: list[Any]) -> list[Val]:
        if node is not obj.node and check(type(obj.obj)) is not real[0]:
            raise m.unsupported(
                f"isinstance() answered from the object, not its class, by {cls.obj!r}"
            )
        cap.graph.observe(node, GuardKind.CUSTOM, Outcome(check, real[0]))
        return [cap.const(real[0])]

    m.expect_outputs(inst, 1, make)
