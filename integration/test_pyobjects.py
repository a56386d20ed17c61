"""Instances of plain Python classes built inside the compiled region.

Model code builds its own small objects: output holders (``ModelOutput``, an ``OrderedDict``
subclass whose ``__setitem__``/``__setattr__`` mirror items and attributes), boxes passed
between helpers, caches stored on the module. The monitor follows their construction and every
Python ``__init__``/``__setattr__``/``__setitem__``/property they run; the mock rebuilds them
without running the class's code, so they can be returned and stored outside.
"""

from __future__ import annotations

import collections
import functools
import types
import typing
from collections import OrderedDict
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy


# ---------------------------------------------------------------------- ModelOutput
class ModelOutput(OrderedDict):  # type: ignore[type-arg]
    """benchmark_VAE's output type: items and attributes mirror each other."""

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, str):
            return {key: v for key, v in self.items()}[k]
        return self.to_tuple()[k]

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self[k] for k in self.keys())


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)])

    def forward(self, z: torch.Tensor, levels: list[int] | None = None) -> ModelOutput:
        output = ModelOutput()
        out = z
        for i, layer in enumerate(self.layers):
            out = layer(out).relu()
            if levels is not None and i + 1 in levels:
                output[f"layer_{i + 1}"] = out
        output["reconstruction"] = out.reshape(z.shape[0], 2, 2)
        output.norm = output["reconstruction"].norm() + output[0].sum()
        return output


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mu = torch.nn.Linear(4, 3)
        self.var = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[ModelOutput, torch.Tensor]:
        out = ModelOutput(embedding=self.mu(x), log_covariance=self.var(x), depth=2)
        return out, out.embedding * out["log_covariance"].exp() + out.depth


def test_model_output_filled_after_construction(check: Any) -> None:
    """Items stored through the Python ``__setitem__`` (and its ``super()`` calls) and an
    attribute through the Python ``__setattr__``: one graph; the mock rebuilds the object with
    the same items, attributes and type."""
    check(Decoder(), H.randn_inputs((3, 4)), calls=4)
    check(Decoder(), lambda i: ((torch.randn(3, 4), [1, 2]), {}), calls=3)
    assert H.graphs(Decoder(), torch.randn(3, 4)) == (1, [])


def test_model_output_built_from_keywords(check: Any) -> None:
    """``OrderedDict.__init__(**kw)`` stores each keyword through the Python ``__setitem__``."""
    check(Encoder(), H.randn_inputs((2, 4)), calls=4)
    assert H.graphs(Encoder(), torch.randn(2, 4)) == (1, [])


class Registry(dict):  # type: ignore[type-arg]
    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value * 2)


def registry(x: torch.Tensor) -> Registry:
    r = Registry(a=x)  # dict.__init__ stores directly: no doubling
    r["b"] = x  # STORE_SUBSCR runs the Python __setitem__: doubled
    return r


def test_dict_subclass_init_does_not_run_python_setitem(check: Any) -> None:
    """``dict.__init__`` (unlike ``OrderedDict.__init__``) bypasses a Python ``__setitem__``."""
    check(registry, H.randn_inputs((3,)), calls=3)
    out = magpy.compile(registry, backend="eager")(torch.ones(2))
    assert torch.equal(out["a"], torch.ones(2)) and torch.equal(out["b"], 2 * torch.ones(2))


# ---------------------------------------------------------------------- plain classes
class Box:
    scale = 2.0

    def __init__(self, x: torch.Tensor, shift: float = 1.0) -> None:
        self.x = x
        self.shift = shift
        self._cached: torch.Tensor | None = None

    @property
    def value(self) -> torch.Tensor:
        if self._cached is None:
            self._cached = self.x * self.scale + self.shift
        return self._cached

    @value.setter
    def value(self, v: torch.Tensor) -> None:
        self._cached = v.clone()

    def doubled(self) -> Box:
        return Box(self.value * 2, shift=self.shift)


def boxes(x: torch.Tensor) -> tuple[Box, Box, torch.Tensor]:
    a = Box(x)
    b = a.doubled()
    b.value = b.value.relu()
    return a, a if x.shape[0] > 2 else b, a.value + b.value


def test_plain_class_with_properties_and_methods(check: Any) -> None:
    """``__init__``, a property getter and setter, a method building another instance, and a
    class attribute: one graph; outputs are rebuilt with the run's aliasing."""
    check(boxes, H.randn_inputs((3, 4)), calls=4)
    assert H.graphs(boxes, torch.randn(3, 4)) == (1, [])
    a, same, _ = magpy.compile(boxes, backend="eager")(torch.randn(3, 4))
    assert same is a and type(a) is Box


def test_class_attribute_read_is_guarded() -> None:
    """``self.scale`` found on the class is read from the class, so changing it is seen."""
    compiled = magpy.compile(boxes, backend="eager")
    x = torch.randn(3, 4)
    try:
        for scale in (2.0, 2.0, 5.0, 5.0):
            Box.scale = scale
            H.assert_same(compiled(x), boxes(x))
    finally:
        Box.scale = 2.0
    assert magpy.stats(compiled).records == 2


class Cache(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.last: Box | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = Box(self.lin(x), shift=0.5)
        return self.last.value


def test_object_stored_on_the_module() -> None:
    """A new object stored outside is rebuilt by the mock and written to the module."""
    model = Cache()
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4)
        out = compiled(x)
        last = model.last
        assert isinstance(last, Box) and last.shift == 0.5
        assert torch.allclose(last.x, model.lin(x)) and torch.allclose(out, last.value)
    assert magpy.stats(compiled).records == 1 and magpy.stats(compiled).hits == 2


def truth(x: torch.Tensor, fill: bool) -> torch.Tensor:
    out = ModelOutput()
    if fill:
        out["x"] = x
    return x + 1 if out else x - 1


def test_truth_of_a_built_mapping(check: Any) -> None:
    check(truth, lambda i: ((torch.randn(3), i % 2 == 0), {}), calls=4, expect_records=2)


# ---------------------------------------------------------------------- __getattr__
class AttrDict(dict):  # type: ignore[type-arg]
    """Config objects read by attribute (EasyDict-style)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class Lazy:
    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __getattr__(self, name: str) -> Any:
        return self.x


def attr_config(x: torch.Tensor, scale: float) -> Any:
    cfg = AttrDict(scale=scale, act=torch.relu)
    lazy = Lazy(x * 3)
    return cfg.act(x) * cfg.scale + lazy.anything, cfg


def test_a_python_getattr_is_followed(check: Any) -> None:
    """A missing attribute of an object built in the run runs its class's ``__getattr__``: it
    is followed, by LOAD_ATTR and by LOAD_METHOD (``cfg.act(x)``)."""
    check(attr_config, lambda i: ((torch.randn(3), 2.0), {}), calls=3)
    assert H.graphs(attr_config, torch.randn(3), 2.0) == (1, [])


# ---------------------------------------------------------------------- SimpleNamespace
def namespace(x: torch.Tensor) -> Any:
    ns = types.SimpleNamespace(a=x * 2, b=3)
    ns.c = ns.a + ns.b
    del ns.b
    return ns.c, ns


def test_a_simple_namespace_built_in_the_run(check: Any) -> None:
    check(namespace, lambda i: ((torch.randn(3),), {}), calls=3)
    assert H.graphs(namespace, torch.randn(3)) == (1, [])


class Doubling:
    """Every attribute read runs Python: ``double`` is computed, the rest read plainly."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __getattribute__(self, name: str) -> Any:
        if name == "double":
            return object.__getattribute__(self, "t") * 2
        return super().__getattribute__(name)

    def scale(self, k: float) -> torch.Tensor:
        return self.t * k


def reads_through_getattribute(x: torch.Tensor) -> Any:
    d = Doubling(x)
    return d.double + d.t + d.scale(3.0), d


def test_a_python_getattribute_is_followed(check: Any) -> None:
    """Each read of an object built in the run whose class has a Python ``__getattribute__``
    follows it; ``object.__getattribute__``/``super().__getattribute__`` inside it is the
    plain read."""
    check(reads_through_getattribute, lambda i: ((torch.randn(3),), {}), calls=3)
    assert H.graphs(reads_through_getattribute, torch.randn(3)) == (1, [])


# ---------------------------------------------------------------------- metaclasses
class Tagging(type):
    """A metaclass whose ``__call__`` post-processes every instance."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        obj.tag = cls.__name__.lower()
        return obj


class Head(metaclass=Tagging):
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def tagged_head(x: torch.Tensor) -> Any:
    head = Head(2.0)
    return head(x), head


def test_a_metaclass_call_is_followed(check: Any) -> None:
    """``Head(2.0)`` runs ``Tagging.__call__``, whose ``super().__call__`` builds the object;
    the returned object is rebuilt with the attribute the metaclass set."""
    check(tagged_head, lambda i: ((torch.randn(3),), {}), calls=3)
    assert H.graphs(tagged_head, torch.randn(3)) == (1, [])
    _, head = magpy.compile(tagged_head, backend="eager")(torch.randn(3))
    assert type(head) is Head and vars(head) == {"scale": 2.0, "tag": "head"}


# ---------------------------------------------------------------------- still breaks
class Guarded:
    """A Python ``__delattr__``: its objects are not followed."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __delattr__(self, name: str) -> None:
        raise AttributeError(name)


class Slotted:
    __slots__ = ("x",)

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x


@pytest.mark.parametrize("cls", [Guarded, Slotted], ids=["__delattr__", "__slots__"])
def test_classes_the_shadow_cannot_hold_break(cls: type) -> None:
    """A Python ``__delattr__`` or ``__slots__``: a graph break, and results stay eager's."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return cls(x * 2).x + 1

    graphs, reasons = H.graphs(fn, torch.randn(3))
    assert graphs == 2 and cls.__name__ in reasons[0]
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        assert torch.equal(compiled(x), fn(x))


# ---------------------------------------------------------------------- functools.partial
def _dice(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7, p: int = 2) -> torch.Tensor:
    return (2 * (a * b).sum() + eps) / (a.pow(p).sum() + b.sum() + eps)


def _apply(fn: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return fn(a, b)


def partials(a: torch.Tensor, b: torch.Tensor, eps: float) -> tuple[torch.Tensor, Any]:
    fn = functools.partial(_dice, eps=eps)
    add_a = functools.partial(torch.add, a)
    return _apply(fn, a, b) + add_a(b).sum(), fn


def test_partial_built_in_the_run(check: Any) -> None:
    """``functools.partial`` made in the region (catalyst's metrics): calls through it are
    followed, and a returned partial is rebuilt with the same parts."""
    check(partials, lambda i: ((torch.rand(3), torch.rand(3), 1e-5), {}), calls=3)
    assert H.graphs(partials, torch.rand(3), torch.rand(3), 1e-5) == (1, [])
    _, fn = magpy.compile(partials, backend="eager")(torch.rand(3), torch.rand(3), 0.5)
    assert (fn.func, fn.args, fn.keywords) == (_dice, (), {"eps": 0.5})


# ---------------------------------------------------------------------- torch.distributions
class Policy(torch.nn.Module):
    """A policy head: a distribution built in ``forward`` (argument validation on, as by
    default), its ``lazy_property`` ``probs``, ``log_prob`` and ``entropy``."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> Any:
        dist = torch.distributions.Categorical(logits=self.head(x))
        return dist.log_prob(action), dist.probs, dist.entropy()


def gaussian(mu: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> Any:
    dist = torch.distributions.Normal(mu, scale)
    return dist.log_prob(x), dist.mean, dist.entropy()


def test_distributions_built_in_forward(check: Any) -> None:
    """The validation of the arguments (``constraint.check(v).all()``) is an assumption
    checked on every call; ``action.long()`` of an int64 action is not an update in place."""
    check(Policy(), lambda i: ((torch.randn(5, 4), torch.randint(0, 3, (5,))), {}), calls=3)
    assert H.graphs(Policy(), torch.randn(5, 4), torch.randint(0, 3, (5,)))[0] == 1
    check(gaussian, lambda i: ((torch.randn(3), torch.rand(3) + 0.1, torch.randn(3)), {}))
    assert H.graphs(gaussian, torch.randn(3), torch.rand(3) + 0.1, torch.randn(3))[0] == 1


def independent(mu: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> Any:
    dist = torch.distributions.Independent(torch.distributions.Normal(mu, scale), 1)
    return dist.log_prob(x), dist.entropy(), dist


def test_a_class_with_typing_generic_in_its_bases(check: Any) -> None:
    """``Independent`` has ``typing.Generic`` in its MRO, whose ``__slots__`` is empty: its
    instances still keep everything in ``__dict__`` (pfrl's Gaussian heads)."""
    check(
        independent, lambda i: ((torch.randn(2, 3), torch.rand(2, 3) + 0.1, torch.randn(2, 3)), {})
    )
    assert H.graphs(independent, torch.randn(2, 3), torch.rand(2, 3) + 0.1, torch.randn(2, 3)) == (
        1,
        [],
    )


def validated(mu: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.distributions.Normal(mu, scale, validate_args=True).log_prob(x)


def test_distribution_argument_errors_reach_the_user() -> None:
    """A scale that fails validation on a later call: the assumption misses and the program
    runs again, raising torch's own ``ValueError``; later calls still hit."""
    compiled = magpy.compile(validated, backend="eager")
    good = (torch.randn(3), torch.rand(3) + 0.1, torch.randn(3))
    H.assert_same(compiled(*good), validated(*good))
    with pytest.raises(ValueError, match="scale"):
        compiled(torch.randn(3), -torch.rand(3) - 0.1, torch.randn(3))
    H.assert_same(compiled(*good), validated(*good))
    assert magpy.stats(compiled).hits == 1


def test_the_default_validation_setting_is_guarded() -> None:
    """``Distribution.set_default_validate_args`` changes a class attribute the run read."""
    compiled = magpy.compile(gaussian, backend="eager")
    bad = (torch.randn(3), -torch.rand(3) - 0.1, torch.randn(3))
    before = torch.distributions.Distribution._validate_args
    try:
        torch.distributions.Distribution.set_default_validate_args(False)
        H.assert_same(compiled(*bad), gaussian(*bad))  # no validation: NaN log-probabilities
        torch.distributions.Distribution.set_default_validate_args(True)
        with pytest.raises(ValueError, match="scale"):
            compiled(*bad)
    finally:
        torch.distributions.Distribution.set_default_validate_args(before)


# ---------------------------------------------------------------------- namedtuple _replace
Point = collections.namedtuple("Point", "x scale bits")


class Quant(typing.NamedTuple):
    value: torch.Tensor
    scale: float


class QuantWithNew(Quant):
    """brevitas's QuantTensor: a Python ``__new__`` over a NamedTuple; ``_replace`` bypasses
    it (``_make`` calls ``tuple.__new__``), and so must the mock."""

    def __new__(cls, value: torch.Tensor, scale: float = 1.0) -> QuantWithNew:
        return super().__new__(cls, value * 1, scale)


def replaces(p: Point, q: Quant, w: QuantWithNew) -> Any:
    a = p._replace(x=p.x * 2)
    b = q._replace(scale=q.scale + 1)
    c = w._replace(value=w.value.relu())
    return a, b, c, p


def _replace_inputs(i: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    w = QuantWithNew(torch.randn(2), 3.0 + i)
    return (Point(torch.randn(3), 2.0, 8 + i), Quant(torch.randn(2), 0.5 * i), w), {}


def test_namedtuple_replace_is_one_graph(check: Any) -> None:
    """``nt._replace(...)`` runs ``map(kwds.pop, fields, nt)`` natively; the result is built
    from the shadows, of the input's own class, and rebuilt by the mock."""
    check(replaces, _replace_inputs, calls=3)
    assert H.graphs(replaces, *_replace_inputs(0)[0]) == (1, [])
    compiled = magpy.compile(replaces, backend="eager")
    args = _replace_inputs(1)[0]
    out = compiled(*args)
    assert [type(x) for x in out] == [Point, Quant, QuantWithNew, Point]
    assert out[3] is args[0] and out[2].value is not args[2].value


def test_namedtuple_replace_follows_the_input_class() -> None:
    """A namedtuple of another class with the same fields is a guard miss, not the old class."""
    other = collections.namedtuple("Other", "x scale bits")
    compiled = magpy.compile(lambda p: p._replace(bits=1), backend="eager")
    t = torch.randn(2)
    assert type(compiled(Point(t, 1.0, 2))) is Point
    out = compiled(other(t, 1.0, 2))
    assert type(out) is other and out == (t, 1.0, 1)


def test_namedtuple_replace_of_a_missing_field_raises_like_eager() -> None:
    """The same exception as eager's (its class differs by version: ``ValueError`` before
    3.13, ``TypeError`` from 3.13)."""

    def fn(p: Any) -> Any:
        return p._replace(nope=1)

    compiled = magpy.compile(fn, backend="eager")
    with pytest.raises((ValueError, TypeError), match="unexpected field name") as want:
        fn(Point(torch.randn(2), 1.0, 2))
    with pytest.raises(want.type, match="unexpected field name") as got:
        compiled(Point(torch.randn(2), 1.0, 2))
    assert str(got.value) == str(want.value)


Pair = collections.namedtuple("Pair", "a b")


def bound_reads(x: torch.Tensor) -> Any:
    p = Pair(x, 1)
    q = p._make([x * 2, 3])  # a classmethod read through an object the run built
    d = {"k": x + 1, "j": 2}
    pop = d.pop  # a builtin method of a dict the run built, as a value
    return q.a + pop("k"), q, d


def test_methods_read_as_values_from_objects_built_in_the_run(check: Any) -> None:
    check(bound_reads, lambda i: ((torch.randn(3),), {}), calls=3)
    assert H.graphs(bound_reads, torch.randn(3)) == (1, [])


# ---------------------------------------------------------------------- hasattr, delattr
def _three_calls_one_record(fn: Any) -> Any:
    """``fn`` compiled, three fresh calls equal to eager, one record serving the last two."""
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), fn(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st
    return compiled


class Crate:
    """A plain box; ``kind`` is a class attribute a program may look for."""

    kind = "box"


def hasattr_and_delattr(x: torch.Tensor) -> torch.Tensor:
    b = Crate()
    b.scale = 2.0
    if hasattr(b, "scale"):
        x = x * b.scale
    delattr(b, "scale")
    x = x + hasattr(b, "scale") + hasattr(b, "kind") + hasattr(b, "missing")
    return x


def test_hasattr_and_delattr_on_an_object_built_in_the_run() -> None:
    """The object's own attributes are the shadow's (stores and deletions followed); the class
    decides the rest, and a class that gains or loses the name misses."""
    compiled = _three_calls_one_record(hasattr_and_delattr)
    Crate.missing = 1  # type: ignore[attr-defined]
    try:
        x = torch.randn(3)
        H.assert_same(compiled(x), hasattr_and_delattr(x))
    finally:
        del Crate.missing  # type: ignore[attr-defined]
    x = torch.randn(3)
    H.assert_same(compiled(x), hasattr_and_delattr(x))
    assert magpy.stats(compiled).records == 2


class Settings:
    """An object from outside whose ``__dict__`` the program changes, then reads."""


SETTINGS = Settings()
SETTINGS.a, SETTINGS.b = 1, 2  # type: ignore[attr-defined]


def keys_after_a_write(x: torch.Tensor) -> torch.Tensor:
    SETTINGS.c = 3  # type: ignore[attr-defined]
    n = sum(1 for k in vars(SETTINGS) if k != "b")
    del SETTINGS.c  # type: ignore[attr-defined]
    return x * n + len(SETTINGS.__dict__)


def test_the_keys_of_a_dict_the_run_changed_are_guarded_as_they_were() -> None:
    """Its keys are checked as they were when the call began (the run's own writes replayed),
    so the record hits; a key added from outside misses."""
    compiled = _three_calls_one_record(keys_after_a_write)
    SETTINGS.d = 4  # type: ignore[attr-defined]
    try:
        x = torch.randn(3)
        H.assert_same(compiled(x), keys_after_a_write(x))
    finally:
        del SETTINGS.d  # type: ignore[attr-defined]
    assert magpy.stats(compiled).records == 2


class LayeredCache:
    """Like transformers' caches: a property listing a per-layer flag, looked for by hasattr."""

    def __init__(self, n: int) -> None:
        self.conv = dict.fromkeys(range(n))  # (a classmethod of dict, bound anew on each read)
        self.ready = dict.fromkeys(range(n), False)

    @property
    def is_sliding(self) -> list[bool]:
        return [i % 2 == 1 for i in self.conv]


def use_layered_cache(x: torch.Tensor) -> torch.Tensor:
    cache = LayeredCache(3)
    for i in cache.conv:
        cache.conv[i] = x * i
        cache.ready[i] = True
    if hasattr(cache, "is_sliding") and True in cache.is_sliding:
        x = x + cache.is_sliding.index(True)
    return x + sum(cache.conv.values()) + sum(cache.ready.values())


def test_dict_fromkeys_and_hasattr_of_a_property_of_an_object_built_in_the_run() -> None:
    _three_calls_one_record(use_layered_cache)


# ---------------------------------------------------------------------- id()
class Optimizerish:
    """An object from outside that a table keys by ``id()`` (``GradScaler``'s per-optimizer
    states)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale


TABLE_BY_ID: dict[int, float] = {}
CURRENT = [Optimizerish(2.0)]


def scale_by_id(x: torch.Tensor) -> torch.Tensor:
    opt = CURRENT[0]
    return x * TABLE_BY_ID[id(opt)] + opt.scale


def test_id_of_an_object_from_outside_is_a_constant_guarded_by_identity() -> None:
    first, second = CURRENT[0], Optimizerish(5.0)
    TABLE_BY_ID.update({id(first): 3.0, id(second): 7.0})
    compiled = _three_calls_one_record(scale_by_id)
    CURRENT[0] = second  # another object: another number, the guard misses
    try:
        x = torch.randn(3)
        H.assert_same(compiled(x), scale_by_id(x))
        assert magpy.stats(compiled).records == 2, magpy.stats(compiled)
    finally:
        CURRENT[0] = first


def id_of_a_new_object(x: torch.Tensor) -> torch.Tensor:
    box = Optimizerish(1.0)
    return x + (id(box) % 2) * 0


def test_id_of_an_object_the_run_makes_is_a_break() -> None:
    out = magpy.explain(id_of_a_new_object)(torch.randn(3))
    assert [r.reason for r in out.break_reasons] == [
        "id() of an object the run made (Optimizerish) or a value"
    ], out.break_reasons
