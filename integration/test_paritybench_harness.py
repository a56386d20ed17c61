"""Tests of the ParityBench harness itself (``paritybench.py`` and ``paritybench_worker.py``).

No ParityBench file is used: the generated-style files below are written into ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

HERE = Path(__file__).resolve().parent


def _load(name: str, filename: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PB = _load("_pb_harness", "paritybench.py")
W = _load("_pb_worker", "paritybench_worker.py")

HEADER = """\
import sys
_module = sys.modules[__name__]
del sys
from _paritybench_helpers import _mock_config, patch_functional
from unittest.mock import mock_open, MagicMock
import abc, collections, copy, functools, math, random, numpy, torch
import numpy as np
patch_functional()
open = mock_open()
logging = sys = argparse = MagicMock()
_global_config = args = cfg = config = _mock_config()
xrange = range
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
"""

GOOD = (
    HEADER
    + """\
import pbsynth_missing_pkg
from pbsynth_missing_pkg.models import resnet50
from pbsynth_missing_other import Thing, helper
import pbsynth_real_pkg
from _paritybench_helpers import _mock_config, _mock_layer, _paritybench_base, _fails_compile


class Plain(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2


class Printer(nn.Module):
    def forward(self, x):
        print("side effect")
        return x + 1


class Counter(nn.Module):
    calls = [0]

    def forward(self, x):
        Counter.calls[0] += 1
        return x + Counter.calls[0]


class Broken(nn.Module):
    def forward(self, x):
        return x @ torch.ones(3, 3)


@helper
class Decorated(nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)


class NoForward(nn.Module):
    pass


TESTCASES = [
    # (nn.Module, init_args, forward_args, jit_compiles)
    (Plain,
     lambda: ([], {'n': 4}),
     lambda: ([torch.rand([2, 4])], {}),
     True),
    (Printer,
     lambda: ([], {}),
     lambda: ([torch.rand([2, 4])], {}),
     False),
    (Counter,
     lambda: ([], {}),
     lambda: ([torch.rand([2, 4])], {}),
     False),
    (Broken,
     lambda: ([], {}),
     lambda: ([torch.rand([2, 4])], {}),
     False),
    (Decorated,
     lambda: ([], {}),
     lambda: ([torch.rand([2, 4])], {}),
     True),
    (NoForward,
     lambda: ([], {}),
     lambda: ([], {}),
     False),
]


class Test_pbsynth(_paritybench_base):
    def test_000(self):
        self._check(*TESTCASES[0])
"""
)

REAL_PKG = """\
try:
    import pbsynth_optional_dep  # a real package's own optional import: never stubbed
    HAVE_DEP = True
except ImportError:
    HAVE_DEP = False
"""

SLOW = (
    HEADER
    + """\
import time


class Sleepy(nn.Module):
    def forward(self, x):
        time.sleep(60)
        return x


class Quick(nn.Module):
    def forward(self, x):
        return x * 3


TESTCASES = [
    (Sleepy, lambda: ([], {}), lambda: ([torch.rand([2])], {}), False),
    (Quick, lambda: ([], {}), lambda: ([torch.rand([2])], {}), False),
]
"""
)

BAD_IMPORT = (
    HEADER
    + """\
raise RuntimeError("this project cannot be imported")
"""
)


@pytest.fixture
def gen_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of generated-style files; the test's modules are dropped afterwards."""
    d = tmp_path / "generated"
    d.mkdir()
    (d / "test_pbsynth_good.py").write_text(GOOD)
    (d / "_paritybench_helpers.py").write_text("raise AssertionError('never imported')\n")
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "pbsynth_real_pkg.py").write_text(REAL_PKG)
    monkeypatch.syspath_prepend(str(pkg))
    before = set(sys.modules)
    yield d
    for name in set(sys.modules) - before:
        if name.startswith(("pbsynth", "test_pbsynth", "_paritybench_helpers")):
            del sys.modules[name]


def _loaded_cases(path: Path) -> tuple[Any, dict[str, Any]]:
    loaded = W.load_generated(path)
    assert loaded.error is None, loaded.error
    return loaded, {c.name: c for c in W.cases_of(loaded.module)}


# ------------------------------------------------------------------------------------------------
# split selection
# ------------------------------------------------------------------------------------------------
def test_split_is_by_sha1_of_the_basename(tmp_path: Path) -> None:
    names = [f"test_project_{i}.py" for i in range(40)]
    for n in names:
        (tmp_path / n).write_text("TESTCASES = []\n")
    (tmp_path / "_paritybench_helpers.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    dev = {p.name for p in PB.list_files(tmp_path, "dev")}
    rest = {p.name for p in PB.list_files(tmp_path, "rest")}
    expected = {n for n in names if hashlib.sha1(n.encode()).hexdigest()[0].isdigit()}
    assert dev == expected
    assert rest == set(names) - expected
    assert {p.name for p in PB.list_files(tmp_path, "all")} == set(names)
    assert 0 < len(dev) < len(names)  # both halves are exercised by these names
    assert PB.in_split("test_project_0.py", "dev") == ("test_project_0.py" in expected)
    with pytest.raises(ValueError):
        PB.in_split("x.py", "train")


# ------------------------------------------------------------------------------------------------
# import stubbing
# ------------------------------------------------------------------------------------------------
def test_missing_imports_of_the_generated_file_are_stubbed(gen_dir: Path) -> None:
    loaded, cases = _loaded_cases(gen_dir / "test_pbsynth_good.py")
    stubbed = set(loaded.stubbed)
    assert {"pbsynth_missing_pkg", "pbsynth_missing_pkg.models", "pbsynth_missing_other"} <= stubbed
    # installed packages are real, and a real package's own optional import is not stubbed
    have_numpy = (
        importlib.machinery.PathFinder.find_spec("numpy") is not None
    )  # on disk, not a stub
    real = ("torch", "pbsynth_real_pkg") + (("numpy",) if have_numpy else ())
    assert not any(s.startswith(real) for s in stubbed)
    assert "pbsynth_optional_dep" not in stubbed
    assert sys.modules["pbsynth_real_pkg"].HAVE_DEP is False
    # the stubs are permissive: attributes, calls, subclassing
    mod = loaded.module
    assert callable(mod.resnet50) and mod.resnet50(pretrained=True) is not None
    assert isinstance(type("Sub", (mod.Thing,), {})(), mod.Thing)
    # a stub used as a decorator keeps the decorated class
    assert issubclass(mod.Decorated, torch.nn.Module)
    assert list(cases) == ["Plain", "Printer", "Counter", "Broken", "Decorated", "NoForward"]
    # our own _paritybench_helpers shim was used, not the file next to the generated ones
    assert sys.modules["_paritybench_helpers"].__file__ == W.__file__
    # the finder is gone after the import: later imports fail normally
    with pytest.raises(ImportError):
        __import__("pbsynth_missing_later")


def test_cannot_import_name_from_an_installed_module_is_stubbed(gen_dir: Path) -> None:
    (gen_dir.parent / "site" / "pbsynth_real2.py").write_text("A = 1\n")
    src = HEADER + "from pbsynth_real2 import A, Gone\nTESTCASES = []\n"
    (gen_dir / "test_pbsynth_names.py").write_text(src)
    loaded = W.load_generated(gen_dir / "test_pbsynth_names.py")
    assert loaded.error is None
    assert "pbsynth_real2:Gone" in loaded.stubbed
    assert loaded.module.A == 1


def test_a_missing_module_that_reaches_the_generated_file_is_stubbed(gen_dir: Path) -> None:
    # an installed package that needs a missing one (``torch.utils.tensorboard`` without
    # ``tensorboard``): the ModuleNotFoundError reaches the generated file's import
    (gen_dir.parent / "site" / "pbsynth_real3.py").write_text(
        "import pbsynth_transitive_missing\nWriter = pbsynth_transitive_missing.Writer\n"
    )
    src = HEADER + "from pbsynth_real3 import Writer\nTESTCASES = []\n"
    (gen_dir / "test_pbsynth_transitive.py").write_text(src)
    loaded = W.load_generated(gen_dir / "test_pbsynth_transitive.py")
    assert loaded.error is None, loaded.error
    assert "pbsynth_transitive_missing" in loaded.stubbed
    assert loaded.module.Writer is not None


def test_an_import_that_fails_otherwise_is_reported(gen_dir: Path) -> None:
    (gen_dir / "test_pbsynth_bad.py").write_text(BAD_IMPORT)
    loaded = W.load_generated(gen_dir / "test_pbsynth_bad.py")
    assert loaded.module is None
    assert "this project cannot be imported" in (loaded.error or "")


# ------------------------------------------------------------------------------------------------
# eager reference: nondeterminism, eager failures
# ------------------------------------------------------------------------------------------------
def test_nondeterministic_eager_outputs_are_skipped(gen_dir: Path) -> None:
    _, cases = _loaded_cases(gen_dir / "test_pbsynth_good.py")
    ref = W.run_eager(cases["Counter"])
    assert ref.status == "skip" and ref.reason.startswith("nondeterministic")
    assert W.run_eager(cases["Plain"]).status == "ok"
    assert W.run_eager(cases["NoForward"]).status == "skip"
    bad = W.run_eager(cases["Broken"])
    assert bad.status == "eager_fail" and "RuntimeError" in bad.reason


def test_inputs_and_modules_are_identical_copies(gen_dir: Path) -> None:
    _, cases = _loaded_cases(gen_dir / "test_pbsynth_good.py")
    case = cases["Plain"]
    (a,), _ = case.inputs()
    (b,), _ = case.inputs()
    assert torch.equal(a, b)
    m1, m2 = case.fresh_module(), case.fresh_module()
    assert m1 is not m2 and torch.equal(m1.fc.weight, m2.fc.weight)


# ------------------------------------------------------------------------------------------------
# classification
# ------------------------------------------------------------------------------------------------
def _mock_wrong(case: Any, backend: str) -> Any:
    """A "compiler" that returns the right structure with wrong numbers on the 2nd call."""
    out = W.CaseOutcome(graphs=1, breaks=0)
    module = case.fresh_module()
    out.out1 = case.call(module)
    out.called1 = True
    out.out2 = case.call(lambda *a, **k: module(*a, **k) + 1e-2)
    out.ran = True
    return out


def _mock_crash(case: Any, backend: str) -> Any:
    out = W.CaseOutcome(graphs=1, breaks=0)
    with W._capture_errors(out, "call1"):
        raise TypeError("the mock compiler fails")
    return out


MOCK_MODES = {**W.MODES, "mock_wrong": _mock_wrong, "mock_crash": _mock_crash}


def _statuses(case: Any, modes: list[str]) -> dict[str, dict[str, Any]]:
    recs = W.evaluate_case(case, modes, "eager", mode_table=MOCK_MODES, file="f.py")
    assert [r["mode"] for r in recs] == modes
    return {r["mode"]: r for r in recs}


def test_classification_of_correct_wrong_and_crashing_compilers(gen_dir: Path) -> None:
    _, cases = _loaded_cases(gen_dir / "test_pbsynth_good.py")
    recs = _statuses(cases["Plain"], ["magpy", "mock_wrong", "mock_crash"])
    assert recs["magpy"]["status"] == "full_graph_ok", recs["magpy"]
    assert recs["magpy"]["graphs"] == 1 and recs["magpy"]["breaks"] == 0
    assert recs["mock_wrong"]["status"] == "wrong"
    assert recs["mock_wrong"]["reason"].startswith("call2 out: values differ")
    assert recs["mock_crash"]["status"] == "crash"
    assert "TypeError: the mock compiler fails" in recs["mock_crash"]["reason"]


def test_classification_of_breaks_and_eager_failures(gen_dir: Path) -> None:
    _, cases = _loaded_cases(gen_dir / "test_pbsynth_good.py")
    rec = _statuses(cases["Printer"], ["magpy"])["magpy"]
    assert rec["status"] == "break", rec
    assert rec["reason"]
    failed = _statuses(cases["Broken"], ["magpy", "mock_wrong"])
    assert {r["status"] for r in failed.values()} == {"eager_fail"}
    skipped = _statuses(cases["Counter"], ["magpy"])
    assert skipped["magpy"]["status"] == "skip"


def test_classify_rules() -> None:
    ref = W.Reference("ok", out1=torch.ones(2), out2=(torch.ones(2), [3, 4.0]))
    ok = W.CaseOutcome(
        graphs=1,
        breaks=0,
        out1=torch.ones(2),
        called1=True,
        out2=(torch.ones(2), [3, 4.0]),
        ran=True,
    )
    assert W.classify(ref, ok) == ("full_graph_ok", "")
    two = W.CaseOutcome(**{**ok.__dict__, "graphs": 2})
    assert W.classify(ref, two)[0] == "break"
    fb = W.CaseOutcome(**{**ok.__dict__, "fallbacks": 1, "fallback_reason": "internal"})
    assert W.classify(ref, fb) == ("break", "fallback: internal")
    empty = W.CaseOutcome(**{**ok.__dict__, "graphs": 0})  # e.g. an identity module
    assert W.classify(ref, empty) == ("full_graph_ok", "")
    empty_break = W.CaseOutcome(**{**ok.__dict__, "graphs": 0, "breaks": 1, "reasons": ["print"]})
    assert W.classify(ref, empty_break) == ("break", "print")
    bad_type = W.CaseOutcome(**{**ok.__dict__, "out2": [torch.ones(2), [3, 4.0]]})
    assert W.classify(ref, bad_type)[0] == "wrong"
    bad_num = W.CaseOutcome(**{**ok.__dict__, "out2": (torch.ones(2), [3, 4.5])})
    assert W.classify(ref, bad_num)[0] == "wrong"
    crash_then_wrong = W.CaseOutcome(
        **{**ok.__dict__, "out1": torch.zeros(2), "errors": ["call2: boom"]}
    )
    assert W.classify(ref, crash_then_wrong)[0] == "wrong"  # wrong wins over crash
    crash = W.CaseOutcome(graphs=1, breaks=0, errors=["call1: TypeError: x"])
    assert W.classify(ref, crash) == ("crash", "call1: TypeError: x")


def test_compare_nested_outputs() -> None:
    a = {"x": (torch.ones(3), None), "y": [1, 2.0, "s"]}
    assert W.compare(a, {"x": (torch.ones(3) + 1e-6, None), "y": [1, 2.0, "s"]}) is None
    assert "shape" in W.compare(a, {"x": (torch.ones(4), None), "y": [1, 2.0, "s"]})
    assert "dtype" in W.compare(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert W.compare(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    assert W.compare([1], (1,)) is not None
    assert W.compare(torch.tensor([1, 2]), torch.tensor([1, 3])) is not None


def test_reason_normalization() -> None:
    a = PB.normalize_reason("crash: call1: TypeError: bad 0x7f00ab at 12 [test_a.py:33 in f]")
    b = PB.normalize_reason("crash: call1: TypeError: bad 0x7f11cd at 99 [test_b.py:7 in g]")
    assert a == b
    assert PB.normalize_reason("graph break (test_x.py:12)") == "graph break"


# ------------------------------------------------------------------------------------------------
# CLI: subprocess per file, JSON lines, resume, timeouts, report
# ------------------------------------------------------------------------------------------------
def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _cli_args(gen_dir: Path, out: Path, *extra: str) -> list[str]:
    return [str(gen_dir), "--split", "all", "--mode", "magpy", "--jobs", "2",
            "--out", str(out), *extra]  # fmt: skip


@pytest.fixture
def worker_path(gen_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic site-packages folder must reach the workers too."""
    monkeypatch.setenv("PYTHONPATH", str(gen_dir.parent / "site"))


def test_cli_runs_files_in_subprocesses_and_resumes(
    gen_dir: Path, tmp_path: Path, worker_path: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (gen_dir / "test_pbsynth_bad.py").write_text(BAD_IMPORT)
    out = tmp_path / "results.jsonl"
    assert PB.main(_cli_args(gen_dir, out, "--filter", "good")) == 0
    first = _records(out)
    cases = [r for r in first if r["kind"] == "case"]
    assert [r["kind"] for r in first].count("file") == 1
    by_case = {r["case"]: r for r in cases}
    assert by_case["Plain"]["status"] == "full_graph_ok"
    assert by_case["Printer"]["status"] == "break"
    assert by_case["Counter"]["status"] == "skip"
    assert by_case["Broken"]["status"] == "eager_fail"
    assert all(r["mode"] == "magpy" and r["backend"] == "eager" for r in cases)
    fields = {"file", "case", "mode", "status", "graphs", "breaks", "reason", "seconds"}
    assert fields <= set(by_case["Plain"])

    # drop one case line and cut the last one short (as if the run had been killed), then
    # resume over all the files
    kept = [r for r in first if r.get("case") != "Decorated"]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"kind": "ca')
    PB.main([*_cli_args(gen_dir, out), "--resume"])
    text = capsys.readouterr().out
    assert "2 files in split 'all'" in text
    assert "running 2 files (0 already done)" in text
    recs = PB.load_results(out)
    keys = [(r["file"], r["index"], r["mode"]) for r in recs if r["kind"] == "case"]
    assert len(keys) == len(set(keys))  # nothing ran twice
    good = {r["case"]: r for r in recs if r.get("file") == "test_pbsynth_good.py"
            and r["kind"] == "case"}  # fmt: skip
    assert len(good) == 6 and good["Decorated"]["status"] == "full_graph_ok"
    bad = [r for r in recs if r.get("file") == "test_pbsynth_bad.py"]
    assert len(bad) == 1 and "cannot be imported" in bad[0]["import_error"]
    # the report
    assert "### magpy" in text and "full-graph share" in text
    assert "Top 15 failure reasons (magpy)" in text

    # everything is done now: a third run starts no worker
    PB.main([*_cli_args(gen_dir, out), "--resume"])
    assert "running 0 files (2 already done)" in capsys.readouterr().out


def test_cli_cases_per_file_runs_each_files_first_cases(
    gen_dir: Path, tmp_path: Path, worker_path: None
) -> None:
    """``--cases-per-file 2``: a sample for slow backends, the first two cases of each file;
    a resumed run counts the file as done."""
    out = tmp_path / "results.jsonl"
    PB.main(_cli_args(gen_dir, out, "--filter", "good", "--cases-per-file", "2"))
    recs = _records(out)
    files = [r for r in recs if r["kind"] == "file"]
    cases = [r for r in recs if r["kind"] == "case"]
    assert [f["n_cases"] for f in files] == [2]
    assert sorted(r["index"] for r in cases) == [0, 1]
    PB.main(_cli_args(gen_dir, out, "--filter", "good", "--cases-per-file", "2", "--resume"))
    assert len(_records(out)) == len(recs)  # nothing ran again


@pytest.mark.slow
def test_cli_timeout_kills_the_worker_and_continues(
    gen_dir: Path, tmp_path: Path, worker_path: None
) -> None:
    (gen_dir / "test_pbsynth_slow.py").write_text(SLOW)
    out = tmp_path / "results.jsonl"
    PB.main(_cli_args(gen_dir, out, "--filter", "slow", "--timeout", "10"))
    slow = {r["case"]: r for r in PB.load_results(out) if r["kind"] == "case"}
    assert slow["Sleepy"]["status"] == "eager_fail" and "timeout" in slow["Sleepy"]["reason"]
    assert slow["Quick"]["status"] == "full_graph_ok"  # a new worker continued after the kill


def test_summary_tables_for_both_modes() -> None:
    def rec(mode: str, idx: int, status: str, reason: str = "") -> dict[str, Any]:
        return {
            "kind": "case",
            "file": "f.py",
            "index": idx,
            "case": f"C{idx}",
            "mode": mode,
            "backend": "eager",
            "status": status,
            "reason": reason,
        }

    records = [
        {"kind": "file", "file": "f.py", "n_cases": 4, "stubbed": ["torchvision"]},
        rec("magpy", 0, "full_graph_ok"),
        rec("dynamo", 0, "full_graph_ok"),
        rec("magpy", 1, "wrong", "call2 out: values differ (max abs diff 0.5)"),
        rec("dynamo", 1, "full_graph_ok"),
        rec("magpy", 2, "break", "print at 0x1234 (f.py:3)"),
        rec("dynamo", 2, "break", "print"),
        rec("magpy", 3, "eager_fail", "x"),
        rec("dynamo", 3, "eager_fail", "x"),
    ]
    text = PB.summarize(records, ["magpy", "dynamo"])
    assert "| deterministic eager-OK cases | 3 | 3 |" in text
    assert "| full-graph share | 33.3% | 66.7% |" in text
    assert "| WRONG outputs | 1 | 0 |" in text
    assert "WRONG OUTPUTS (magpy)" in text and "C1" in text
    assert "| 1 | break | print at <addr> |" in text
    assert "### side by side" in text


def test_the_fixed_dev_sample_is_300_dev_files() -> None:
    names = [
        line.strip()
        for line in (HERE / "data" / "paritybench_dev_sample.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(names) == len(set(names)) >= 300
    assert all(PB.in_split(n, "dev") for n in names)


def test_a_sample_selects_its_files_and_refuses_others(tmp_path: Path) -> None:
    dev = [f"test_p{i}.py" for i in range(40) if PB.in_split(f"test_p{i}.py", "dev")]
    rest = next(f"test_p{i}.py" for i in range(40) if not PB.in_split(f"test_p{i}.py", "dev"))
    files = [tmp_path / n for n in dev]
    sample = tmp_path / "sample.txt"
    sample.write_text(f"# two files\n{dev[3]}\n{dev[1]}  # a comment\n\n")
    assert [f.name for f in PB.select_sample(files, sample, "dev")] == sorted([dev[1], dev[3]])
    sample.write_text(f"{rest}\n")
    with pytest.raises(SystemExit, match="not in split"):
        PB.select_sample(files, sample, "dev")
    absent = next(
        f"test_absent_{i}.py" for i in range(40) if PB.in_split(f"test_absent_{i}.py", "dev")
    )
    sample.write_text(f"{absent}\n")
    with pytest.raises(SystemExit, match="not in the folder"):
        PB.select_sample(files, sample, "dev")


def _cases(*statuses: str) -> list[dict[str, Any]]:
    return [{"kind": "case", "mode": "magpy", "status": s} for s in statuses]


def test_the_require_gate_counts_full_graphs_and_refuses_wrong_or_crashes() -> None:
    ok = ["full_graph_ok"] * 199
    assert PB.meets(_cases(*ok, "break", "eager_fail", "skip"), 0.995)
    assert not PB.meets(_cases(*ok[:190], "break", "timeout"), 0.995)
    assert not PB.meets(_cases(*ok, "wrong"), 0.5)
    assert not PB.meets(_cases(*ok, "crash"), 0.5)
