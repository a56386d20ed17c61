"""The differential harness: a program run eagerly and compiled, in fresh worlds, compared whole.

A **case** is a scenario, ``scenario(w) -> observation``, registered with :func:`case` in a
``test_differs_<category>.py`` file. The scenario builds its own world (fresh functions,
namespaces, modules, objects), compiles what it runs with ``w.compile(fn)`` and calls it several
times, changing inputs and surrounding state between calls; it returns what a user could observe
(outputs, the state it mutated). ``w.attempt(callable)`` runs one call and observes its
exception as eager users see it (type, message, the user frames of its traceback) instead of
ending the world.

:func:`run_case` runs the scenario twice, each in a fresh world (MagPy and TorchDynamo reset,
``torch``/``random``/``numpy`` reseeded): once with ``w.compile`` the identity (eager) and once
with the compiler under test; each run records stdout and every warning (category, message,
file, line). The two are compared exactly: types (``1`` is not ``1.0`` nor ``True``), floats by
bits (signed zeros, NaN), tensors by dtype, shape, stride, device, ``requires_grad``, values
(exact, or close for Inductor), sign bits and ``.grad``; containers and plain objects by
structure. A compiled world must also have hit its cache at least once (``hits=``), so a cache
that never serves a call cannot pass.

Compilers: ``magpy`` (the backend given), ``dynamo`` (``torch.compile`` with the same backend).
``MAGPY_DIFF_COMPILER=dynamo`` runs the suite against TorchDynamo;
``python integration/differential_report.py`` prints the table of both.
"""

from __future__ import annotations

import contextlib
import enum
import io
import math
import os
import random
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import torch

import magpy

__all__ = [
    "CASES",
    "Outcome",
    "Verdict",
    "World",
    "case",
    "compare",
    "compiler_under_test",
    "run_case",
]

_HERE = os.path.dirname(os.path.abspath(__file__))


@attrs.define
class Case:
    name: str
    category: str
    scenario: Callable[[World], Any]
    inductor: bool  # also in the Inductor subset
    hits: int  # the compiled world serves at least this many calls from its cache


CASES: list[Case] = []


def case(
    category: str, *, inductor: bool = False, hits: int = 1
) -> Callable[[Callable[[World], Any]], Callable[[World], Any]]:
    """Register ``scenario`` as a differential case of ``category``."""

    def register(scenario: Callable[[World], Any]) -> Callable[[World], Any]:
        if any(c.name == scenario.__name__ for c in CASES):
            raise ValueError(f"two differential cases are named {scenario.__name__!r}")
        CASES.append(Case(scenario.__name__, category, scenario, inductor, hits))
        return scenario

    return register


@attrs.frozen
class Raised:
    """An exception as eager users see it: type, message, and the user lines it came from."""

    type: str
    message: str
    frames: tuple[str, ...]


def _raised(exc: BaseException) -> Raised:
    frames = tuple(
        f"{os.path.basename(f.filename)}:{f.name}"
        for f in traceback.extract_tb(exc.__traceback__)
        if f.filename.startswith(_HERE) and os.path.basename(f.filename) != "differential.py"
    )
    return Raised(type(exc).__qualname__, str(exc), frames)


class World:
    """What a scenario runs in: ``compile`` (eager: the identity) and ``attempt``."""

    def __init__(self, compiler: str, backend: str) -> None:
        self.compiler = compiler
        self.backend = backend
        self.compiled: list[Any] = []

    def compile(self, fn: Any, **options: Any) -> Any:
        if self.compiler == "eager":
            return fn
        if self.compiler == "dynamo":
            out = torch.compile(fn, backend=self.backend, **options)
        else:
            out = magpy.compile(fn, backend=self.backend, **options)
        self.compiled.append(out)
        return out

    def attempt(self, call: Callable[[], Any]) -> Any:
        """``call()``'s value, or its exception as a :class:`Raised`."""
        try:
            return call()
        except Exception as exc:
            return _raised(exc)

    def hits(self) -> int | None:
        if self.compiler != "magpy":
            return None
        return sum(magpy.stats(c).hits for c in self.compiled)


@attrs.define
class Outcome:
    value: Any = None
    raised: Raised | None = None
    stdout: str = ""
    warnings: list[tuple[str, str, str, int]] = attrs.field(factory=list)
    hits: int | None = None


def _fresh() -> None:
    magpy.reset()
    torch._dynamo.reset()
    torch.manual_seed(0)
    random.seed(0)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(0)


def run_world(c: Case, compiler: str, backend: str) -> Outcome:
    """One run of ``c``'s scenario in a fresh world."""
    _fresh()
    w = World(compiler, backend)
    out = Outcome()
    buf = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(buf):
        warnings.simplefilter("always")
        try:
            out.value = c.scenario(w)
        except Exception as exc:
            out.raised = _raised(exc)
    out.stdout = buf.getvalue()
    out.warnings = [
        (w_.category.__name__, str(w_.message), os.path.basename(w_.filename), w_.lineno)
        for w_ in caught
        if not issubclass(w_.category, magpy.MagPyWarning)
    ]
    out.hits = w.hits()
    _fresh()
    return out


class Verdict(enum.Enum):
    SAME = "same"
    WRONG_VALUE = "silent wrong value"
    WRONG_EXCEPTION = "wrong exception"
    FRAME_ONLY = "frame-only difference"
    CRASH = "crash"
    NO_HIT = "no cache hit"


def compiler_under_test() -> str:
    return os.environ.get("MAGPY_DIFF_COMPILER", "magpy")


def run_case(c: Case, *, backend: str = "eager", compiler: str | None = None) -> list[str]:
    """Differences between eager and compiled runs of ``c`` (empty: the same)."""
    return classify(c, backend=backend, compiler=compiler)[1]


def classify(
    c: Case, *, backend: str = "eager", compiler: str | None = None
) -> tuple[Verdict, list[str]]:
    compiler = compiler or compiler_under_test()
    want = run_world(c, "eager", backend)
    try:
        got = run_world(c, compiler, backend)
    except BaseException as exc:  # the harness itself broke: a crash
        return Verdict.CRASH, [f"crash: {exc!r}"]
    rtol = 1e-4 if backend != "eager" else 0.0
    diffs: list[str] = []
    if (got.raised is None) != (want.raised is None) or (
        got.raised is not None and want.raised is not None and got.raised != want.raised
    ):
        kind = Verdict.WRONG_EXCEPTION
        if want.raised is None:
            kind = Verdict.CRASH
        return kind, [f"raised {got.raised} where eager raised {want.raised}"]
    compare(got.value, want.value, "out", diffs, rtol=rtol)
    if got.stdout != want.stdout:
        diffs.append(f"stdout {got.stdout!r} != {want.stdout!r}")
    if diffs:
        return Verdict.WRONG_VALUE, diffs
    if [w[:2] for w in got.warnings] != [w[:2] for w in want.warnings]:
        return Verdict.WRONG_VALUE, [f"warnings {got.warnings} != {want.warnings}"]
    if got.warnings != want.warnings:
        return Verdict.FRAME_ONLY, [f"warning lines {got.warnings} != {want.warnings}"]
    if got.hits is not None and got.hits < c.hits:
        return Verdict.NO_HIT, [f"{got.hits} cache hits, expected at least {c.hits}"]
    return Verdict.SAME, []


def tests(module: str) -> tuple[Any, Any]:
    """``test_eager, test_inductor``: pytest tests of the cases registered by ``module``.

    ``test_eager`` runs every case with ``backend="eager"``; ``test_inductor`` the cases marked
    ``inductor=True`` with Inductor (the first two of a file in the default run, the
    rest ``slow``-marked).
    """
    import pytest  # the harness is also imported by the report script, without pytest

    mine = [c for c in CASES if c.scenario.__module__ == module]
    inductor = [c for c in mine if c.inductor]

    @pytest.mark.parametrize("c", mine, ids=[c.name for c in mine])
    def test_eager(c: Case) -> None:
        verdict, diffs = classify(c, backend="eager")
        assert verdict is Verdict.SAME, f"{verdict.value}: " + "\n".join(diffs)

    params = [
        pytest.param(c, id=c.name, marks=[pytest.mark.inductor] + [pytest.mark.slow] * (i >= 2))
        for i, c in enumerate(inductor)
    ]

    @pytest.mark.parametrize("c", params)
    def test_inductor(c: Case) -> None:
        verdict, diffs = classify(c, backend="inductor")
        assert verdict is Verdict.SAME, f"{verdict.value}: " + "\n".join(diffs)

    return test_eager, test_inductor


# ------------------------------------------------------------------------------ comparison
def _float_same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _tensor(got: torch.Tensor, want: torch.Tensor, path: str, diffs: list[str], rtol: float):
    meta = lambda t: (t.dtype, tuple(t.shape), t.device, t.requires_grad, t.is_leaf, t.layout)  # noqa: E731
    if meta(got) != meta(want):
        diffs.append(f"{path}: tensor meta {meta(got)} != {meta(want)}")
        return
    if want.layout == torch.strided and got.stride() != want.stride():
        diffs.append(f"{path}: stride {got.stride()} != {want.stride()}")
    g, w = got.detach(), want.detach()
    if w.is_floating_point() or w.is_complex():
        if rtol:
            same = torch.allclose(g, w, rtol=rtol, atol=1e-5, equal_nan=True)
        else:
            same = torch.equal(torch.nan_to_num(g, nan=7.25), torch.nan_to_num(w, nan=7.25)) and (
                torch.equal(g.isnan(), w.isnan())
            )
        if same and w.is_floating_point() and not rtol:
            same = torch.equal(torch.signbit(g), torch.signbit(w))
    else:
        same = torch.equal(g, w)
    if not same:
        diffs.append(f"{path}: values differ\n{g}\n!=\n{w}")
    if not (want.is_leaf or want.retains_grad):
        return  # (``.grad`` of a non-leaf warns and is None)
    if (got.grad is None) != (want.grad is None):
        diffs.append(f"{path}.grad: {got.grad is None} vs {want.grad is None}")
    elif want.grad is not None:
        _tensor(got.grad, want.grad, f"{path}.grad", diffs, rtol)


def compare(got: Any, want: Any, path: str, diffs: list[str], *, rtol: float = 0.0) -> None:
    """Append to ``diffs`` every way ``got`` differs from ``want`` (types exactly)."""
    if type(got) is not type(want):
        diffs.append(f"{path}: type {type(got).__qualname__} != {type(want).__qualname__}")
        return
    if isinstance(want, torch.Tensor):
        _tensor(got, want, path, diffs, rtol)
    elif isinstance(want, float):
        if not (_float_same(got, want) or (rtol and math.isclose(got, want, rel_tol=rtol))):
            diffs.append(f"{path}: {got!r} != {want!r}")
    elif isinstance(want, complex):
        if not (_float_same(got.real, want.real) and _float_same(got.imag, want.imag)):
            diffs.append(f"{path}: {got!r} != {want!r}")
    elif isinstance(want, dict):
        if list(got) != list(want):
            diffs.append(f"{path}: keys {list(got)} != {list(want)}")
            return
        for k in want:
            g, w = dict.__getitem__(got, k), dict.__getitem__(want, k)
            compare(g, w, f"{path}[{k!r}]", diffs, rtol=rtol)
    elif isinstance(want, list | tuple):
        if len(got) != len(want):
            diffs.append(f"{path}: len {len(got)} != {len(want)}")
            return
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            compare(g, w, f"{path}[{i}]", diffs, rtol=rtol)
    elif isinstance(want, torch.nn.Module):
        compare(
            dict(got.state_dict(keep_vars=True)),
            dict(want.state_dict(keep_vars=True)),
            f"{path}.state_dict()",
            diffs,
            rtol=rtol,
        )
    elif isinstance(want, int | str | bytes | bool | type(None) | Raised | range | slice):
        if got != want:
            diffs.append(f"{path}: {got!r} != {want!r}")
    elif hasattr(want, "__dict__") and not isinstance(want, type):
        compare(dict(vars(got)), dict(vars(want)), f"vars({path})", diffs, rtol=rtol)
    elif got != want:
        diffs.append(f"{path}: {got!r} != {want!r}")
