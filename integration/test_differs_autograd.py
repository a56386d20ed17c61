"""Never differs from eager: autograd (issue 17).

``requires_grad`` inputs, backward through the compiled output, ``.grad`` accumulating over
calls, ``no_grad``/``enable_grad``/``inference_mode`` around or inside the call, ``detach``, an
``nn.Module``'s parameters updated between calls (an optimizer step), ``retain_grad``.
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case


def _seen(t: torch.Tensor) -> tuple[torch.Tensor, bool, bool]:
    """A non-leaf output as observed: its values, ``requires_grad``, ``is_leaf``.

    (The harness compares ``.grad``, which warns on a non-leaf tensor.)
    """
    return t.detach(), t.requires_grad, t.is_leaf


@case("autograd", inductor=True)
def backward_through_output(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * x).sum()

    cf = w.compile(f)
    obs = []
    for k in range(4):
        x = torch.linspace(0, 1, 5, requires_grad=True) + 0.0 * k
        x = x.detach().requires_grad_()
        y = cf(x)
        y.backward()
        obs.append((_seen(y), x))
    return obs


@case("autograd")
def grad_accumulates_over_calls(w: D.World) -> object:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return (x * x * s).sum()

    cf = w.compile(f)
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    obs = []
    for s in (1.0, 1.0, 2.0, 1.0):
        cf(x, s).backward()
        obs.append(x.grad.clone())
    return obs, x


@case("autograd")
def requires_grad_varies(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    cf = w.compile(f)
    obs = []
    for rg in (True, False, True, False):
        x = torch.ones(3, requires_grad=rg)
        y = cf(x)
        obs.append((_seen(y), y.grad_fn is None))
    return obs


@case("autograd")
def no_grad_around_call(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.exp()

    cf = w.compile(f)
    obs = []
    x = torch.ones(2, requires_grad=True)
    for ng in (False, True, False, True):
        if ng:
            with torch.no_grad():
                y = cf(x)
        else:
            y = cf(x)
        obs.append(_seen(y))
    return obs


@case("autograd")
def no_grad_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            a = x * 2
        b = x * 3
        return a, b

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.full((2,), float(k), requires_grad=True)
        a, b = cf(x)
        b.sum().backward()
        obs.append((_seen(a), _seen(b), x))
    return obs


@case("autograd")
def enable_grad_inside_no_grad(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            return x * x

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.full((2,), 1.0 + k, requires_grad=True)
        with torch.no_grad():
            y = cf(x)
        obs.append((_seen(y), torch.is_grad_enabled()))
    return obs


@case("autograd")
def inference_mode_around(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    cf = w.compile(f)
    obs = []
    for im in (True, True, False, True):
        x = torch.ones(2)
        if im:
            with torch.inference_mode():
                y = cf(x)
        else:
            y = cf(x)
        obs.append((y, y.is_inference()))
    return obs


@case("autograd")
def detach_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * x.detach()

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.full((3,), 2.0 + k, requires_grad=True)
        cf(x).sum().backward()
        obs.append(x)
    return obs


@case("autograd", inductor=True)
def optimizer_step_between_calls(w: D.World) -> object:
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    cm = w.compile(m)
    obs = []
    x = torch.arange(6.0).reshape(2, 3)
    for _ in range(4):
        opt.zero_grad()
        y = cm(x)
        y.pow(2).sum().backward()
        opt.step()
        obs.append(y.detach().clone())
    return obs, m


@case("autograd")
def parameter_assigned_in_place(w: D.World) -> object:
    m = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        m.weight.copy_(torch.eye(2))
    cm = w.compile(m)
    obs = []
    for k in range(4):
        with torch.no_grad():
            m.weight.mul_(2)
        obs.append(_seen(cm(torch.ones(1, 2) * k)))
    return obs


@case("autograd")
def retain_grad_on_intermediate(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.ones(2, requires_grad=True)
        y = cf(x)
        y.retain_grad()
        (y * (k + 1)).sum().backward()
        obs.append((y, x))
    return obs


@case("autograd")
def grad_of_two_outputs(w: D.World) -> object:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * y, x + y

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.full((2,), 1.0 + k, requires_grad=True)
        y = torch.full((2,), 2.0, requires_grad=True)
        a, b = cf(x, y)
        torch.autograd.backward([a.sum(), b.sum()])
        obs.append((_seen(a), _seen(b), x, y))
    return obs


@case("autograd")
def is_grad_enabled_read_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return x + 1
        return x - 1

    cf = w.compile(f)
    obs = []
    for ng in (False, True, False, True, False):
        with torch.set_grad_enabled(not ng):
            obs.append(cf(torch.ones(2)))
    return obs


test_eager, test_inductor = D.tests(__name__)
