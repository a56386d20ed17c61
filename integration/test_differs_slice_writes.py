"""Never differs from eager: writes into slices of tensors (``t[i] = v``, ``t[a:b] += v``).

The graph's node for ``t[index] = value`` stands for the updated tensor, which later operations
read; Inductor and AOTAutograd trace the graph with the fx interpreter, so the node must give
the tensor there too (found by a ParityBench model, AnovaKernel: ``a[:, t+1:] += ...`` then
``cumsum(a)`` failed to compile with Inductor and ran eagerly).
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case


@case("slice_writes", inductor=True)
def slice_add_then_cumsum(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        b, n, e = x.shape
        prev = torch.ones(b, n + 1, e)
        for t in range(2):
            a = torch.zeros(b, n + 1, e)
            a[:, t + 1 :, :] += x[:, t:, :] * prev[:, t:-1, :]
            a = torch.cumsum(a, dim=1)
            prev = a
        return a[:, -1, :].sum(-1)

    cf = w.compile(f)
    return [cf(torch.randn(2, 4, 3)) for _ in range(3)]


@case("slice_writes", inductor=True)
def setitem_on_an_input_then_used(w: D.World) -> object:
    def f(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        x[1:3] = v * 2
        y = x.sum(0)
        x[0] = y
        return x * 1

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.arange(12.0).reshape(4, 3) + k
        out = cf(x, torch.full((2, 3), float(k)))
        obs.append((out, x))  # the input as the writes left it
    return obs


@case("slice_writes")
def setitem_with_a_mask_and_a_scalar(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[y < 0] = 0.0
        y[:, 0] = -1.0
        return y.cumsum(1)

    cf = w.compile(f)
    return [cf(torch.randn(3, 4)) for _ in range(3)]


@case("slice_writes")
def setitem_of_a_view_seen_through_the_base(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        base = torch.zeros(4, 4)
        view = base[1:3]
        view[:, 1:] = x
        return base.sum(1), view

    cf = w.compile(f)
    return [cf(torch.randn(2, 3)) for _ in range(3)]


test_eager, test_inductor = D.tests(__name__)
