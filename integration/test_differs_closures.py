"""Never differs from eager: closures and their cells (issue 17, class 3).

Every write to a cell (``nonlocal``, STORE_DEREF, a captured local reassigned later) happens on
every call, hit or not, as in eager; reads of cells written between calls are guarded.
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case


@case("closures", inductor=True)
def nonlocal_counter(w: D.World) -> object:
    n = 0

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal n
        n += 1
        return x * n

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, n


@case("closures")
def nonlocal_tensor_accumulator(w: D.World) -> object:
    acc = torch.zeros(2)

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal acc
        acc = acc * 0.5 + x
        return acc.sum()

    cf = w.compile(f)
    outs = [cf(torch.ones(2) * i) for i in range(4)]
    return outs, acc


@case("closures")
def nonlocal_list_append(w: D.World) -> object:
    hist: list[object] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        hist.append(y)
        return y

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(3)]
    return outs, hist


@case("closures")
def nonlocal_dict_item(w: D.World) -> object:
    state = {"last": torch.zeros(2)}

    def f(x: torch.Tensor) -> torch.Tensor:
        state["last"] = x * 2
        return x - 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2) * i) for i in range(3)]
    return outs, state


@case("closures")
def nonlocal_replaced_list(w: D.World) -> object:
    buf: list[object] = [None]

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal buf
        buf = [x * 2]
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(3)]
    return outs, buf


@case("closures")
def nonlocal_alternating_flag(w: D.World) -> object:
    mode = "a"

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal mode
        y = x + 1 if mode == "a" else x - 1
        mode = "b" if mode == "a" else "a"
        return y

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(6)]
    return outs, mode


@case("closures")
def cell_read_changed_between_calls(w: D.World) -> object:
    scale = 2.0

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * scale

    cf = w.compile(f)
    outs = [cf(torch.ones(2)), cf(torch.ones(2))]
    scale = 3.0
    outs += [cf(torch.ones(2)), cf(torch.ones(2))]
    return outs


@case("closures")
def captured_local_reassigned_after_def(w: D.World) -> object:
    k = 1
    f = lambda x: x * k  # noqa: E731
    k = 5
    cf = w.compile(f)
    return [cf(torch.ones(2)) for _ in range(3)]


@case("closures")
def captured_after_break(w: D.World) -> object:
    k = 0
    for i in range(10):
        if i == 3:
            break
        k = i
    f = lambda x: x + k  # noqa: E731
    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(2)]
    k = 7
    outs += [cf(torch.ones(2)) for _ in range(2)]
    return outs


@case("closures")
def nested_closure_writes_outer(w: D.World) -> object:
    n = 0

    def middle() -> object:
        def inner(x: torch.Tensor) -> torch.Tensor:
            nonlocal n
            n += 2
            return x * n

        return inner

    cf = w.compile(middle())
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, n


@case("closures")
def helper_writes_cell(w: D.World) -> object:
    n = 0

    def bump() -> int:
        nonlocal n
        n += 1
        return n

    def f(x: torch.Tensor) -> torch.Tensor:
        bump()
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, n


@case("closures")
def helper_writes_cell_read_back(w: D.World) -> object:
    n = 0

    def bump() -> None:
        nonlocal n
        n += 1

    def f(x: torch.Tensor) -> torch.Tensor:
        bump()
        bump()
        return x * n

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, n


@case("closures", inductor=True)
def split_print_between_writes(w: D.World) -> object:
    n = 0

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal n
        n += 1
        print("mid", n)
        n += 10
        return x * n

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(5)]
    return outs, n


@case("closures")
def split_write_after_print(w: D.World) -> object:
    last = None

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal last
        print("step")
        last = x * 3
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2) * i) for i in range(4)]
    return outs, last


@case("closures")
def split_helper_writes_cell(w: D.World) -> object:
    n = 0

    def bump() -> None:
        nonlocal n
        n += 1

    def f(x: torch.Tensor) -> torch.Tensor:
        bump()
        print("between")
        bump()
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, n


@case("closures")
def returned_adder(w: D.World) -> object:
    def make(x: torch.Tensor, k: int) -> object:
        return lambda t: t * k + x

    cf = w.compile(make)
    fns = [cf(torch.ones(2), k) for k in (1, 1, 2, 2)]
    return [g(torch.ones(2)) for g in fns]


@case("closures")
def returned_getter_setter_share(w: D.World) -> object:
    def make(x: torch.Tensor) -> object:
        v = x + 1

        def get() -> torch.Tensor:
            return v

        def put(t: torch.Tensor) -> None:
            nonlocal v
            v = t

        return get, put

    cf = w.compile(make)
    outs = []
    for _ in range(3):
        get, put = cf(torch.ones(2))
        before = get()
        put(torch.zeros(1))
        outs.append((before, get()))
    return outs


@case("closures")
def returned_closure_cell_reassigned(w: D.World) -> object:
    def make(x: torch.Tensor) -> object:
        k = x * 2
        g = lambda: k  # noqa: E731
        k = x * 3
        return g

    cf = w.compile(make)
    return [cf(torch.ones(2))() for _ in range(3)]


@case("closures")
def cell_tensor_inplace(w: D.World) -> object:
    buf = torch.zeros(2)

    def f(x: torch.Tensor) -> torch.Tensor:
        buf.add_(x)
        return buf * 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, buf


@case("closures")
def nonlocal_in_loop(w: D.World) -> object:
    n = 0

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal n
        for _ in range(3):
            n += 1
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, n


@case("closures")
def conditional_write(w: D.World) -> object:
    n = 0

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal n
        if x.shape[0] > 2:
            n += 1
        return x.sum()

    cf = w.compile(f)
    outs = [cf(torch.ones(s)) for s in (3, 2, 3, 2, 3)]
    return outs, n


@case("closures")
def nonlocal_tuple(w: D.World) -> object:
    pair = (0, 1)

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal pair
        pair = (pair[1], pair[0])
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(4)]
    return outs, pair


@case("closures")
def two_compiled_share_cell(w: D.World) -> object:
    n = 0

    def inc(x: torch.Tensor) -> torch.Tensor:
        nonlocal n
        n += 1
        return x + 1

    def get(x: torch.Tensor) -> torch.Tensor:
        return x * n

    ci, cg = w.compile(inc), w.compile(get)
    outs = []
    for _ in range(4):
        outs.append((ci(torch.ones(2)), cg(torch.ones(2))))
    return outs, n


@case("closures")
def cell_written_outside_between_calls(w: D.World) -> object:
    k = 1

    def setk(v: int) -> None:
        nonlocal k
        k = v

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + k

    cf = w.compile(f)
    outs = []
    for v in (1, 1, 4, 4, 1):
        setk(v)
        outs.append(cf(torch.ones(2)))
    return outs


@case("closures")
def nonlocal_set_to_none(w: D.World) -> object:
    cur = 0

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal cur
        cur = None
        return x + 1

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(3)]
    return outs, cur


@case("closures")
def nonlocal_dict_replaced(w: D.World) -> object:
    cfg = {"step": 0}

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal cfg
        cfg = {"step": 1, "seen": True}
        return x * 2

    cf = w.compile(f)
    outs = [cf(torch.ones(2)) for _ in range(3)]
    return outs, cfg


@case("closures", inductor=True)
def nonlocal_ema_state(w: D.World) -> object:
    ema = None

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal ema
        ema = x if ema is None else ema * 0.9 + x * 0.1
        return ema.relu()

    cf = w.compile(f)
    outs = [cf(torch.full((2,), float(i))) for i in range(5)]
    return outs, ema


@case("closures")
def helper_counter_in_module(w: D.World) -> object:
    calls = 0

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            nonlocal calls
            calls += 1
            return self.lin(x)

    m = M()
    cm = w.compile(m)
    with torch.no_grad():
        outs = [cm(torch.ones(1, 2)) for _ in range(4)]
    return outs, calls


test_eager, test_inductor = D.tests(__name__)
