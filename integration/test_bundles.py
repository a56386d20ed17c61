"""Bundles (``magpy.save_cache_artifacts`` / ``magpy.load_cache_artifacts``, the meaning of
``torch.compiler``'s): a process saves its compiled records as bytes; a fresh process, running a
copy of the program from another directory (another checkout: other absolute paths), loads them
and serves its first calls from them, with nothing monitored, results equal to eager's.

A bundle is verified before anything in it is unpickled: one whose bytes changed, or signed
with another key, raises ``magpy.BundleError`` (the test fails if anything is unpickled); one
made by other versions or settings is ignored with the reason in ``BundleInfo.refused``.

The program is run as a script (``python <copy>/bundle_prog.py ...``, its module ``__main__``),
each run a fresh process; ``save`` runs with a records directory (``MAGPY_RECORDS_DIR``), ``load``
with none: the bundle alone serves.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import magpy
from magpy_runtime.store import _bundle, _entryfiles, _persist, _store

PROGRAM = """
import json
import sys
from pathlib import Path

import torch

import magpy


def act(t):
    return torch.relu(t) * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return act(self.lin(x)) + 0.5


def fn(x, n):
    return act(x).sum(dim=1) + n


def main():
    action, bundle, backend = sys.argv[1:4]
    key = sys.argv[4].encode() if len(sys.argv) > 4 else None
    info = None
    if action == "load":
        info = magpy.load_cache_artifacts(Path(bundle).read_bytes(), key=key)
    torch.manual_seed(0)
    net = Net().eval()
    compiled = {n: magpy.compile(p, backend=backend) for n, p in (("net", net), ("fn", fn))}
    if action == "load-late":  # (compiled before the bundle is loaded)
        info = magpy.load_cache_artifacts(Path(bundle).read_bytes(), key=key)
    equal = True
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(4, 8)
            pairs = [(compiled["net"](x), net(x)), (compiled["fn"](x, 1), fn(x, 1))]
            close = torch.equal if backend == "eager" else torch.allclose
            equal = equal and all(close(got, want) for got, want in pairs)
    inductor = "torch._inductor.compile_fx" in sys.modules
    fields = ("hits", "misses", "records", "from_disk")
    stats = {n: {f: getattr(magpy.stats(c), f) for f in fields} for n, c in compiled.items()}
    if action == "save":
        Path(bundle).write_bytes(magpy.save_cache_artifacts(key=key))
    loaded = None if info is None else {"records": info.records, "refused": info.refused}
    print(json.dumps({"equal": equal, "stats": stats, "inductor_imported": inductor,
                      "loaded": loaded}))


main()
"""

KEY = "a key of 32 bytes for the tests!"


def _copy(where: Path) -> Path:
    """The program in directory ``where`` (a checkout of its own)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "bundle_prog.py").write_text(textwrap.dedent(PROGRAM))
    return where / "bundle_prog.py"


def _run(script: Path, *argv: str, records: Path | None = None) -> tuple[dict[str, Any], str]:
    """``script`` run as a fresh process: its printed result and its log (``records``)."""
    env = {k: v for k, v in os.environ.items() if k != "MAGPY_RECORDS_DIR"}
    env |= {"MAGPY_LOGS": "records", "OMP_NUM_THREADS": "1"}
    if records is not None:
        env["MAGPY_RECORDS_DIR"] = str(records)
    out = subprocess.run(
        [sys.executable, str(script), *argv],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=script.parent,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _save(root: Path, backend: str, *key: str, on_disk: bool = True) -> tuple[Path, dict[str, Any]]:
    """A bundle saved by a first process, its records written to a records directory
    (``on_disk``) or, without one, kept in memory."""
    bundle = root / "bundle.bin"
    records = root / "records" if on_disk else None
    result, log = _run(_copy(root / "first"), "save", str(bundle), backend, *key, records=records)
    assert result["equal"], result
    assert all(s["misses"] == 1 for s in result["stats"].values()), result
    assert log.count("stored as" if on_disk else "kept in memory as") >= 2, log
    return bundle, result


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of the eager backend, saved by a first process (unsigned)."""
    return _save(tmp_path_factory.mktemp("bundle"), "eager")[0]


def test_a_fresh_process_elsewhere_serves_its_first_calls_from_a_bundle(
    saved: Path, tmp_path: Path
) -> None:
    """Another directory, no records directory: the two records come from the bundle; no call
    is monitored (no miss, no new record), results equal eager's."""
    result, log = _run(_copy(tmp_path / "second"), "load", str(saved), "eager")
    assert result["equal"], result
    assert result["loaded"] == {"records": 2, "refused": None}
    for name in ("net", "fn"):
        assert result["stats"][name] == {"hits": 3, "misses": 0, "records": 1, "from_disk": 1}
    assert "new record" not in log and log.count("loaded from") == 2, log


def test_records_made_in_memory_are_saved(tmp_path: Path) -> None:
    """No records directory in the saving process (``torch.compiler.save_cache_artifacts``
    needs no setup either): its records, kept in memory, are in the bundle; a fresh process
    elsewhere serves its first calls from them, nothing monitored."""
    bundle, _ = _save(tmp_path, "eager", on_disk=False)
    assert not (tmp_path / "records").exists()
    result, log = _run(_copy(tmp_path / "second"), "load", str(bundle), "eager")
    assert result["equal"], result
    assert result["loaded"] == {"records": 2, "refused": None}
    for name in ("net", "fn"):
        assert result["stats"][name] == {"hits": 3, "misses": 0, "records": 1, "from_disk": 1}
    assert "new record" not in log and log.count("loaded from") == 2, log


def test_callables_compiled_before_the_bundle_is_loaded_are_served(
    saved: Path, tmp_path: Path
) -> None:
    """The bundle loaded after both callables were compiled (before their first call): their
    first call is served by it as well."""
    result, log = _run(_copy(tmp_path / "second"), "load-late", str(saved), "eager")
    assert result["equal"], result
    assert result["loaded"] == {"records": 2, "refused": None}
    for name in ("net", "fn"):
        assert result["stats"][name] == {"hits": 3, "misses": 0, "records": 1, "from_disk": 1}
    assert "new record" not in log, log


def test_what_cannot_be_stored_is_named_when_saving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lambda (not found again by name) and a graph with symbolic sizes: their records are
    not in the bundle, and the warning of ``save_cache_artifacts`` says which and why."""
    magpy.reset()
    square = magpy.compile(lambda x: x * x, backend="eager")
    sized = magpy.compile(_sized, backend="eager", dynamic=True)
    for n in (3, 4, 5):
        x = torch.randn(n)
        assert torch.equal(square(x), x * x) and torch.equal(sized(x), _sized(x))
    magpy.save_cache_artifacts()
    warned = [r.getMessage() for r in caplog.records if "not in the bundle" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "<lambda>: code not found again by name" in warned[0], warned
    assert "_sized: its graph has symbolic sizes" in warned[0], warned
    magpy.reset()


def _sized(x: torch.Tensor) -> torch.Tensor:
    return x.cos() + x.shape[0]


def test_a_signed_bundle_needs_its_key(tmp_path: Path) -> None:
    """``key=``: an HMAC-SHA256; loaded with the key it serves, without it (or with another)
    it is refused before anything is used; an unsigned bundle is refused when a key is given."""
    bundle, _ = _save(tmp_path, "eager", KEY)
    data = bundle.read_bytes()
    assert data.startswith(_bundle.MAGIC + b"hmac-sha256:")
    result, _ = _run(_copy(tmp_path / "second"), "load", str(bundle), "eager", KEY)
    assert result["stats"]["fn"]["from_disk"] == 1 and result["equal"]
    with pytest.raises(magpy.BundleError, match="signed: pass the key"):
        magpy.load_cache_artifacts(data)
    with pytest.raises(magpy.BundleError, match="HMAC-SHA256 under the key given"):
        magpy.load_cache_artifacts(data, key=b"another key of 32 bytes, wrong!!")
    unsigned = _resigned(data, lambda header: None, key=None)
    with pytest.raises(magpy.BundleError, match="not signed, and a key was given"):
        magpy.load_cache_artifacts(unsigned, key=KEY.encode())


@pytest.fixture
def nothing_unpickled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a record, or torch's artifacts, were unpickled or loaded."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("unpickled before the bundle was verified")

    monkeypatch.setattr(_persist, "decode", refuse)
    monkeypatch.setattr(_store, "add_bundled", refuse)
    monkeypatch.setattr(_bundle, "add_bundled", refuse)
    monkeypatch.setattr(_bundle, "install_snapcheck", refuse)


@pytest.mark.parametrize("where", [-5, 200], ids=["payload", "header"])
def test_a_tampered_bundle_is_refused_before_unpickling(
    saved: Path, nothing_unpickled: None, where: int
) -> None:
    """One byte changed (in the records, or in the header after the digest line): the SHA-256
    no longer matches; ``BundleError`` names it, nothing was unpickled or kept."""
    data = bytearray(saved.read_bytes())
    at = where if where < 0 else data.index(b"\n", len(_bundle.MAGIC)) + 1 + where
    data[at] ^= 0x01
    with pytest.raises(magpy.BundleError, match="SHA-256 does not match"):
        magpy.load_cache_artifacts(bytes(data))


def test_other_formats_are_refused(saved: Path, nothing_unpickled: None) -> None:
    """Not a bundle, a later format, an unknown digest: refused before anything is read."""
    data = saved.read_bytes()
    with pytest.raises(magpy.BundleError, match="not a MagPy bundle"):
        magpy.load_cache_artifacts(b"\x80\x04" + data)
    later = data.replace(b"MAGPY-BUNDLE 1\n", b"MAGPY-BUNDLE 2\n", 1)
    with pytest.raises(magpy.BundleError, match="format '2'"):
        magpy.load_cache_artifacts(later)
    plain = data.replace(b"\nsha256:", b"\nmd5:", 1)
    with pytest.raises(magpy.BundleError, match="unknown digest"):
        magpy.load_cache_artifacts(plain)


def _resigned(data: bytes, change: Any, key: bytes | None) -> bytes:
    """``data`` with its header changed by ``change`` and a digest that matches it (as a
    bundle made by another MagPy would have)."""
    body = data[len(_bundle.MAGIC) :].partition(b"\n")[2]
    header_line, _, payload = body.partition(b"\n")
    header = json.loads(header_line)
    change(header)
    body = _entryfiles.canonical(header) + b"\n" + payload
    if key is None:
        mac = b"sha256:" + hashlib.sha256(body).hexdigest().encode()
    else:
        mac = b"hmac-sha256:" + hmac.new(key, body, hashlib.sha256).hexdigest().encode()
    return _bundle.MAGIC + mac + b"\n" + body


@pytest.mark.parametrize("which", ["torch", "magpy", "python", "speculate"])
def test_a_bundle_of_other_versions_or_settings_is_ignored(
    saved: Path, nothing_unpickled: None, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A header naming another torch, MagPy or Python, or made with another
    ``config.speculate``: nothing is loaded, the reason is returned and warned."""

    def change(header: dict[str, Any]) -> None:
        if which == "speculate":
            header["config"]["speculate"] = not header["config"]["speculate"]
        else:
            header["versions"][which] += ".other"

    info = magpy.load_cache_artifacts(_resigned(saved.read_bytes(), change, key=None))
    assert info.records == 0 and info.refused is not None
    assert info.refused.startswith("made with other versions or settings"), info
    assert any("bundle ignored" in r.getMessage() for r in caplog.records)


def test_the_key_has_no_file_path(saved: Path) -> None:
    """Each bundled entry's key names module, qualified name and a digest of the code, and
    no path of the checkout that made it."""
    body = saved.read_bytes()[len(_bundle.MAGIC) :].partition(b"\n")[2]
    header_line, _, payload = body.partition(b"\n")
    keys, at = [], 0
    for section in json.loads(header_line)["sections"]:
        part, at = payload[at : at + section["bytes"]], at + section["bytes"]
        if section["kind"] == "entry":
            read = _entryfiles.parse_entry(part)
            assert not isinstance(read, str), read
            keys.append(read[0]["key"])
    assert sorted(k["qualname"] for k in keys) == ["Net", "fn"]
    for key in keys:
        assert key["module"] == "__main__" and {"file", "path"}.isdisjoint(key)
        assert str(saved.parent) not in json.dumps(key)


@pytest.mark.inductor
@pytest.mark.parametrize("on_disk", [True, False], ids=["records-dir", "in-memory"])
def test_inductor_bundle_serves_without_compiling(tmp_path: Path, on_disk: bool) -> None:
    """Backend "inductor": the bundle carries each record with its library (AOTInductor) and
    torch's artifacts; a fresh process elsewhere serves its first calls from it without
    importing Inductor, results close to eager's. Without a records directory the libraries
    are built when the bundle is saved."""
    bundle, first = _save(tmp_path, "inductor", on_disk=on_disk)
    assert first["inductor_imported"]
    result, log = _run(_copy(tmp_path / "second"), "load", str(bundle), "inductor")
    assert result["equal"], result
    assert result["loaded"] == {"records": 2, "refused": None}
    for name in ("net", "fn"):
        assert result["stats"][name] == {"hits": 3, "misses": 0, "records": 1, "from_disk": 1}
    assert "new record" not in log, log
    assert not result["inductor_imported"], log
    shutil.rmtree(tmp_path / "records", ignore_errors=True)
