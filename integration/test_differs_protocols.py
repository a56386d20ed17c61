"""Never differs from eager: protocols that run the program's code (issue 35, classes 4, 5).

Custom descriptors with state, dict keys whose ``__hash__``/``__eq__`` read mutable state,
``isinstance`` against an ABC that ``register()``s a class later or a ``runtime_checkable``
Protocol whose method appears later, view relations between arguments; and MagPy's own work
staying invisible: a ``__getattr__`` runs as often as in eager. (A function given instrumented
code after a graph break, ``f.__code__ is original`` False, is not fixed: see the issue note.)
"""

from __future__ import annotations

import abc
import typing

import _integration_differential as D
import torch

case = D.case


def _x() -> torch.Tensor:
    return torch.arange(3, dtype=torch.float32) + 1


@case("protocols")
def descriptor_get_with_state(w: D.World) -> object:
    class Ticks:
        def __init__(self) -> None:
            self.n = 0

        def __get__(self, obj: object, owner: type | None = None) -> int:
            self.n += 1
            return self.n

    class Holder:
        tick = Ticks()

    h = Holder()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * h.tick

    cf = w.compile(f)
    return [cf(_x()) for _ in range(4)], Holder.__dict__["tick"].n


@case("protocols")
def descriptor_set_transforms(w: D.World) -> object:
    class Clamped:
        def __set_name__(self, owner: type, name: str) -> None:
            self.slot = "_" + name

        def __get__(self, obj: object, owner: type | None = None) -> float:
            return getattr(obj, self.slot)

        def __set__(self, obj: object, value: float) -> None:
            setattr(obj, self.slot, min(value, 5.0))

    class Holder:
        v = Clamped()

    h = Holder()
    h.v = 1.0

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * h.v

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    h.v = 9.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("protocols")
def dict_key_whose_hash_reads_state(w: D.World) -> object:
    class Key:
        def __init__(self) -> None:
            self.h = 1

        def __hash__(self) -> int:
            return self.h

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Key) and other.h == self.h

    k = Key()
    table = {k: 1}

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (2 if k in table else 3)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    k.h = 7
    outs += [cf(_x()), cf(_x())]
    return outs


@case("protocols", inductor=True)
def isinstance_of_an_abc_registered_later(w: D.World) -> object:
    class Base(abc.ABC):  # noqa: B024  (no abstract methods: register() alone decides)
        pass

    class Plain:
        pass

    p = Plain()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (2 if isinstance(p, Base) else 3)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    Base.register(Plain)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("protocols")
def isinstance_of_a_protocol_whose_method_appears(w: D.World) -> object:
    @typing.runtime_checkable
    class Pings(typing.Protocol):
        def ping(self) -> int: ...

    class Thing:
        pass

    t = Thing()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (2 if isinstance(t, Pings) else 3)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    Thing.ping = lambda self: 1  # type: ignore[attr-defined]
    outs += [cf(_x()), cf(_x())]
    return outs


@case("protocols")
def view_base_between_arguments(w: D.World) -> object:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + 1 if a._base is b else a - 1

    cf = w.compile(f)
    t = torch.zeros(4)
    return [cf(t[:2], t), cf(t[:2], t), cf(torch.zeros(2), t), cf(t[1:3], t)]


@case("protocols")
def is_set_to_between_arguments(w: D.World) -> object:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + 1 if a.is_set_to(b) else a - 1

    cf = w.compile(f)
    t, u = torch.zeros(2), torch.zeros(2)
    return [cf(t, t), cf(t, t), cf(t, u), cf(u, u)]


@case("protocols")
def getattr_hook_runs_as_often_as_eager(w: D.World) -> object:
    class Lazy:
        def __init__(self) -> None:
            object.__setattr__(self, "asked", 0)

        def __getattr__(self, name: str) -> float:
            object.__setattr__(self, "asked", self.asked + 1)
            return 2.0

    g = Lazy()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * g.scale

    cf = w.compile(f)
    outs = [cf(_x()) for _ in range(4)]
    return outs, g.asked


@case("protocols", inductor=True)
def torch_function_mode_sees_only_the_program(w: D.World) -> object:
    from torch.overrides import TorchFunctionMode

    seen: list[str] = []

    class Log(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", "?"))
            return func(*args, **(kwargs or {}))

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2

    cf = w.compile(f)
    outs = []
    with Log():
        for _ in range(4):
            outs.append(cf(_x()))
    return outs, seen


@case("protocols")
def tensor_subclass_hook_sees_only_the_program(w: D.World) -> object:
    seen: list[str] = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", "?"))
            return super().__torch_function__(func, types, args, kwargs or {})

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum()

    cf = w.compile(f)
    outs = [cf(_x().as_subclass(Logged)) for _ in range(4)]
    return [torch.Tensor(o) for o in outs], seen


test_eager, test_inductor = D.tests(__name__)
