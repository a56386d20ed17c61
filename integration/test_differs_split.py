"""Never differs from eager: split mode, after a graph break (issue 17).

A function with a graph break (``print()``, a ``.item()`` feeding Python control flow, a call
MagPy does not support) runs as segments; state changes between calls (inputs, globals,
attributes) and writes to globals and attributes before and after the break must all happen,
in order, as in eager.
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case


@case("split", inductor=True)
def print_between_segments(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        print("mid", y.shape)
        return y + 1

    cf = w.compile(f)
    return [cf(torch.ones(2) * k) for k in range(4)]


@case("split", inductor=True)
def item_into_control_flow(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        s = x.sum().item()
        if s > 2:
            return x * 10
        return x - 1

    cf = w.compile(f)
    return [cf(torch.ones(2) * k) for k in (0.0, 0.5, 2.0, 3.0, 0.0, 2.0, 0.5, 2.0, 3.0)]


@case("split")
def item_value_used_as_number(w: D.World) -> object:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, float]:
        m = x.max().item()
        return x / m, m * 2

    cf = w.compile(f)
    return [cf(torch.arange(1.0, 4.0) * k) for k in (1, 1, 2, 1)]


def _opaque(t: torch.Tensor) -> torch.Tensor:
    # ndarray.copy of a tensor's values: still a break (``t.numpy() * 3`` alone is tensor math
    # in the graph now: test_numpy_tensor_values.py)
    return torch.from_numpy(t.numpy().copy() * 3)


@case("split")
def unsupported_call_in_the_middle(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        z = _opaque(y)
        return z * y

    cf = w.compile(f)
    return [cf(torch.ones(3) * k) for k in range(4)]


@case("split")
def globals_written_around_break(w: D.World) -> object:
    ns: dict[str, object] = {"torch": torch, "before": 0, "after": 0}
    exec(
        "def f(x):\n"
        "    global before, after\n"
        "    before = before + 1\n"
        "    y = x * before\n"
        "    print('break', before)\n"
        "    after = after + before\n"
        "    return y + after\n",
        ns,
    )
    cf = w.compile(ns["f"])
    obs = []
    for b in (0, 0, 10, 0, 10):
        ns["before"] = b  # changed between calls; ``after`` keeps growing
        obs.append((cf(torch.ones(2)), ns["before"], ns["after"]))
    return obs


class _Holder:
    def __init__(self) -> None:
        self.calls = 0
        self.last: torch.Tensor | None = None
        self.scale = 1.0


@case("split")
def attributes_written_around_break(w: D.World) -> object:
    h = _Holder()

    def f(x: torch.Tensor) -> torch.Tensor:
        h.calls += 1
        y = x * h.scale
        print("seen", h.calls)
        h.last = y
        return y + h.calls

    cf = w.compile(f)
    obs = [cf(torch.ones(2)) for _ in range(2)]
    h.scale = 3.0
    obs += [cf(torch.ones(2)) for _ in range(2)]
    return obs, h


@case("split")
def attribute_read_after_break_changed_between_calls(w: D.World) -> object:
    h = _Holder()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        print("b")
        return y * h.scale

    cf = w.compile(f)
    obs = []
    for s in (1.0, 1.0, 2.0, 2.0, 1.0):
        h.scale = s
        obs.append(cf(torch.ones(2)))
    return obs


@case("split")
def list_mutated_before_and_after_break(w: D.World) -> object:
    log: list[object] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        log.append("start")
        y = x * 2
        if y.sum().item() > 3:
            log.append("big")
        log.append(len(log))
        return y

    cf = w.compile(f)
    obs = []
    for k in (1.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0):
        log.clear()
        obs.append((cf(torch.ones(2) * k), list(log)))
    return obs, log


@case("split")
def two_breaks_in_a_row(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        a = x + 1
        print("one")
        b = a * a
        n = int(b.sum().item())
        print("two", n)
        return b - n

    cf = w.compile(f)
    return [cf(torch.ones(2) * k) for k in (1.0, 1.0, 2.0, 1.0)]


@case("split")
def break_inside_loop(w: D.World) -> object:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = x * 2
            if x.sum().item() > 20:
                break
        return x

    cf = w.compile(f)
    return [cf(torch.ones(2) * k, 5) for k in (1.0, 1.0, 3.0, 1.0, 0.5, 3.0, 1.0, 3.0)]


@case("split")
def tensor_mutated_across_break(w: D.World) -> object:
    def f(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        acc.add_(x)
        print("acc")
        acc.mul_(2)
        return acc.sum()

    cf = w.compile(f)
    acc = torch.zeros(2)
    return [cf(torch.ones(2) * k, acc) for k in range(4)], acc


@case("split")
def module_attribute_changed_between_calls(w: D.World) -> object:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.gain = 1.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            print("gain", self.gain)
            return y * self.gain

    torch.manual_seed(0)
    m = M()
    cm = w.compile(m)
    obs = []
    with torch.no_grad():
        for g in (1.0, 1.0, 2.0, 2.0):
            m.gain = g
            obs.append(cm(torch.ones(1, 2)))
    return obs


@case("split")
def exception_after_break(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        print("before raise")
        if y.sum().item() < 0:
            raise ValueError("negative")
        return y

    cf = w.compile(f)
    return [w.attempt(lambda k=k: cf(torch.ones(2) * k)) for k in (1.0, 1.0, -1.0, 1.0, -1.0)]


test_eager, test_inductor = D.tests(__name__)
