"""ParityBench worker: evaluate the test cases of ONE generated file, in its own process.

Started by ``integration/paritybench.py`` as ``python paritybench_worker.py FILE --modes ...``.
It talks to the parent over its original stdout, one JSON object per line (every other output of
the generated code is sent to stderr, which the parent collects to a file)::

    {"event": "file", "n_cases": N, "cases": [...], "stubbed": [...], "import_error": null}
    {"event": "start", "index": I, "phase": "eager" | "magpy" | "dynamo" | ...}
    {"event": "result", "record": {...}}          # one per (case, mode)
    {"event": "end"}

The parent enforces the time limit per phase (it kills this process and starts a new one for the
remaining cases), so nothing here measures time except for the report.

Generated files (``test_<repo>.py``) define modules and a ``TESTCASES`` list of
``(nn_module_class, init_args, forward_args, jit_compiles)`` where ``init_args`` and
``forward_args`` are (usually) ``lambda: ([args...], {kwargs...})``. They import
``_paritybench_helpers`` (replaced here by our own small shim) and many optional packages; the
ones that are not installed are stubbed while, and only while, the generated file is imported.

The module is also imported by the harness tests, which call :func:`evaluate_case` in-process
with a mocked compiler mode.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import random
import re
import sys
import time
import traceback
import types
import unittest
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

SEED = 1337
RTOL = 1e-4
ATOL = 1e-4

__all__ = [
    "MODES",
    "CaseOutcome",
    "Reference",
    "compare",
    "evaluate_case",
    "load_generated",
    "main",
]


# ------------------------------------------------------------------------------------------------
# Protocol
# ------------------------------------------------------------------------------------------------
class _Channel:
    """JSON lines to the parent (or into a list, for the tests)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.events: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any]) -> None:
        if self.stream is None:
            self.events.append(event)
            return
        self.stream.write(json.dumps(event, default=str) + "\n")
        self.stream.flush()


# ------------------------------------------------------------------------------------------------
# Determinism helpers
# ------------------------------------------------------------------------------------------------
def seed_everything(seed: int = SEED) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(Exception):
        import numpy as np

        np.random.seed(seed)


def _resolve_args(spec: Any) -> tuple[list[Any], dict[str, Any]]:
    """``lambda: ([args], {kwargs})`` (or the tuple itself, or a bare list of args)."""
    value = spec() if callable(spec) else copy.deepcopy(spec)
    if (
        isinstance(value, tuple | list)
        and len(value) == 2
        and isinstance(value[0], list | tuple)
        and isinstance(value[1], Mapping)
    ):
        return list(value[0]), dict(value[1])
    if isinstance(value, Mapping):
        return [], dict(value)
    if isinstance(value, list | tuple):
        return list(value), {}
    return [value], {}


def snapshot(value: Any, _depth: int = 0) -> Any:
    """Detached copies of every tensor in a (nested) output, taken right after the call."""
    import torch

    if _depth > 50:
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(snapshot(v, _depth + 1) for v in value))
    if isinstance(value, list | tuple):
        items = [snapshot(v, _depth + 1) for v in value]
        try:
            return type(value)(items)
        except Exception:
            return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        try:
            out = type(value)()
            for k, v in value.items():
                out[k] = snapshot(v, _depth + 1)
            return out
        except Exception:
            return {k: snapshot(v, _depth + 1) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        with contextlib.suppress(Exception):
            return _Snap(
                type(value),
                {
                    f.name: snapshot(getattr(value, f.name), _depth + 1)
                    for f in dataclasses.fields(value)
                },
            )
    if hasattr(value, "__dict__") and not isinstance(
        value, type | types.ModuleType | types.FunctionType | torch.nn.Module
    ):
        with contextlib.suppress(Exception):
            return _Snap(type(value), {k: snapshot(v, _depth + 1) for k, v in vars(value).items()})
    return value


@dataclasses.dataclass
class _Snap:
    """A snapshot of an arbitrary object: its type and its (snapshotted) attributes."""

    cls: type
    attrs: dict[str, Any]


def compare(
    ref: Any, out: Any, rtol: float = RTOL, atol: float = ATOL, path: str = "out", _depth: int = 0
) -> str | None:
    """``None`` when ``out`` matches ``ref`` (nested); else a short description of the first
    difference."""
    import torch

    if _depth > 50:
        return None
    if isinstance(ref, torch.Tensor) or isinstance(out, torch.Tensor):
        if not (isinstance(ref, torch.Tensor) and isinstance(out, torch.Tensor)):
            return f"{path}: type {type(ref).__name__} != {type(out).__name__}"
        if ref.shape != out.shape:
            return f"{path}: shape {tuple(ref.shape)} != {tuple(out.shape)}"
        if ref.dtype != out.dtype:
            return f"{path}: dtype {ref.dtype} != {out.dtype}"
        if ref.is_sparse or out.is_sparse:
            ref, out = ref.to_dense(), out.to_dense()
        if ref.numel() == 0:
            return None
        if ref.dtype.is_floating_point or ref.dtype.is_complex:
            r, o = (
                ref.to(torch.complex128 if ref.dtype.is_complex else torch.float64),
                out.to(torch.complex128 if out.dtype.is_complex else torch.float64),
            )
            if torch.allclose(r, o, rtol=rtol, atol=atol, equal_nan=True):
                return None
            finite = torch.isfinite(r) & torch.isfinite(o)
            diff = (r - o).abs()[finite]
            worst = float(diff.max()) if diff.numel() else float("nan")
            bad = int((~torch.isclose(r, o, rtol=rtol, atol=atol, equal_nan=True)).sum())
            return f"{path}: values differ (max abs diff {worst:.3g}, {bad}/{ref.numel()} elements)"
        if torch.equal(ref, out):
            return None
        bad = int((ref != out).sum())
        return f"{path}: values differ ({bad}/{ref.numel()} elements)"
    if isinstance(ref, _Snap) or isinstance(out, _Snap):
        if not (isinstance(ref, _Snap) and isinstance(out, _Snap)) or ref.cls is not out.cls:
            return f"{path}: type {_tname(ref)} != {_tname(out)}"
        return compare(ref.attrs, out.attrs, rtol, atol, path, _depth + 1)
    if type(ref) is not type(out):
        # int/float/bool mixes are compared by value; a container of another type is a bug.
        numbers = (bool, int, float)
        if not (isinstance(ref, numbers) and isinstance(out, numbers)):
            return f"{path}: type {_tname(ref)} != {_tname(out)}"
    if isinstance(ref, list | tuple):
        if len(ref) != len(out):
            return f"{path}: length {len(ref)} != {len(out)}"
        for i, (a, b) in enumerate(zip(ref, out, strict=True)):
            msg = compare(a, b, rtol, atol, f"{path}[{i}]", _depth + 1)
            if msg:
                return msg
        return None
    if isinstance(ref, dict):
        if set(ref.keys()) != set(out.keys()):
            return f"{path}: keys {sorted(map(str, ref))} != {sorted(map(str, out))}"
        for k in ref:
            msg = compare(ref[k], out[k], rtol, atol, f"{path}[{k!r}]", _depth + 1)
            if msg:
                return msg
        return None
    if isinstance(ref, float) or isinstance(out, float):
        a, b = float(ref), float(out)
        if (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=atol):
            return None
        return f"{path}: {a!r} != {b!r}"
    try:
        equal = ref == out
        if isinstance(equal, bool):
            return None if equal else f"{path}: {_short(ref)} != {_short(out)}"
    except Exception:
        pass
    return None  # not comparable: assume equal


def _tname(x: Any) -> str:
    return x.cls.__name__ if isinstance(x, _Snap) else type(x).__name__


def _short(x: Any, n: int = 60) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."


def _exc_text(exc: BaseException, n: int = 300) -> str:
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else ""
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text[:n]


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of the traceback (for crash reports)."""
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    fr = tb[-1]
    return f"{os.path.basename(fr.filename)}:{fr.lineno} in {fr.name}"


# ------------------------------------------------------------------------------------------------
# Our own shim for the generated files' ``_paritybench_helpers`` import
# ------------------------------------------------------------------------------------------------
def _make_helpers_module() -> types.ModuleType:
    import torch

    mod = types.ModuleType("_paritybench_helpers")
    mod.__file__ = __file__

    class _mock_config(dict):
        """A dict whose keys are also attributes (stands in for argparse/yaml configs)."""

        def __getattr__(self, name: str) -> Any:
            try:
                return self[name]
            except KeyError:
                raise AttributeError(name) from None

    def patch_functional() -> None:
        """Some projects import ``torch.functional`` as ``F``: give both modules both names."""
        if getattr(torch.functional, "_pb_patched", False):
            return
        f1, f2 = torch.functional, torch.nn.functional
        n1 = {n for n in dir(f1) if re.match(r"^[a-z]", n)}
        n2 = {n for n in dir(f2) if re.match(r"^[a-z]", n)}
        for n in n1 - n2:
            setattr(f2, n, getattr(f1, n))
        for n in n2 - n1:
            setattr(f1, n, getattr(f2, n))
        torch.functional._pb_patched = True

    class DummyBlock(torch.nn.ReLU):
        expansion = 1

    def _mock_layer(
        in_features: Any = None, out_features: Any = None, *args: Any, **kwargs: Any
    ) -> torch.nn.Module:
        if in_features and out_features:
            return torch.nn.Linear(in_features, out_features, **kwargs)
        return DummyBlock()

    def _fails_compile() -> Callable[[Any], Any]:
        return lambda x: x

    class _paritybench_base(unittest.TestCase):
        def _check(self, *args: Any) -> None:
            raise unittest.SkipTest("run through integration/paritybench.py")

    mod._mock_config = _mock_config  # type: ignore[attr-defined]
    mod.patch_functional = patch_functional  # type: ignore[attr-defined]
    mod.DummyBlock = DummyBlock  # type: ignore[attr-defined]
    mod._mock_layer = _mock_layer  # type: ignore[attr-defined]
    mod._fails_compile = _fails_compile  # type: ignore[attr-defined]
    mod._paritybench_base = _paritybench_base  # type: ignore[attr-defined]
    return mod


# ------------------------------------------------------------------------------------------------
# Stubs for optional packages that are not installed
# ------------------------------------------------------------------------------------------------
class _StubMeta(type):
    """Stub classes: any attribute is another stub, calling one makes an instance (or, as a
    decorator, returns the decorated callable), subclassing works."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("_pb_auto") and len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: keep the decorated function/class
        return super().__call__(*args, **kwargs)

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


class _StubBase(metaclass=_StubMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(Exception):
            super().__init__()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return stub_class(f"{type(self).__qualname__}()")()

    def __getitem__(self, item: Any) -> Any:
        return stub_class(f"{type(self).__qualname__}[]")()

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def stub_class(qualname: str) -> type:
    cls = _StubMeta(qualname.rsplit(".", 1)[-1], (_StubBase,), {"_pb_auto": True})
    cls.__qualname__ = qualname
    cls.__module__ = qualname.split(".", 1)[0]
    return cls


class StubModule(types.ModuleType):
    """A permissive stand-in for a package that is not installed."""

    __version__ = "99.0.0"  # passes "needs version >= X" checks of the importing packages

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last entry of ``sys.meta_path`` while a generated file is imported: a module that no real
    finder provides (i.e. an ``ImportError``), imported by the generated file itself (or under a
    package that is already a stub), becomes a :class:`StubModule`. Imports made by real packages
    (``try: import optional_dep``) are not affected."""

    def __init__(self, importer_name: str) -> None:
        self.importer_name = importer_name
        self.stubbed: list[str] = []
        # Missing modules that a real package imported (without catching the ImportError) on
        # behalf of the generated file: stubbed on the next attempt.
        self.allowed: set[str] = set()

    def _from_generated_code(self) -> bool:
        frame = sys._getframe(1)
        while frame is not None:
            fn = frame.f_code.co_filename
            if not (fn.startswith("<frozen importlib") or fn == __file__):
                return frame.f_globals.get("__name__") == self.importer_name
            frame = frame.f_back  # type: ignore[assignment]
        return False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parent = fullname.rpartition(".")[0]
        if not (
            fullname in self.allowed
            or isinstance(sys.modules.get(parent), StubModule)
            or self._from_generated_code()
        ):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        mod = StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        self.stubbed.append(module.__name__)


@dataclasses.dataclass
class Loaded:
    module: types.ModuleType | None
    stubbed: list[str]
    error: str | None = None


def load_generated(path: str | os.PathLike[str], max_attempts: int = 12) -> Loaded:
    """Import one generated file under the module name ``test_<repo>`` (the name its code
    expects in ``sys.modules``), stubbing what it imports but is not installed.

    A missing module imported by the generated code itself is stubbed right away; one that an
    installed package imports on its behalf is stubbed only when the ``ModuleNotFoundError``
    reaches the generated file (then the import is tried again), so optional imports that
    packages catch themselves keep failing as usual.

    ``ImportError: cannot import name 'X' from 'pkg'`` (an installed package without that
    name) is answered by giving ``pkg`` a stub ``X`` and importing again."""
    path = os.fspath(path)
    if "_paritybench_helpers" not in sys.modules:
        sys.modules["_paritybench_helpers"] = _make_helpers_module()
    name = Path(path).stem
    source = Path(path).read_text(encoding="utf-8", errors="replace")
    code = compile(source, path, "exec")
    finder = StubFinder(name)
    stubbed_names: list[str] = []
    error: str | None = None
    for _ in range(max_attempts):
        module = types.ModuleType(name)
        module.__file__ = path
        sys.modules[name] = module
        sys.meta_path.append(finder)
        try:
            exec(code, module.__dict__)
        except ImportError as exc:
            if (
                isinstance(exc, ModuleNotFoundError)
                and exc.name
                and exc.name not in finder.allowed
                and exc.name not in sys.modules
            ):
                finder.allowed.add(exc.name)  # raised through the generated file's import
                continue
            m = re.match(r"cannot import name '([^']+)' from '([^']+)'", str(exc))
            target = sys.modules.get(m.group(2)) if m else None
            if m and target is not None and not hasattr(target, m.group(1)):
                setattr(target, m.group(1), stub_class(f"{m.group(2)}.{m.group(1)}"))
                stubbed_names.append(f"{m.group(2)}:{m.group(1)}")
                continue
            error = f"{_exc_text(exc)} [{_where(exc)}]"
            break
        except BaseException as exc:  # SyntaxError, SystemExit, anything at import time
            error = f"{_exc_text(exc)} [{_where(exc)}]"
            break
        else:
            if not hasattr(module, "TESTCASES"):
                module.TESTCASES = []  # type: ignore[attr-defined]
            return Loaded(module, finder.stubbed + stubbed_names)
        finally:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(finder)
    return Loaded(None, finder.stubbed + stubbed_names, error or "too many import retries")


# ------------------------------------------------------------------------------------------------
# One test case
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Reference:
    """What eager produced for a test case (or why it could not)."""

    status: str  # "ok" | "eager_fail" | "skip"
    reason: str = ""
    out1: Any = None  # first call of a fresh module copy
    out2: Any = None  # second call of the same copy
    seconds: float = 0.0


class Case:
    """A test case: fresh module copies and identical inputs on demand."""

    def __init__(self, index: int, cls: Any, init_spec: Any, fwd_spec: Any) -> None:
        self.index = index
        self.cls = cls
        self.name = getattr(cls, "__name__", repr(cls))
        self.init_spec = init_spec
        self.fwd_spec = fwd_spec
        self._base: Any = None

    def build(self) -> Any:
        seed_everything()
        args, kwargs = _resolve_args(self.init_spec)
        seed_everything()
        mod = self.cls(*args, **kwargs)
        with contextlib.suppress(Exception):
            mod.eval()
        return mod

    def fresh_module(self) -> Any:
        if self._base is None:
            self._base = self.build()
        try:
            return copy.deepcopy(self._base)
        except Exception:
            return self.build()

    def inputs(self) -> tuple[list[Any], dict[str, Any]]:
        seed_everything()
        return _resolve_args(self.fwd_spec)

    def call(self, fn: Any) -> Any:
        args, kwargs = self.inputs()
        seed_everything()
        return snapshot(fn(*args, **kwargs))


def run_eager(case: Case) -> Reference:
    t0 = time.perf_counter()
    fwd = getattr(case.cls, "forward", None)
    if fwd is None or getattr(fwd, "__name__", "") == "_forward_unimplemented":
        return Reference("skip", "no forward()")
    try:
        a = case.fresh_module()
        out1 = case.call(a)
        out2 = case.call(a)
        b = case.fresh_module()
        out_b = case.call(b)
        in1, in2 = case.inputs(), case.inputs()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Reference(
            "eager_fail", f"{_exc_text(exc)} [{_where(exc)}]", seconds=time.perf_counter() - t0
        )
    secs = time.perf_counter() - t0
    if compare(snapshot(in1), snapshot(in2), 0, 0) is not None:
        return Reference("skip", "nondeterministic inputs", seconds=secs)
    diff = compare(out1, out_b)
    if diff is not None:
        return Reference("skip", f"nondeterministic: {diff}", seconds=secs)
    return Reference("ok", out1=out1, out2=out2, seconds=secs)


@dataclasses.dataclass
class CaseOutcome:
    """What a compiler mode reports for one case (before classification)."""

    graphs: int | None = None
    breaks: int | None = None
    fallbacks: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)  # break reasons, in order
    fallback_reason: str | None = None
    errors: list[str] = dataclasses.field(default_factory=list)  # "phase: Exc: msg [where]"
    out1: Any = None
    out2: Any = None
    called1: bool = False  # the first compiled call returned
    ran: bool = False  # both compiled calls returned
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def _capture_errors(outcome: CaseOutcome, phase: str) -> Any:
    @contextlib.contextmanager
    def cm() -> Iterator[None]:
        try:
            yield
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            outcome.errors.append(f"{phase}: {_exc_text(exc)} [{_where(exc)}]")

    return cm()


def mode_magpy(case: Case, backend: str) -> CaseOutcome:
    import magpy

    out = CaseOutcome()
    magpy.reset()
    tracer = sys.gettrace()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _capture_errors(out, "explain"):
            args, kwargs = case.inputs()
            seed_everything()
            ex = magpy.explain(case.fresh_module())(*args, **kwargs)
            out.graphs = ex.graph_count
            out.breaks = ex.graph_break_count
            # tensor values checked after the graph (getattr: a --magpy-root may predate them)
            out.extra["assumed"] = len(getattr(ex, "assumptions", ()))
            for r in ex.break_reasons:
                where = f" ({os.path.basename(r.filename)}:{r.lineno})" if r.filename else ""
                out.reasons.append(f"{r.reason}{where}")
        sys.settrace(tracer)
        compiled = None
        with _capture_errors(out, "compile"):
            compiled = magpy.compile(case.fresh_module(), backend=backend)
        if compiled is not None:
            with _capture_errors(out, "call1"):
                out.out1 = case.call(compiled)
                out.called1 = True
                with _capture_errors(out, "call2"):
                    out.out2 = case.call(compiled)
                    out.ran = True
            sys.settrace(tracer)
            with contextlib.suppress(Exception):
                st = magpy.stats(compiled)
                out.fallbacks = st.fallbacks
                out.extra.update(
                    hits=st.hits,
                    misses=st.misses,
                    records=st.records,
                    compiled_graphs=st.graphs,
                    compiled_breaks=st.breaks,
                    assumption_misses=getattr(st, "assumption_misses", 0),
                )
                state = getattr(compiled, "_magpy_state", None)
                if st.fallbacks and state is not None:
                    out.fallback_reason = state.eager_reason
    warns = [str(w.message) for w in caught if type(w.message).__name__ == "MagPyWarning"]
    if warns:
        out.extra["warnings"] = [w[:300] for w in warns[:3]]
    magpy.reset()
    return out


def mode_dynamo(case: Case, backend: str) -> CaseOutcome:
    import torch
    import torch._dynamo

    out = CaseOutcome()
    torch._dynamo.reset()
    with _capture_errors(out, "explain"):
        args, kwargs = case.inputs()
        seed_everything()
        ex = torch._dynamo.explain(case.fresh_module())(*args, **kwargs)
        out.graphs = ex.graph_count
        out.breaks = max(0, ex.graph_break_count)  # -1 when no graph at all
        for r in ex.break_reasons:
            where = ""
            stack = getattr(r, "user_stack", None) or []
            if stack:
                where = f" ({os.path.basename(stack[-1].filename)}:{stack[-1].lineno})"
            out.reasons.append(f"{r.reason}{where}")
    torch._dynamo.reset()
    compiled = None
    with _capture_errors(out, "compile"):
        compiled = torch.compile(case.fresh_module(), backend=backend, fullgraph=False)
    if compiled is not None:
        with _capture_errors(out, "call1"):
            out.out1 = case.call(compiled)
            out.called1 = True
            with _capture_errors(out, "call2"):
                out.out2 = case.call(compiled)
                out.ran = True
    torch._dynamo.reset()
    return out


MODES: dict[str, Callable[[Case, str], CaseOutcome]] = {
    "magpy": mode_magpy,
    "dynamo": mode_dynamo,
}


def classify(ref: Reference, out: CaseOutcome) -> tuple[str, str]:
    """``(status, top reason)`` of a mode's outcome against the eager reference."""
    wrong = []
    if out.called1 or out.ran:
        d1 = compare(ref.out1, out.out1)
        if d1:
            wrong.append(f"call1 {d1}")
    if out.ran:
        d2 = compare(ref.out2, out.out2)
        if d2:
            wrong.append(f"call2 {d2}")
    if wrong:
        return "wrong", "; ".join(wrong)
    if out.errors:
        return "crash", out.errors[0]
    if out.breaks:
        return "break", out.reasons[0] if out.reasons else f"{out.breaks} graph breaks"
    if out.fallbacks:
        return "break", f"fallback: {out.fallback_reason or 'runs eagerly'}"
    if out.graphs == 1:
        return "full_graph_ok", ""
    if out.graphs == 0:
        # nothing to put in a graph (an identity, a module of Python arithmetic): the whole
        # call was captured, with no break and no fallback
        return "full_graph_ok", ""
    if out.graphs is None:
        return "break", "no graph count"
    return "break", f"{out.graphs} graphs, no break reason"


def evaluate_case(
    case: Case,
    modes: list[str],
    backend: str,
    ref: Reference | None = None,
    channel: _Channel | None = None,
    mode_table: Mapping[str, Callable[[Case, str], CaseOutcome]] | None = None,
    file: str = "",
) -> list[dict[str, Any]]:
    """Eager reference, then each mode: one record per mode."""
    table = MODES if mode_table is None else mode_table
    ch = channel or _Channel()
    if ref is None:
        ch.send({"event": "start", "index": case.index, "phase": "eager"})
        ref = run_eager(case)
    base = {
        "kind": "case",
        "file": file,
        "index": case.index,
        "case": case.name,
        "backend": backend,
        "eager_seconds": round(ref.seconds, 3),
    }
    records = []
    for mode in modes:
        rec = dict(base, mode=mode)
        if ref.status != "ok":
            rec.update(status=ref.status, reason=ref.reason, seconds=0.0)
        else:
            ch.send({"event": "start", "index": case.index, "phase": mode})
            t0 = time.perf_counter()
            try:
                out = table[mode](case, backend)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # a failure of the harness around the compiler
                out = CaseOutcome(errors=[f"{mode}: {_exc_text(exc)} [{_where(exc)}]"])
            secs = time.perf_counter() - t0
            status, reason = classify(ref, out)
            rec.update(
                status=status,
                reason=reason[:500],
                seconds=round(secs, 3),
                graphs=out.graphs,
                breaks=out.breaks,
                fallbacks=out.fallbacks,
                reasons=[r[:300] for r in out.reasons[:5]],
                errors=out.errors[:3],
                **out.extra,
            )
            if out.fallback_reason:
                rec["fallback_reason"] = out.fallback_reason[:500]
        ch.send({"event": "result", "record": rec})
        records.append(rec)
    gc.collect()
    return records


def cases_of(module: types.ModuleType) -> list[Case]:
    cases = []
    for i, entry in enumerate(getattr(module, "TESTCASES", []) or []):
        entry = tuple(entry)
        cls = entry[0]
        init_spec = entry[1] if len(entry) > 1 else (lambda: ([], {}))
        fwd_spec = entry[2] if len(entry) > 2 else (lambda: ([], {}))
        cases.append(Case(i, cls, init_spec, fwd_spec))
    return cases


def run_file(
    path: str,
    modes: list[str],
    backend: str,
    skip: set[tuple[int, str]],
    channel: _Channel,
    max_cases: int = 0,
) -> None:
    t0 = time.perf_counter()
    loaded = load_generated(path)
    cases = cases_of(loaded.module) if loaded.module is not None else []
    if max_cases > 0:  # a sample: the file's first cases only
        cases = cases[:max_cases]
    channel.send(
        {
            "event": "file",
            "n_cases": len(cases),
            "cases": [c.name for c in cases],
            "stubbed": loaded.stubbed,
            "import_error": loaded.error,
            "seconds": round(time.perf_counter() - t0, 3),
        }
    )
    for case in cases:
        todo = [m for m in modes if (case.index, m) not in skip]
        if todo:
            evaluate_case(case, todo, backend, channel=channel, file=os.path.basename(path))
    channel.send({"event": "end"})


def _limit_memory(gb: float) -> None:
    if gb <= 0:
        return
    with contextlib.suppress(Exception):
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (int(gb * 1024**3), hard))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--modes", default="magpy")
    p.add_argument("--backend", default="eager")
    p.add_argument("--skip", default="[]", help="JSON list of [index, mode] already done")
    p.add_argument("--mem-gb", type=float, default=0.0)
    p.add_argument("--max-cases", type=int, default=0, help="only the first N cases (0: all)")
    a = p.parse_args(argv)

    # The protocol keeps the real stdout; everything the generated code prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _limit_memory(a.mem_gb)
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(Exception):
        import torch._inductor.config as ic

        ic.fallback_random = True
    skip = {(int(i), str(m)) for i, m in json.loads(a.skip)}
    modes = [m for m in a.modes.split(",") if m]
    run_file(a.file, modes, a.backend, skip, _Channel(proto), a.max_cases)
    proto.flush()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown (generated code may hang in atexit/threads)
