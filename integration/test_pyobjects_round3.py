"""Python objects the compiled region makes and then uses (issue 36, round 3).

- An object the mock rebuilds by calling its class (a dataclass such as transformers'
  ``ModelOutput``, which an ``OrderedDict``-subclass with a Python ``__delitem__``) changed
  after it was built: items set through its ``__setitem__`` (transformers'
  ``capture_outputs`` stores the hidden states it collected), attributes set or deleted; and
  ``hasattr``/``getattr(..., default)`` of it. The mock builds it, then makes the same changes.
- ``property``/``staticmethod``/``classmethod`` in a class statement run in the region: pure
  constructors of descriptors over the functions it made; a read through a property follows
  its getter.
- ``weakref.ref``/``weakref.proxy`` of objects the run knows: calling the reference gives
  the object; a proxy's attributes are the referent's.
- ``hasattr``/``getattr`` with a default on plain objects built in the run (a class with a
  Python ``__getattr__`` included), and a method replaced on the class between calls.

Each case broke the graph, or gave another result than eager, before.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import OrderedDict
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy

try:
    from transformers.modeling_outputs import BaseModelOutput
except ImportError:  # (transformers is optional: ``pip install magpy[hf]``)
    BaseModelOutput = None


# ---------------------------------------------------------------------- replayed objects
@dataclasses.dataclass
class Record(OrderedDict):  # type: ignore[type-arg]
    """A ``ModelOutput``-like output: its items mirror its attributes through its Python
    ``__setitem__``; its ``__delitem__`` raises, so it is no plain class and is rebuilt by
    calling it (its construction runs no Python of the program's)."""

    hidden: torch.Tensor | None = None
    states: tuple[torch.Tensor, ...] | None = None

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __delitem__(self, key: Any) -> None:
        raise TypeError(f"cannot delete {key!r} of a {type(self).__name__}")


def collects(x: torch.Tensor) -> tuple[Record, Any, bool]:
    out = Record(hidden=x * 2)
    collected = [x + 1, x - 1]
    if hasattr(out, "vision_states"):  # (capture_outputs' question, answered by the class)
        pass
    elif hasattr(out, "hidden"):  # (its own field)
        collected = collected[:-1]
        collected.append(out.hidden)
    out["states"] = tuple(collected)  # the Python __setitem__, followed
    return out, getattr(out, "missing", 3), hasattr(out, "states")


def test_items_set_on_a_rebuilt_output_are_made_again(check: Any) -> None:
    """The output's ``__setitem__`` (the program's: followed) stores an item and an attribute
    natively; the mock calls the class, then stores them the same way."""
    compiled = check(collects, H.randn_inputs((3,)), calls=4)
    out, default, has = compiled(torch.ones(3))
    assert list(out.keys()) == ["states"] and out.states is out["states"]
    assert (default, has) == (3, True)
    assert H.graphs(collects, torch.randn(3)) == (1, [])


@dataclasses.dataclass
class Frozenish(OrderedDict):  # type: ignore[type-arg]
    """Native ``__setitem__`` and ``__setattr__``; a ``__delitem__`` of its own."""

    hidden: torch.Tensor | None = None

    def __delitem__(self, key: Any) -> None:
        raise TypeError("no")


def changed(x: torch.Tensor) -> tuple[Frozenish, bool, bool, Any]:
    out = Frozenish(x)
    out["a"] = x.sin()
    out.scale = 2
    out.tmp = x
    del out.tmp  # (the mock's object must not keep it)
    out.shift = x + 1
    delattr(out, "shift")
    return out, hasattr(out, "tmp"), hasattr(out, "scale"), getattr(out, "shift", None)


def test_attributes_set_and_deleted_on_a_rebuilt_output(check: Any) -> None:
    """Stores and deletions through the native hooks are made again by the mock, in order."""
    compiled = check(changed, H.randn_inputs((3,)), calls=4)
    out, *flags = compiled(torch.ones(3))
    assert flags == [False, True, None]
    assert vars(out).keys() == {"hidden", "scale"} and list(out) == ["a"]


def deletes_missing(x: torch.Tensor) -> Frozenish:
    out = Frozenish(x)
    try:  # noqa: SIM105  (the handler in the program's own frame is the case)
        del out.missing
    except AttributeError:
        pass
    return out


def test_a_change_that_raises_is_a_break() -> None:
    """A failed change is not one the mock could make again (it would raise there)."""
    _, reasons = H.graphs(deletes_missing, torch.randn(3))
    assert any("raised AttributeError" in r for r in reasons), reasons
    compiled = magpy.compile(deletes_missing, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        assert compiled(x).hidden is x
    assert H.counters(compiled)[3] == 0  # (no record that fails: no eager fallback)


@dataclasses.dataclass(frozen=True, slots=True)
class Pair:
    a: torch.Tensor
    b: int = 2


def slotted(x: torch.Tensor) -> tuple[torch.Tensor, bool, bool, Any]:
    p = Pair(x)
    return p.a * p.b, hasattr(p, "a"), hasattr(p, "c"), getattr(p, "c", None)


def test_hasattr_of_a_slotted_rebuilt_dataclass(check: Any) -> None:
    """Its slots are its own state, set by the construction the mock repeats."""
    check(slotted, H.randn_inputs((3,)), calls=3)


def model_output(x: torch.Tensor) -> Any:
    out = BaseModelOutput(last_hidden_state=x * 2)
    states = [x, x + 1]
    if hasattr(out, "vision_hidden_states"):
        pass
    elif hasattr(out, "last_hidden_state"):
        states = states[:-1]
        states.append(out.last_hidden_state)
    out["hidden_states"] = tuple(states)  # (transformers' __setitem__: run again by the mock)
    out.attentions = (x.cos(),)
    return out, out[1], out.to_tuple()


def test_a_transformers_output_changed_after_it_was_built(check: Any) -> None:
    """transformers' ``capture_outputs``: ``hasattr`` of the output the model built, then its
    hidden states stored as an item (its ``__setitem__`` mirrors them as an attribute)."""
    if BaseModelOutput is None:
        pytest.skip("transformers is not installed")
    compiled = check(model_output, H.randn_inputs((3,)), calls=4)
    out, second, flat = compiled(torch.ones(3))
    assert list(out.keys()) == ["last_hidden_state", "hidden_states", "attentions"]
    assert out.hidden_states is out["hidden_states"] is second and len(flat) == 3
    assert H.graphs(model_output, torch.randn(3)) == (1, [])


# ---------------------------------------------------------------------- descriptors
def descriptors(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    class Scaled:
        factor = 3

        def __init__(self, v: torch.Tensor) -> None:
            self._v = v

        @property
        def v(self) -> torch.Tensor:
            """Twice the value."""
            return self._v * 2

        @v.setter
        def v(self, new: torch.Tensor) -> None:
            self._v = new

        @v.deleter
        def v(self) -> None:
            self._v = self._v * 0

        @staticmethod
        def shift(y: torch.Tensor) -> torch.Tensor:
            return y + 1

        @classmethod
        def make(cls, y: torch.Tensor) -> Scaled:
            return cls(y * cls.factor)

    s = Scaled(x)
    first = s.v
    s.v = x + 1
    second = s.v
    del s.v
    return first, second, s.v, Scaled.shift(x), s.shift(x), Scaled.make(x).v, s.make(x).v


def test_property_staticmethod_classmethod_in_a_class_made_in_the_region(check: Any) -> None:
    """``property`` (and its setter and deleter copies), ``staticmethod`` and ``classmethod``
    made by the class statement: one graph; the getter, setter and deleter are followed."""
    check(descriptors, H.randn_inputs((3,)), calls=4)
    assert H.graphs(descriptors, torch.randn(3)) == (1, [])


def descriptor_objects(x: torch.Tensor) -> tuple[Any, torch.Tensor]:
    def half(obj: Any) -> torch.Tensor:
        return x / 2

    prop = property(half, doc="half of x")
    return prop, prop.fget(None) + 1


def test_a_property_made_in_the_region_leaves_it() -> None:
    """The mock makes a new property over the function it makes again (not the run's)."""
    compiled = magpy.compile(descriptor_objects, backend="eager")
    made = []
    for _ in range(3):
        x = torch.randn(3)
        prop, out = compiled(x)
        assert type(prop) is property and prop.__doc__ == "half of x"
        assert torch.equal(prop.fget(None), x / 2) and torch.equal(out, x / 2 + 1)
        made.append(prop)
    assert made[1] is not made[2] and made[1].fget is not made[2].fget
    assert H.counters(compiled) == (1, 2, 0, 0)


# ---------------------------------------------------------------------- weak references
class Node:
    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def scaled(self, k: float) -> torch.Tensor:
        return self.value * k


def weak(x: torch.Tensor) -> tuple[torch.Tensor, bool, Node]:
    node = Node(x)
    ref = weakref.ref(node)
    proxy = weakref.proxy(node)
    proxy.extra = x + 1  # (the referent's attribute)
    out = ref().value * 2 + proxy.value + proxy.scaled(3.0) + node.extra
    return out, ref() is node and weakref.ref(node) is ref, node


def test_weak_references_to_objects_made_in_the_run(check: Any) -> None:
    """``ref()`` gives the referent (the same basic reference each time); a proxy reads and
    writes the referent's attributes."""
    check(weak, H.randn_inputs((3,)), calls=4)
    assert H.graphs(weak, torch.randn(3)) == (1, [])


def leaves(x: torch.Tensor) -> tuple[Node, Any]:
    node = Node(x * 2)
    return node, weakref.ref(node)


def test_a_weak_reference_that_leaves_the_region() -> None:
    """The mock makes it again over the object it rebuilt, not the run's."""
    compiled = magpy.compile(leaves, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        node, ref = compiled(x)
        assert ref() is node and torch.equal(node.value, x * 2)
    assert H.counters(compiled) == (1, 2, 0, 0)


class Holder(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ref = weakref.ref(self)  # (torch's RemovableHandle keeps such references)
        return ref().scale(x)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_a_weak_reference_to_an_object_from_outside(check: Any) -> None:
    check(Holder(), H.randn_inputs((3,)), calls=3)


def weak_callback(x: torch.Tensor) -> torch.Tensor:
    node = Node(x)
    weakref.ref(node, lambda r: None)
    return x + 1


def test_a_weak_reference_with_a_callback_is_a_break() -> None:
    """The callback runs when the referent dies, which the record cannot repeat."""
    _, reasons = H.graphs(weak_callback, torch.randn(3))
    assert any("callback" in r for r in reasons), reasons


# ---------------------------------------------------------------------- hasattr, getattr
class Lazy:
    """Attributes it does not hold come from its Python ``__getattr__``."""

    kind = "lazy"

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __getattr__(self, name: str) -> Any:
        if name.startswith("auto_"):
            return self.x * len(name)
        raise AttributeError(name)


def lookups(x: torch.Tensor) -> tuple[Any, ...]:
    lazy = Lazy(x)
    return (
        hasattr(lazy, "x"),
        hasattr(lazy, "kind"),
        hasattr(lazy, "auto_a"),
        hasattr(lazy, "other"),
        getattr(lazy, "other", 5),
        getattr(lazy, "auto_bb", None),
        lazy.auto_c,
        getattr(lazy, "x", None) is x,
    )


def test_hasattr_and_getattr_through_a_python_getattr(check: Any) -> None:
    """``__getattr__`` runs for a name the object and its class lack: followed (its
    ``AttributeError`` gives False or the default); other names are the object's own or its
    class's (guarded)."""
    check(lookups, H.randn_inputs((3,)), calls=4)
    assert H.graphs(lookups, torch.randn(3)) == (1, [])


class Counter:
    def __init__(self) -> None:
        self.n = 1

    def step(self) -> int:
        return self.n


def bound_method(x: torch.Tensor) -> torch.Tensor:
    c = Counter()
    step = c.step  # (the method the class holds now)
    return x + step()


def test_a_method_replaced_on_the_class_between_calls() -> None:
    """The bound method read from an object built in the run is what its class holds: the
    class's entry is guarded, so replacing it misses."""
    compiled = magpy.compile(bound_method, backend="eager")
    x = torch.zeros(2)
    original = Counter.step
    try:
        assert torch.equal(compiled(x), x + 1) and torch.equal(compiled(x), x + 1)
        Counter.step = lambda self: 2  # type: ignore[method-assign]
        assert torch.equal(compiled(x), bound_method(x))
    finally:
        Counter.step = original  # type: ignore[method-assign]


class Falsy:
    """Class attributes whose values are falsy, next to a Python ``__getattr__``: each is found
    on the class (``__getattr__`` does not run), none is taken for a missing name."""

    scale = None
    zero = 0
    empty = ""
    off = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("auto_"):
            return 7
        raise AttributeError(name)


class PlainFalsy:
    scale = None
    zero = 0
    empty = ""
    off = False


FALSY_NAMES = ("scale", "zero", "empty", "off")


def falsy_reads(x: torch.Tensor, obj: Any) -> tuple[Any, ...]:
    made = Falsy()
    got = [getattr(o, n) for o in (made, obj) for n in FALSY_NAMES]
    found = [hasattr(o, n) for o in (made, obj) for n in FALSY_NAMES]
    defaults = [getattr(o, n, 9) for o in (made, obj) for n in FALSY_NAMES]
    return x * (made.scale is None) + obj.zero + len(obj.empty) + made.off, got, found, defaults


def test_falsy_class_attributes_are_found_not_missing(check: Any) -> None:
    """A class attribute that is None, 0, "" or False is read from the class like any other,
    on an object built in the run and on one from outside (with a Python ``__getattr__`` and
    without): one graph, no break, and the hits give eager's values."""
    for obj in (Falsy(), PlainFalsy()):
        check(falsy_reads, lambda i, obj=obj: ((torch.randn(3), obj), {}), calls=3)
        assert H.graphs(falsy_reads, torch.randn(3), obj) == (1, [])


def containers(x: torch.Tensor) -> tuple[Any, ...]:
    parts, named = [x, x + 1], {"a": x}
    return x * 2, hasattr(parts, "append"), hasattr(named, "shape"), getattr(parts, "size", 4)


def test_hasattr_of_builtin_containers_made_in_the_run(check: Any) -> None:
    """A list or dict has no attributes of its own: its (fixed) type answers."""
    check(containers, H.randn_inputs((3,)), calls=3)


class _MaskedLoss(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", None)  # (a buffer that is None: not a class attribute)
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum() * self.scale if self.mask is None else (x * self.mask).sum()


class _BuildsItsLoss(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # CrossEntropyLoss() reads its ``weight`` buffer, None
        loss = torch.nn.CrossEntropyLoss()(self.lin(x), labels)
        return loss + _MaskedLoss()(x)


def test_a_module_built_in_forward_whose_buffer_is_none_hits() -> None:
    """A None buffer of a module built in forward is read from the instance, not guarded as an
    attribute of its class (which has none: that guard could never pass, a record per call)."""
    model = _BuildsItsLoss()
    labels = torch.tensor([0, 1, 2, 0])
    H.assert_compiles_like_eager(
        model, lambda i: ([torch.randn(4, 3), labels], {}), calls=4, backend="eager"
    )
