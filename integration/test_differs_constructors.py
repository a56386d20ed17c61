"""Never differs from eager: constructors that run the program's Python (issue 35, class 3).

A compiled function builds an object of a class the program defines, and building it runs the
program's Python: an ``nn.Module`` subclass's ``__init__`` (reading a global, a class
attribute, counting its instances), a dataclass's ``__post_init__`` or default factory, an
exception's ``__init__``, a metaclass's ``__call__``. That code is followed like any call (what
it reads is guarded, what it does replayed), or it is a break; it is never taken to be pure.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import ClassVar

import _integration_differential as D
import torch
from torch import nn

case = D.case

_STATE = {"scale": 2.0}


def _x() -> torch.Tensor:
    return torch.arange(4, dtype=torch.float32) - 1.5


def _calls(cf: object, n: int = 4) -> list[object]:
    """``n`` calls, the global scale changed after each (put back afterwards)."""
    outs = []
    try:
        for _ in range(n):
            outs.append(cf(_x()))  # type: ignore[operator]
            _STATE["scale"] += 1.0
    finally:
        _STATE["scale"] = 2.0
    return outs


# ---------------------------------------------------------------------- modules built in forward
@case("constructors", inductor=True)
def module_init_reads_a_global(w: D.World) -> object:
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = _STATE["scale"]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.s

    def f(x: torch.Tensor) -> torch.Tensor:
        layer = Scale()
        return layer(x) + 1

    return _calls(w.compile(f))


@case("constructors")
def module_init_counts_its_instances(w: D.World) -> object:
    class Counted(nn.Module):
        made: ClassVar[list[int]] = []

        def __init__(self) -> None:
            super().__init__()
            Counted.made.append(len(Counted.made))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    def f(x: torch.Tensor) -> torch.Tensor:
        return Counted()(x)

    outs = _calls(w.compile(f))
    return outs, list(Counted.made)


@case("constructors")
def module_init_inherited_from_a_program_base(w: D.World) -> object:
    class Base(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = _STATE["scale"]

    class Scale(Base):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.s

    def f(x: torch.Tensor) -> torch.Tensor:
        return Scale()(x)

    return _calls(w.compile(f))


@case("constructors")
def module_class_attribute_changed_between_calls(w: D.World) -> object:
    class Scale(nn.Module):
        k = 2.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    def f(x: torch.Tensor) -> torch.Tensor:
        return Scale()(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    Scale.k = 3.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("constructors")
def module_init_reads_a_class_attribute(w: D.World) -> object:
    class Scale(nn.Module):
        k = 2.0

        def __init__(self) -> None:
            super().__init__()
            self.s = self.k + 1

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.s

    def f(x: torch.Tensor) -> torch.Tensor:
        return Scale()(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    Scale.k = 5.0
    outs += [cf(_x()), cf(_x())]
    return outs


# ---------------------------------------------------------------------- dataclasses
@case("constructors", inductor=True)
def dataclass_post_init_reads_a_global(w: D.World) -> object:
    @dataclasses.dataclass
    class Cfg:
        base: float = 1.0

        def __post_init__(self) -> None:
            self.scale = _STATE["scale"]

    def f(x: torch.Tensor) -> torch.Tensor:
        cfg = Cfg()
        return x * cfg.scale + cfg.base

    return _calls(w.compile(f))


@case("constructors")
def dataclass_post_init_logs(w: D.World) -> object:
    log: list[float] = []

    @dataclasses.dataclass
    class Cfg:
        base: float = 1.0

        def __post_init__(self) -> None:
            log.append(self.base)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * Cfg(3.0).base

    outs = _calls(w.compile(f))
    return outs, log


@case("constructors")
def dataclass_default_factory_reads_a_global(w: D.World) -> object:
    @dataclasses.dataclass
    class Cfg:
        scale: float = dataclasses.field(default_factory=lambda: _STATE["scale"])

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * Cfg().scale

    return _calls(w.compile(f))


@case("constructors")
def frozen_dataclass_post_init_reads_a_global(w: D.World) -> object:
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        scale: float = 1.0

        def __post_init__(self) -> None:
            object.__setattr__(self, "scale", self.scale * _STATE["scale"])

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * Cfg().scale

    return _calls(w.compile(f))


@case("constructors")
def dataclass_metaclass_call_logs(w: D.World) -> object:
    log: list[float] = []

    class Registry(type):
        def __call__(cls, *args: object) -> object:
            log.append(_STATE["scale"])
            return super().__call__(*args)

    @dataclasses.dataclass
    class Cfg(metaclass=Registry):
        base: float = 1.0

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * Cfg().base  # type: ignore[attr-defined]

    outs = _calls(w.compile(f))
    return outs, log


# ---------------------------------------------------------------------- other classes
@case("constructors")
def exception_init_reads_a_global(w: D.World) -> object:
    class Tagged(Exception):
        def __init__(self) -> None:
            super().__init__("tagged")
            self.scale = _STATE["scale"]

    def f(x: torch.Tensor) -> torch.Tensor:
        err = Tagged()
        return x * err.scale

    return _calls(w.compile(f))


@case("constructors")
def namedtuple_metaclass_call_logs(w: D.World) -> object:
    log: list[float] = []

    class Registry(type):
        def __call__(cls, *args: object) -> object:
            log.append(_STATE["scale"])
            return super().__call__(*args)

    class Pair(collections.namedtuple("Pair", "a b"), metaclass=Registry):
        pass

    def f(x: torch.Tensor) -> torch.Tensor:
        p = Pair(2.0, 1.0)
        return x * p.a + p.b

    outs = _calls(w.compile(f))
    return outs, log


@case("constructors")
def class_init_replaced_between_calls(w: D.World) -> object:
    class Box:
        def __init__(self) -> None:
            self.scale = 2.0

    def bigger(self: Box) -> None:
        self.scale = 5.0

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * Box().scale

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    Box.__init__ = bigger  # type: ignore[method-assign]
    outs += [cf(_x()), cf(_x())]
    return outs


test_eager, test_inductor = D.tests(__name__)
