"""MagPy on CUDA through Inductor (Triton kernels): ``python3 -m nox -s integration_gpu``.

Skipped without a CUDA device (the default run deselects the ``gpu`` marker too). Each test
compares compiled against eager on fresh inputs over several calls and counts records, as the
CPU suites do: a forward, Dropout's random stream, fp16 autocast, ``mode="reduce-overhead"``
(CUDA graphs), and a whole training step with fp16 autocast and ``GradScaler`` including a
step that overflows.
"""

from __future__ import annotations

from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _cnn(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(dropout),
        nn.Flatten(), nn.Linear(8 * 8 * 8, 10),
    ).cuda()  # fmt: skip


def _images(i: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(i)
    return torch.randn(4, 3, 8, 8, device="cuda", generator=g)


def _calls(compiled: Any, eager: Any, n: int = 4, **tol: float) -> None:
    for i in range(n):
        x = _images(i)
        torch.cuda.manual_seed(100 + i)
        got = compiled(x)
        torch.cuda.manual_seed(100 + i)
        want = eager(x)
        H.assert_same(got.float(), want.float(), f"call {i}", **tol)


def test_a_forward_through_triton() -> None:
    model = _cnn().eval()
    compiled = magpy.compile(model)
    _calls(compiled, model)
    st = magpy.stats(compiled)
    assert (st.records, st.graphs, st.breaks, st.fallbacks) == (1, 1, 0, 0), st


def test_dropout_draws_eagers_numbers() -> None:
    """Inductor falls back to eager's random ops (MagPy's default), so a seeded call draws
    what eager draws."""
    model = _cnn(dropout=0.5).train()
    reference = _cnn(dropout=0.5).train()
    _calls(magpy.compile(model), reference)


def test_fp16_autocast() -> None:
    model = _cnn().eval()

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            return model(x)

    compiled = magpy.compile(f)
    _calls(compiled, f, rtol=1e-2, atol=1e-2)
    assert magpy.stats(compiled).graphs == 1


def test_reduce_overhead_uses_cuda_graphs() -> None:
    model = _cnn().eval()
    compiled = magpy.compile(model, mode="reduce-overhead")
    outs = []
    for i in range(5):
        x = _images(i)
        got = compiled(x)
        H.assert_same(got, model(x), f"call {i}")
        outs.append((got.clone(), model(x)))
    for i, (got, want) in enumerate(outs):  # (copies taken as torch.compile's users do)
        H.assert_same(got, want, f"kept output {i}")
    st = magpy.stats(compiled)
    assert st.records == 1 and st.hits == 4 and st.fallbacks == 0, st


def _step(model: nn.Module, opt: torch.optim.Optimizer, scaler: Any) -> Any:
    ce = nn.functional.cross_entropy
    return H.scaled_step(model, opt, scaler, ce, device="cuda", dtype=torch.float16)


def test_a_training_step_with_fp16_and_a_grad_scaler() -> None:
    model, reference = _cnn().train(), _cnn().train()
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (model, reference)]
    scalers = [torch.amp.GradScaler("cuda", init_scale=2.0**10, growth_interval=2) for _ in "ab"]
    compiled = magpy.compile(_step(model, opts[0], scalers[0]))
    eager = _step(reference, opts[1], scalers[1])
    for i in range(10):
        x = _images(i)
        if i == 6:
            x[0, 0, 0, 0] = float("inf")  # an overflow: the step skips the update
        y = torch.randint(0, 10, (4,), device="cuda", generator=torch.Generator("cuda"))
        H.assert_same(compiled(x, y), eager(x, y), f"step {i}", rtol=1e-3, atol=1e-3)
        H.assert_same(model.state_dict(), reference.state_dict(), f"step {i}", rtol=1e-3, atol=1e-3)
        assert scalers[0].get_scale() == scalers[1].get_scale(), f"scale after step {i}"
    st = magpy.stats(compiled)
    assert st.fallbacks == 0 and st.assumption_misses == 1, st
    assert st.hits >= 6, st
