"""Helpers for the cross-package tests: compare compiled against eager, count user code.

``conftest.py`` loads this file under the module name ``_integration_helpers`` (pytest runs in
importlib mode, so ``integration/`` is not on ``sys.path``, and a plain ``helpers`` could be
shadowed by another package's file of the same name). Tests import it as::

    import _integration_helpers as H

The main entry point is :func:`assert_compiles_like_eager`, also exposed as the ``check`` fixture.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import importlib.util
import os
import subprocess
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import magpy

__all__ = [
    "CONFORMANCE_DIR",
    "Inputs",
    "ModelCounts",
    "UserCodeCounter",
    "alias_signature",
    "assert_compiles_like_eager",
    "assert_model_counts",
    "assert_same",
    "count_user_code",
    "load_programs",
    "randn_inputs",
    "user_code_files",
]

# (args, kwargs), as returned by make_inputs(i); the convention of the conformance programs.
Inputs = tuple[list[Any] | tuple[Any, ...], dict[str, Any]]

_REPO = Path(__file__).resolve().parents[1]
# The shared folder lives next to the repository root (``../shared``); MAGPY_CONFORMANCE_DIR
# points elsewhere.
CONFORMANCE_DIR = Path(
    os.environ.get("MAGPY_CONFORMANCE_DIR", _REPO.parent / "shared" / "conformance")
)
_PROGRAMS = "_magpy_conformance_programs"


def load_programs() -> types.ModuleType | None:
    """The conformance ``programs`` module, or None when the shared folder is absent."""
    if _PROGRAMS in sys.modules:
        return sys.modules[_PROGRAMS]
    path = CONFORMANCE_DIR / "programs.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(_PROGRAMS, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PROGRAMS] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_PROGRAMS]
        raise
    return module


def randn_inputs(
    *shapes: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0
) -> Callable[[int], Inputs]:
    """``make_inputs(i)``: fresh random tensors of ``shapes`` (different for every ``i``)."""

    def make(i: int) -> Inputs:
        g = torch.Generator().manual_seed(seed + 7919 * i)
        return [torch.randn(*s, generator=g, dtype=dtype) for s in shapes], {}

    return make


# ------------------------------------------------------------------------------ comparisons
def assert_same(
    got: Any, want: Any, path: str = "out", *, rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    """Assert ``got`` equals ``want``: tensors by meta and ``allclose``, containers by structure."""
    assert type(got) is type(want), f"{path}: type {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device), (
            f"{path}: tensor meta {got.shape}/{got.dtype}/{got.device} != "
            f"{want.shape}/{want.dtype}/{want.device}"
        )
        assert got.requires_grad == want.requires_grad, f"{path}: requires_grad differs"
        if want.dtype == torch.bool or not (want.is_floating_point() or want.is_complex()):
            assert torch.equal(got, want), f"{path}: values differ"
        else:
            close = torch.allclose(
                got.detach(), want.detach(), rtol=rtol, atol=atol, equal_nan=True
            )
            assert close, f"{path}: values differ (max abs {float((got - want).abs().max()):.3g})"
    elif dataclasses.is_dataclass(want) and not isinstance(want, type):
        for f in dataclasses.fields(want):
            assert_same(
                getattr(got, f.name),
                getattr(want, f.name),
                f"{path}.{f.name}",
                rtol=rtol,
                atol=atol,
            )
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            g, w = dict.__getitem__(got, k), dict.__getitem__(want, k)  # no user __getitem__
            assert_same(g, w, f"{path}[{k!r}]", rtol=rtol, atol=atol)
        if type(want) is not dict and hasattr(want, "__dict__"):
            assert_same(vars(got), vars(want), f"vars({path})", rtol=rtol, atol=atol)
    elif _plain_instance(want):  # a user object compared by identity: compare its state
        assert_same(vars(got), vars(want), f"vars({path})", rtol=rtol, atol=atol)
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), f"{path}: len {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]", rtol=rtol, atol=atol)
    elif isinstance(want, float):
        assert abs(got - want) <= 1e-6 * max(1.0, abs(want)), f"{path}: {got} != {want}"
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def _plain_instance(obj: Any) -> bool:
    """An instance of a user class that compares by identity and keeps its state in
    ``__dict__`` (not a module, function, class or enum member)."""
    cls = type(obj)
    return (
        (cls.__eq__ is object.__eq__ or cls is types.SimpleNamespace)
        and isinstance(getattr(obj, "__dict__", None), dict)
        and not isinstance(obj, type | types.FunctionType | types.ModuleType | torch.nn.Module)
        and not isinstance(obj, enum.Enum)
    )


def _tensor_leaves(obj: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensor_leaves(v, out)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _tensor_leaves(v, out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _tensor_leaves(getattr(obj, f.name), out)
    return out


def alias_signature(out: Any, inputs: Any) -> list[str]:
    """Which output tensors are input tensors (``in<k>``) or each other (same ``t<k>``)."""
    ins = {id(t): f"in{i}" for i, t in enumerate(_tensor_leaves(inputs, []))}
    seen: dict[int, str] = {}
    return [
        ins.get(id(t)) or seen.setdefault(id(t), f"t{len(seen)}") for t in _tensor_leaves(out, [])
    ]


def _module_state(m: torch.nn.Module) -> dict[str, Any]:
    """Parameters, buffers and the plain Python attributes of every submodule (incl. training)."""
    plain = (int, float, str, bool, tuple, type(None))
    state: dict[str, Any] = {f"sd:{k}": v for k, v in m.state_dict(keep_vars=True).items()}
    for name, sub in m.named_modules():
        for k, v in sorted(vars(sub).items()):
            if not k.startswith("_") and isinstance(v, plain):
                state[f"attr:{name or '<root>'}.{k}"] = v
    return state


# ------------------------------------------------------------------------------ user code counter
def user_code_files(target: Any) -> set[str]:
    """Source files of the user code behind ``target`` (a function, a module, or compiled one).

    For a module: every submodule class's ``forward`` that is not torch's own.
    """
    target = getattr(target, "_magpy_original", target)
    torch_dir = os.path.dirname(torch.__file__)
    codes: list[types.CodeType] = []
    if isinstance(target, torch.nn.Module):
        for sub in target.modules():
            fwd = getattr(type(sub).forward, "__code__", None)
            if fwd is not None:
                codes.append(fwd)
    else:
        fn = getattr(target, "__func__", target)
        code = getattr(fn, "__code__", None)
        if code is None:
            code = type(fn).__call__.__code__
        codes.append(code)
    return {c.co_filename for c in codes if not c.co_filename.startswith(torch_dir)}


@dataclasses.dataclass
class UserCodeCounter:
    """What :func:`count_user_code` saw: frames started and lines run in the user's files."""

    files: set[str]
    calls: list[str] = dataclasses.field(default_factory=list)
    lines: int = 0
    tracer_survived: bool = True

    @property
    def events(self) -> int:
        return len(self.calls) + self.lines


@contextlib.contextmanager
def count_user_code(files: set[str]) -> Iterator[UserCodeCounter]:
    """Count, with ``sys.settrace``, frames and lines of code from ``files`` run in the block.

    The previous trace function is restored afterwards. ``tracer_survived`` is False when
    something replaced the counter during the block without restoring it.
    """
    counter = UserCodeCounter(set(files))

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            counter.lines += 1
        return local

    def global_(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_filename in counter.files:
            counter.calls.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}")
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(global_)
    try:
        yield counter
    finally:
        counter.tracer_survived = sys.gettrace() is global_
        sys.settrace(previous)


# ------------------------------------------------------------------------------ library models
@dataclasses.dataclass(frozen=True)
class ModelCounts:
    """explain's (graphs, breaks) and stats' (records, hits, breaks, fallbacks) after the calls
    of :func:`assert_model_counts`."""

    graphs: int = 1
    breaks: int = 0
    records: int = 1
    hits: int = 2
    stat_breaks: int = 0
    fallbacks: int = 0


def assert_model_counts(
    name: str,
    model: torch.nn.Module,
    make_inputs: Callable[[int, int], dict[str, Any]],
    expect: ModelCounts,
    compare: Callable[[Any, Any, str], None],
    *,
    batch: int,
    calls: int,
) -> None:
    """A library model (transformers, MONAI, diffusers) through MagPy's eager backend.

    ``magpy.explain`` on the inputs of seed 0 gives ``expect``'s graphs and breaks; then
    ``calls`` calls on fresh inputs (``make_inputs(batch, seed)``) equal an untouched copy of
    the model (``compare(got, want, where)``), and the compiled model's stats are ``expect``'s.
    The global RNG is seeded before each call on both sides (Reformer's LSH attention draws
    random rotations).
    """
    reference = copy.deepcopy(model)
    with torch.no_grad():
        explained = magpy.explain(model)(**make_inputs(batch, 0))
        compiled = magpy.compile(model, backend="eager")
        for i in range(calls):
            kwargs = make_inputs(batch, 1 + i)
            torch.manual_seed(i)
            got = compiled(**kwargs)
            torch.manual_seed(i)
            compare(got, reference(**kwargs), f"call {i}")
    assert (explained.graph_count, explained.graph_break_count) == (
        expect.graphs,
        expect.breaks,
    ), f"{name}: explain says {explained}"
    st = magpy.stats(compiled)
    got_stats = (st.records, st.hits, st.breaks, st.fallbacks)
    want = (expect.records, expect.hits, expect.stat_breaks, expect.fallbacks)
    assert got_stats == want, (
        f"{name}: (records, hits, breaks, fallbacks) {got_stats} != {want}: if MagPy now "
        f"captures more of it, update EXPECT"
    )


# ------------------------------------------------------------------------------ the main check
def assert_compiles_like_eager(
    fn_or_module: Any,
    make_inputs: Callable[[int], Inputs],
    calls: int = 4,
    backend: Any = "eager",
    expect_records: int = 1,
    *,
    expect_hits: int | None = None,
    check_hits_run_no_user_code: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **compile_kwargs: Any,
) -> Any:
    """Run ``fn_or_module`` eagerly and compiled on ``calls`` fresh inputs and compare everything.

    ``make_inputs(i) -> (args, kwargs)``. A module is deep-copied for the eager side, so state it
    changes (BatchNorm running stats, counters) is compared after every call, as are the inputs
    (in-place updates), the output's aliasing of inputs, and the exception if one is raised.
    Both sides get the same torch seed before each call. At the end the compiled callable must
    have exactly ``expect_records`` records, ``expect_hits`` hits (default ``calls -
    expect_records``), no break and no eager fallback, so a cache that never hits cannot pass.

    With ``check_hits_run_no_user_code`` every call is traced; a call that was a cache hit must
    not start a frame or run a line of the user's code (the first eager call checks the
    counter does see the user's code). Returns the compiled callable.
    """
    is_module = isinstance(fn_or_module, torch.nn.Module)
    reference = copy.deepcopy(fn_or_module) if is_module else fn_or_module
    compiled = magpy.compile(fn_or_module, backend=backend, **compile_kwargs)
    files = user_code_files(fn_or_module)
    # Only torch's own modules (e.g. nn.Sequential of torch layers): no user code to watch.
    check_hits_run_no_user_code = check_hits_run_no_user_code and bool(files)
    for i in range(calls):
        args, kwargs = make_inputs(i)
        ref_args, ref_kwargs = copy.deepcopy((args, kwargs))

        torch.manual_seed(1000 + i)
        with count_user_code(files) as eager_seen:
            want, want_exc = _call(reference, ref_args, ref_kwargs)
        if i == 0 and check_hits_run_no_user_code:
            assert eager_seen.events > 0, f"the counter saw no user code in {files}"

        hits_before = magpy.stats(compiled).hits
        torch.manual_seed(1000 + i)
        with count_user_code(files) as seen:
            got, got_exc = _call(compiled, args, kwargs)
        was_hit = magpy.stats(compiled).hits > hits_before
        where = f"call {i}"
        assert seen.tracer_survived, f"{where}: magpy left sys.settrace replaced"
        if was_hit and check_hits_run_no_user_code:
            assert seen.events == 0, (
                f"{where} was a cache hit but ran user code: {seen.calls[:5]} ({seen.lines} lines)"
            )

        assert got_exc == want_exc, f"{where}: exception {got_exc} != eager {want_exc}"
        assert_same(got, want, f"{where}: out", rtol=rtol, atol=atol)
        assert_same(
            (args, kwargs),
            (ref_args, ref_kwargs),
            f"{where}: inputs after the call",
            rtol=rtol,
            atol=atol,
        )
        if got_exc is None:
            assert alias_signature(got, (args, kwargs)) == alias_signature(
                want, (ref_args, ref_kwargs)
            ), f"{where}: output aliasing differs from eager"
        if is_module:
            assert_same(
                _module_state(fn_or_module),
                _module_state(reference),
                f"{where}: module state",
                rtol=rtol,
                atol=atol,
            )

    st = magpy.stats(compiled)
    hits = calls - expect_records if expect_hits is None else expect_hits
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (expect_records, hits, 0, 0), (
        f"expected {expect_records} records, {hits} hits, no break and no fallback; got {st}"
    )
    return compiled


def _call(fn: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, tuple[type, str] | None]:
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # the program's own exception must come through unchanged
        return None, (type(exc), str(exc))


# ---------------------------------------------------------------------- what explain and stats say
def graphs(fn: Any, *args: Any) -> tuple[int, list[str]]:
    """``(graph count, break reasons)`` of one explained call of ``fn(*args)``."""
    ex = magpy.explain(fn)(*args)
    return ex.graph_count, [r.reason for r in ex.break_reasons]


def explain_quietly(fn: Any, *args: Any) -> Any:
    """``magpy.explain(fn)(*args)`` with the program's own warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return magpy.explain(fn)(*args)


def break_text(ex: Any) -> str:
    """The break reasons of an explain output, joined by `` | ``."""
    return " | ".join(r.reason for r in ex.break_reasons)


def counters(compiled: Any) -> tuple[int, int, int, int]:
    """``(records, hits, breaks, fallbacks)`` of a compiled callable."""
    st = magpy.stats(compiled)
    return st.records, st.hits, st.breaks, st.fallbacks


def warnings_seen(log: list[warnings.WarningMessage]) -> list[tuple[Any, ...]]:
    """What the warnings in ``log`` said and where: ``(message, category, file, line)``."""
    return [(str(w.message), w.category, w.filename, w.lineno) for w in log]


def run_module(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m module *args`` from the repository root (the benchmarks and reports under
    ``integration``), its warnings off; asserts it exits 0 and returns what it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def runs_eagerly(expected: bool = True) -> Any:
    """Around the calls of a callable MagPy can record nothing of (a result no mock can hand
    out, a break at the call itself): it says once that it runs eagerly from then on."""
    if not expected:
        return contextlib.nullcontext()
    return pytest.warns(magpy.MagPyWarning, match="runs eagerly from now on")


def scaled_step(
    model: Any, opt: Any, scaler: Any, loss_fn: Callable[..., Any], *, device: str, dtype: Any
) -> Callable[[Any, Any], Any]:
    """A training step with autocast (``device``, ``dtype``) and a ``torch.amp.GradScaler``:
    ``scale(loss).backward()``, ``step``, ``update``, then ``zero_grad``."""

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device, dtype=dtype):
            loss = loss_fn(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    return step
