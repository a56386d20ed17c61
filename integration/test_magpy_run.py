"""``magpy run`` and ``magpy.use_for_torch_compile()``: ``torch.compile`` served by MagPy.

Each ``magpy run`` test writes a small program into ``tmp_path`` and runs it in a subprocess
(``python -m magpy run ...`` with this interpreter); the program prints what it saw as JSON
(results against eager, ``magpy.stats``), which the test reads. The API tests run in-process
and check that the originals are put back exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import magpy
from magpy._cli import main

PROGRAM = """
import json, sys
import torch
import magpy

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))

def fn(x):
    y = torch.sin(x) + 1
    if y.sum() > 0:  # (a value MagPy assumes, checked after each graph run)
        y = y * 2
    return y.cos()

def breaks(x):
    y = x * 2
    print("side effect", file=sys.stderr)  # (a graph break)
    return y + 1

x = torch.randn(4, 8)
want = (model(x), fn(x), breaks(x))
model.compile(backend="eager")
cfn = torch.compile(fn, backend="eager")
cbreaks = torch.compile(backend="eager")(breaks)
for _ in range(3):
    got = (model(x), cfn(x), cbreaks(x))
report = {
    "argv": sys.argv,
    "name": __name__,
    "equal": [torch.equal(g, w) for g, w in zip(got, want)],
    "stats": {
        label: {"hits": s.hits, "records": s.records}
        for label, s in [("model", magpy.stats(model)), ("fn", magpy.stats(cfn))]
    },
    "torch_compile_is_magpy": getattr(torch.compile, "__magpy_redirect__", None) is not None,
}
print("REPORT " + json.dumps(report))
if sys.argv[1:2] == ["--fail"]:
    def inner():
        raise ValueError("the program's own error")
    inner()
if sys.argv[1:2] == ["--exit"]:
    sys.exit(int(sys.argv[2]))
"""


def _magpy_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m magpy run *args`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "magpy", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=os.environ | {"PYTHONWARNINGS": "default"},
    )


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"no report; stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    return report


def _write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def _assert_served(report: dict[str, Any]) -> None:
    assert report["equal"] == [True, True, True]
    assert report["torch_compile_is_magpy"]
    for label in ("model", "fn"):  # (one record, then the later calls hit it)
        assert report["stats"][label] == {"hits": 2, "records": 1}, label


def test_run_serves_torch_compile_and_module_compile(tmp_path: Path) -> None:
    """Under ``magpy run script.py ARGS``, ``module.compile()``, ``torch.compile(fn)`` and
    ``torch.compile(...)(fn)`` are MagPy's: results equal eager and ``magpy.stats`` shows the
    records serving the calls; the script runs as ``__main__`` with ``sys.argv`` as python sets
    it (options after the script are its own)."""
    script = _write(tmp_path / "prog.py", PROGRAM)
    done = _magpy_run(str(script), "a", "--explain", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = _report(done)
    assert report["argv"] == [str(script), "a", "--explain"]
    assert report["name"] == "__main__"
    _assert_served(report)
    assert "magpy run --explain" not in done.stderr  # (the program's --explain, not magpy's)


def test_run_module_form_passes_its_exit_status(tmp_path: Path) -> None:
    """``magpy run -m package.module ARGS`` runs the module as ``python -m`` does (``sys.argv[0]``
    its file, the current folder importable), and ``sys.exit(3)`` in it ends magpy with 3."""
    _write(tmp_path / "pkg" / "__init__.py", "")
    module_file = _write(tmp_path / "pkg" / "train.py", PROGRAM)
    done = _magpy_run("-m", "pkg.train", "--exit", "3", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    report = _report(done)
    assert report["argv"] == [str(module_file), "--exit", "3"]
    assert report["name"] == "__main__"
    _assert_served(report)


def test_run_shows_the_programs_exception_as_python_does(tmp_path: Path) -> None:
    """An uncaught exception: python's traceback of the program's own frames only (no magpy or
    runpy frame), exit status 1."""
    script = _write(tmp_path / "prog.py", PROGRAM)
    done = _magpy_run(str(script), "--fail", cwd=tmp_path)
    assert done.returncode == 1
    tail = done.stderr[done.stderr.index("Traceback (most recent call last):") :]
    frames = [line.strip() for line in tail.splitlines() if line.strip().startswith("File ")]
    assert len(frames) == 2, tail
    assert all(f'File "{script}"' in frame for frame in frames), tail
    assert frames[0].endswith("in <module>") and frames[1].endswith("in inner")
    assert tail.rstrip().endswith("ValueError: the program's own error")


def test_run_explain_prints_what_was_compiled_and_where_it_broke(tmp_path: Path) -> None:
    """``magpy run --explain``: at exit, each compiled callable (with its file:line), its
    graphs and its graph breaks (file:line and source), on stderr; the program's output is
    untouched."""
    script = _write(tmp_path / "prog.py", PROGRAM)
    done = _magpy_run("--explain", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_served(_report(done))
    err = done.stderr
    assert "magpy run --explain: 3 callable(s) compiled by MagPy" in err
    assert "== Sequential (module.compile()) at " in err
    assert f"== fn at {script}:" in err and f"== breaks at {script}:" in err
    explained = err[err.index("== breaks at") :]
    line = next(i for i, t in enumerate(PROGRAM.splitlines(), 1) if '"side effect"' in t)
    assert "Graph Breaks:" in explained
    assert f"1. {script}:{line}: print()" in explained
    assert "magpy run --explain" not in done.stdout


FALLBACK_PROGRAM = """
import json, warnings
import torch
import torch._dynamo
import magpy

seen = []

@torch._dynamo.register_backend(name="counting_backend")
def counting_backend(gm, example_inputs):
    seen.append(len(gm.graph.nodes))
    return gm.forward

def fn(x):
    return torch.relu(x) * 3

x = torch.randn(5)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = torch.compile(fn, backend="counting_backend")
    second = torch.compile(lambda x: fn(x) + 1, backend="counting_backend")
    served = torch.compile(fn, backend="eager")
    results = [torch.equal(first(x), fn(x)), torch.equal(second(x), fn(x) + 1)]
print("REPORT " + json.dumps({
    "warnings": [
        str(w.message) for w in caught if issubclass(w.category, magpy.MagPyWarning)
    ],
    "equal": results,
    "dynamo_compiled": len(seen),
    "first_is_magpy": hasattr(first, "_magpy_state"),
    "served_is_magpy": hasattr(served, "_magpy_state"),
}))
"""


def test_run_falls_back_to_torchdynamo_with_one_warning(tmp_path: Path) -> None:
    """A backend only TorchDynamo knows (one the program registered with Dynamo) is not
    MagPy's: the call warns once (``MagPyWarning``, naming the backend) and the real
    ``torch.compile`` compiles it; a second such call does not warn again, and calls MagPy
    can honour are still MagPy's. ``--explain`` lists the fallbacks."""
    script = _write(tmp_path / "fallback.py", FALLBACK_PROGRAM)
    done = _magpy_run("--explain", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = _report(done)
    assert len(report["warnings"]) == 1, report["warnings"]
    assert "'counting_backend'" in report["warnings"][0]
    assert "compiled by TorchDynamo" in report["warnings"][0]
    assert report["equal"] == [True, True]
    assert report["dynamo_compiled"] == 2
    assert not report["first_is_magpy"] and report["served_is_magpy"]
    assert "Compiled by TorchDynamo instead (2 call(s)):" in done.stderr


def test_run_refuses_a_missing_script() -> None:
    """A script that does not exist is a usage error (status 2), before anything runs."""
    with pytest.raises(SystemExit) as exc:
        main(["run", "no/such/script.py"])
    assert exc.value.code == 2


# ---------------------------------------------------------------------- the API


def _fn(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) + 1


def test_use_for_torch_compile_as_context_manager_restores_the_originals() -> None:
    """Inside ``with magpy.use_for_torch_compile():`` torch.compile and nn.Module.compile are
    MagPy's; on exit (an exception included) the very objects found before are back."""
    real, real_module_compile = torch.compile, torch.nn.Module.__dict__["compile"]
    x = torch.randn(3)
    with pytest.raises(KeyError), magpy.use_for_torch_compile() as redirect:
        assert torch.compile is not real
        compiled = torch.compile(_fn, backend="eager")
        module = torch.nn.Linear(3, 3)
        module.compile(backend="eager")
        for _ in range(2):
            assert torch.equal(compiled(x), _fn(x))
            module(x)
        assert magpy.stats(compiled).hits == 1
        assert magpy.stats(module).hits == 1
        assert redirect.compiled == [compiled, module._compiled_call_impl]
        raise KeyError("leaves the block")
    assert torch.compile is real
    assert torch.nn.Module.__dict__["compile"] is real_module_compile


def test_use_for_torch_compile_as_a_call_is_undone_by_undo() -> None:
    """``magpy.use_for_torch_compile()`` as a plain call (for notebooks) stays until
    ``.undo()``; a second ``undo()`` does nothing; nested redirects undo in turn."""
    real, real_module_compile = torch.compile, torch.nn.Module.__dict__["compile"]
    outer = magpy.use_for_torch_compile()
    try:
        after_outer = torch.compile
        assert after_outer is not real
        with magpy.use_for_torch_compile():
            assert torch.compile is not after_outer
        assert torch.compile is after_outer
    finally:
        outer.undo()
    outer.undo()
    assert torch.compile is real
    assert torch.nn.Module.__dict__["compile"] is real_module_compile


def test_use_for_torch_compile_maps_the_parameters() -> None:
    """torch.compile's ``disable`` gives the function back, ``recompile_limit`` becomes
    ``magpy.max_records``, ``fullgraph`` and ``dynamic`` reach magpy.compile, and an option
    only TorchDynamo knows (``guard_filter_fn``) falls back with a warning."""
    from magpy_runtime._torch_compile import magpy_options

    with magpy.use_for_torch_compile():
        assert torch.compile(_fn, disable=True) is _fn
    mapped = magpy_options(backend="eager", fullgraph=True, dynamic=False, recompile_limit=2)
    assert mapped == {
        "fullgraph": True,
        "dynamic": False,
        "backend": "eager",
        "mode": None,
        "options": {"magpy.max_records": 2},
        "disable": False,
    }
    assert isinstance(magpy_options(backend="eager", name="region"), dict)
    fallback = magpy_options(options={"guard_filter_fn": lambda entries: entries})
    assert isinstance(fallback, str) and "guard_filter_fn" in fallback
    assert isinstance(magpy_options(backend=lambda gm: gm), str)  # (no (gm, example_inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(magpy_options(backend="aot_eager"), dict)
