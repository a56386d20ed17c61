"""A representative few programs through ``backend="inductor"`` (C++ kernels on CPU).

Each Inductor compile takes 30-90 s on a 2-core machine, hence ``slow``; run with
``pytest -c pyproject.toml integration -m inductor``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import magpy

pytestmark = [pytest.mark.inductor, pytest.mark.slow]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(16, 64)
        self.l2 = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(F.gelu(self.l1(x)))


@pytest.mark.parametrize("name", ["c_convnet", "c_inplace_on_inputs"])
def test_conformance_program_through_inductor(
    name: str, programs: Any, check: Callable[..., Any]
) -> None:
    """Compiled with Inductor: equal to eager over 3 calls, 1 record, 2 hits, no user code."""
    torch.manual_seed(0)
    fn, make = programs.CASES[name]["build"]()
    check(fn, make, calls=3, backend="inductor")


def test_mlp_through_inductor(check: Callable[..., Any]) -> None:
    """An MLP through Inductor (grad enabled): equal to eager over 3 calls, 1 record, 2 hits."""
    torch.manual_seed(0)
    check(MLP(), H.randn_inputs((4, 16)), calls=3, backend="inductor")


def returns_input_and_product(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * w
    return x, y


def returns_view_and_product(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.t(), x * w


def test_inductor_returned_view_aliases_the_input(check: Callable[..., Any]) -> None:
    """Through Inductor a returned view of an input stays a view of it on hits."""
    compiled = check(
        returns_view_and_product, H.randn_inputs((3, 2), (3, 2)), calls=3, backend="inductor"
    )
    x, w = torch.randn(3, 2), torch.randn(3, 2)
    v, _ = compiled(x, w)
    x.add_(1)
    assert torch.equal(v, x.t()), "the returned view does not alias the input"


def test_inductor_returned_input_is_the_input_object(check: Callable[..., Any]) -> None:
    """Through Inductor ``return x, x * w`` gives back ``x`` itself, on hits too."""
    compiled = check(
        returns_input_and_product, H.randn_inputs((3, 2), (3, 2)), calls=3, backend="inductor"
    )
    x, w = torch.randn(3, 2), torch.randn(3, 2)
    a, y = compiled(x, w)
    assert a is x and y is not x


def masked_mean(x: torch.Tensor) -> torch.Tensor:
    kept = x[x > 0]  # an output shape that depends on the values
    return kept.sum() / max(len(kept), 1)


def test_a_graph_inductor_cannot_compile_runs_uncompiled() -> None:
    """Inductor rejects ``x[mask]`` (a data-dependent output shape): the graph then runs as
    is, with one warning, instead of the whole callable falling back to eager. (The record
    assumes ``len(kept)``, so it compiles on the call that confirms it: the second.)"""
    compiled = magpy.compile(masked_mean, backend="inductor")
    fixed = torch.tensor([1.0, -2.0, 3.0, 0.5])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for x in (fixed, fixed.clone()):
            H.assert_same(compiled(x), masked_mean(x))
    ours = [w for w in seen if issubclass(w.category, magpy.MagPyWarning)]
    assert len(ours) == 1 and "runs uncompiled" in str(ours[0].message), ours
    for x in (torch.tensor([-1.0, 2.0, -3.0, 0.5]), fixed):
        H.assert_same(compiled(x), masked_mean(x))
    stats = magpy.stats(compiled)
    assert (stats.fallbacks, stats.breaks, stats.records, stats.hits) == (0, 0, 2, 2), stats


def real_python(x: torch.Tensor, cfg: dict[str, Any]) -> Any:
    """A class statement, a ``match``, a closure handed out and an exception handled inside a
    ``with`` block, around tensor math Inductor compiles."""

    class Gate:
        scale = cfg["scale"]

        def __call__(self, t: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(t) * self.scale

    match cfg:
        case {"shift": s}:
            y = Gate()(x) + s
        case _:
            y = Gate()(x)
    try:
        with torch.no_grad():
            z = y * 2
            raise KeyError("handled")
    except KeyError:
        z = z + 1
    return z


def closure_out(x: torch.Tensor) -> Any:
    y = torch.relu(x)
    return y, lambda t: t * y.sum()


def test_real_python_through_inductor(check: Callable[..., Any]) -> None:
    check(
        real_python,
        lambda i: ((torch.randn(8), {"scale": 2.0, "shift": 0.5}), {}),
        calls=3,
        backend="inductor",
    )
    compiled = magpy.compile(closure_out, backend="inductor")
    for _ in range(3):
        x = torch.randn(8)
        y, fn = compiled(x)
        H.assert_same((y, fn(x)), (torch.relu(x), x * torch.relu(x).sum()))
    assert magpy.stats(compiled).records == 1


def scaled_matmul_updates(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    w.add_(a @ b, alpha=-0.1)  # (an SGD update whose gradient is a matrix product)
    return torch.sub(w, torch.mm(a, b), alpha=3) + torch.add(w, a.mm(b), alpha=0.5)


def test_alpha_of_an_add_of_a_matrix_product(check: Callable[..., Any]) -> None:
    """``add(x, mm(a, b), alpha=s)`` (and ``sub``, in place or not) keeps its ``alpha``:
    Inductor's own rewrite into ``addmm`` drops it (``torch.compile`` gives ``x + a @ b``);
    MagPy applies ``alpha`` first (``magpy_codegen._inductor_passes``)."""
    make = H.randn_inputs((4, 4), (4, 3), (3, 4))
    check(scaled_matmul_updates, make, calls=3, backend="inductor")
