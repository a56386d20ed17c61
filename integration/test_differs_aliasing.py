"""Never differs from eager: aliasing (issue 17).

Views and in-place ops on inputs, outputs aliasing inputs or each other, the same tensor passed
twice, ``out=``, in-place on a view of an input, mutation of a list/dict argument, returning an
input. What is observed: the outputs, the inputs after the call, and which of them share
storage (``data_ptr`` identities, as a user can test with ``is`` / ``_base``).
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@case("aliasing", inductor=True)
def inplace_on_input(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    cf = w.compile(f)
    obs = []
    for k in range(4):
        x = torch.full((3,), float(k))
        y = cf(x)
        obs.append((x, y))
    return obs


@case("aliasing", inductor=True)
def view_of_input_returned(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = x.view(2, 3)
        return v, x.t() if x.dim() == 2 else x[1:]

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.arange(6.0) + k
        v, s = cf(x)
        x.mul_(10)  # the views see it, as in eager
        obs.append((v, s, _shares(v, x), _shares(s, x), v._base is x))
    return obs


@case("aliasing")
def returns_input_itself(w: D.World) -> object:
    def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
        if flag:
            return x
        return x + 1

    cf = w.compile(f)
    obs = []
    for flag in (True, True, False, True):
        x = torch.ones(2)
        y = cf(x, flag)
        obs.append((y is x, y))
    return obs


@case("aliasing")
def same_tensor_twice(w: D.World) -> object:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.mul_(2)
        return a + b

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.full((2,), 1.0 + k)
        obs.append((cf(x, x), x))  # b sees a's write: the same tensor
    for k in range(2):
        x, y = torch.full((2,), 1.0 + k), torch.ones(2)
        obs.append((cf(x, y), x, y))
    return obs


@case("aliasing")
def two_views_of_one_base(w: D.World) -> object:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return b * 1

    cf = w.compile(f)
    obs = []
    for _ in range(3):
        base = torch.zeros(4)
        obs.append((cf(base[:3], base[1:]), base))
    return obs


@case("aliasing")
def outputs_alias_each_other(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y[1:], y.view(-1)

    cf = w.compile(f)
    obs = []
    for k in range(3):
        a, b, c = cf(torch.arange(4.0) + k)
        a.add_(100)
        obs.append((a, b, c, _shares(a, b), _shares(a, c)))
    return obs


@case("aliasing")
def same_output_twice(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        return y, y

    cf = w.compile(f)
    obs = []
    for k in range(3):
        a, b = cf(torch.ones(2) * k)
        obs.append((a is b, a))
    return obs


@case("aliasing")
def out_argument(w: D.World) -> object:
    def f(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return torch.add(x, 1, out=out)

    cf = w.compile(f)
    obs = []
    for k in range(3):
        out = torch.empty(3)
        r = cf(torch.full((3,), float(k)), out)
        obs.append((r is out, out))
    return obs


@case("aliasing")
def inplace_on_view_of_input(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        x[1:].mul_(3)
        x[0] = -1.0
        return x.sum()

    cf = w.compile(f)
    obs = []
    for k in range(4):
        x = torch.arange(4.0) + k
        obs.append((cf(x), x))
    return obs


@case("aliasing")
def transpose_inplace_of_input(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        t = x.t()
        t.add_(torch.arange(t.shape[1], dtype=t.dtype))
        return t.contiguous()

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.zeros(2, 3) + k
        y = cf(x)
        obs.append((x, y))
    return obs


@case("aliasing")
def list_argument_mutated(w: D.World) -> object:
    def f(xs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        xs.append(y * 2)
        xs[0] = xs[0] + 1
        return xs[-1] + xs[0]

    cf = w.compile(f)
    obs = []
    for k in range(4):
        xs = [torch.ones(2) * k]
        r = cf(xs, torch.full((2,), float(k)))
        obs.append((r, xs))
    return obs


@case("aliasing")
def dict_argument_mutated(w: D.World) -> object:
    def f(d: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        d["y"] = x + d["w"]
        d["w"].add_(1)
        del d["tmp"]
        return d["y"] * 2

    cf = w.compile(f)
    obs = []
    for k in range(4):
        d = {"w": torch.ones(2) * k, "tmp": 1}
        r = cf(d, torch.ones(2))
        obs.append((r, d))
    return obs


@case("aliasing")
def input_stored_in_container(w: D.World) -> object:
    def f(x: torch.Tensor, box: list[torch.Tensor]) -> torch.Tensor:
        box.append(x)
        return x + 1

    cf = w.compile(f)
    obs = []
    box: list[torch.Tensor] = []
    xs = [torch.full((2,), float(k)) for k in range(4)]
    for x in xs:
        cf(x, box)
    obs.append([b is x for b, x in zip(box, xs, strict=True)])
    return obs, box


@case("aliasing")
def resize_like_inplace_chain(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.unsqueeze(0)
        y.mul_(2).add_(1)
        return y.squeeze(0).clone()

    cf = w.compile(f)
    obs = []
    for k in range(3):
        x = torch.ones(3) * k
        obs.append((cf(x), x))
    return obs


test_eager, test_inductor = D.tests(__name__)
