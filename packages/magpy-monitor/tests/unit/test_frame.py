"""The shadow value stack mirrors the real stack at every opcode event (_frame.py, handlers).

Each corpus program runs under ``magpy_monitor.capture`` with the ``stack_checker`` fixture,
which compares depth and every slot (identity for heap objects, equality for value types) of
each monitored frame's shadow stack with the real stack. Capture must succeed and return the
eager result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import magpy_monitor

# ---------------------------------------------------------------------- corpus programs


def arith_tensors(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x + y) * 2 - x / 3 + (-y) ** 2


def arith_scalars(x: torch.Tensor, n: int, f: float) -> Any:
    return x * (n + 1) - f, n * 4 // 3 % 5, f / 2.0, -n, n << 2


def list_comprehension(x: torch.Tensor) -> list[torch.Tensor]:
    return [x * i for i in range(3)]


def set_and_dict_comprehension(x: torch.Tensor) -> Any:
    return {i % 2 for i in range(5)}, {k: x * k for k in range(2)}


def genexp_into_tuple(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.sum() for t in (x, y))


def genexp_unpacked(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b = (t * 2 for t in (x, y))
    return a + b


def genexp_star_unpacked(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (*(t * 2 for t in (x, y)),)


def closure(x: torch.Tensor) -> torch.Tensor:
    k = 2

    def inner(t: torch.Tensor) -> torch.Tensor:
        return t * k

    return inner(x)


def closure_in_comprehension(x: torch.Tensor) -> list[torch.Tensor]:
    total = x

    def add(t: torch.Tensor) -> torch.Tensor:
        return t + total

    return [add(t) for t in (x, x)]


def nested_calls(x: torch.Tensor) -> torch.Tensor:
    def a(t: torch.Tensor) -> torch.Tensor:
        return b(t) + 1

    def b(t: torch.Tensor) -> torch.Tensor:
        return t.relu()

    return a(x)


def kwargs_call(x: torch.Tensor) -> torch.Tensor:
    def g(a: torch.Tensor, *, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return a * scale + shift

    return g(x, scale=2.0, shift=1.0) + g(x)


def star_args_call(x: torch.Tensor) -> torch.Tensor:
    def g(*args: Any, **kwargs: Any) -> Any:
        return args[0] * kwargs["s"]

    return g(x, s=3)


def double_star_call(x: torch.Tensor) -> torch.Tensor:
    kw = {"s": 2}

    def g(a: torch.Tensor, s: int) -> torch.Tensor:
        return a * s

    return g(x, **kw)


def lambda_with_default(x: torch.Tensor) -> torch.Tensor:
    f = lambda t, k=2: t * k  # noqa: E731
    return f(x) + f(x, k=3)


def enumerate_values(x: torch.Tensor) -> torch.Tensor:
    for i, v in enumerate([1, 2, 3]):
        x = x + i * v
    return x


def enumerate_tensors(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    out = []
    for i, t in enumerate([x, y]):
        out.append(t * i)
    return out


def zip_values(x: torch.Tensor) -> torch.Tensor:
    for a, b in zip([1, 2], [3, 4]):  # noqa: B905 (zip(strict=) is not modelled)
        x = x + a * b
    return x


def zip_tensors(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    acc = x * 0
    for a, b in zip([x, y], [y, x]):  # noqa: B905
        acc = acc + a * b
    return acc


def range_and_while(x: torch.Tensor) -> torch.Tensor:
    for i in range(2, 5):
        x = x + i
    i = 0
    while i < 3:
        x = x * 2
        i += 1
    return x


def fstrings(x: torch.Tensor, n: int, name: str) -> Any:
    return x * n, f"n={n:3d}/{n!r}/{name}", f"{tuple(x.shape)}", name.upper() + "_" + str(n)


def tensor_slicing(x: torch.Tensor) -> Any:
    return x[1:3, ::2], x[0], x[..., -1], x[:, None], x[x.shape[0] - 1]


def builtins_on_values(x: torch.Tensor, d: dict[str, int], lst: list[int]) -> Any:
    attr = "shape"
    return (
        isinstance(x, torch.Tensor),
        getattr(x, attr),
        hasattr(d, "keys"),
        len(lst),
        len(x),
        x.size(0),
        x.dim(),
        type(x) is torch.Tensor,
        callable(d.get),
    )


def shapes_and_views(x: torch.Tensor) -> Any:
    n, c = x.shape
    return x.view(n * c), x.reshape(-1, c), x.new_zeros(x.shape[1:]), x.size()


def tensor_methods(x: torch.Tensor) -> Any:
    return (
        x.sum(dim=0).mean(),
        x.t().contiguous(),
        torch.cat([x, x], dim=1),
        F.softmax(x, dim=-1),
        torch.where(x > 0, x, 0.0),
    )


def inplace_on_new_tensor(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.mul_(2)
    y += 1
    return y


def branches_on_values(x: torch.Tensor, flag: bool, n: int) -> torch.Tensor:
    if flag and n > 2:
        x = x + 1
    elif not flag or n == 0:
        x = x - 1
    return x if n % 2 else -x


def min_max_abs(x: torch.Tensor, a: int, b: int) -> Any:
    return x * max(a, b) + min(a, b), abs(a - b), sum([a, b])


def chained_compare(a: int, b: int) -> bool:
    return 0 < a < b


def nested_unpack(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    (a, b), c = (x, y), x
    return a * b + c


def dict_operations(x: torch.Tensor, d: dict[str, Any]) -> Any:
    return {**d, "z": x}, d.get("a"), d.get("q", 5), list(d.keys()), [v for v in d.values()]


def dict_items_loop(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
    for k, v in d.items():
        x = x * v + len(k)
    return x


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.lin(x))


class ModuleListLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), nn.Tanh(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class ModuleListEnumerate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        return x


class ModuleListIndex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), nn.ReLU()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](self.layers[0](x))


class KwargsModule(nn.Module):
    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return x * scale


class CallsWithKwargs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = KwargsModule()
        self.k = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, scale=3.0) * self.k


class PairedBlocks(nn.Module):
    """``enumerate(list(zip(a, b)))`` yields ``(i, (x, y))``: a nested tuple the monitor built."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ModuleList([Block(), Block()])
        self.b = nn.ModuleList([nn.Tanh(), nn.ReLU()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blocks = list(zip(self.a, self.b))  # noqa: B905  (as diffusers writes it)
        for i, (first, second) in enumerate(blocks):
            x = second(first(x)) + i
        return x


class SlicedModuleList(nn.Module):
    """``zip(self.extra, self.layers[1:])``: a slice of a ModuleList from outside."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block(), nn.ReLU()])
        self.extra = nn.ModuleList([nn.Tanh(), nn.Tanh()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x)
        for e, layer in zip(self.extra, self.layers[1:]):  # noqa: B905  (as diffusers writes it)
            x = layer(e(x))
        return x


class Scaler:
    """A plain object with a Python ``__call__`` (like diffusers' attention processors)."""

    def __call__(self, x: torch.Tensor, *, k: float = 2.0) -> torch.Tensor:
        return x * k


class CallsAnObject(nn.Module):
    """Calls ``self.fn`` (a ``Scaler``) with only the keywords its signature accepts."""

    def __init__(self) -> None:
        super().__init__()
        self.fn = Scaler()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import inspect

        accepted = set(inspect.signature(self.fn.__call__).parameters.keys())
        kwargs = {k: v for k, v in {"k": 3.0, "unused": 1.0}.items() if k in accepted}
        return self.fn(x, **kwargs)


def _x() -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0))


def _y() -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(1))


_ENUMERATE_BUG = (
    "enumerate()/zip() pre-build their (i, item) tuples as shadow values, but the real iterator "
    "yields a different tuple object; FrameMonitor.bind accepts a non-identical object only for "
    "value types, so a tuple holding a tensor/module fails with InternalError at FOR_ITER"
)
_MODULE_INDEX_BUG = (
    "_calls.subscr evaluates `_MODULE_CONTAINERS | torch.nn.ModuleDict | ...` where "
    "_MODULE_CONTAINERS is a tuple: TypeError (InternalError) when indexing an external "
    "ModuleList/Sequential/ModuleDict/ParameterList"
)

# (id, make_callable, make_args)
CORPUS: list[Any] = [
    ("arith_tensors", lambda: arith_tensors, lambda: (_x(), _y())),
    ("arith_scalars", lambda: arith_scalars, lambda: (_x(), 7, 1.5)),
    ("list_comprehension", lambda: list_comprehension, lambda: (_x(),)),
    ("set_and_dict_comprehension", lambda: set_and_dict_comprehension, lambda: (_x(),)),
    ("genexp_into_tuple", lambda: genexp_into_tuple, lambda: (_x(), _y())),
    ("genexp_unpacked", lambda: genexp_unpacked, lambda: (_x(), _y())),
    ("closure", lambda: closure, lambda: (_x(),)),
    ("closure_in_comprehension", lambda: closure_in_comprehension, lambda: (_x(),)),
    ("nested_calls", lambda: nested_calls, lambda: (_x(),)),
    ("kwargs_call", lambda: kwargs_call, lambda: (_x(),)),
    ("star_args_call", lambda: star_args_call, lambda: (_x(),)),
    ("double_star_call", lambda: double_star_call, lambda: (_x(),)),
    ("lambda_with_default", lambda: lambda_with_default, lambda: (_x(),)),
    ("enumerate_values", lambda: enumerate_values, lambda: (_x(),)),
    ("zip_values", lambda: zip_values, lambda: (_x(),)),
    ("range_and_while", lambda: range_and_while, lambda: (_x(),)),
    ("fstrings", lambda: fstrings, lambda: (_x(), 3, "ab")),
    ("tensor_slicing", lambda: tensor_slicing, lambda: (_x(),)),
    ("builtins_on_values", lambda: builtins_on_values, lambda: (_x(), {"a": 1}, [1, 2])),
    ("shapes_and_views", lambda: shapes_and_views, lambda: (_x(),)),
    ("tensor_methods", lambda: tensor_methods, lambda: (_x(),)),
    ("inplace_on_new_tensor", lambda: inplace_on_new_tensor, lambda: (_x(),)),
    ("branches_on_values", lambda: branches_on_values, lambda: (_x(), True, 3)),
    ("min_max_abs", lambda: min_max_abs, lambda: (_x(), 2, 5)),
    ("chained_compare", lambda: chained_compare, lambda: (1, 2)),
    ("nested_unpack", lambda: nested_unpack, lambda: (_x(), _y())),
    ("dict_operations", lambda: dict_operations, lambda: (_x(), {"a": 1, "b": _y()})),
    ("dict_items_loop", lambda: dict_items_loop, lambda: (_x(), {"a": 2, "bb": 3})),
    ("module_call", lambda: Block(), lambda: (_x(),)),
    ("module_list_loop", lambda: ModuleListLoop(), lambda: (_x(),)),
    ("sequential", lambda: nn.Sequential(Block(), nn.ReLU()), lambda: (_x(),)),
    ("module_kwargs_call", lambda: CallsWithKwargs(), lambda: (_x(),)),
    ("enumerate_zipped_pairs", lambda: PairedBlocks(), lambda: (_x(),)),
    ("sliced_module_list", lambda: SlicedModuleList(), lambda: (_x(),)),
    ("callable_object_and_signature", lambda: CallsAnObject(), lambda: (_x(),)),
    pytest.param(
        "enumerate_tensors",
        lambda: enumerate_tensors,
        lambda: (_x(), _y()),
    ),
    pytest.param(
        "zip_tensors",
        lambda: zip_tensors,
        lambda: (_x(), _y()),
    ),
    pytest.param(
        "module_list_enumerate",
        lambda: ModuleListEnumerate(),
        lambda: (_x(),),
    ),
    pytest.param(
        "module_list_index",
        lambda: ModuleListIndex(),
        lambda: (_x(),),
    ),
    pytest.param(
        "genexp_star_unpacked",
        lambda: genexp_star_unpacked,
        lambda: (_x(), _y()),
    ),
]


def _ids(case: Any) -> str:
    values = case.values if hasattr(case, "values") else case
    return str(values[0])


def assert_same(actual: Any, expected: Any) -> None:
    """Structural equality; tensors compared with torch.equal."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected)
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_same(actual[k], expected[k])
    else:
        assert actual == expected


@pytest.mark.parametrize(("name", "make_fn", "make_args"), CORPUS, ids=[_ids(c) for c in CORPUS])
def test_shadow_stack_matches_real_stack(
    name: str,
    make_fn: Callable[[], Any],
    make_args: Callable[[], tuple[Any, ...]],
    stack_checker: Any,
) -> None:
    """Capture succeeds, returns the eager result, and shadow == real stack at every event."""
    torch.manual_seed(0)
    fn = make_fn()
    expected = fn(*make_args())
    result = magpy_monitor.capture(fn, make_args(), {})
    assert stack_checker.mismatches == []
    assert result.failure is None, repr(result.failure)
    assert stack_checker.checks > 0
    assert_same(result.value, expected)


def test_checker_sees_every_frame_of_an_inlined_call(stack_checker: Any) -> None:
    """The comparison runs in callee frames too (closures and module forwards are inlined)."""
    seen: set[str] = set()
    original = stack_checker.check

    def spy(mon: Any) -> None:
        seen.add(mon.code.co_name)
        original(mon)

    stack_checker.check = spy
    result = magpy_monitor.capture(nested_calls, (_x(),), {})
    assert result.failure is None
    assert {"entry", "nested_calls", "a", "b"} <= seen


def test_checker_detects_a_corrupted_shadow_stack(
    stack_checker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that forgets to push makes the comparison (and capture) fail."""
    from magpy_monitor.core.registry import OPCODE_HANDLERS as HANDLERS

    monkeypatch.setitem(HANDLERS, "LOAD_CONST", lambda m, inst: None)
    result = magpy_monitor.capture(lambda x: x * 2, (_x(),), {})
    assert result.failure is not None
    assert stack_checker.mismatches
