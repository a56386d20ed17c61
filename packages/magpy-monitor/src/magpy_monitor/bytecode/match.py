"""``match`` statements: the MATCH_* instructions, GET_LEN and COPY_DICT_WITHOUT_KEYS.

Literal and value patterns compile to comparisons, handled elsewhere. Structural patterns ask
the subject's type (``MATCH_SEQUENCE``, ``MATCH_MAPPING``, the ``isinstance`` of
``MATCH_CLASS``), its length, its keys and its attributes; each answer is taken from the real
run and guarded where it comes from: the subject's type, the identity of the pattern's class
(and its ``__match_args__``, an attribute read), the keys of a dict, the attributes read.
"""

from __future__ import annotations

from typing import Any

from magpy_refgraph import Item

from ..core import registry
from ..core.attributes import load_attr
from ..core.frame import FrameMonitor, Inst
from ..core.registry import BUILTIN_HANDLERS, opcode
from ..core.values import Val

__all__: list[str] = []

_TPFLAGS_MATCH_SELF = 1 << 22


@opcode("MATCH_SEQUENCE", "MATCH_MAPPING")
def _match_kind(m: FrameMonitor, inst: Inst) -> None:
    """Whether the subject (left on the stack) is a sequence / a mapping: its type says."""
    m.cap.observe_type(m.stack[-1])
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(real[0])])


@opcode("GET_LEN")
def _get_len(m: FrameMonitor, inst: Inst) -> None:
    """``len(subject)``, the subject left on the stack: as the ``len`` builtin."""
    _fn, handle = BUILTIN_HANDLERS[id(len)]
    handle(m, inst, [m.stack[-1]], {})


@opcode("MATCH_CLASS")
def _match_class(m: FrameMonitor, inst: Inst) -> None:
    """``case C(p0, p1, name=p2)``: a tuple of the subject's attributes, or None."""
    subject, cls_val, names = m.pop(3)
    cap = m.cap
    cls = cls_val.obj
    if not isinstance(cls, type) or not isinstance(names.obj, tuple):
        raise m.unsupported("a class pattern whose class is not a type")
    cap.observe_identity(cls_val)
    cap.observe_type(subject)  # decides isinstance(subject, cls)
    count = inst.arg

    def make(real: list[Any]) -> list[Val]:
        if real[0] is None:
            if isinstance(subject.obj, cls):
                raise m.unsupported(f"a {cls.__name__} pattern failed on an attribute")
            return [cap.const(None)]
        positional: list[str | None] = []
        if count:
            match_args = getattr(cls, "__match_args__", None)
            if match_args is None and cls.__flags__ & _TPFLAGS_MATCH_SELF and count == 1:
                positional = [None]  # ``case int(x)``: the subject itself
            elif type(match_args) is tuple:
                cap.observe(load_attr(m, cls_val, "__match_args__", match_args))  # by value
                positional = list(match_args[:count])
            else:
                raise m.unsupported(f"{cls.__name__}.__match_args__ is not a tuple")
        wanted = [*positional, *names.obj]
        if len(wanted) != len(real[0]):
            raise m.unsupported(f"a {cls.__name__} pattern matched other attributes")
        items = [
            subject if name is None else load_attr(m, subject, name, value)
            for name, value in zip(wanted, real[0], strict=True)
        ]
        return [cap.new(real[0], items=items)]

    m.expect_outputs(inst, 1, make)


def _items(m: FrameMonitor, subject: Val, keys: Any) -> dict[Any, tuple[Val, Val]]:
    """The subject dict's shadow items for ``keys`` (None: all of them); an outside dict's
    keys are guarded."""
    obj = subject.obj
    if not isinstance(obj, dict) or type(obj).get is not dict.get:
        raise m.unsupported(f"a mapping pattern on a {type(obj).__name__}")
    if isinstance(subject.items, dict):
        return subject.items
    if not subject.external:
        raise m.unsupported("a mapping pattern on a dict of unknown contents")
    m.cap.observe_keys(subject)
    return {
        k: (m.cap.const(k), m.cap.child(subject, Item(k), v))
        for k, v in obj.items()
        if keys is None or k in keys
    }


@opcode("MATCH_KEYS")
def _match_keys(m: FrameMonitor, inst: Inst) -> None:
    """``case {"a": x, "b": y}``: the values of the keys (left on the stack), or None."""
    subject, keys = m.stack[-2], m.stack[-1]
    if not isinstance(keys.obj, tuple):
        raise m.unsupported("mapping pattern keys that are not constants")
    m.cap.observe(keys)
    pairs = _items(m, subject, keys.obj)

    def make(real: list[Any]) -> list[Val]:
        if real[0] is None:
            if all(k in pairs for k in keys.obj):
                raise m.unsupported("a mapping pattern failed where the keys are there")
            return [m.cap.const(None)]
        return [m.cap.new(real[0], items=[pairs[k][1] for k in keys.obj])]

    m.expect_outputs(inst, 1, make)


@opcode("COPY_DICT_WITHOUT_KEYS")
def _copy_dict_without_keys(m: FrameMonitor, inst: Inst) -> None:
    """``case {"a": x, **rest}``: ``rest``, a new dict of the other items."""
    (keys,) = m.pop()
    subject = m.stack[-1]
    pairs = _items(m, subject, None)

    def make(real: list[Any]) -> list[Val]:
        rest: dict[Any, tuple[Val, Val]] = {}
        for k, (kv, v) in pairs.items():
            if k not in keys.obj:
                registry.PUT_ITEM.impl(rest, kv, v)
        return [m.cap.new(real[0], items=rest)]

    m.expect_outputs(inst, 1, make)
