"""Never differs from eager: errors a compiled graph raises at run time (issue 17, class 5).

A call that a record serves, whose graph raises the program's own error (an index out of
range, shapes that do not match, a failed factorization), raises as eager does: the same
exception and message, effects applied once (an in-place update before the error), no MagPy
warning, no ``__context__``/``__cause__`` of MagPy's; and the record stays: later good calls hit.
"""

from __future__ import annotations

import warnings
from typing import Any

import _integration_differential as D
import torch
import torch.nn.functional as F


def case(category: str, *, hits: int = 2, inductor: bool = False) -> Any:
    """A case whose record serves ``hits`` calls: the good calls before and after an error."""
    return D.case(category, hits=hits, inductor=inductor)


_BAD = torch.tensor([0, 5])
_GOOD = torch.tensor([2, 0])


def _calls(w: D.World, cf: object, args: list[tuple[object, ...]]) -> list[object]:
    out = []
    for a in args:
        out.append(w.attempt(lambda a=a: cf(*a)))  # type: ignore[operator]
    return out


def _context(call: object) -> object:
    try:
        return call()  # type: ignore[operator]
    except Exception as exc:
        return (type(exc).__name__, str(exc), exc.__context__ is None, exc.__cause__ is None)


@case("errors", inductor=True)
def inplace_then_index_error(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD), (x, _BAD)])
    return outs, x


@case("errors")
def index_error_no_mutation(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[idx] * 2

    cf = w.compile(f)
    x = torch.arange(3.0)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])


@case("errors")
def error_has_no_context(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x[idx]

    cf = w.compile(f)
    x = torch.ones(3)
    outs = [_context(lambda i=i: cf(x, i)) for i in (_GOOD, _GOOD, _BAD, _BAD, _GOOD)]
    return outs, x


@case("errors")
def index_select_out_of_range(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        return torch.index_select(y, 0, idx)

    cf = w.compile(f)
    x = torch.arange(3.0)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])


@case("errors")
def gather_out_of_range(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(0.5)
        return torch.gather(x, 0, idx)

    cf = w.compile(f)
    x = torch.zeros(3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)]), x


@case("errors")
def scatter_inplace_out_of_range(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        x.scatter_(0, idx, torch.ones(2))
        return x * 2

    cf = w.compile(f)
    x = torch.zeros(3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)]), x


@case("errors", inductor=True)
def embedding_out_of_range(w: D.World) -> object:
    emb = torch.nn.Embedding(3, 2)

    def f(idx: torch.Tensor) -> torch.Tensor:
        return F.relu(emb(idx))

    cf = w.compile(f)
    with torch.no_grad():
        return _calls(w, cf, [(_GOOD,), (_GOOD,), (_BAD,), (_GOOD,)])


@case("errors", inductor=True)
def cholesky_not_positive_definite(w: D.World) -> object:
    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.cholesky(a @ a.mT + 0.0) * 2

    cf = w.compile(f)
    good = torch.eye(3) * 2
    bad = torch.zeros(3, 3)
    return _calls(w, cf, [(good,), (good,), (bad,), (good * 3,)])


@case("errors")
def cholesky_after_inplace(w: D.World) -> object:
    def f(a: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        shift.add_(1)
        return torch.linalg.cholesky(a)

    cf = w.compile(f)
    s = torch.zeros(2)
    good = torch.eye(2)
    bad = -torch.eye(2)
    return _calls(w, cf, [(good, s), (good, s), (bad, s), (good, s)]), s


@case("errors")
def multinomial_negative(w: D.World) -> object:
    def f(p: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(p, 2)

    cf = w.compile(f)
    good = torch.tensor([0.5, 0.5, 1.0])
    bad = torch.tensor([0.5, -1.0, 1.0])
    return _calls(w, cf, [(good,), (good,), (bad,), (good,)])


@case("errors", hits=3)
def random_before_error(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        r = torch.rand(3)
        return (x + r)[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD), (x, _GOOD)])


@case("errors")
def global_write_before_error(w: D.World) -> object:
    ns: dict[str, object] = {"torch": torch, "count": 0}
    exec(
        "def f(x, idx):\n    global count\n    count += 1\n    x.add_(1)\n    return x[idx]\n",
        ns,
    )
    cf = w.compile(ns["f"])
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, x, ns["count"]


@case("errors")
def attribute_write_before_error(w: D.World) -> object:
    class Box:
        calls = 0

    box = Box()

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        box.calls += 1
        return x[idx] + 1

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, box.calls


@case("errors")
def list_append_before_error(w: D.World) -> object:
    log: list[object] = []

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        log.append(1)
        return x[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, log


@case("errors")
def nonlocal_write_before_error(w: D.World) -> object:
    n = 0

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        nonlocal n
        n += 1
        return x[idx] * n

    cf = w.compile(f)
    x = torch.ones(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, n


@case("errors")
def error_in_helper(w: D.World) -> object:
    def pick(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return t[idx]

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return pick(x * 2, idx)

    cf = w.compile(f)
    x = torch.zeros(3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)]), x


@case("errors")
def error_in_nested_helpers(w: D.World) -> object:
    def inner(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, idx)

    def outer(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return inner(t + 1, idx)

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return outer(x, idx).sum()

    cf = w.compile(f)
    x = torch.arange(3.0)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])


@case("errors")
def warning_before_error(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        warnings.warn("careful", stacklevel=1)
        return x[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])


@case("errors", hits=5)
def split_print_then_error(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        print("step")
        y = x * 2
        return y[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, x


@case("errors", hits=4)
def split_error_before_print(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        y = x[idx]
        print("after")
        return y + 1

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, x


@case("errors")
def split_error_in_helper(w: D.World) -> object:
    def helper(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        print("in helper")
        return t.add_(1)[idx]

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return helper(x * 1, idx) + x[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, x


@case("errors")
def module_buffer_then_error(w: D.World) -> object:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("steps", torch.zeros(()))
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            self.steps.add_(1)
            return self.lin(x)[:, idx]

    m = M()
    cm = w.compile(m)
    x = torch.ones(2, 3)
    with torch.no_grad():
        outs = _calls(w, cm, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)])
    return outs, m.steps


@case("errors")
def in_place_on_two_inputs(w: D.World) -> object:
    def f(a: torch.Tensor, b: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        b.mul_(2)
        return (a + b)[idx]

    cf = w.compile(f)
    a, b = torch.zeros(3), torch.ones(3)
    outs = _calls(w, cf, [(a, b, _GOOD), (a, b, _GOOD), (a, b, _BAD), (a, b, _GOOD)])
    return outs, a, b


@case("errors")
def inplace_view_then_error(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x[0].add_(1)
        return x.sum(0)[idx]

    cf = w.compile(f)
    x = torch.zeros(2, 3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)]), x


@case("errors", hits=3)
def error_then_good_calls_hit(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return (x * 3)[idx]

    cf = w.compile(f)
    x = torch.arange(3.0)
    args = [(x, _GOOD), (x, _BAD), (x, _BAD), (x, _GOOD), (x, _GOOD), (x, _GOOD)]
    return _calls(w, cf, args)


@case("errors")
def grad_then_error(w: D.World) -> object:
    p = torch.ones(3, requires_grad=True)

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return (p * x)[idx].sum()

    cf = w.compile(f)
    x = torch.arange(3.0)
    outs = []
    for idx in (_GOOD, _GOOD, _BAD, _GOOD):
        r = w.attempt(lambda idx=idx: cf(x, idx))
        if isinstance(r, torch.Tensor):
            r.backward()
            r = r.detach()
        outs.append(r)
    return outs, p.grad


@case("errors")
def program_catches_error(w: D.World) -> object:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x[idx]

    cf = w.compile(f)
    x = torch.zeros(3)
    outs = []
    for idx in (_GOOD, _GOOD, _BAD, _BAD, _GOOD):
        try:
            outs.append(cf(x, idx))
        except IndexError as exc:
            outs.append(("caught", str(exc)))
    return outs, x


@case("errors")
def bmm_batch_values(w: D.World) -> object:
    def f(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        y = torch.bmm(a, a.mT)
        return y[idx].relu()

    cf = w.compile(f)
    a = torch.ones(3, 2, 2)
    return _calls(w, cf, [(a, _GOOD), (a, _GOOD), (a, _BAD), (a, _GOOD)])


@case("errors", hits=5)
def compiled_calls_compiled(w: D.World) -> object:
    def g(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return t[idx]

    cg = w.compile(g)

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return cg(x, idx) * 2

    cf = w.compile(f)
    x = torch.zeros(3)
    return _calls(w, cf, [(x, _GOOD), (x, _GOOD), (x, _BAD), (x, _GOOD)]), x


test_eager, test_inductor = D.tests(__name__)
