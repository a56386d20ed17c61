"""ParityBench harness: run MagPy (and/or TorchDynamo) over the generated ParityBench files.

Usage (from the repository root; ParityBench itself lives OUTSIDE this repository)::

    python -m integration.paritybench /tmp/paritybench/generated --split dev --mode both \\
        --backend eager --jobs 2 --out .paritybench/results.jsonl [--limit N] [--resume]

Every generated ``test_<repo>.py`` is evaluated in its own subprocess
(``integration/paritybench_worker.py``); ``--jobs`` of them run in parallel. ``--timeout`` is
the limit, in seconds, for each phase of the file's subprocess (the eager reference of one case,
one mode on one case; starting up and importing the file has ``--import-timeout``): when a phase
runs over, the subprocess is killed, that phase is recorded as a timeout and a new subprocess
continues with the remaining cases.

Each case gets one JSON line per mode in ``--out`` (and each file one ``"kind": "file"`` line),
so ``--resume`` continues an interrupted run. Statuses:

``full_graph_ok``  one graph, no break, no fallback, both compiled calls equal eager
``break``          equal outputs, but more than one graph / graph breaks / eager fallback
``wrong``          a compiled call returned something different from eager (reported loudly)
``crash``          explain/compile/call raised where eager did not (or killed the worker)
``timeout``        the mode ran over ``--timeout``
``eager_fail``     eager itself failed to build or run (excluded from the denominator)
``skip``           nondeterministic eager outputs, or no ``forward`` (excluded as well)

Splits: ``dev`` is the files whose ``sha1(basename)`` starts with a digit; ``rest`` the others
(reserved: do not run or tune on it); ``all`` everything.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().with_name("paritybench_worker.py")
PACKAGES = ("magpy-refgraph", "magpy-monitor", "magpy-codegen", "magpy-runtime")

_STOP = threading.Event()  # set on Ctrl-C / SIGTERM: no new workers
_LIVE: set[subprocess.Popen[bytes]] = set()  # running workers, killed on the way out
_LIVE_LOCK = threading.Lock()


def src_paths(root: Path = REPO) -> list[Path]:
    """The import paths of the MagPy checkout at ``root`` (this repository by default)."""
    return [root / "packages" / p / "src" for p in PACKAGES] + [root / "src"]


STATUSES = ["full_graph_ok", "break", "wrong", "crash", "timeout", "eager_fail", "skip"]

__all__ = ["in_split", "list_files", "load_results", "main", "normalize_reason", "summarize"]


# ------------------------------------------------------------------------------------------------
# File selection
# ------------------------------------------------------------------------------------------------
def in_split(basename: str, split: str) -> bool:
    """``dev``: sha1 of the file's basename starts with 0-9; ``rest``: with a-f; ``all``."""
    if split == "all":
        return True
    dev = hashlib.sha1(basename.encode()).hexdigest()[0] in "0123456789"
    if split == "dev":
        return dev
    if split == "rest":
        return not dev
    raise ValueError(f"unknown split {split!r}")


def list_files(directory: str | os.PathLike[str], split: str) -> list[Path]:
    files = sorted(
        p for p in Path(directory).iterdir() if re.fullmatch(r"test_.*\.py", p.name) and p.is_file()
    )
    return [p for p in files if in_split(p.name, split)]


# ------------------------------------------------------------------------------------------------
# Results file
# ------------------------------------------------------------------------------------------------
class ResultsFile:
    """Append-only JSON lines, shared by the worker threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        # A run killed in the middle of a line leaves it unterminated: end it, so the next
        # record starts on a line of its own (the broken line is skipped when read).
        if path.exists() and path.stat().st_size:
            with path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
            if last != b"\n":
                with path.open("a", encoding="utf-8") as f:
                    f.write("\n")

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str)
        with self.lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def load_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill: the case runs again
    return out


# ------------------------------------------------------------------------------------------------
# Running one file
# ------------------------------------------------------------------------------------------------
def _worker_env(root: Path = REPO) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(p) for p in src_paths(root)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / "paritybench-inductor-cache")
    )
    return env


def _events(proc: subprocess.Popen[bytes], deadline_box: list[float]) -> Iterator[Any]:
    """Events of the worker; yields ``"timeout"`` when the current deadline passes and
    ``"eof"`` when the worker closed its end."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    buf = b""
    try:
        while True:
            remaining = deadline_box[0] - time.monotonic()
            if remaining <= 0:
                yield "timeout"
                return
            if not sel.select(min(remaining, 5.0)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                yield "eof"
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue
    finally:
        sel.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_file(
    path: Path,
    modes: list[str],
    backend: str,
    timeout: float,
    results: ResultsFile,
    done: set[tuple[str, int, str]],
    file_done: bool,
    mem_gb: float,
    log: Any = None,
    root: Path = REPO,
    import_timeout: float = 120.0,
    max_cases: int = 0,
) -> dict[str, Any]:
    """Evaluate one generated file (restarting its worker after a timeout or a crash)."""
    name = path.name
    skip = {(i, m) for (f, i, m) in done if f == name}
    summary: dict[str, Any] = {"file": name, "statuses": collections.Counter(), "wrong": []}
    n_cases: int | None = None
    case_names: list[str] = []
    restarts = 0
    while not _STOP.is_set():
        current: tuple[int, str] | None = None  # (index, phase) in progress
        ended = False
        with tempfile.TemporaryDirectory(prefix="paritybench-") as cwd:
            err_path = os.path.join(cwd, "stderr.txt")
            with open(err_path, "wb") as err:
                cmd = [
                    sys.executable,
                    str(WORKER),
                    str(path.resolve()),
                    "--modes",
                    ",".join(modes),
                    "--backend",
                    backend,
                    "--skip",
                    json.dumps(sorted(skip)),
                    "--mem-gb",
                    str(mem_gb),
                    "--max-cases",
                    str(max_cases),
                ]
                proc = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    cwd=cwd,
                    env=_worker_env(root),
                    start_new_session=True,
                )
            with _LIVE_LOCK:
                _LIVE.add(proc)
            # starting Python, torch and the generated file's imports: its own budget
            deadline = [time.monotonic() + max(timeout, import_timeout)]
            outcome = "eof"
            try:
                for ev in _events(proc, deadline):
                    if ev in ("timeout", "eof"):
                        outcome = ev
                        break
                    kind = ev.get("event")
                    if kind == "file":
                        n_cases = ev["n_cases"]
                        case_names = ev.get("cases", [])
                        if not file_done:
                            results.write(
                                {
                                    "kind": "file",
                                    "file": name,
                                    "n_cases": n_cases,
                                    "stubbed": ev.get("stubbed", []),
                                    "import_error": ev.get("import_error"),
                                    "backend": backend,
                                    "seconds": ev.get("seconds"),
                                    "magpy_root": str(root),
                                }
                            )
                            file_done = True
                        summary["stubbed"] = ev.get("stubbed", [])
                        summary["import_error"] = ev.get("import_error")
                    elif kind == "start":
                        current = (ev["index"], ev["phase"])
                        deadline[0] = time.monotonic() + timeout
                    elif kind == "result":
                        rec = ev["record"]
                        rec["file"] = name
                        results.write(rec)
                        skip.add((rec["index"], rec["mode"]))
                        summary["statuses"][rec["status"]] += 1
                        if rec["status"] == "wrong":
                            summary["wrong"].append(rec)
                            msg = (
                                f"!!! WRONG OUTPUT [{rec['mode']}] {name}:{rec['case']} "
                                f"(#{rec['index']}): {rec.get('reason')}"
                            )
                            print(msg, file=sys.stderr, flush=True)
                        current = None
                    elif kind == "end":
                        ended = True
            finally:
                _kill(proc)
                with _LIVE_LOCK:
                    _LIVE.discard(proc)
                if proc.stdout is not None:
                    proc.stdout.close()
            if _STOP.is_set():
                return summary
            if ended:
                return summary
            rc = proc.returncode
            limit = timeout if current is not None else max(timeout, import_timeout)
            why = (
                f"timeout after {limit:g}s"
                if outcome == "timeout"
                else f"worker died (exit {rc}): {_tail(err_path, 300).strip()[-300:]}"
            )
        restarts += 1
        if current is None:
            # The import of the generated file (or the end of the run) failed.
            if n_cases is None:
                if not file_done:
                    results.write(
                        {
                            "kind": "file",
                            "file": name,
                            "n_cases": 0,
                            "stubbed": [],
                            "import_error": f"import: {why}",
                            "backend": backend,
                        }
                    )
                summary["import_error"] = f"import: {why}"
                return summary
            if all((i, m) in skip for i in range(n_cases) for m in modes) or restarts > 3:
                return summary
            continue
        index, phase = current
        status = "timeout" if outcome == "timeout" else "crash"
        todo = [phase] if phase in modes else [m for m in modes if (index, m) not in skip]
        for mode in todo:
            rec = {
                "kind": "case",
                "file": name,
                "index": index,
                "case": case_names[index] if index < len(case_names) else "?",
                "mode": mode,
                "backend": backend,
                "status": status if phase in modes else "eager_fail",
                "reason": why if phase in modes else f"eager: {why}",
                "seconds": timeout if outcome == "timeout" else None,
            }
            results.write(rec)
            skip.add((index, mode))
            summary["statuses"][rec["status"]] += 1
        if log:
            log(f"  {name}#{index} [{phase}] {why[:120]}")
        if n_cases is not None and all((i, m) in skip for i in range(n_cases) for m in modes):
            return summary
        if restarts > 2 * (n_cases or 1) * len(modes) + 3:
            return summary
    return summary


def _stop_all(*_: Any) -> None:
    """Stop starting workers and kill the running ones (Ctrl-C, SIGTERM)."""
    _STOP.set()
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------
def normalize_reason(reason: str | None, limit: int = 140) -> str:
    """Group similar reasons: drop addresses, numbers, paths and quoted tensor reprs."""
    if not reason:
        return ""
    s = str(reason)
    s = re.sub(r"0x[0-9a-fA-F]+", "<addr>", s)
    s = re.sub(r" ?\(at \('[^']*', \d+\)\)", "", s)  # MagPy's "(at ('file', line))"
    s = re.sub(r"(/[^\s:'\"\])]+)+/", "", s)  # directories
    s = re.sub(r"\((?:test_)?[\w.-]+\.py:\d+\)", "", s)  # (file.py:123) locations
    s = re.sub(r"\[[\w.<>-]+\.py:\d+ in [\w<>.]+\]", "", s)  # [file.py:12 in fn] crash sites
    s = re.sub(r"tensor\(\[.*?\]\)", "tensor(...)", s)
    s = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", s)
    s = re.sub(r"\s+", " ", s).strip()
    return s[:limit]


def _mode_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    c = collections.Counter(r["status"] for r in records)
    denom = sum(c[s] for s in ("full_graph_ok", "break", "wrong", "crash", "timeout"))
    return {
        "cases": len(records),
        "eager_fail": c["eager_fail"],
        "skip": c["skip"],
        "denominator": denom,
        "full_graph_ok": c["full_graph_ok"],
        "share": (c["full_graph_ok"] / denom) if denom else 0.0,
        "break": c["break"],
        "wrong": c["wrong"],
        "crash": c["crash"],
        "fallback": sum(1 for r in records if r.get("fallbacks")),
        "timeout": c["timeout"],
        "correct": c["full_graph_ok"] + c["break"],
        # MagPy only (from magpy.stats): the identical second call did not hit the cache
        "miss2": sum(1 for r in records if (r.get("misses") or 0) >= 2 and not r.get("fallbacks")),
    }


def _table(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(x).replace("|", "\\|") for x in row) + " |" for row in rows]
    return "\n".join(lines)


_METRICS = [
    ("cases", "cases"),
    ("eager_fail", "eager failures (excluded)"),
    ("skip", "skipped: nondeterministic / no forward (excluded)"),
    ("denominator", "deterministic eager-OK cases"),
    ("full_graph_ok", "full graph, correct"),
    ("share", "full-graph share"),
    ("break", "correct with breaks/fallback"),
    ("correct", "correct outputs (any graphs)"),
    ("wrong", "WRONG outputs"),
    ("crash", "crashes"),
    ("fallback", "cases with an eager fallback"),
    ("timeout", "timeouts"),
    ("miss2", "identical 2nd call missed the cache"),
]


def _fmt(key: str, value: Any) -> str:
    return f"{value:.1%}" if key == "share" else str(value)


def summarize(records: list[dict[str, Any]], modes: list[str], top: int = 15) -> str:
    """The Markdown report of every case record for ``modes``."""
    files = {r["file"]: r for r in records if r.get("kind") == "file"}
    cases = [r for r in records if r.get("kind") == "case"]
    parts = []
    n_imp = sum(1 for r in files.values() if r.get("import_error"))
    stub_counts = collections.Counter(
        top
        for r in files.values()
        for top in {s.split(".")[0].split(":")[0] for s in r.get("stubbed") or []}
    )
    parts.append(
        f"files: {len(files)}, failing to import: {n_imp}; most stubbed packages: "
        + ", ".join(f"{k} ({v})" for k, v in stub_counts.most_common(10))
    )
    by_mode = {m: [r for r in cases if r["mode"] == m] for m in modes}
    stats = {m: _mode_stats(by_mode[m]) for m in modes}
    for m in modes:
        st = stats[m]
        parts.append(f"\n### {m}\n")
        parts.append(
            _table(["metric", "value"], [[label, _fmt(k, st[k])] for k, label in _METRICS])
        )
        fails = [r for r in by_mode[m] if r["status"] in ("break", "wrong", "crash", "timeout")]
        counts = collections.Counter(
            (r["status"], normalize_reason(r.get("reason"))) for r in fails
        )
        parts.append(f"\nTop {top} failure reasons ({m}):\n")
        parts.append(
            _table(
                ["count", "status", "reason"],
                [[n, s, reason or "?"] for (s, reason), n in counts.most_common(top)],
            )
        )
        wrong = [r for r in by_mode[m] if r["status"] == "wrong"]
        if wrong:
            parts.append(f"\n**!!! {len(wrong)} WRONG OUTPUTS ({m}):**\n")
            parts += [
                f"- {r['file']} :: {r['case']} (#{r['index']}): {r.get('reason')}" for r in wrong
            ]
    if len(modes) > 1:
        parts.append("\n### side by side\n")
        parts.append(
            _table(
                ["metric", *modes],
                [[label, *(_fmt(k, stats[m][k]) for m in modes)] for k, label in _METRICS],
            )
        )
        if len(modes) == 2:
            a, b = modes
            sa = {(r["file"], r["index"]): r["status"] for r in by_mode[a]}
            sb = {(r["file"], r["index"]): r["status"] for r in by_mode[b]}
            both = [
                k
                for k in sa
                if k in sb and "eager_fail" not in (sa[k], sb[k]) and "skip" not in (sa[k], sb[k])
            ]
            xt = collections.Counter((sa[k], sb[k]) for k in both)
            order = ["full_graph_ok", "break", "wrong", "crash", "timeout"]
            parts.append(f"\nrows: {a}, columns: {b} (cases run by both)\n")
            parts.append(
                _table([f"{a} \\ {b}", *order], [[s, *(xt[(s, t)] for t in order)] for s in order])
            )
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _default_mem_gb(jobs: int) -> float:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError):
        return 0.0
    return round(max(2.0, min(10.0, 0.8 * total / max(1, jobs))), 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m integration.paritybench",
        description="Run MagPy / TorchDynamo over ParityBench.",
    )
    p.add_argument("dir", help="ParityBench's generated/ folder (outside this repository)")
    p.add_argument("--split", default="dev", choices=["dev", "rest", "all"])
    p.add_argument("--mode", default="magpy", choices=["magpy", "dynamo", "both"])
    p.add_argument("--backend", default="eager", choices=["eager", "inductor", "aot_eager"])
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds per phase: the eager reference of a case, one mode of a case",
    )
    p.add_argument(
        "--import-timeout",
        type=float,
        default=120.0,
        help="seconds for a worker to start and import its generated file",
    )
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=".paritybench/results.jsonl")
    p.add_argument("--limit", type=int, default=None, help="first N files of the split")
    p.add_argument("--offset", type=int, default=0, help="skip the first N files of the split")
    p.add_argument("--filter", default=None, help="only files whose name contains this")
    p.add_argument(
        "--sample",
        type=Path,
        default=None,
        help="a text file of basenames, one per line: only those files (each must be in the "
        "split; integration/data/paritybench_dev_sample.txt is the fixed dev sample)",
    )
    p.add_argument(
        "--require",
        type=float,
        default=None,
        metavar="SHARE",
        help="exit non-zero unless at least SHARE of the counted cases (all but eager_fail and "
        "skip) are full_graph_ok and none is wrong or a crash, e.g. 0.995",
    )
    p.add_argument(
        "--cases-per-file",
        type=int,
        default=0,
        help="only each file's first N cases (0: all); a cheaper sample for slow backends",
    )
    p.add_argument("--resume", action="store_true", help="skip cases already in --out")
    p.add_argument(
        "--mem-gb",
        type=float,
        default=None,
        help="address-space limit per worker (default: from RAM and --jobs; 0: none)",
    )
    p.add_argument("--report-only", action="store_true", help="print the report of --out")
    p.add_argument(
        "--magpy-root",
        type=Path,
        default=REPO,
        help="MagPy checkout whose packages the workers import (default: this "
        "repository; e.g. a `git archive` snapshot for a stable baseline)",
    )
    a = p.parse_args(argv)

    if a.split == "rest":
        print("warning: the 'rest' split is reserved; do not tune on it", file=sys.stderr)
    modes = ["magpy", "dynamo"] if a.mode == "both" else [a.mode]
    all_files = list_files(a.dir, a.split)
    print(f"{len(all_files)} files in split {a.split!r} of {a.dir}", flush=True)
    files = all_files[a.offset :]
    if a.sample is not None:
        files = select_sample(files, a.sample, a.split)
    if a.filter:
        files = [f for f in files if a.filter in f.name]
    if a.limit is not None:
        files = files[: a.limit]
    names = {f.name for f in files}

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not a.resume and not a.report_only and out.exists():
        out.unlink()
    existing = load_results(out)
    done = {
        (r["file"], r["index"], r["mode"])
        for r in existing
        if r.get("kind") == "case" and r.get("backend") == a.backend
    }
    files_done = {r["file"]: r for r in existing if r.get("kind") == "file"}

    todo = []
    for f in files:
        fr = files_done.get(f.name)
        if fr is not None and (
            fr.get("import_error")
            or all((f.name, i, m) in done for i in range(fr.get("n_cases", 0)) for m in modes)
        ):
            continue
        todo.append(f)
    if not a.report_only:
        print(
            f"running {len(todo)} files ({len(files) - len(todo)} already done), modes "
            f"{modes}, backend {a.backend}, jobs {a.jobs}, timeout {a.timeout:g}s, "
            f"results -> {out}",
            flush=True,
        )
        mem = _default_mem_gb(a.jobs) if a.mem_gb is None else a.mem_gb
        results = ResultsFile(out)
        t0 = time.monotonic()

        def log(msg: str) -> None:
            print(msg, flush=True)

        _STOP.clear()
        old_term = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
        pool = ThreadPoolExecutor(max_workers=max(1, a.jobs))
        try:
            futs = {
                pool.submit(
                    run_file,
                    f,
                    modes,
                    a.backend,
                    a.timeout,
                    results,
                    done,
                    f.name in files_done,
                    mem,
                    log,
                    a.magpy_root,
                    a.import_timeout,
                    a.cases_per_file,
                ): f
                for f in todo
            }
            for n, fut in enumerate(as_completed(futs), 1):
                f = futs[fut]
                try:
                    s = fut.result()
                    st = ", ".join(f"{k}={v}" for k, v in sorted(s["statuses"].items()))
                    extra = (
                        f" IMPORT ERROR: {s['import_error'][:100]}" if s.get("import_error") else ""
                    )
                except Exception as exc:  # a bug of the harness: keep going
                    st, extra = f"harness error {type(exc).__name__}: {exc}", ""
                log(f"[{n}/{len(todo)} {time.monotonic() - t0:6.0f}s] {f.name}: {st}{extra}")
        except KeyboardInterrupt:
            _stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            print("interrupted: the workers were stopped; continue with --resume", flush=True)
            return 130
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)

    records = [
        r
        for r in load_results(out)
        if r.get("file") in names
        and (r.get("kind") == "file" or (r.get("backend") == a.backend and r.get("mode") in modes))
    ]
    print()
    ran = len({r["file"] for r in records if r.get("kind") == "file"})
    print(
        f"## ParityBench ({a.split} split, backend {a.backend}: {ran} of {len(names)} "
        "selected files have results)\n"
    )
    print(summarize(records, modes))
    wrong = sum(1 for r in records if r.get("status") == "wrong")
    if a.require is not None:
        return 0 if meets(records, a.require) else 1
    return 1 if wrong else 0


def meets(records: list[dict[str, Any]], share: float) -> bool:
    """Whether every mode's cases in ``records`` pass the ``--require`` gate (printed)."""
    ok = True
    for mode in sorted({r["mode"] for r in records if r.get("kind") == "case"}):
        counts = collections.Counter(
            r["status"] for r in records if r.get("kind") == "case" and r["mode"] == mode
        )
        counted = sum(counts.values()) - counts["eager_fail"] - counts["skip"]
        full = counts["full_graph_ok"] / counted if counted else 0.0
        bad = counts["wrong"] + counts["crash"]
        passed = full >= share and bad == 0
        ok = ok and passed
        print(
            f"{mode}: {counts['full_graph_ok']}/{counted} = {full:.2%} full graph "
            f"(required {share:.2%}), {counts['wrong']} wrong, {counts['crash']} crashes: "
            + ("PASS" if passed else "FAIL")
        )
    return ok


def select_sample(files: list[Path], sample: Path, split: str) -> list[Path]:
    """The files of ``files`` named in the text file ``sample`` (one basename per line, ``#``
    comments). A name that is missing from the folder or outside ``split`` is an error."""
    names = [
        line.split("#", 1)[0].strip() for line in sample.read_text(encoding="utf-8").splitlines()
    ]
    wanted = [n for n in names if n]
    by_name = {f.name: f for f in files}
    outside = [n for n in wanted if not in_split(n, split)]
    if outside:
        raise SystemExit(f"--sample: {len(outside)} files not in split {split!r}: {outside[:3]}")
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise SystemExit(f"--sample: {len(missing)} files not in the folder: {missing[:3]}")
    return [by_name[n] for n in sorted(set(wanted))]


if __name__ == "__main__":
    sys.exit(main())
