"""Never differs from eager: library state is state (issue 35, classes 1 and 2).

What a program reads from torch's or the standard library's modules changes between calls:
backend flags (``torch.backends.cudnn.benchmark``), a logger's level, ``warnings.filters``, a
class replaced on ``torch.nn``, a method patched onto a library class (PEFT- and Liger-style).
Each read is guarded where it lives. And a setter of torch's global state called *inside* the
program (``torch.set_num_threads``, the flags' setters) is an effect that runs on every call,
never a graph node a backend may drop. Every scenario puts the state back as it found it.
"""

from __future__ import annotations

import logging
import warnings

import _integration_differential as D
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

case = D.case


def _x() -> torch.Tensor:
    return torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5


# ------------------------------------------------------------------ reads that change
@case("library state", inductor=True)
def cudnn_benchmark_read_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (2.0 if torch.backends.cudnn.benchmark else 3.0)

    was = torch.backends.cudnn.benchmark
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        torch.backends.cudnn.benchmark = not was
        outs += [cf(_x()), cf(_x())]
    finally:
        torch.backends.cudnn.benchmark = was
    return outs


@case("library state")
def cudnn_deterministic_read_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + (1.0 if torch.backends.cudnn.deterministic else -1.0)

    was = torch.backends.cudnn.deterministic
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        torch.backends.cudnn.deterministic = not was
        outs += [cf(_x()), cf(_x())]
    finally:
        torch.backends.cudnn.deterministic = was
    return outs


@case("library state")
def mkldnn_enabled_read_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (5.0 if torch.backends.mkldnn.enabled else 7.0)

    was = torch.backends.mkldnn.enabled
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        torch.backends.mkldnn.enabled = not was
        outs += [cf(_x()), cf(_x())]
    finally:
        torch.backends.mkldnn.enabled = was
    return outs


@case("library state")
def matmul_tf32_read_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (2.0 if torch.backends.cuda.matmul.allow_tf32 else 4.0)

    was = torch.backends.cuda.matmul.allow_tf32
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        torch.backends.cuda.matmul.allow_tf32 = not was
        outs += [cf(_x()), cf(_x())]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was
    return outs


@case("library state")
def matmul_precision_read_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (1.0 if torch.get_float32_matmul_precision() == "highest" else 9.0)

    was = torch.get_float32_matmul_precision()
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        torch.set_float32_matmul_precision("medium" if was == "highest" else "highest")
        outs += [cf(_x()), cf(_x())]
    finally:
        torch.set_float32_matmul_precision(was)
    return outs


_LOG = logging.getLogger("magpy.tests.library_state")


@case("library state")
def logger_level_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        if _LOG.isEnabledFor(logging.DEBUG):
            return x * 2
        return x * 3

    was = _LOG.level
    try:
        _LOG.setLevel(logging.WARNING)
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        _LOG.setLevel(logging.DEBUG)
        outs += [cf(_x()), cf(_x())]
    finally:
        _LOG.setLevel(was)
    return outs


@case("library state")
def logging_disable_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (2 if _LOG.isEnabledFor(logging.ERROR) else 3)

    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        logging.disable(logging.CRITICAL)
        outs += [cf(_x()), cf(_x())]
    finally:
        logging.disable(logging.NOTSET)
    return outs


@case("library state")
def warnings_filters_read_changes(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * len(warnings.filters)

    with warnings.catch_warnings():
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        warnings.filterwarnings("ignore", message="magpy-library-state")
        outs += [cf(_x()), cf(_x())]
    return outs


@case("library state", inductor=True)
def nn_class_replaced(w: D.World) -> object:
    class Doubled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    def f(x: torch.Tensor) -> torch.Tensor:
        return nn.ReLU()(x) + 1

    was = nn.ReLU
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        nn.ReLU = Doubled  # type: ignore[misc]
        outs += [cf(_x()), cf(_x())]
    finally:
        nn.ReLU = was  # type: ignore[misc]
    return outs


@case("library state")
def functional_replaced_by_a_class(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.relu(x) * 2

    class Leaky:
        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return F.leaky_relu(x, 0.5)

    was = F.relu
    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        F.relu = Leaky()  # type: ignore[assignment]
        outs += [cf(_x()), cf(_x())]
    finally:
        F.relu = was
    return outs


@case("library state", inductor=True)
def library_forward_patched(w: D.World) -> object:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))

    def patched(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) * 0.5

    was = nn.Linear.forward
    try:
        cm = w.compile(model)
        with torch.no_grad():
            outs = [cm(_x()), cm(_x())]
            nn.Linear.forward = patched  # type: ignore[method-assign]
            outs += [cm(_x()), cm(_x())]
    finally:
        nn.Linear.forward = was  # type: ignore[method-assign]
    return outs


@case("library state")
def library_method_patched_on_a_base(w: D.World) -> object:
    torch.manual_seed(0)
    norm = nn.LayerNorm(3)

    def extra_repr(self: nn.Module) -> str:
        return "patched"

    def f(x: torch.Tensor) -> object:
        return norm(x), norm.extra_repr()

    was = nn.LayerNorm.extra_repr
    try:
        cf = w.compile(f)
        with torch.no_grad():
            outs = [cf(_x()), cf(_x())]
            nn.LayerNorm.extra_repr = extra_repr  # type: ignore[method-assign]
            outs += [cf(_x()), cf(_x())]
    finally:
        nn.LayerNorm.extra_repr = was  # type: ignore[method-assign]
    return outs


@case("library state")
def parametrize_cached_switched(w: D.World) -> object:
    calls: list[int] = []

    class Scaled(nn.Module):
        def forward(self, weight: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return weight * 2

    torch.manual_seed(0)
    layer = nn.Linear(3, 3)
    parametrize.register_parametrization(layer, "weight", Scaled())

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, layer.weight) + F.linear(x, layer.weight)

    cf = w.compile(f)
    with torch.no_grad():
        outs = [cf(_x()), cf(_x())]
        with parametrize.cached():
            outs += [cf(_x()), cf(_x())]
        outs += [cf(_x())]
    return outs, len(calls)


# ------------------------------------------------------------------ setters inside the program
@case("library state", inductor=True)
def set_num_threads_inside(w: D.World) -> object:
    def f(x: torch.Tensor, k: int) -> torch.Tensor:
        torch.set_num_threads(k)
        return x + 1

    was = torch.get_num_threads()
    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.set_num_threads(2)
            cf(_x(), 1)
            seen.append(torch.get_num_threads())
    finally:
        torch.set_num_threads(was)
    return seen


@case("library state", inductor=True)
def set_default_dtype_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.set_default_dtype(torch.float64)
        return torch.ones(3) + x.sum()

    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.set_default_dtype(torch.float32)
            out = cf(_x())
            seen.append((out.dtype, torch.get_default_dtype()))
    finally:
        torch.set_default_dtype(torch.float32)
    return seen


@case("library state")
def deterministic_algorithms_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.use_deterministic_algorithms(True, warn_only=True)
        return x * 2

    was = torch.are_deterministic_algorithms_enabled()
    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.use_deterministic_algorithms(False)
            cf(_x())
            seen.append(torch.are_deterministic_algorithms_enabled())
    finally:
        torch.use_deterministic_algorithms(was)
    return seen


@case("library state")
def matmul_precision_set_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.set_float32_matmul_precision("high")
        return x @ x.T

    was = torch.get_float32_matmul_precision()
    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.set_float32_matmul_precision("highest")
            cf(_x())
            seen.append(torch.get_float32_matmul_precision())
    finally:
        torch.set_float32_matmul_precision(was)
    return seen


@case("library state")
def cudnn_flag_stored_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.backends.cudnn.benchmark = True
        return x - 1

    was = torch.backends.cudnn.benchmark
    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.backends.cudnn.benchmark = False
            cf(_x())
            seen.append(torch.backends.cudnn.benchmark)
    finally:
        torch.backends.cudnn.benchmark = was
    return seen


@case("library state")
def flush_denormal_set_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.set_flush_denormal(True)
        return x * 1e-39

    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.set_flush_denormal(False)
            out = cf(_x())
            seen.append((out, torch.tensor([1e-39]) * 1))
    finally:
        torch.set_flush_denormal(False)
    return seen


@case("library state")
def mkldnn_flag_stored_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.backends.mkldnn.enabled = False
        return x.abs()

    was = torch.backends.mkldnn.enabled
    seen = []
    try:
        cf = w.compile(f)
        for _ in range(4):
            torch.backends.mkldnn.enabled = True
            cf(_x())
            seen.append(torch.backends.mkldnn.enabled)
    finally:
        torch.backends.mkldnn.enabled = was
    return seen


test_eager, test_inductor = D.tests(__name__)
