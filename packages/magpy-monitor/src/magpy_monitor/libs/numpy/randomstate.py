"""numpy's random generators: ``np.random.*`` (the global ``RandomState``), ``RandomState``
and ``Generator`` objects from outside, as draws the mock makes again (``libs.stdlib.draws``).

What a draw returns is a constant of the record: a number, or an array made during the run
(``ndarrays``: numpy over it runs natively, ``torch.from_numpy`` of it is a constant tensor of
the graph), checked bit for bit against the same draw on every later run. An argument may be an
array the run made from guarded values (``np.random.choice(a, p=weights)``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ...core.frame import FrameMonitor
from ...core.values import Val
from ..stdlib.draws import SEED_FUNCTIONS, GeneratorKind, add_generator, drawn_float
from .ndarrays import _accept_one, _result
from .tensorarrays import fed_array

__all__: list[str] = []

try:
    np: Any = importlib.import_module("numpy")
except ImportError:  # numpy is optional
    np = None

_COMMON = (
    "random uniform normal standard_normal binomial poisson choice permutation beta gamma "
    "exponential laplace lognormal geometric multinomial standard_exponential standard_gamma "
    "standard_cauchy standard_t chisquare dirichlet gumbel logistic multivariate_normal "
    "negative_binomial pareto power rayleigh triangular vonmises wald weibull zipf"
)
_STATE_METHODS = frozenset(
    (_COMMON + " rand randn randint random_integers random_sample ranf sample seed").split()
)
_GENERATOR_METHODS = frozenset((_COMMON + " integers").split())


def _result_of(m: FrameMonitor, obj: Any) -> Val:
    return _result(m, obj, [])


def _accept(m: FrameMonitor, v: Val) -> Any:
    _accept_one(m, v, "a random draw")  # (a break for arrays from outside, tensors...)
    return v.obj


_MAX_DRAWN = 1 << 16  # (elements of a continuous draw fed to the graph on every call)


def _drawn(m: FrameMonitor, out: Any) -> tuple[Val, Callable[[Any], bool]] | None:
    """A float array drawn (``np.random.normal(size=s)``): an input of the graph rather than a
    constant. The record holds a tensor of its dtype and shape (``holder``, a graph input by a
    constant path); the mock's draw on every call writes what it drew into it before the graph
    runs, so the graph computes with this call's values, as eager does. The array's shadow
    holds a copy of the holder's values in the graph (``TensorArray``): numpy arithmetic over it
    that ``tensorarrays`` records and ``torch.from_numpy`` of it are graph operations; any other
    use (a branch on it, its values read into Python, returning it) is a break there. A
    Python float (``np.random.rand()``, no size) is ``drawn_float``."""
    if type(out) is float:
        return drawn_float(m, out)
    if not (
        type(out) is np.ndarray
        and out.dtype in (np.float32, np.float64)
        and out.ndim > 0
        and out.size <= _MAX_DRAWN
        and out.flags.c_contiguous
    ):
        return None
    return fed_array(m.cap, out)


def _register() -> None:
    if np is None:
        return
    rs = np.random.RandomState
    legacy = GeneratorKind(_STATE_METHODS, rs.get_state, rs.set_state, _result_of, _accept, _drawn)
    add_generator(rs, legacy)
    seed, glob = np.random.seed, getattr(np.random.mtrand, "_rand", None)
    if type(glob) is rs and getattr(seed, "__self__", None) is not glob:
        # ``np.random.seed`` is a function of its own (it reseeds the global RandomState)
        SEED_FUNCTIONS[id(seed)] = (seed, glob, legacy, lambda m: None)

    def state(g: Any) -> Any:
        return g.bit_generator.state

    def restore(g: Any, s: Any) -> None:
        g.bit_generator.state = s

    add_generator(
        np.random.Generator,
        GeneratorKind(_GENERATOR_METHODS, state, restore, _result_of, _accept, _drawn),
    )


_register()
