"""Never differs from eager: randomness (issue 17, class 8).

``torch.rand``/``randn``/``dropout`` in train and eval mode, the global RNG state after each call
(``torch.get_rng_state()`` is an observation), a ``torch.Generator`` argument, ``manual_seed``
between calls, ``torch.nn.Dropout`` modules. With ``backend="inductor"`` MagPy compiles with
``fallback_random`` (``magpy_codegen/_backend.py``), so dropout masks and the RNG state after
a hit are eager's; most cases are also in the Inductor subset.
"""

from __future__ import annotations

import random

import _integration_differential as D
import torch
import torch.nn.functional as F

case = D.case


def _state() -> torch.Tensor:
    return torch.get_rng_state()


@case("randomness", inductor=True)
def rand_and_state_after_each_call(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(x.shape)

    cf = w.compile(f)
    return [(cf(torch.ones(4)), _state()) for _ in range(4)]


@case("randomness", inductor=True)
def dropout_functional_train(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x * 2, p=0.5, training=True)

    cf = w.compile(f)
    return [(cf(torch.ones(16)), _state()) for _ in range(4)]


@case("randomness", inductor=True)
def dropout_module_train_then_eval(w: D.World) -> object:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2))
    cm = w.compile(m)
    x = torch.arange(8.0).reshape(2, 4)
    obs = []
    with torch.no_grad():
        for mode in ("train", "train", "eval", "eval", "train"):
            m.train(mode == "train")
            obs.append((cm(x), _state()))
    return obs


@case("randomness", inductor=True)
def randn_like_scaled(w: D.World) -> object:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return x + torch.randn_like(x) * s

    cf = w.compile(f)
    return [(cf(torch.zeros(3, 3), s), _state()) for s in (1.0, 1.0, 0.5, 1.0)]


@case("randomness", inductor=True)
def manual_seed_between_calls(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.randn(x.shape) * x

    cf = w.compile(f)
    obs = []
    for seed in (1, 1, 2, 1):
        torch.manual_seed(seed)
        obs.append((cf(torch.ones(5)), _state()))
    return obs


@case("randomness", inductor=True)
def generator_argument(w: D.World) -> object:
    def f(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return x + torch.rand(x.shape, generator=g)

    cf = w.compile(f)
    g = torch.Generator().manual_seed(7)
    obs = [(cf(torch.ones(3), g), g.get_state(), _state()) for _ in range(3)]
    g2 = torch.Generator().manual_seed(7)  # another generator, same seed
    obs.append((cf(torch.ones(3), g2), g2.get_state(), _state()))
    return obs


@case("randomness", inductor=True)
def dropout_after_compute_with_grad(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x.sin(), p=0.25, training=True).sum()

    cf = w.compile(f)
    obs = []
    for _ in range(3):
        x = torch.linspace(0, 1, 12, requires_grad=True)
        y = cf(x)
        y.backward()
        obs.append((y.detach(), x.grad, _state()))
    return obs


@case("randomness")
def dropout_eval_is_identity(w: D.World) -> object:
    def f(x: torch.Tensor, training: bool) -> torch.Tensor:
        return F.dropout(x, p=0.5, training=training)

    cf = w.compile(f)
    return [(cf(torch.ones(8), t), _state()) for t in (False, False, True, False, True)]


@case("randomness", inductor=True)
def several_random_ops_in_one_graph(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = torch.rand(3) + x
        b = torch.randint(0, 10, (3,))
        c = torch.bernoulli(torch.full((3,), 0.5))
        return a, b, c

    cf = w.compile(f)
    return [(cf(torch.ones(3)), _state()) for _ in range(3)]


@case("randomness")
def rng_state_set_between_calls(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rand(2)

    cf = w.compile(f)
    saved = torch.get_rng_state()
    first = [cf(torch.ones(2)) for _ in range(2)]
    torch.set_rng_state(saved)  # replay: the same stream again
    again = [cf(torch.ones(2)) for _ in range(2)]
    return first, again, _state()


@case("randomness")
def python_random_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * random.random()

    cf = w.compile(f)
    return [cf(torch.ones(2)) for _ in range(3)], random.random()


@case("randomness")  # not in the Inductor subset: 0 cache hits there (undiagnosed)
def randperm_indexing(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x[torch.randperm(x.shape[0])]

    cf = w.compile(f)
    return [(cf(torch.arange(6.0)), _state()) for _ in range(3)]


@case("randomness")
def normal_inplace_on_buffer(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        buf = torch.empty(4)
        buf.normal_(0.0, 2.0)
        return buf + x

    cf = w.compile(f)
    return [(cf(torch.ones(4)), _state()) for _ in range(3)]


test_eager, test_inductor = D.tests(__name__)
