"""``magpy explain`` on the command line, its HTML report, and ``magpy.explain(fn)(...).save``.

The command runs in a subprocess (``python -m magpy explain``) on the sample programs in
``integration/samples``: ``explain_break.py`` (a ``print`` halfway: one graph break, two
graphs) and ``explain_model.py`` (an ``nn.Module`` instance, no break). User mistakes are
checked in-process through ``magpy._cli.main`` (exit status 2, a message naming the
problem, no traceback). Also: what ``magpy.explain`` leaves behind (nothing: the functions it
instrumented get their code back) and that it runs the program exactly once.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch

import magpy
from magpy import _cli
from magpy._explain_cli import UsageError, example_arguments
from magpy_runtime._html import INSTALL_HINT
from magpy_runtime.cache._sites import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "samples"
BREAK_SAMPLE = SAMPLES / "explain_break.py"
BREAK_LINE = 'print("scale_and_report: halfway")'


def _magpy_explain(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m magpy explain *args`` in a subprocess, its warnings off."""
    return subprocess.run(
        [sys.executable, "-m", "magpy", "explain", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
    )


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


class _Report(HTMLParser):
    """What a report holds: the text of each element by class, of each ``<pre>``, and the
    tags seen."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.by_class: dict[str, list[str]] = {}
        self.pres: list[str] = []
        self.tags: set[str] = set()
        self._open: list[tuple[str, str | None, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._open.append((tag, dict(attrs).get("class"), []))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            name, cls, parts = self._open.pop()
            text = "".join(parts)
            if cls:
                self.by_class.setdefault(cls, []).append(text)
            if name == "pre":
                self.pres.append(text)
            if self._open:
                self._open[-1][2].append(text)
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][2].append(data)


def _check_report(index: Path, *, svg: bool) -> _Report:
    """The report of ``explain_break.py:scale_and_report``: the break line marked with its
    reason, both graphs' ops and code, each record's guard and mock, the RefGraph."""
    assert index.name == "index.html" and index.is_file()
    report = _Report(index.read_text(encoding="utf-8"))
    marked = report.by_class.get("brk", [])
    assert len(marked) == 1 and BREAK_LINE in marked[0] and "print()" in marked[0], marked
    assert str(_line_of(BREAK_SAMPLE, BREAK_LINE)) in marked[0]
    assert report.by_class["ops"] == ["sinmul", "reluadd"], report.by_class["ops"]
    pres = "\n".join(report.pres)
    assert "def forward" in pres and "torch.sin" in pres and "torch.relu" in pres
    assert pres.count("def __magpy_guard") == 2 and pres.count("def __magpy_mock") == 2
    if svg:
        assert "svg" in report.tags and not report.by_class.get("dot")
    else:
        assert "svg" not in report.tags
        assert report.by_class["dot"][0].startswith("digraph RefGraph {")
        assert INSTALL_HINT in report.by_class["hint"][0]
    return report


def test_explain_a_callable_prints_graphs_breaks_and_writes_a_report(tmp_path: Path) -> None:
    """``magpy explain explain_break.py:scale_and_report --report DIR``: two graphs, one break
    at the print's file:line with its source line, the records' guards, the share outside
    graphs (from 5 more compiled calls, said so), and a report (an SVG where dot is on PATH)."""
    proc = _magpy_explain(f"{BREAK_SAMPLE}:scale_and_report", "--report", str(tmp_path))
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "Graph Count: 2\nGraph Break Count: 1\nOp Count: 4\nRecord Count: 2" in out
    line = _line_of(BREAK_SAMPLE, BREAK_LINE)
    assert f"{BREAK_SAMPLE}:{line}: print() has effects" in out
    assert f"{line} | {BREAK_LINE}" in out
    assert "Graph 1 (2 ops): sin, mul" in out and "Graph 2 (2 ops): relu, add" in out
    assert "Record 1: runs Graph 1" in out and "if not (type(v2) is float and v2 == 3.0)" in out
    assert "Time Outside Compiled Graphs: " in out and "5 more calls with the same inputs" in out
    assert out.splitlines().count("scale_and_report: halfway") == 1 + 5  # explained, 5 more
    assert f"report: {tmp_path / 'index.html'}" in out
    _check_report(tmp_path / "index.html", svg=shutil.which("dot") is not None)


def test_explain_a_module_instance_by_module_name() -> None:
    """``magpy explain -m explain_model:model -v``: one graph of three ops, no break, the
    graph's code and the guard's source, no time outside graphs."""
    proc = _magpy_explain("-m", "explain_model:model", "-v", "--calls", "3", cwd=SAMPLES)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "== TinyNet ==\nGraph Count: 1\nGraph Break Count: 0" in out
    assert "Graph 1 (3 ops): linear, relu, linear" in out and "Graph Breaks" not in out
    assert "def forward(self, L_x" in out and "# guard of TinyNet.forward" in out
    assert "Time Outside Compiled Graphs: 0% (3 more calls" in out


def test_explain_a_script_reports_what_its_compiled_callables_captured(tmp_path: Path) -> None:
    """``magpy explain explain_break.py --report DIR 4``: the script runs as ``__main__`` with
    ``sys.argv[1:] == ["4"]`` (four compiled calls) and the callable it compiles is reported
    from those calls, in the report too."""
    script = str(BREAK_SAMPLE.relative_to(ROOT))
    proc = _magpy_explain(script, "--report", str(tmp_path), "4")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.splitlines().count("scale_and_report: halfway") == 4
    assert "== scale_and_report ==\nGraph Count: 2\n" in out and "Record Count: 2" in out
    line = _line_of(BREAK_SAMPLE, BREAK_LINE)
    assert f"integration/samples/explain_break.py:{line}: print() has effects" in out
    assert "Time Outside Compiled Graphs: " in out and "over the program's own calls" in out
    report = _Report((tmp_path / "index.html").read_text(encoding="utf-8"))
    assert report.by_class["ops"] == ["sinmul", "reluadd"]


def test_a_missing_script_is_a_usage_error_without_torch() -> None:
    """A script that does not exist: exit status 2, the file named, no traceback."""
    proc = _magpy_explain("no/such/script.py:fn")
    assert proc.returncode == 2, proc.stderr
    assert "no/such/script.py: no such file" in proc.stderr and "Traceback" not in proc.stderr


_MISTAKES = """
import torch
from torch import nn

class Net(nn.Module):
    def forward(self, x):
        return x + 1

net = Net()
value = 3

def f(x):
    return x * 2
"""


@pytest.mark.parametrize(
    ("target", "inputs", "message"),
    [
        (":nope", "(torch.ones(2),)", "has no attribute 'nope'"),
        (":net.nope", "(torch.ones(2),)", "net has no attribute 'nope'"),
        (":Net", "(torch.ones(2),)", "'Net' in {path} is a class"),
        (":value", "(torch.ones(2),)", "'value' in {path} is not callable (of type int)"),
        (":f", None, "{path} defines no example_inputs()"),
        (":f", "torch.ones(2)", "example_inputs() in {path} returned a Tensor"),
        (":f", "[torch.ones(2)]", "example_inputs() in {path} returned a list"),
        (":f", "(torch.ones(2),), {1: 2}", "kwargs have keys that are not str: [1]"),
        ("", "(torch.ones(2),)", "{path} ran but compiled nothing with magpy.compile"),
        (":f extra", "(torch.ones(2),)", "a callable takes its arguments from example_inputs"),
    ],
)
def test_user_mistakes_exit_with_status_2_and_a_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    inputs: str | None,
    message: str,
) -> None:
    """Each mistake exits with status 2 and a message naming what is wrong, no traceback."""
    path = tmp_path / f"mistake_{abs(hash((target, inputs)))}.py"
    source = _MISTAKES
    if inputs is not None:
        source += f"\ndef example_inputs():\n    return {inputs}\n"
    path.write_text(source)
    name, *extra = target.split() or [""]
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(["explain", f"{path}{name}", *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert message.format(path=path) in err and "Traceback" not in err, err


def test_cli_argument_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A module that does not exist (``-m``) and a ``--report`` path that is a file: exit
    status 2 with a message naming them."""
    for argv, message in [
        (["-m", "no_such_module_xyz:f"], "no module named 'no_such_module_xyz'"),
        (["-m", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
        ([f"{BREAK_SAMPLE}:scale_and_report", "--report", str(BREAK_SAMPLE)], "is a file"),
        ([f"{BREAK_SAMPLE}:scale_and_report", "--calls", "-1"], "expected 0 or a positive"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            _cli.main(["explain", *argv])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err, (argv, err)


def test_an_error_of_the_program_shows_its_traceback_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """example_inputs() raising is the program's error, not a usage error: its traceback,
    a line naming it, exit status 1."""
    path = tmp_path / "raising_inputs.py"
    path.write_text("def f(x):\n    return x\n\ndef example_inputs():\n    return (1 / 0,)\n")
    assert _cli.main(["explain", f"{path}:f"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert f"example_inputs() of {path} raised ZeroDivisionError" in err


def test_the_example_inputs_rule() -> None:
    """A tuple is the positional arguments; ``(tuple, dict)`` is (args, kwargs); any other
    pair is two positional arguments; anything but a tuple is refused."""
    x = torch.ones(1)
    assert example_arguments((x,), "s.py") == ((x,), {})
    assert example_arguments(((x,), {"k": 1}), "s.py") == ((x,), {"k": 1})
    assert example_arguments(([x], {"k": 1}), "s.py") == (([x], {"k": 1}), {})
    assert example_arguments(((x,), 3), "s.py") == (((x,), 3), {})
    assert example_arguments((), "s.py") == ((), {})
    with pytest.raises(UsageError, match=r"returned a dict"):
        example_arguments({"x": x}, "s.py")


# ---------------------------------------------------------------------- magpy.explain itself
CALLS = {"inner": 0, "outer": 0}


def _inner(y: torch.Tensor) -> torch.Tensor:
    CALLS["inner"] += 1
    z = y * 2
    print("inner prints")
    return z + 1


def _outer(x: torch.Tensor) -> torch.Tensor:
    CALLS["outer"] += 1
    return _inner(x.sin()).cos()


def _has_sites(fn: Any) -> bool:
    """``fn`` has an instrumented generation (installed only while a compiled call runs: its
    ``__code__`` outside one is its own)."""
    cs = REGISTRY.by_code.get(fn.__code__)
    return cs is not None and cs.current is not None and "__magpy_site" in cs.current.code.co_names


def test_explain_runs_the_program_once_and_leaves_no_instrumented_code() -> None:
    """``magpy.explain`` of a function whose callee breaks: each runs exactly once, and
    afterwards both have their original code and the registry holds nothing of theirs."""
    codes = (_outer.__code__, _inner.__code__)
    CALLS.update(inner=0, outer=0)
    out = magpy.explain(_outer)(torch.randn(3))
    assert CALLS == {"inner": 1, "outer": 1}
    assert out.graph_break_count == 1 and out.graph_count == 4, out
    assert (_outer.__code__, _inner.__code__) == codes
    assert not REGISTRY.by_code and not REGISTRY.by_key


def test_explain_keeps_the_sites_of_a_compiled_callable() -> None:
    """A compiled callable in split mode keeps its instrumented code and its records through
    an explain of the same function, and hits afterwards."""
    fast = magpy.compile(_outer, backend="eager")
    x = torch.randn(3)
    for _ in range(3):
        fast(x)
    assert _has_sites(_outer) and _has_sites(_inner)
    before = magpy.stats(fast)
    magpy.explain(_outer)(x)
    assert _has_sites(_outer) and _has_sites(_inner)
    fast(x)
    after = magpy.stats(fast)
    assert after.records == before.records and after.hits > before.hits, (before, after)


def _fake_dot(directory: Path) -> None:
    """A ``dot`` that answers any DOT with a fixed SVG (the report's SVG path without
    Graphviz)."""
    exe = directory / "dot"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdin.read()\n"
        'print(\'<?xml version="1.0"?>\\n<svg xmlns="http://www.w3.org/2000/svg">'
        "<text>fake refgraph</text></svg>')\n"
    )
    exe.chmod(0o755)


def test_save_writes_the_report_with_or_without_graphviz(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``magpy.explain(fn)(*args).save(dir)``: the function's source with the break marked,
    each graph's ops, guards and mocks; the RefGraph as DOT text with the install hint where
    no ``dot`` is on PATH, as inline SVG where one is."""
    spec = importlib.util.spec_from_file_location("_explain_break_sample", BREAK_SAMPLE)
    assert spec is not None and spec.loader is not None
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    args, kwargs = sample.example_inputs()
    out = magpy.explain(sample.scale_and_report)(*args, **kwargs)
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    _check_report(out.save(tmp_path / "no_dot"), svg=False)
    _fake_dot(empty)
    report = _check_report(out.save(tmp_path / "with_dot"), svg=True)
    assert "fake refgraph" in "".join(report.by_class["refgraph"])
    with pytest.raises(TypeError, match=r"save\(directory\)"):
        out.save(3)  # type: ignore[arg-type]
