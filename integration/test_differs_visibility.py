"""Never differs from eager: what MagPy's work could let a program see (issue 35, classes 5-6).

- MagPy's site instrumentation must not show: a function's ``__code__`` (and all derived from
  it: ``co_code``, ``co_names``, equality with another code object, ``dis``) reads as in eager,
  after a graph break as before, outside a compiled call and inside one.
- A warning that an operation of the graph issues is shown on every call as eager shows it
  (count, category, message, file and line) under the program's filters.
- An integer ``torch.div(..., rounding_mode=...)`` may raise: a hit that raises leaves eager's
  effects (an earlier in-place update applied once).
- numpy's error state (``np.errstate``) decides whether numpy arithmetic raises, warns or gives
  ``inf``: changed between calls, it is obeyed.
- An ``lru_cache``'d callee counts hits and misses as in eager (``cache_info()``), also with
  several records, ``typed=True``, ``maxsize=None`` and ``cache_clear()`` between calls.
"""

from __future__ import annotations

import dis
import functools
import inspect
import io
import marshal
import os
import types
import warnings

import _integration_differential as D
import numpy as np
import torch

case = D.case


def _x() -> torch.Tensor:
    return torch.arange(4, dtype=torch.float32) - 1.5


def _attempts(w: D.World, cf: object, argsets: list[tuple[object, ...]], acc: torch.Tensor) -> list:
    out: list[object] = []
    for args in argsets:
        out.append(w.attempt(lambda a=args: cf(acc, *a)))  # type: ignore[operator]
        out.append(acc.clone())
    return out


# ---------------------------------------------------------------------- a function's code
def _code_facts(fn: types.FunctionType, code0: types.CodeType) -> tuple[object, ...]:
    code = fn.__code__
    return (code is code0, code == code0, code.co_code == code0.co_code, code.co_names)


@case("visibility")
def function_code_after_a_break(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        print("break")
        return y + 1

    code0 = f.__code__
    cf = w.compile(f)
    out = []
    for _ in range(4):
        out += [cf(_x()), _code_facts(f, code0)]
    return out


@case("visibility")
def function_code_read_inside_the_call(w: D.World) -> object:
    def g(x: torch.Tensor) -> torch.Tensor:
        code = g.__code__
        y = x * 2
        print("break")
        return y + len(code.co_code) + len(code.co_names)

    cf = w.compile(g)
    return [cf(_x()) for _ in range(4)]


@case("visibility")
def callee_code_compared_inside_the_call(w: D.World) -> object:
    def inner(x: torch.Tensor) -> torch.Tensor:
        print("inner break")
        return x + 1

    twin = types.FunctionType(inner.__code__, inner.__globals__, "twin", None, None)

    def outer(x: torch.Tensor) -> object:
        same = inner.__code__ == twin.__code__
        ident = inner.__code__ is twin.__code__
        return inner(x * 2) * 3, same, ident, inner.__code__.co_names

    cf = w.compile(outer)
    out = [cf(_x()) for _ in range(4)]
    return out, inner.__code__ is twin.__code__


@case("visibility")
def disassembly_of_a_compiled_function(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        print("break")
        return y.cos()

    cf = w.compile(f)
    out: list[object] = []
    for _ in range(3):
        out.append(cf(_x()))
        text = io.StringIO()
        dis.dis(f, file=text)
        out.append(text.getvalue())
    return out


@case("visibility")
def copies_and_dumps_of_a_compiled_function(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        print("break")
        return y * 2

    cf = w.compile(f)
    out: list[object] = []
    for _ in range(3):
        out.append(cf(_x()))
        copy = types.FunctionType(f.__code__, f.__globals__, "copy", f.__defaults__, f.__closure__)
        out += [copy.__code__.co_names, marshal.dumps(f.__code__)]
        out.append(sorted(inspect.getclosurevars(f).builtins))
    return out


# ---------------------------------------------------------------------- integer division
@case("visibility", hits=2)
def integer_floor_division_by_zero_updates_once(w: D.World) -> object:
    def f(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        acc.add_(1)
        return torch.div(a, b, rounding_mode="floor")

    cf = w.compile(f)
    acc = torch.zeros(2)
    a = torch.tensor([7, -7])
    args = [(a, torch.tensor([2, 3])), (a, torch.tensor([2, 3])), (a, torch.tensor([0, 3]))]
    return _attempts(w, cf, [*args, (a, torch.tensor([2, 0])), args[0]], acc)


@case("visibility", hits=3)
def integer_trunc_division_in_place_by_zero(w: D.World) -> object:
    def f(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        acc.mul_(2).add_(1)
        a.div_(b, rounding_mode="trunc")
        return a + 1

    cf = w.compile(f)
    acc = torch.ones(1)
    out = []
    for b in (3, 3, 0, 2, 0, 3):
        a = torch.tensor([9, -9])
        out.append(w.attempt(lambda a=a, b=b: cf(acc, a, torch.tensor([b, b]))))
        out += [a, acc.clone()]
    return out


# ---------------------------------------------------------------------- warnings of graph ops
def _seen(caught: list[warnings.WarningMessage]) -> list[tuple[str, str, str, int]]:
    return [
        (c.category.__name__, str(c.message)[:60], os.path.basename(c.filename), c.lineno)
        for c in caught
    ]


@case("visibility")
def graph_op_warning_under_the_programs_filters(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.std() * 2 + x  # (one element: "degrees of freedom is <= 0" on every call)

    cf = w.compile(f)
    one = torch.ones(1)
    out: list[object] = []
    for action in ("always", "always", "ignore", "always", "default", "default", "error"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            out.append(w.attempt(lambda: cf(one)))
        out.append(_seen(caught))
    return out


@case("visibility", inductor=True)
def graph_op_warning_attributed_to_the_program(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.tensor(x) * 2  # ("To copy construct from a tensor..." on every call)
        return y + x

    cf = w.compile(f)
    return [cf(_x()) for _ in range(4)]


@case("visibility")
def graph_op_warning_default_filter_once_per_place(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.range(0, 3) + x  # (a deprecation warning on every call)

    cf = w.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        outs = [cf(_x()) for _ in range(4)]
    return outs, _seen(caught)


# A library's Python code that warns while its operation runs (torch.nn.functional): the graph
# runs the operation without the warning and the mock replays it from the place eager names
def _softmax_no_dim(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softmax(x * 2) + 1  # ("Implicit dimension choice ...")


@case("visibility")
def library_warning_under_each_filter(w: D.World) -> object:
    cf = w.compile(_softmax_no_dim)
    out: list[object] = []
    for action in ("always", "always", "ignore", "default", "default", "once", "always", "error"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            out.append(w.attempt(lambda: cf(_x())))
        out.append(_seen(caught))
    return out


@case("visibility")
def library_warning_default_filter_then_a_registry_reset(w: D.World) -> object:
    cf = w.compile(_softmax_no_dim)
    out: list[object] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        out += [cf(_x()) for _ in range(3)]
        warnings.filterwarnings("default", message="nothing like it")  # (resets the registries)
        out += [cf(_x()) for _ in range(2)]
    return out, _seen(caught)


class _OldLoss(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.loss = torch.nn.MSELoss()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # (a deprecated argument, and a target of another shape: two warnings of torch's)
        a = torch.nn.functional.mse_loss(x, y, size_average=False)
        return a + self.loss(x, y[:1])


@case("visibility")
def library_warnings_of_a_module_and_a_function(w: D.World) -> object:
    cf = w.compile(_OldLoss())
    out: list[object] = []
    for action in ("always", "default", "always"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            out.append([cf(_x(), _x()) for _ in range(2)])
        out.append(_seen(caught))
    return out


@case("visibility")
def library_warning_only_for_some_arguments(w: D.World) -> object:
    def f(x: torch.Tensor, mode: str) -> torch.Tensor:
        return torch.nn.functional.upsample(x, scale_factor=2, mode=mode) * 2  # (deprecated)

    cf = w.compile(f)
    out: list[object] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(1, 1, 2, 2)
        out += [cf(x, "nearest"), cf(x, "nearest"), cf(x, "bilinear"), cf(x, "nearest")]
    return out, _seen(caught)


# ---------------------------------------------------------------------- numpy's error state
@case("visibility", inductor=True)
def numpy_errstate_raise_set_between_calls(w: D.World) -> object:
    def f(x: torch.Tensor, n: np.float64) -> torch.Tensor:
        return x * (np.float64(1.0) / n)

    cf = w.compile(f)
    zero = np.float64(0.0)
    with np.errstate(divide="ignore"):
        outs = [cf(_x(), zero), cf(_x(), zero)]
    with np.errstate(divide="raise"):
        outs += [w.attempt(lambda: cf(_x(), zero)), w.attempt(lambda: cf(_x(), zero))]
    with np.errstate(divide="ignore"):
        outs += [cf(_x(), zero), cf(_x(), zero)]
    return outs


@case("visibility")
def numpy_errstate_warns_on_every_call(w: D.World) -> object:
    def f(x: torch.Tensor, a: float) -> torch.Tensor:
        r = np.array([a, 1.0]) / np.array([0.0, 2.0])  # (divide by zero: a RuntimeWarning)
        return x + float(r[1])

    cf = w.compile(f)
    with np.errstate(divide="warn"):
        outs = [cf(_x(), 2.0) for _ in range(3)]
    with np.errstate(divide="ignore"):
        outs += [cf(_x(), 2.0) for _ in range(2)]
    return outs


# ---------------------------------------------------------------------- lru_cache
@case("visibility")
def lru_cache_info_with_several_records(w: D.World) -> object:
    @functools.cache
    def scale(n: int) -> int:
        return n * 2

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * scale(n)

    cf = w.compile(f)
    outs = []
    for n in (3, 3, 4, 4, 3, 5, 3, 4):
        outs += [cf(_x(), n), tuple(scale.cache_info())]
    return outs


@case("visibility")
def lru_cache_typed_and_bounded_evicts(w: D.World) -> object:
    @functools.lru_cache(maxsize=2, typed=True)
    def shift(n: float) -> float:
        return n + 1

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * shift(n) + shift(float(n))

    cf = w.compile(f)
    outs = []
    for n in (3, 3, 3, 4, 4, 3, 3):
        outs += [cf(_x(), n), tuple(shift.cache_info())]
    return outs


_LEVEL = {"k": 2}


@case("visibility")
def lru_cache_cleared_between_calls_counts(w: D.World) -> object:
    @functools.lru_cache
    def level(name: str, *, plus: int = 0) -> int:
        return _LEVEL[name] + plus

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * level("k") + level("k", plus=1)

    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x()), tuple(level.cache_info())]
        _LEVEL["k"] = 5
        level.cache_clear()
        outs += [cf(_x()), cf(_x()), tuple(level.cache_info())]
        level.cache_clear()
        outs += [cf(_x()), cf(_x()), tuple(level.cache_info())]
    finally:
        _LEVEL["k"] = 2
    return outs


test_eager, test_inductor = D.tests(__name__)
