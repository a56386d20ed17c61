"""Never differs from eager: native code that calls back into Python (issue 35, class 3).

``re.sub`` with a replacement function, ``inspect.signature`` (which reads ``__defaults__`` and
``__signature__``): each runs the program's Python from native code, or reads the program's
objects; what it read is guarded, or it is a break. (Constructors that run the program's
Python, a module's ``__init__`` or a dataclass's ``__post_init__``: ``test_differs_constructors``.)
"""

from __future__ import annotations

import inspect
import re

import _integration_differential as D
import torch

case = D.case


def _x() -> torch.Tensor:
    return torch.arange(4, dtype=torch.float32) - 1.5


_SUFFIX = {"v": "a"}


@case("callbacks", inductor=True)
def re_sub_with_a_function_reading_state(w: D.World) -> object:
    def f(x: torch.Tensor) -> object:
        name = re.sub(r"[0-9]", lambda mt: _SUFFIX["v"], "layer1")
        return x * len(name), name

    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        _SUFFIX["v"] = "bbb"
        outs += [cf(_x()), cf(_x())]
    finally:
        _SUFFIX["v"] = "a"
    return outs


@case("callbacks")
def signature_reads_defaults(w: D.World) -> object:
    def target(a: int, b: int = 2) -> int:
        return a + b

    def f(x: torch.Tensor) -> torch.Tensor:
        default = inspect.signature(target).parameters["b"].default
        return x * default

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    target.__defaults__ = (5,)
    outs += [cf(_x()), cf(_x())]
    return outs


test_eager, test_inductor = D.tests(__name__)
