"""Never differs from eager: promoted scalars keep Python's semantics (issue 17, class 6).

A scalar that changes between calls becomes a graph input (a 0-d tensor), and arithmetic over it
runs as tensor arithmetic, which differs from Python's outside some conditions: a zero divisor
(Python raises), int64 overflow (Python's ints do not wrap), a negative base to a fractional
power (Python gives a complex), ints beyond 2**53 meeting floats. Each case calls the compiled
function with the scalar changing (so it is promoted), the hostile value on a later call, then
an ordinary value again (which the promoted record serves). Python scalars are also *weak* in
type promotion: the dtype of ``tensor op scalar`` must be eager's for every tensor dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import _integration_differential as D
import torch

case = D.case

NAN, INF = float("nan"), float("inf")


def _x() -> torch.Tensor:
    return torch.tensor([1.5, -2.0, 3.25, 0.0])


def _register(
    name: str, fn: Callable[..., Any], calls: list[tuple[Any, ...]], *, inductor: bool = False
) -> None:
    """A case calling compiled ``fn(x, *args)`` for each ``args`` of ``calls``, in order."""

    def scenario(w: D.World) -> object:
        cf = w.compile(fn)
        x = _x()
        return [w.attempt(lambda a=a: cf(x, *a)) for a in calls]

    scenario.__name__ = scenario.__qualname__ = name
    case("promoted_scalars", inductor=inductor)(scenario)


def _one(values: list[Any]) -> list[tuple[Any, ...]]:
    return [(v,) for v in values]


# ------------------------------------------------------------------ Python's semantics
_register(
    "reciprocal_of_zero_float", lambda x, k: x * (1 / k), _one([2.0, 4.0, 0.0, 8.0]), inductor=True
)
_register("reciprocal_of_zero_int", lambda x, k: x * (1 / k), _one([2, 4, 0, 8, 5]), inductor=True)
_register("negative_zero_divisor", lambda x, k: x * (3.0 / k), _one([2.0, 4.0, -0.0, 8.0]))
_register(
    "divided_by_zero", lambda x, k: x * (k / 0.5) * (2.0 / (k - 1.0)), _one([2.0, 3.0, 1.0, 5.0])
)
_register("float_of_huge_power", lambda x, k: x * float(2**k), _one([1, 2, 3, 1100, 4]))
_register("int_power_past_int64", lambda x, k: x * (2**k), _one([1, 2, 3, 70, 4]))
_register("int_mul_wraps", lambda x, k: x * (k * k), _one([3, 5, 2**40, 7]))
_register("int_sub_wraps", lambda x, k: x * (k - 2), _one([3, 5, -(2**63), 7]))
_register("int_beyond_int64", lambda x, k: x * k, _one([3, 5, 2**64, 7]))
_register("sqrt_of_negative_float", lambda x, k: x * (k**0.5), _one([4.0, 9.0, -4.0, 16.0]))
_register("fractional_power_of_negative", lambda x, k: x + (k**1.5), _one([4.0, 9.0, -1.0, 16.0]))
_register("zero_to_negative_power", lambda x, k: x * (k**-1.0), _one([2.0, 4.0, 0.0, 8.0]))
_register("float_power_overflows", lambda x, k: x * (k**300.0), _one([1.5, 2.0, 20.0, 1.25]))
_register("int_to_negative_int_power", lambda x, k: x * (2**-k), _one([1, 2, -3, 4]))
_register("int_power_of_int", lambda x, k: x * (k**3), _one([2, 3, 2**30, 4]))
_register("floordiv_by_zero", lambda x, k: x * (7 // k), _one([2, 3, 0, 4, 3]))
_register("mod_by_zero", lambda x, k: x * (7 % k), _one([2, 3, 0, 4, 3]))
_register(
    "float_floordiv_by_zero",
    lambda x, k: x * (k // 0.0 if k > 9 else k // 2.0),
    _one([2.0, 3.0, 11.0, 4.0, 3.0]),
)
_register("float_mod_signs", lambda x, k: x * (k % 2.5), _one([2.0, 3.0, -1.0, 4.0, 3.0]))
_register("int_truncates", lambda x, k: x * int(k), _one([1.5, 2.7, -2.7, 3.5]))
_register("int_of_huge_float", lambda x, k: x * int(k), _one([1.5, 2.7, 1e30, 3.5]))
_register("int_of_nan", lambda x, k: x * int(k), _one([1.5, 2.7, NAN, 3.5]))
_register("int_of_inf", lambda x, k: x * int(k), _one([1.5, 2.7, -INF, 3.5]))
_register("round_half_even", lambda x, k: x * round(k), _one([0.5, 1.5, 2.5, -0.5, 1.5]))
_register("round_to_digits", lambda x, k: x * round(k, 1), _one([0.25, 1.35, 2.675, 0.25]))
_register("float_inf_times_zero", lambda x, k: x * (k * 0.0), _one([1.0, 2.0, INF, 3.0]))
_register("float_overflow_to_inf", lambda x, k: x * (k * 1e308), _one([1.0, 2.0, 10.0, 3.0]))
_register("nan_compares", lambda x, k: x * (k < 1.0), _one([0.5, 2.0, NAN, 0.25]))
_register("signed_zero_product", lambda x, k: x + (k * -0.0), _one([1.0, 2.0, -3.0, 0.0]))


def _branch_sqrt(x: torch.Tensor, k: float) -> torch.Tensor:
    if math.sqrt(k) > 1.5:
        return x * k
    return x - k


_register("branch_on_sqrt", _branch_sqrt, _one([1.0, 4.0, 9.0, -1.0, 16.0]))

# int vs float comparisons: Python compares exactly, a double does not hold 2**53 + 1
_BIG = 2**53 + 1
_register("float_of_int_beyond_2_53", lambda x, k: x * (float(k) - 2.0**53), _one([1, 2, _BIG, 4]))

# bools promoted: ints in arithmetic
_BOOLS = _one([True, False, True, False, False])
_register("bool_plus_bool", lambda x, b: x * (b + b), _BOOLS)
_register("bool_minus_one", lambda x, b: x * (b - 1), _BOOLS)
_register("bool_negated", lambda x, b: x * -b, _BOOLS)
_register("bool_over_two", lambda x, b: x * (b / 2), _BOOLS)
_register("two_over_bool", lambda x, b: x * (2 / b), _BOOLS)
_register("bool_times_float", lambda x, b: x * (b * 2.5), _BOOLS)


# ------------------------------------------------------------------ dtypes: scalars are weak
_DTYPES = {
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "bool": torch.bool,
}
_SCALARS: dict[str, list[Any]] = {
    "int": [2, 3, -5, 7],
    "float": [0.5, 1.25, -3.1, 1e-3],
    "bool": [True, False, True, True],
}


def _ops(t: torch.Tensor, s: Any) -> list[Any]:
    def attempt(f: Callable[[], Any]) -> Any:
        try:
            return f()
        except Exception as exc:
            return type(exc).__qualname__

    return [
        attempt(lambda: t * s),
        attempt(lambda: s + t),
        attempt(lambda: t - s),
        attempt(lambda: t / s),
        attempt(lambda: t > s),
        attempt(lambda: t * (s * 2)),
    ]


def _register_dtype(tname: str, dtype: torch.dtype, sname: str, zero_dim: bool) -> None:
    def scenario(w: D.World) -> object:
        def f(x: torch.Tensor, s: Any) -> list[Any]:
            t = x.to(dtype) if not zero_dim else x[2].to(dtype)
            return _ops(t, s)

        cf = w.compile(f)
        x = _x()
        return [w.attempt(lambda s=s: cf(x, s)) for s in _SCALARS[sname]]

    scenario.__name__ = f"{tname}{'_0d' if zero_dim else ''}_tensor_with_{sname}"
    case("promoted_scalars", inductor=(tname, sname) == ("int64", "float"))(scenario)


for _t, _dt in _DTYPES.items():
    for _s in _SCALARS:
        if not (_t == "bool" and _s != "bool"):
            _register_dtype(_t, _dt, _s, zero_dim=False)
for _t, _s in [("int32", "int"), ("int64", "float"), ("float32", "float")]:
    _register_dtype(_t, _DTYPES[_t], _s, zero_dim=True)


test_eager, test_inductor = D.tests(__name__)
