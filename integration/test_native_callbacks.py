"""Python that native code runs while the monitor models a call as a whole, and checks that
native code answers from the object itself.

A call modelled as a whole (a module built inside ``forward``, an operator of a library's
class) runs natively; Python it starts is a library's (taken as the model says) or the
program's (a break, ``core.programcode``). The ``__new__`` that ``collections.namedtuple``
makes is code of no module (``eval`` in a namespace ``namedtuple_<name>``); it only builds the
tuple, so it is no program code whoever defines the class: ``torch.__version__ < "1.5"``
(``packaging``'s ``_Version`` namedtuple) and a loss built with a deprecated argument (its
warning noted through MagPy's ``WarnCall``) stay one graph.

``isinstance(t, torch.FloatTensor)`` (a legacy tensor type: the tensor's dtype and device
decide), ``isinstance(t, Variable)`` (any tensor) and ``isinstance(t, Parameter)`` of a tensor
the run made are constants of the record: the record fixes its class, dtype and device (they
were guarded as ``issubclass`` of its class, which answers otherwise, and missed on every
call). The same checks of an argument are asked again of the argument by the guard.
"""

from __future__ import annotations

import warnings
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy


def old_torch(x: torch.Tensor) -> torch.Tensor:
    if torch.__version__ < "1.5":  # (TorchVersion's Python ``__lt__`` builds a namedtuple)
        return x - 1
    return x + 1


class LegacyLoss(nn.Module):
    """A loss built in ``forward`` with ``size_average``: torch warns (stacklevel=2)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return nn.MSELoss(size_average=False)(a, b) + nn.MSELoss(size_average=False)(b, a)


def test_a_library_namedtuple_built_natively_is_one_graph() -> None:
    H.assert_compiles_like_eager(old_torch, H.randn_inputs((3,)))


Pair = namedtuple("Pair", "a b")  # (its ``__new__`` is generated code of no module)


class Ordered:
    """The program's class whose ``__lt__`` runs the program's Python: not modelled."""

    def __init__(self, v: float) -> None:
        self.v = v

    def __lt__(self, other: Ordered) -> bool:
        return self.v < other.v


def sorts_pairs(x: torch.Tensor) -> torch.Tensor:
    # sorted() calls the program's ``__lt__`` natively: still a break with a reason
    items = sorted([Ordered(2.0), Ordered(1.0)])
    return x * items[0].v + Pair(1, 2).b


def test_the_programs_own_python_called_natively_still_breaks() -> None:
    """The program's namedtuple is no break; its ``__lt__`` that ``sorted`` runs is one."""
    ex = H.explain_quietly(sorts_pairs, torch.ones(2))
    assert ex.graph_break_count == 1 and "Ordered.__lt__" in H.break_text(ex), H.break_text(ex)
    compiled = magpy.compile(sorts_pairs, backend="eager")
    for _ in range(3):
        H.assert_same(compiled(torch.ones(2)), sorts_pairs(torch.ones(2)))


@pytest.mark.parametrize("action", ["always", "default", "once", "ignore"])
def test_a_module_built_with_a_deprecated_argument_replays_its_warning(
    recorded: Callable[[str], list[warnings.WarningMessage]], action: str
) -> None:
    def inputs(i: int) -> tuple[Any, ...]:
        return (torch.full((3,), float(i)), torch.ones(3))

    ex = H.explain_quietly(LegacyLoss(), *inputs(0))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    log = recorded(action)
    wants = [LegacyLoss()(*inputs(i)) for i in range(3)]
    expected = H.warnings_seen(log)
    assert action == "ignore" or expected
    compiled = magpy.compile(LegacyLoss(), backend="eager")
    log = recorded(action)
    outs = [compiled(*inputs(i)) for i in range(3)]
    assert H.warnings_seen(log) == expected
    for got, want in zip(outs, wants, strict=True):
        H.assert_same(got, want)
    assert H.counters(compiled) == (1, 2, 0, 0)


FLOAT_TYPES = torch.FloatTensor, torch.FloatTensor
HALF_TYPES = torch.HalfTensor, torch.HalfTensor


def _convert(val: Any, kinds: tuple[type, ...], to: Callable[[torch.Tensor], Any]) -> Any:
    """EasyNLP's fp16 helpers: a conversion chosen by legacy tensor types."""
    check = val
    if isinstance(check, (nn.Parameter, torch.autograd.Variable)):
        check = val.data
    return to(val) if isinstance(check, kinds) else val


class HalfModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4).half()

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(_convert(x, FLOAT_TYPES, torch.Tensor.half))
        return _convert(y, HALF_TYPES, torch.Tensor.float), isinstance(y, torch.DoubleTensor)


def test_legacy_tensor_types_of_a_tensor_the_run_made_are_one_record() -> None:
    H.assert_compiles_like_eager(HalfModule(), H.randn_inputs((2, 4)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_legacy_tensor_types_follow_the_dtype(dtype: torch.dtype) -> None:
    """Another dtype records again: of the argument (guarded on it) and of a tensor made from it."""

    def pick(x: torch.Tensor) -> torch.Tensor:
        made = isinstance(x * 1, torch.FloatTensor)
        return x + 1 if made else x - 1 if isinstance(x, torch.FloatTensor) else x * 3

    compiled = magpy.compile(pick, backend="eager")
    for d in (dtype, dtype, torch.float16, dtype):
        x = torch.ones(3, dtype=d)
        H.assert_same(compiled(x), pick(x))
    assert H.counters(compiled) == (2, 2, 0, 0)
