"""``torch.compile`` and MagPy around each other (issue 21): never a crash, results as eager.

- ``torch.compile(magpy.compile(m))`` and a MagPy object called inside a function TorchDynamo
  compiles: TorchDynamo leaves MagPy's entry frames (and the frames below them) alone, so the
  MagPy object works as without it (it records once and then hits).
- ``magpy.compile(torch.compile(m))``: MagPy does not follow TorchDynamo's frames; the call runs
  natively (a graph break), with TorchDynamo's compiled code.
"""

from __future__ import annotations

import warnings

import _integration_helpers as H
import torch
import torch._dynamo
from torch import nn

import magpy


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def test_torch_compile_of_a_magpy_object_runs_magpy() -> None:
    torch._dynamo.reset()
    model = _model()
    compiled = magpy.compile(model, backend="eager")
    outer = torch.compile(compiled, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no TorchDynamo warning about MagPy's code either)
        for _ in range(3):
            x = torch.randn(2, 4)
            H.assert_same(outer(x), model(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st


def test_a_magpy_object_inside_a_torch_compiled_function() -> None:
    torch._dynamo.reset()
    model = _model()
    compiled = magpy.compile(model, backend="eager")

    def outer(x: torch.Tensor) -> torch.Tensor:
        return compiled(x * 2) + 1

    fast = torch.compile(outer, backend="eager")
    with warnings.catch_warnings():
        # (TorchDynamo reads .grad of a non-leaf result after a graph break and warns, with
        # torch.compiler.disable too)
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(3):
            x = torch.randn(2, 4)
            H.assert_same(fast(x), model(x * 2) + 1)
    assert magpy.stats(compiled).hits == 2


def test_magpy_of_a_torch_compiled_module_gives_eager_results() -> None:
    torch._dynamo.reset()
    model = _model()
    compiled = magpy.compile(torch.compile(model, backend="eager"), backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            x = torch.randn(2, 4)
            H.assert_same(compiled(x), model(x))
