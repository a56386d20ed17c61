"""Never differs from eager: values guarded exactly (issue 17, class 2).

A value the program specialised on is compared by type and value exactly: ``(1.0, 2)`` is not
``(1, 2)``, ``-0.0`` is not ``0.0``, ``True`` is not ``1``, ``slice(0, 2.0)`` is not
``slice(0, 2)``; a NaN constant hits (NaN never equals itself under ``==``) and matches no
other float; complex numbers by the bits of both parts; str/int subclasses and enum members by
their exact type (and members by identity).
"""

from __future__ import annotations

import enum
import math

import _integration_differential as D
import torch

case = D.case
NAN = float("nan")


class Color(enum.IntEnum):
    A = 1
    B = 2


class MyStr(str):
    pass


class MyInt(int):
    pass


class Cfg:
    def __init__(self, v: object) -> None:
        self.v = v


def _run(w: D.World, f, values, x=None):  # type: ignore[no-untyped-def]
    cf = w.compile(f)
    x = torch.ones(2) if x is None else x
    return [w.attempt(lambda v=v: cf(x, v)) for v in values]


@case("exact_values", inductor=True)
def tuple_int_vs_float(w: D.World) -> object:
    def f(x, t):
        return x * t[0], str(t), type(t[0]).__name__

    return _run(w, f, [(1, 2), (1, 2), (1.0, 2), (1, 2.0), (1, 2)])


@case("exact_values", inductor=True)
def signed_zero_scalar(w: D.World) -> object:
    def f(x, s):
        return 1 / (x * s), repr(s)

    return _run(w, f, [0.0, 0.0, -0.0, 0.0, -0.0])


@case("exact_values")
def signed_zero_in_tuple(w: D.World) -> object:
    def f(x, t):
        return 1 / (x * t[0]), repr(t)

    return _run(w, f, [(0.0, 1), (0.0, 1), (-0.0, 1), (0.0, 1)])


@case("exact_values")
def signed_zero_attr(w: D.World) -> object:
    def f(x, c):
        return math.copysign(1.0, c.v) * x

    cf = w.compile(f)
    c = Cfg(0.0)
    out = [cf(torch.ones(2), c), cf(torch.ones(2), c)]
    c.v = -0.0
    out.append(cf(torch.ones(2), c))
    c.v = 0.0
    out.append(cf(torch.ones(2), c))
    return out


@case("exact_values")
def true_vs_one(w: D.World) -> object:
    def f(x, k):
        return x + k, repr(k), k + 1

    x = torch.zeros(2, dtype=torch.bool)
    return _run(w, f, [1, 1, True, 1, True, True], x)


@case("exact_values")
def false_vs_zero(w: D.World) -> object:
    def f(x, k):
        return x * k, repr(k)

    x = torch.ones(2, dtype=torch.bool)
    return _run(w, f, [0, 0, False, 0], x)


@case("exact_values")
def bool_in_tuple(w: D.World) -> object:
    def f(x, t):
        return x + t[0], repr(t)

    x = torch.zeros(2, dtype=torch.bool)
    return _run(w, f, [(1, 2), (1, 2), (True, 2), (1, 2)], x)


@case("exact_values")
def slice_float_stop(w: D.World) -> object:
    def f(x, s):
        return x[s]

    x = torch.arange(5.0)
    return _run(w, f, [slice(0, 2), slice(0, 2), slice(0, 2.0), slice(0, 2)], x)


@case("exact_values")
def slice_false_start(w: D.World) -> object:
    def f(x, s):
        return x[s], repr(s)

    x = torch.arange(5.0)
    return _run(w, f, [slice(0, 2), slice(0, 2), slice(False, 2), slice(0, 2)], x)


@case("exact_values", hits=2)
def nan_constant_hits(w: D.World) -> object:
    def f(x, v):
        return x + v, math.isnan(v)

    return _run(w, f, [NAN, NAN, NAN, 1.0, float("nan"), 2.0])


@case("exact_values")
def nan_fresh_objects_hit(w: D.World) -> object:
    def f(x, v):
        return x * v

    return _run(w, f, [float("nan"), float("nan"), float("nan"), 0.5])


@case("exact_values")
def nan_in_tuple(w: D.World) -> object:
    def f(x, t):
        return x + t[0], t[1]

    return _run(w, f, [(float("nan"), 1), (float("nan"), 1), (1.0, 1), (float("nan"), 1)])


@case("exact_values")
def inf_signs(w: D.World) -> object:
    def f(x, v):
        return x - v, repr(v)

    inf = float("inf")
    return _run(w, f, [inf, inf, -inf, inf, -inf])


@case("exact_values")
def complex_signed_zero_imag(w: D.World) -> object:
    def f(x, c):
        return repr(c), x * c.real, c.imag

    return _run(w, f, [1 + 0j, 1 + 0j, complex(1, -0.0), 1 + 0j])


@case("exact_values")
def complex_vs_float(w: D.World) -> object:
    def f(x, c):
        return x * c, type(c).__name__

    return _run(w, f, [2 + 0j, 2 + 0j, 2.0, 2 + 0j, 2])


@case("exact_values")
def complex_nan_part(w: D.World) -> object:
    def f(x, c):
        return repr(c), x * c.real

    return _run(w, f, [complex(1, NAN), complex(1, NAN), complex(1, 1), complex(1, NAN)])


@case("exact_values")
def nested_tuple(w: D.World) -> object:
    def f(x, t):
        return x * t[1][1], repr(t)

    a = ((1, 2), (3, 4))
    b = ((1, 2), (3, 4.0))
    c = ((1, 2), (3, False))
    return _run(w, f, [a, a, b, a, c, a])


@case("exact_values")
def str_subclass(w: D.World) -> object:
    def f(x, s):
        return x + len(s), type(s).__name__

    return _run(w, f, ["ab", "ab", MyStr("ab"), "ab", MyStr("ab")])


@case("exact_values")
def int_subclass(w: D.World) -> object:
    def f(x, k):
        return x * k, type(k).__name__

    return _run(w, f, [3, 3, MyInt(3), 3, MyInt(3)])


@case("exact_values")
def int_enum_vs_int(w: D.World) -> object:
    def f(x, k):
        return x * k, repr(k)

    return _run(w, f, [1, 1, Color.A, 1, Color.A, Color.B])


@case("exact_values")
def int_enum_members(w: D.World) -> object:
    def f(x, k):
        return x + k, str(k)

    return _run(w, f, [Color.A, Color.A, Color.B, Color.A])


@case("exact_values")
def range_empty_equal(w: D.World) -> object:
    def f(x, r):
        return x + r.start, len(r)

    return _run(w, f, [range(0, 0), range(0, 0), range(5, 5), range(0, 0)])


@case("exact_values")
def range_step(w: D.World) -> object:
    def f(x, r):
        return x * r.step, list(r)

    return _run(w, f, [range(0, 3), range(0, 3), range(0, 3, 1), range(0, 3, 5), range(0, 1)])


@case("exact_values")
def list_items_int_vs_float(w: D.World) -> object:
    def f(x, xs):
        return x * xs[0], repr(xs)

    return _run(w, f, [[1, 2], [1, 2], [1.0, 2], [1, 2]])


@case("exact_values")
def dict_values_exact(w: D.World) -> object:
    def f(x, d):
        return x * d["a"], repr(d)

    return _run(w, f, [{"a": 1}, {"a": 1}, {"a": 1.0}, {"a": True}, {"a": 1}])


@case("exact_values")
def dict_keys_bool_vs_int(w: D.World) -> object:
    def f(x, d):
        return x + len(d), repr(list(d))

    return _run(w, f, [{1: "a"}, {1: "a"}, {True: "a"}, {1: "a"}, {1.0: "a"}])


@case("exact_values")
def kwarg_signed_zero(w: D.World) -> object:
    def f(x, *, s=0.0):
        return 1 / (x * s)

    cf = w.compile(f)
    x = torch.ones(2)
    return [cf(x), cf(x, s=0.0), cf(x, s=-0.0), cf(x)]


@case("exact_values")
def closure_cell_signed_zero(w: D.World) -> object:
    s = 0.0

    def f(x):
        return 1 / (x * s)

    cf = w.compile(f)
    x = torch.ones(2)
    out = [cf(x), cf(x)]
    s = -0.0
    out.append(cf(x))
    s = 0.0
    out.append(cf(x))
    return out


@case("exact_values")
def dtype_values(w: D.World) -> object:
    def f(x, d):
        return x.to(d) * 2

    return _run(w, f, [torch.float32, torch.float32, torch.float64, torch.int64, torch.float32])


@case("exact_values")
def large_int_vs_float(w: D.World) -> object:
    def f(x, k):
        return x + (k % 7), repr(k)

    return _run(w, f, [2**70, 2**70, 2.0**70, 2**70])


@case("exact_values")
def frozenset_int_vs_float(w: D.World) -> object:
    def f(x, s):
        return x + len(s), sorted(repr(v) for v in s)

    a = frozenset({1, 2})
    return _run(w, f, [a, a, frozenset({1.0, 2}), a])


test_eager, test_inductor = D.tests(__name__)
