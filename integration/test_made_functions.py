"""Functions and classes made inside the compiled region and handed out of it.

A nested ``def`` or ``lambda`` is a new function on every call, closing over *that* call's
variables: the mock builds a new one each time (with new cells), never the recorded run's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import torch

import magpy


# ---------------------------------------------------------------------- closures that leave
def scaler(x: torch.Tensor, k: float) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any]]:
    return x + 1, lambda t: t * k


def test_a_returned_closure_sees_this_calls_variables() -> None:
    """The closure multiplies by each call's ``k`` (not by the recorded run's), and every call
    gives a new function; ``k`` is never read in the region, so one record serves all."""
    compiled = magpy.compile(scaler, backend="eager")
    made = []
    for k in (2.0, 3.0, 4.0):
        x = torch.randn(3)
        out, fn = compiled(x, k)
        assert torch.equal(out, x + 1)
        assert torch.equal(fn(x), x * k)
        made.append(fn)
    assert len({id(f) for f in made}) == 3
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits) == (1, 2)
    assert H.graphs(scaler, torch.randn(3), 2.0) == (1, [])


def counter(x: torch.Tensor) -> tuple[Any, Any, torch.Tensor]:
    total = x.sum()

    def add(v: torch.Tensor) -> None:
        nonlocal total
        total = total + v

    def get() -> torch.Tensor:
        return total

    return add, get, total * 2


def test_closures_sharing_a_variable_share_it_again() -> None:
    """``add`` and ``get`` close over one cell, holding a tensor the graph computed: the
    rebuilt pair shares one new cell per call."""
    compiled = magpy.compile(counter, backend="eager")
    pairs = []
    for _ in range(3):
        x = torch.randn(4)
        add, get, doubled = compiled(x)
        assert torch.allclose(get(), x.sum()) and torch.allclose(doubled, 2 * x.sum())
        add(torch.tensor(1.0))
        assert torch.allclose(get(), x.sum() + 1)
        pairs.append((add, get))
    first_add, first_get = pairs[0]
    assert torch.allclose(first_get(), pairs[0][1]())  # the first call's cell is its own
    assert first_add.__closure__[0] is not pairs[1][0].__closure__[0]  # type: ignore[index]
    assert magpy.stats(compiled).records == 1


def with_defaults(x: torch.Tensor, *, scale: float = 2.0) -> Any:
    shift = x.mean()

    def apply(t: torch.Tensor, s: float = scale, *, m: torch.Tensor = shift) -> torch.Tensor:
        """Scale, then shift."""
        return t * s + m

    return apply


def test_defaults_and_keyword_defaults_are_this_calls() -> None:
    compiled = magpy.compile(with_defaults, backend="eager")
    for scale in (2.0, 2.0, 5.0):
        x = torch.randn(3)
        fn = compiled(x, scale=scale)
        assert torch.allclose(fn(x), x * scale + x.mean())
        assert fn.__name__ == "apply" and fn.__doc__ == "Scale, then shift."
        assert fn.__qualname__ == "with_defaults.<locals>.apply"
        assert fn.__annotations__ == with_defaults(x).__annotations__


class Hooked(torch.nn.Module):
    """A module that keeps a function made in ``forward`` (a post-processing hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.post: Any = None

    def forward(self, x: torch.Tensor, gain: float) -> torch.Tensor:
        y = self.lin(x)
        self.post = lambda t: t * gain + y.detach().mean()
        return y


def test_a_function_stored_outside_is_new_on_every_call() -> None:
    mod = Hooked()
    compiled = magpy.compile(mod, backend="eager")
    seen = []
    for gain in (1.0, 3.0, 3.0):
        x = torch.randn(2, 3)
        y = compiled(x, gain)
        assert torch.allclose(mod.post(x), x * gain + y.detach().mean())
        seen.append(mod.post)
    assert len({id(f) for f in seen}) == 3
    assert magpy.stats(compiled).records == 1


def tagged(x: torch.Tensor) -> Any:
    def inner(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    inner.tag = "changed"  # type: ignore[attr-defined]
    return x * 2, inner


def test_a_function_changed_after_it_was_made_stays_correct() -> None:
    compiled = magpy.compile(tagged, backend="eager")
    with H.runs_eagerly():
        for _ in range(3):
            x = torch.randn(3)
            out, fn = compiled(x)
            assert torch.equal(out, x * 2) and fn.tag == "changed" and torch.equal(fn(x), x + 1)


def recursive_inner(x: torch.Tensor) -> tuple[torch.Tensor, Any]:
    def fact(n: int) -> int:
        return 1 if n <= 1 else n * fact(n - 1)

    return x * fact(3), fact


def test_a_nested_function_that_closes_over_itself_stays_correct() -> None:
    """Its cell holds the function itself: no recipe can build that, so the record is refused
    (before: a RecursionError reached the program)."""
    compiled = magpy.compile(recursive_inner, backend="eager")
    with H.runs_eagerly():
        for _ in range(3):
            x = torch.randn(3)
            out, fact = compiled(x)
            assert torch.equal(out, x * 6) and fact(4) == 24
    reasons = [r.reason for r in magpy.explain(recursive_inner)(torch.randn(3)).break_reasons]
    assert any("closes over itself" in r for r in reasons), reasons


# ---------------------------------------------------------------------- class statements
SCALE = 2.0


class Base:
    def __init__(self, bias: torch.Tensor) -> None:
        self.bias = bias

    def offset(self) -> torch.Tensor:
        return self.bias * SCALE


def local_class(x: torch.Tensor, k: float) -> tuple[torch.Tensor, str]:
    class Affine(Base):
        """An affine map made per call."""

        gain: float = SCALE
        shift = k  # the enclosing function's variable (LOAD_CLASSDEREF)
        tmp = [n * 2 for n in range(3)]  # noqa: RUF012  (deleted below)
        total = sum(tmp)
        del tmp

        def __init__(self, bias: torch.Tensor) -> None:
            super().__init__(bias)

        def __call__(self, t: torch.Tensor) -> torch.Tensor:
            return t * self.gain + self.shift + self.offset() + self.total

    fn = Affine(x.mean())
    return fn(x), f"{Affine.__name__}:{Affine.__annotations__['gain']}:{Affine.__doc__}"


def test_a_class_statement_in_the_region(check: Any) -> None:
    """The class body runs under the monitor: names it reads from outside are guarded (the
    global ``SCALE``, the argument ``k``), so a hit need not build the class at all."""
    check(local_class, lambda i: ((torch.randn(3), 0.5), {}), calls=3)
    assert H.graphs(local_class, torch.randn(3), 0.5) == (1, [])
    global SCALE
    compiled = magpy.compile(local_class, backend="eager")
    x = torch.randn(3)
    assert torch.allclose(compiled(x, 0.5)[0], local_class(x, 0.5)[0])
    SCALE = 3.0
    try:
        assert torch.allclose(compiled(x, 0.5)[0], local_class(x, 0.5)[0])
        assert magpy.stats(compiled).records == 2
    finally:
        SCALE = 2.0


def escaping_class(x: torch.Tensor) -> tuple[torch.Tensor, Any, Any]:
    class Box:
        def __init__(self, v: torch.Tensor) -> None:
            self.v = v

    return x * 2, Box, Box(x)


def test_a_class_that_leaves_the_region_is_new_on_every_call() -> None:
    """Eager makes a new class per call: the mock cannot hand out the recorded one, so this is
    a graph break (after the multiplication), and every call gets its own class."""
    _, reasons = H.graphs(escaping_class, torch.randn(3))
    assert reasons and "Box" in reasons[0]
    compiled = magpy.compile(escaping_class, backend="eager")
    seen = []
    with H.runs_eagerly():
        for _ in range(3):
            x = torch.randn(3)
            out, cls, box = compiled(x)
            assert torch.equal(out, x * 2) and type(box) is cls and box.v is x
            seen.append(cls)
    assert len({id(c) for c in seen}) == 3


class WithHook:
    seen: list[str] = []  # noqa: RUF012

    def __init_subclass__(cls) -> None:
        WithHook.seen.append(cls.__name__)


def subclass_hook(x: torch.Tensor) -> torch.Tensor:
    class Child(WithHook):
        pass

    return x + len(WithHook.seen)


def meta_class(x: torch.Tensor) -> torch.Tensor:
    import abc

    class Abstract(metaclass=abc.ABCMeta):  # noqa: B024
        scale = 3

    return x * Abstract.scale


def test_class_statements_the_monitor_does_not_follow_stay_correct() -> None:
    """A Python ``__init_subclass__`` (an effect outside), a metaclass other than ``type``:
    graph breaks, with eager's results."""
    for fn in (subclass_hook, meta_class):
        compiled = magpy.compile(fn, backend="eager")
        for _ in range(3):
            x = torch.randn(3)
            expected = fn(x)
            # (subclass_hook adds a count its hook keeps: one more since the eager call; x + 2
            # and (x + 1) + 1 may round apart)
            H.assert_same(compiled(x), expected + (1 if fn is subclass_hook else 0))
        assert magpy.stats(compiled).breaks >= 1
