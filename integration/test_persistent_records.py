"""Persistent records (``magpy.config.records_dir``, ``MAGPY_RECORDS_DIR``): a record stored by
one process serves the first call of the next one, without monitoring it; every entry that
fails a check (owner, permissions, digest, versions, changed code) is ignored with a warning
and the call is monitored as without the store; ``magpy.reset()`` and ``magpy cache clear``
delete the entries.

One subprocess (``stored``, once per module) records the program below with the eager
backend; the test that needs a fresh process starts a second one, the others load that
subprocess's entries into this process (a copy of its directory each), where the program's
modules are imported from the same files under the same names.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import magpy
from magpy import _cli
from magpy_runtime import config
from magpy_runtime.store import _entryfiles

HELPERS = """
import torch


def act(t):
    return torch.relu(t) * 2
"""

PROGRAM = """
import json
import sys

import torch

import magpy
import persist_helpers


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = 2.0
        self.mode = "eval"

    def shift(self):
        # (a frozenset constant: its order differs between processes, its fingerprint not)
        return 0.5 if self.mode in {"train", "eval", "test"} else 0.0

    def forward(self, x):
        return persist_helpers.act(self.lin(x)) * self.scale + self.shift()


def fn(x, n):
    return persist_helpers.act(x) + n


KEY = object()  # an instance: a record that reads TABLE[KEY] cannot be stored
TABLE = {KEY: 3.0}


def uses_key(x):
    return x * TABLE[KEY]


def drive(backend="eager", names=("net", "fn", "uses_key"), calls=3):
    torch.manual_seed(0)
    programs = {"net": Net(), "fn": fn, "uses_key": uses_key}
    args = {"net": lambda x: (x,), "fn": lambda x: (x, 1), "uses_key": lambda x: (x,)}
    compiled = {n: magpy.compile(programs[n], backend=backend) for n in names}
    equal = True
    for _ in range(calls):
        x = torch.randn(3, 4)
        for n in names:
            got, want = compiled[n](*args[n](x)), programs[n](*args[n](x))
            close = torch.equal if backend == "eager" else torch.allclose
            equal = equal and close(got, want)
    fields = ("hits", "misses", "records", "from_disk")
    stats = {n: {f: getattr(magpy.stats(c), f) for f in fields} for n, c in compiled.items()}
    inductor = "torch._inductor.compile_fx" in sys.modules  # (before the libraries are built)
    magpy.wait_compiles()  # (a stored Inductor record's library is built on the worker)
    return {"equal": equal, "stats": stats, "inductor_imported": inductor}

"""
# a fresh process runs the program imported (as this process imports it, by the same name)
MAIN = (
    "import json, sys, persist_prog; names = tuple(sys.argv[2:]) or ('net', 'fn', 'uses_key'); "
    "print(json.dumps(persist_prog.drive(sys.argv[1], names)))"
)

MODULES = ("persist_prog", "persist_helpers")


def _write_program(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / "persist_helpers.py").write_text(textwrap.dedent(HELPERS))
    (where / "persist_prog.py").write_text(textwrap.dedent(PROGRAM))


def _run(
    program: Path, records: Path, *argv: str, extra_env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """``persist_prog`` run as a fresh process with ``records`` as its store: its ``drive``
    result and its log (``MAGPY_LOGS=records``)."""
    env = (
        os.environ
        | {
            "MAGPY_RECORDS_DIR": str(records),
            "MAGPY_LOGS": "records",
            # (the caller's path after it: a run against a checkout's sources keeps them)
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(program), os.environ.get("PYTHONPATH")])
            ),
            "OMP_NUM_THREADS": "1",
        }
        | (extra_env or {})
    )
    out = subprocess.run(
        [sys.executable, "-c", MAIN, *argv],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(program directory, the store the first process left, that process's log)."""
    root = tmp_path_factory.mktemp("persist")
    _write_program(root / "program")
    result, log = _run(root / "program", root / "records", "eager")
    assert result["equal"], result
    assert all(s["misses"] == 1 and s["from_disk"] == 0 for s in result["stats"].values())
    return root / "program", root / "records", log


@pytest.fixture
def program(stored: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The program's module, imported here from the files the first process ran."""
    monkeypatch.syspath_prepend(str(stored[0]))
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(_entryfiles, "_warned", set())  # (each test sees its own warnings)
    module = __import__("persist_prog")
    yield module
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.fixture
def records(stored: tuple[Path, Path, str], tmp_path: Path) -> Path:
    """A copy of the first process's store, with its permissions."""
    copy = tmp_path / "records"
    shutil.copytree(stored[1], copy)
    copy.chmod(0o700)
    return copy


def _drive(program: Any, records: Path, **kwargs: Any) -> dict[str, Any]:
    with config.patch(records_dir=str(records)):
        result: dict[str, Any] = program.drive(**kwargs)
    assert result["equal"], result
    return result


def _entries(records: Path) -> list[Path]:
    return sorted(records.glob(f"*{_entryfiles.SUFFIX}"))


def test_the_first_process_stores_what_can_be_stored(stored: tuple[Path, Path, str]) -> None:
    """One entry per storable record (the module and the function), user-only files in a
    user-only directory; the record that reads a dict by an instance key is not stored."""
    _, records, log = stored
    assert len(_entries(records)) == 2
    assert records.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in _entries(records))
    assert "record of uses_key not stored: a builtins.object object" in log
    assert log.count("stored as") == 2


def test_a_second_process_serves_its_first_calls_from_disk(stored: tuple[Path, Path, str]) -> None:
    """A fresh process: the first call of each stored callable is served by the stored record
    (no miss, nothing monitored: no "new record" line), results equal eager's."""
    program, records, _ = stored
    result, log = _run(program, records, "eager")
    stats = result["stats"]
    for name in ("net", "fn"):
        assert stats[name] == {"hits": 3, "misses": 0, "records": 1, "from_disk": 1}
        assert f"new record for {'Net' if name == 'net' else name}" not in log
        assert f"record of {'Net' if name == 'net' else name} loaded from" in log
    assert stats["uses_key"] == {"hits": 2, "misses": 1, "records": 1, "from_disk": 0}


def test_this_process_serves_from_a_copy(program: Any, records: Path) -> None:
    """The control for the rejections below: loaded in this process, the copy serves."""
    stats = _drive(program, records)["stats"]
    assert stats["net"]["from_disk"] == stats["fn"]["from_disk"] == 1
    assert stats["net"]["misses"] == stats["fn"]["misses"] == 0


def _refused(program: Any, records: Path, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    """Nothing served from ``records``: each call monitored and recorded as without a store,
    results equal eager's, and one warning naming ``reason``."""
    with caplog.at_level(logging.WARNING, logger="magpy"):
        stats = _drive(program, records, names=("net", "fn"))["stats"]
    for name in ("net", "fn"):
        assert stats[name] == {"hits": 2, "misses": 1, "records": 1, "from_disk": 0}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(reason in m for m in warned), warned
    assert len([m for m in warned if reason in m]) == 1, warned


def test_an_entry_of_another_owner_is_refused(
    program: Any, records: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files and directory owned by another user (simulated: the uid MagPy compares with)."""
    monkeypatch.setattr(_entryfiles, "_uid", lambda: os.getuid() + 1)
    _refused(program, records, caplog, "belongs to another user")


def test_an_entry_whose_content_changed_is_refused(
    program: Any, records: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One byte of the pickle changed: the SHA-256 no longer matches."""
    for path in _entries(records):
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF
        path.write_bytes(bytes(data))
    _refused(program, records, caplog, "SHA-256")


@pytest.mark.parametrize("which", ["torch", "magpy", "python"])
def test_an_entry_of_other_versions_is_refused(
    program: Any, records: Path, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    """A header naming another torch, MagPy or Python (with a digest that matches it)."""
    for path in _entries(records):
        data = path.read_bytes()
        magic, header_line, payload = data.split(b"\n", 2)
        header = json.loads(header_line)
        header["versions"][which] += ".other"
        header["sha256"] = _entryfiles.digest(header, payload)
        path.write_bytes(magic + b"\n" + _entryfiles.canonical(header) + b"\n" + payload)
    _refused(program, records, caplog, "made with other versions")


def test_a_group_writable_directory_is_refused(
    program: Any, records: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is read from, nor written to, a directory others may write into."""
    records.chmod(0o770)
    _refused(program, records, caplog, "writable by group or others")
    assert len(_entries(records)) == 2  # (the new records were not written there)


def test_a_changed_callee_is_not_served(
    program: Any, records: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The callee ``act`` has another body in this process (as after an edit of its file): its
    fingerprint differs, the entries are refused and deleted, the calls are monitored (results
    of the new body) and recorded anew."""
    helpers = sys.modules["persist_helpers"]
    edited = "import torch\n\n\ndef act(t):\n    return torch.relu(t) * 3\n"
    monkeypatch.setattr(helpers, "act", helpers.act)  # (put back afterwards)
    exec(compile(edited, helpers.__file__, "exec"), vars(helpers))
    stale = {p.name for p in _entries(records)}
    _refused(program, records, caplog, "the code of persist_helpers.act changed")
    fresh = {p.name for p in _entries(records)}
    assert len(fresh) == 2 and not fresh & stale


def test_a_changed_method_of_the_class_is_not_served(
    program: Any, records: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Net.shift`` returns another value in this process: ``Net``'s fingerprint differs."""
    monkeypatch.setattr(program.Net, "shift", lambda self: 1.5)
    with config.patch(records_dir=str(records)):
        stats = program.drive(names=("net",))
    assert stats["equal"]
    assert stats["stats"]["net"] == {"hits": 2, "misses": 1, "records": 1, "from_disk": 0}


def test_reset_deletes_the_stored_entries(program: Any, records: Path) -> None:
    """``magpy.reset()`` empties the store as well as the caches in memory."""
    _drive(program, records, names=("fn",))
    with config.patch(records_dir=str(records)):
        magpy.reset()
    assert _entries(records) == []


def test_cli_lists_and_clears(records: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``magpy cache list`` prints each entry (callable, backend, size, versions);
    ``magpy cache clear`` deletes them."""
    assert _cli.main(["cache", "list", "--dir", str(records)]) == 0
    out = capsys.readouterr().out
    assert "persist_prog.Net (module, backend='eager')" in out
    assert "persist_prog.fn (function, backend='eager')" in out
    assert "torch=" in out and "[current]" in out and "2 entries" in out
    assert _cli.main(["cache", "clear", "--dir", str(records)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert _entries(records) == []


def test_cli_takes_the_directory_from_the_environment(
    records: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --dir, ``MAGPY_RECORDS_DIR`` names the directory; with neither, a usage error."""
    monkeypatch.setenv("MAGPY_RECORDS_DIR", str(records))
    assert _cli.main(["cache", "list"]) == 0
    assert "2 entries" in capsys.readouterr().out
    monkeypatch.delenv("MAGPY_RECORDS_DIR")
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(["cache", "list"])
    assert exit_info.value.code == 2


def test_a_graph_with_symbolic_sizes_is_not_stored(program: Any, tmp_path: Path) -> None:
    """``dynamic=True``: the record's graph has symbolic sizes; nothing is written."""
    with config.patch(records_dir=str(tmp_path / "dyn")):
        compiled = magpy.compile(program.fn, backend="eager", dynamic=True)
        x = torch.randn(3, 4)
        assert torch.equal(compiled(x, 1), program.fn(x, 1))
    assert not (tmp_path / "dyn").exists() or _entries(tmp_path / "dyn") == []


@pytest.mark.inductor
def test_inductor_records_are_served_after_a_restart(tmp_path: Path) -> None:
    """Backend "inductor": the first process stores the record and, on its worker, the graph
    compiled ahead of time into a library; the second process's first call is served by the
    stored record running that library, without importing Inductor; results close to eager's."""
    _write_program(tmp_path / "program")
    where = (tmp_path / "program", tmp_path / "records", "inductor", "fn")
    first, log = _run(*where)
    assert "record of fn stored with its library as" in log
    assert len(_entries(tmp_path / "records")) == 1  # (the entry without it was replaced)
    second, log = _run(*where)
    assert first["equal"] and second["equal"]
    assert first["stats"]["fn"]["from_disk"] == 0 and first["inductor_imported"]
    assert second["stats"]["fn"] == {"hits": 3, "misses": 0, "records": 1, "from_disk": 1}
    assert "new record for fn" not in log
    assert not second["inductor_imported"]
    # a library is made for its machine and thread count: with other threads it is not loaded,
    # the record is compiled by Inductor instead (still served from disk)
    third, log = _run(*where, extra_env={"OMP_NUM_THREADS": "2"})
    assert third["equal"] and third["stats"]["fn"]["from_disk"] == 1
    assert "its library was made for" in log and third["inductor_imported"]


@pytest.mark.inductor
def test_without_libraries_inductor_compiles_a_loaded_record(tmp_path: Path) -> None:
    """``MAGPY_RECORDS_NATIVE=0``: entries hold no library; a loaded record is compiled by
    Inductor (its caches warm), as before libraries."""
    _write_program(tmp_path / "program")
    where = (tmp_path / "program", tmp_path / "records", "inductor", "fn")
    native_off = {"MAGPY_RECORDS_NATIVE": "0"}
    _, log = _run(*where, extra_env=native_off)
    assert "with its library" not in log
    second, _ = _run(*where, extra_env=native_off)
    assert second["equal"] and second["stats"]["fn"]["from_disk"] == 1
    assert second["inductor_imported"]
