"""Never differs from eager: reads CPython makes for the program (issue 17, class 2).

Function defaults and keyword defaults, code objects, ``__globals__``, lookups through a class
and its MRO (methods, properties, ``super()``, ``__class__``), module attributes a function is
reached through, module globals that shadow builtins, ``functools.partial``: each is read by
the interpreter on the program's behalf, and a change between calls must miss the cache.
"""

from __future__ import annotations

import functools
import math
import types

import _integration_differential as D
import torch
import torch.nn.functional as F

case = D.case


def _x() -> torch.Tensor:
    return torch.arange(4, dtype=torch.float32) - 1.5


# ------------------------------------------------------------------ defaults
@case("implicit", inductor=True)
def root_defaults_replaced(w: D.World) -> object:
    def f(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        return x * k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    f.__defaults__ = (5.0,)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def root_kwdefaults_replaced(w: D.World) -> object:
    def f(x: torch.Tensor, *, k: float = 2.0) -> torch.Tensor:
        return x * k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    f.__kwdefaults__ = {"k": -3.0}
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def root_mutable_default(w: D.World) -> object:
    def h(x: torch.Tensor, acc: list = []) -> torch.Tensor:  # noqa: B006
        acc.append(1)
        return x * 2

    ch = w.compile(h)
    outs = [ch(_x()) for _ in range(4)]
    return outs, h.__defaults__[0]


@case("implicit")
def callee_defaults_replaced(w: D.World) -> object:
    def g(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        return x * k

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x) + 1

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g.__defaults__ = (7.0,)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def callee_kwdefaults_replaced(w: D.World) -> object:
    def g(x: torch.Tensor, *, k: float = 2.0) -> torch.Tensor:
        return x * k

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x) + 1

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g.__kwdefaults__ = {"k": 0.5}
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def callee_mutable_default(w: D.World) -> object:
    def g(acc: list = []) -> int:  # noqa: B006
        acc.append(1)
        return 3

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * g()

    cf = w.compile(f)
    outs = [cf(_x()) for _ in range(4)]
    return outs, g.__defaults__[0]


@case("implicit")
def callee_default_dict_mutated(w: D.World) -> object:
    def g(x: torch.Tensor, opts: dict = {"k": 2.0}) -> torch.Tensor:  # noqa: B006
        return x * opts["k"]

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g.__defaults__[0]["k"] = 9.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def callee_defaults_removed(w: D.World) -> object:
    def g(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        return x * k

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g.__defaults__ = None
    outs += [w.attempt(lambda: cf(_x())), w.attempt(lambda: cf(_x()))]
    return outs


@case("implicit")
def method_default_replaced(w: D.World) -> object:
    class A:
        def scale(self, x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
            return x * k

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return a.scale(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.scale.__defaults__ = (4.0,)
    outs += [cf(_x()), cf(_x())]
    return outs


# ------------------------------------------------------------------ code objects
@case("implicit", inductor=True)
def callee_code_replaced(w: D.World) -> object:
    def g(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def other(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x) - 1

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g.__code__ = other.__code__
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def root_code_replaced(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def other(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    f.__code__ = other.__code__
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def method_code_replaced(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    def other(self: object, x: torch.Tensor) -> torch.Tensor:
        return x * 3

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return a.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.go.__code__ = other.__code__
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def callee_code_restored(w: D.World) -> object:
    def g(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def other(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x)

    cf = w.compile(f)
    orig = g.__code__
    outs = [cf(_x()), cf(_x())]
    g.__code__ = other.__code__
    outs += [cf(_x())]
    g.__code__ = orig
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def callee_globals_differ(w: D.World) -> object:
    ns: dict = {"K": 2.0}
    exec("def g(x):\n    return x * K\n", ns)
    g0 = ns["g"]

    def f(x: torch.Tensor) -> torch.Tensor:
        return g0(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    ns["K"] = 3.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def callee_function_rebuilt_with_globals(w: D.World) -> object:
    ns1: dict = {"K": 2.0}
    ns2: dict = {"K": 5.0}
    exec("def g(x):\n    return x * K\n", ns1)
    holder = {"g": ns1["g"]}

    def f(x: torch.Tensor) -> torch.Tensor:
        return holder["g"](x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g = ns1["g"]
    holder["g"] = types.FunctionType(g.__code__, ns2, "g")
    outs += [cf(_x()), cf(_x())]
    return outs


# ------------------------------------------------------------------ class lookups
@case("implicit", inductor=True)
def method_replaced_on_class(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return a.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.go = lambda self, x: x * 10
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def method_shadowed_on_instance(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return a.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    a.go = lambda x: x * 10
    outs += [cf(_x()), cf(_x())]
    del a.go
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def method_shadowed_in_subclass(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class B(A):
        pass

    b = B()

    def f(x: torch.Tensor) -> torch.Tensor:
        return b.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    B.go = lambda self, x: x * 10
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def base_method_replaced(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class B(A):
        pass

    b = B()

    def f(x: torch.Tensor) -> torch.Tensor:
        return b.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.go = lambda self, x: x * 10
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def method_deleted_from_subclass(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class B(A):
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x * 10

    b = B()

    def f(x: torch.Tensor) -> torch.Tensor:
        return b.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    del B.go
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def forward_replaced_on_module_class(w: D.World) -> object:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    m = M()

    def f(x: torch.Tensor) -> torch.Tensor:
        return m(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    M.forward = lambda self, x: x * 10
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def forward_shadowed_on_module_instance(w: D.World) -> object:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    m = M()

    def f(x: torch.Tensor) -> torch.Tensor:
        return m(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    m.forward = lambda x: x * 10
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def compiled_module_forward_replaced(w: D.World) -> object:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    m = M()
    cm = w.compile(m)
    outs = [cm(_x()), cm(_x())]
    M.forward = lambda self, x: x * 10
    outs += [cm(_x()), cm(_x())]
    return outs


@case("implicit")
def property_replaced_on_class(w: D.World) -> object:
    class A:
        @property
        def k(self) -> float:
            return 2.0

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * a.k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.k = property(lambda self: -4.0)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def property_replaced_by_plain_attr(w: D.World) -> object:
    class A:
        @property
        def k(self) -> float:
            return 2.0

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * a.k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.k = 6.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def property_getter_code_replaced(w: D.World) -> object:
    class A:
        @property
        def k(self) -> float:
            return 2.0

    def other(self: object) -> float:
        return 8.0

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * a.k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.k.fget.__code__ = other.__code__
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def class_attr_shadowed_on_instance(w: D.World) -> object:
    class A:
        k = 2.0

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * a.k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    a.k = 3.0
    outs += [cf(_x()), cf(_x())]
    del a.k
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def base_class_attr_replaced(w: D.World) -> object:
    class A:
        k = 2.0

    class B(A):
        pass

    b = B()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * b.k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.k = 3.0
    outs += [cf(_x()), cf(_x())]
    B.k = 4.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def instance_class_reassigned(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class B:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x * 10

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return a.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    a.__class__ = B
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def instance_class_reassigned_attr(w: D.World) -> object:
    class A:
        k = 2.0

    class B:
        k = 5.0

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * a.k

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    a.__class__ = B
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def staticmethod_replaced(w: D.World) -> object:
    class A:
        @staticmethod
        def go(x: torch.Tensor) -> torch.Tensor:
            return x + 1

    def f(x: torch.Tensor) -> torch.Tensor:
        return A.go(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.go = staticmethod(lambda x: x * 10)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def class_method_through_class_replaced(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return A.go(a, x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.go = lambda self, x: x * 10
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def bound_method_of_replaced_object(w: D.World) -> object:
    class A:
        def __init__(self, k: float) -> None:
            self.k = k

        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    holder = {"fn": A(2.0).go}

    def f(x: torch.Tensor) -> torch.Tensor:
        return holder["fn"](x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    holder["fn"] = A(3.0).go
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def bound_method_self_mutated(w: D.World) -> object:
    class A:
        def __init__(self, k: float) -> None:
            self.k = k

        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    a = A(2.0)
    bm = a.go

    def f(x: torch.Tensor) -> torch.Tensor:
        return bm(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    a.k = -1.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def bound_method_func_class_replaced(w: D.World) -> object:
    class A:
        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    bm = A().go

    def f(x: torch.Tensor) -> torch.Tensor:
        return bm(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    A.go = lambda self, x: x * 10  # bm still binds the old function
    outs += [cf(_x()), cf(_x())]
    return outs


# ------------------------------------------------------------------ module attributes


@case("implicit")
def functional_silu_patched(w: D.World) -> object:
    orig = F.silu

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    try:
        F.silu = lambda x: x * 10
        outs += [cf(_x()), cf(_x())]
    finally:
        F.silu = orig
    outs += [cf(_x())]
    return outs


@case("implicit")
def torch_relu_patched(w: D.World) -> object:
    orig = torch.relu

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    try:
        torch.relu = lambda x: x * 10
        outs += [cf(_x()), cf(_x())]
    finally:
        torch.relu = orig
    outs += [cf(_x())]
    return outs


@case("implicit")
def functional_gelu_via_global_alias(w: D.World) -> object:
    ns: dict = {"F": F}
    exec("def f(x):\n    return F.gelu(x) + 1\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x()), cf(_x())]
    ns["F"] = types.SimpleNamespace(gelu=lambda x: x * 3)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def functional_tanh_patched(w: D.World) -> object:
    orig = F.tanh

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.tanh(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    try:
        F.tanh = lambda x: x * 10
        outs += [cf(_x()), cf(_x())]
    finally:
        F.tanh = orig
    outs += [cf(_x())]
    return outs


@case("implicit")
def user_module_function_patched(w: D.World) -> object:
    mod = types.ModuleType("usermod")
    exec("def act(x):\n    return x + 1\n", mod.__dict__)
    ns: dict = {"mod": mod}
    exec("def f(x):\n    return mod.act(x) * 2\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x()), cf(_x())]
    mod.act = lambda x: x - 1
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def user_module_constant_patched(w: D.World) -> object:
    mod = types.ModuleType("usermod2")
    mod.K = 2.0
    ns: dict = {"mod": mod}
    exec("def f(x):\n    return x * mod.K\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x()), cf(_x())]
    mod.K = 3.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def math_function_patched(w: D.World) -> object:
    mod = types.ModuleType("fake_math")
    mod.sqrt = lambda v: v**0.5
    ns: dict = {"m": mod}
    exec("def f(x):\n    return x * m.sqrt(4.0)\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x()), cf(_x())]
    mod.sqrt = lambda v: v * 2
    outs += [cf(_x()), cf(_x())]
    return outs


# ------------------------------------------------------------------ builtins shadowed
@case("implicit")
def global_shadows_builtin_len(w: D.World) -> object:
    ns: dict = {}
    exec("def f(x, xs):\n    return x * len(xs)\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x(), [1, 2]), cf(_x(), [1, 2])]
    ns["len"] = lambda xs: 10
    outs += [cf(_x(), [1, 2]), cf(_x(), [1, 2])]
    del ns["len"]
    outs += [cf(_x(), [1, 2]), cf(_x(), [1, 2])]
    return outs


@case("implicit")
def global_shadows_builtin_abs(w: D.World) -> object:
    ns: dict = {}
    exec("def f(x, k):\n    return x * abs(k)\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x(), -2.0), cf(_x(), -2.0)]
    ns["abs"] = lambda k: k
    outs += [cf(_x(), -2.0), cf(_x(), -2.0)]
    return outs


@case("implicit")
def global_shadows_builtin_float_const(w: D.World) -> object:
    ns: dict = {}
    exec("def f(x):\n    return x * float('2.5')\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x()), cf(_x())]
    ns["float"] = lambda s: 4.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def global_shadows_builtin_in_callee(w: D.World) -> object:
    ns: dict = {}
    exec("def g(xs):\n    return len(xs)\n", ns)
    g = ns["g"]

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * g([1, 2, 3])

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    ns["len"] = lambda xs: -1
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def builtins_module_patched(w: D.World) -> object:
    import builtins

    ns: dict = {}
    exec("def f(x, xs):\n    return x * max(xs)\n", ns)
    cf = w.compile(ns["f"])
    outs = [cf(_x(), [1, 3]), cf(_x(), [1, 3])]
    orig = builtins.max
    try:
        builtins.max = min
        outs += [cf(_x(), [1, 3]), cf(_x(), [1, 3])]
    finally:
        builtins.max = orig
    outs += [cf(_x(), [1, 3])]
    return outs


# ------------------------------------------------------------------ functools.partial
@case("implicit", inductor=True)
def partial_args_changed(w: D.World) -> object:
    def g(k: float, x: torch.Tensor) -> torch.Tensor:
        return x * k

    holder = {"p": functools.partial(g, 2.0)}

    def f(x: torch.Tensor) -> torch.Tensor:
        return holder["p"](x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    holder["p"] = functools.partial(g, 3.0)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def partial_func_changed(w: D.World) -> object:
    def g(k: float, x: torch.Tensor) -> torch.Tensor:
        return x * k

    def h(k: float, x: torch.Tensor) -> torch.Tensor:
        return x + k

    holder = {"p": functools.partial(g, 2.0)}

    def f(x: torch.Tensor) -> torch.Tensor:
        return holder["p"](x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    holder["p"] = functools.partial(h, 2.0)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def partial_keywords_mutated(w: D.World) -> object:
    def g(x: torch.Tensor, k: float = 1.0) -> torch.Tensor:
        return x * k

    p = functools.partial(g, k=2.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return p(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    p.keywords["k"] = 5.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def partial_setstate(w: D.World) -> object:
    def g(k: float, x: torch.Tensor) -> torch.Tensor:
        return x * k

    def h(k: float, x: torch.Tensor) -> torch.Tensor:
        return x - k

    p = functools.partial(g, 2.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return p(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    p.__setstate__((h, (4.0,), {}, None))
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def partial_inner_defaults_changed(w: D.World) -> object:
    def g(k: float, x: torch.Tensor, b: float = 1.0) -> torch.Tensor:
        return x * k + b

    p = functools.partial(g, 2.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return p(x)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    g.__defaults__ = (-1.0,)
    outs += [cf(_x()), cf(_x())]
    return outs


# ------------------------------------------------------------------ unchanged: hits
@case("implicit", hits=3)
def defaults_unchanged_hit(w: D.World) -> object:
    def g(x: torch.Tensor, k: float = 2.0, *, b: float = 1.0) -> torch.Tensor:
        return x * k + b

    def f(x: torch.Tensor) -> torch.Tensor:
        return g(x)

    cf = w.compile(f)
    return [cf(_x()) for _ in range(4)]


@case("implicit", hits=3)
def methods_unchanged_hit(w: D.World) -> object:
    class A:
        k = 2.0

        def go(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    a = A()

    def f(x: torch.Tensor) -> torch.Tensor:
        return a.go(x) + F.gelu(x)

    cf = w.compile(f)
    return [cf(_x()) for _ in range(4)]


# ------------------------------------------------------------------ library functions patched


def _functional_case(name: str) -> None:
    def scenario(w: D.World) -> object:
        def f(x: torch.Tensor) -> torch.Tensor:
            return getattr(F, name)(x) + 1

        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        orig = getattr(F, name)
        setattr(F, name, lambda t: t * 0 - 7)
        try:
            outs += [cf(_x()), cf(_x())]
        finally:
            setattr(F, name, orig)
        outs += [cf(_x()), cf(_x())]  # the first record serves again
        return outs

    scenario.__name__ = f"functional_{name}_patched_through_getattr"
    case("implicit", hits=4)(scenario)


for _name in ("gelu", "softplus", "logsigmoid", "silu", "elu", "softsign"):
    _functional_case(_name)


@case("implicit")
def stdlib_math_sqrt_patched(w: D.World) -> object:
    def f(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * math.sqrt(k)

    cf = w.compile(f)
    outs = [cf(_x(), 4.0), cf(_x(), 4.0)]
    orig = math.sqrt
    math.sqrt = lambda v: -v
    try:
        outs += [cf(_x(), 4.0), cf(_x(), 4.0)]
    finally:
        math.sqrt = orig
    return outs


# ------------------------------------------------------------------ super()
@case("implicit")
def super_base_method_replaced(w: D.World) -> object:
    class A:
        def g(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class B(A):
        def g(self, x: torch.Tensor) -> torch.Tensor:
            return super().g(x) * 2

    b = B()
    cf = w.compile(lambda x: b.g(x))
    outs = [cf(_x()), cf(_x())]
    A.g = lambda self, x: x - 100  # type: ignore[method-assign]
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def super_module_forward_replaced(w: D.World) -> object:
    class Base(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.relu()

    class Child(Base):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) + 1

    cm = w.compile(Child())
    outs = [cm(_x()), cm(_x())]
    Base.forward = lambda self, x: x.neg()  # type: ignore[method-assign]
    outs += [cm(_x()), cm(_x())]
    return outs


@case("implicit")
def super_class_attr_replaced(w: D.World) -> object:
    class A:
        scale = 2.0

        def g(self, x: torch.Tensor) -> torch.Tensor:
            return x

    class B(A):
        scale = 5.0

        def g(self, x: torch.Tensor) -> torch.Tensor:
            return x * super().scale

    b = B()
    cf = w.compile(lambda x: b.g(x))
    outs = [cf(_x()), cf(_x())]
    A.scale = -3.0
    outs += [cf(_x()), cf(_x())]
    return outs


@case("implicit")
def super_method_added_between(w: D.World) -> object:
    class A:
        def g(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class M(A):
        pass

    class B(M):
        def g(self, x: torch.Tensor) -> torch.Tensor:
            return super().g(x) * 2

    b = B()
    cf = w.compile(lambda x: b.g(x))
    outs = [cf(_x()), cf(_x())]
    M.g = lambda self, x: x * 0  # type: ignore[attr-defined]
    outs += [cf(_x()), cf(_x())]
    return outs


test_eager, test_inductor = D.tests(__name__)
