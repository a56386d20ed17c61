"""Every check MagPy runs, locally and in CI (``.ci/run`` is just ``python3 -m nox``).

    python3 -m nox                                   # the default sessions below
    python3 -m nox -s "tests(pkg='codegen')" -- -k guard
    python3 -m nox -l                                # list all sessions

Each package is tested in its own fresh venv that holds only what its pyproject declares. That
proves each package installs on its own, and it enforces the layering: refgraph's venv has no
torch, so an accidental ``import torch`` there fails. ``-r`` reuses venvs for quick reruns.
"""

from __future__ import annotations

import graphlib
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
# The CPython versions MagPy supports. The full suite runs on the Python that runs nox (when it
# is one of these; else on 3.11); `compat` runs the representative part on each of the others.
PYTHONS = ("3.11", "3.12", "3.13")
_RUNNING = f"{sys.version_info[0]}.{sys.version_info[1]}"
PYTHON = _RUNNING if _RUNNING in PYTHONS else PYTHONS[0]
OTHER_PYTHONS = [v for v in PYTHONS if v != PYTHON]
# Exactly the build that lies on the dev machines' disk (2.13.0+cpu satisfies this pin). Any looser
# pin lets pip pick a multi-GB CUDA build from PyPI. Every package that needs torch pins the same.
TORCH = "torch==2.13.0"
# Dev-only tools, pinned so that lint and typecheck results do not change under us.
RUFF = "ruff==0.17.6"
MYPY = "mypy==2.4.1"

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "no"  # fresh venvs by default; `nox -r` reuses them
# A missing interpreter fails CI (it sets CI=true); locally its sessions are skipped, with nox's
# message naming the interpreter.
nox.options.error_on_missing_interpreters = os.environ.get("CI", "") not in ("", "0", "false")
nox.options.download_python = "never"  # (no interpreter downloads: they would reach the web)
nox.options.sessions = ["lint", "typecheck", "layering", "sizes", "tests", "integration", "compat"]


def _pyenv_interpreters_on_path() -> None:
    """Put pyenv's installs of the supported versions on PATH (they are off it on the dev
    machines), newest patch release of each, so nox finds ``python3.12`` and ``python3.13``."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found: list[str] = []
    for version in PYTHONS:
        found_on_path = shutil.which(f"python{version}")
        if found_on_path and "shims" not in Path(found_on_path).parts:
            continue  # (a pyenv shim answers only for the active versions: not a find)
        installs = sorted(
            root.glob(f"{version}.*/bin/python{version}"),
            key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.parent.parent.name)),
        )
        if installs:
            found.append(str(installs[-1].parent))
    if found:
        os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_pyenv_interpreters_on_path()


# --- workspace: packages and their order, read from packages/magpy-*/pyproject.toml ------------


def _req_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, f"cannot parse requirement {requirement!r}"
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _read_workspace() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """Return ({pkg: its requirements}, {pkg: its local magpy-* deps}); pkg is the short name."""
    requirements: dict[str, list[str]] = {}
    for pyproject in sorted(ROOT.glob("packages/magpy-*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        requirements[project["name"].removeprefix("magpy-")] = project.get("dependencies", [])
    local = {
        pkg: {
            name.removeprefix("magpy-")
            for name in map(_req_name, reqs)
            if name.removeprefix("magpy-") in requirements
        }
        for pkg, reqs in requirements.items()
    }
    for pkg, reqs in requirements.items():
        pins = [r.replace(" ", "") for r in reqs if _req_name(r) == "torch"]
        assert pins in ([], [TORCH]), f"magpy-{pkg} pins {pins}; the workspace pins {TORCH}"
    return requirements, local


def _topological(local: dict[str, set[str]]) -> tuple[str, ...]:
    """Dependencies first; ties broken by name so the order is stable."""
    sorter = graphlib.TopologicalSorter(local)
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return tuple(order)


REQUIREMENTS, LOCAL_DEPS = _read_workspace()
PACKAGES = _topological(LOCAL_DEPS)  # ("refgraph", "monitor", "codegen", "runtime")


def _closure(pkg: str) -> list[str]:
    """``pkg`` and every local package it needs, dependencies first."""
    needed = {pkg}
    stack = [pkg]
    while stack:
        for dep in LOCAL_DEPS[stack.pop()]:
            if dep not in needed:
                needed.add(dep)
                stack.append(dep)
    return [p for p in PACKAGES if p in needed]


def _needs_torch(pkg: str) -> bool:
    return any(_req_name(r) == "torch" for p in _closure(pkg) for r in REQUIREMENTS[p])


def _prune_other_venvs(session: nox.Session) -> None:
    """With ``MAGPY_PRUNE_VENVS=1`` (``.ci/run`` sets it), delete the venvs of the sessions that
    ran before this one. Each venv with torch holds ~1.5 GB and a default run makes about ten of
    them; a CI machine's disk is not guaranteed to hold them all (a run once failed with ENOSPC),
    so CI keeps one at a time. Local runs keep them for ``nox -r``."""
    if os.environ.get("MAGPY_PRUNE_VENVS") != "1":
        return
    own = Path(session.virtualenv.location).resolve()
    for venv in (ROOT / ".nox").glob("*/"):
        if venv.resolve() != own and (venv / "pyvenv.cfg").exists():
            shutil.rmtree(venv, ignore_errors=True)


def _install_local(session: nox.Session, pkg: str, extra: str | None = None) -> None:
    """Install ``pkg`` and its local deps editable in one pip call; torch first, pinned."""
    _prune_other_venvs(session)
    if _needs_torch(pkg):
        session.install("--quiet", TORCH)
    editables: list[str] = []
    for dep in _closure(pkg):
        suffix = f"[{extra}]" if extra and dep == pkg else ""
        editables += ["-e", f"packages/magpy-{dep}{suffix}"]
    session.install("--quiet", *editables)


def _install_all(session: nox.Session, *extra_reqs: str) -> None:
    """Install the meta-package and all packages editable (for integration, demo, bench)."""
    _prune_other_venvs(session)
    session.install("--quiet", TORCH)
    editables = [arg for pkg in PACKAGES for arg in ("-e", f"packages/magpy-{pkg}")]
    session.install("--quiet", *editables, "-e", ".", *extra_reqs)


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "pytest", "-c", "pyproject.toml", *args, *session.posargs)


# --- static checks -----------------------------------------------------------------------------


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint + format check over the whole repository (config: root pyproject.toml)."""
    _prune_other_venvs(session)
    session.install("--quiet", RUFF)
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
@nox.parametrize("pkg", [*PACKAGES, "magpy"])
def typecheck(session: nox.Session, pkg: str) -> None:
    """mypy in the package's own venv: strict for refgraph and magpy, ratcheted for the rest."""
    if pkg == "magpy":
        _install_all(session, MYPY)
        target = "src/magpy"
    else:
        _install_local(session, pkg)
        session.install("--quiet", MYPY)
        target = f"packages/magpy-{pkg}/src"
    cache = f".mypy_cache/{pkg}"  # one cache per venv: they see different site-packages
    session.run("mypy", "--config-file", "pyproject.toml", "--cache-dir", cache, target)


@nox.session(python=PYTHON)
def layering(session: nox.Session) -> None:
    """Imports follow refgraph < monitor < codegen < runtime < magpy; refgraph never sees torch."""
    session.run("python", "tools/check_layering.py")
    # The environment enforces it too: refgraph installs without torch, and importing it pulls
    # in nothing from torch's world.
    _install_local(session, "refgraph")
    session.run(
        "python",
        "-c",
        "import importlib.util, sys, magpy_refgraph; "
        "assert importlib.util.find_spec('torch') is None, 'torch is installed in refgraph venv'; "
        "assert not {'torch', 'numpy'} & set(sys.modules), 'magpy_refgraph imported torch/numpy'",
    )


@nox.session(venv_backend="none")
def sizes(session: nox.Session) -> None:
    """Fail if a module (600 lines) or a function (60) of the source grows past its budget."""
    session.run(sys.executable, "tools/check_sizes.py", *session.posargs, external=True)


# --- tests -------------------------------------------------------------------------------------


@nox.session(python=PYTHON)
@nox.parametrize("pkg", PACKAGES)
def tests(session: nox.Session, pkg: str) -> None:
    """One package's tests in a venv with only that package, its magpy-* deps and [test]."""
    _install_local(session, pkg, extra="test")
    _pytest(session, f"packages/magpy-{pkg}/tests")


# What `compat` runs of `integration/` on the other Pythons: conformance and the static path,
# the differential suite, graph breaks and sites, training steps, persistent records, the guard
# memo (its Python check: the C one is 3.11's), the process-survival programs, and a few
# Hugging Face models.
COMPAT_INTEGRATION = (
    "integration/test_static_path.py",
    "integration/test_graph_breaks.py",
    "integration/test_process_survives.py",
    "integration/test_training_step.py",
    "integration/test_persistent_records.py",
    "integration/test_guard_memo.py",
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("integration/test_differs_*.py")),
)
COMPAT_HF_MODELS = "bert or gpt2 or llama or t5"


@nox.session(python=OTHER_PYTHONS)
def compat(session: nox.Session) -> None:
    """On each supported Python besides nox's own: every package's unit tests, conformance with
    both backends, and the representative integration subset (COMPAT_INTEGRATION; Hugging
    Face models matching COMPAT_HF_MODELS). torch there is PyPI's default build (several GB: one
    venv at a time on CI)."""
    _install_all(session, "pytest", "hypothesis", "numpy")
    session.install("--quiet", "-e", ".[hf]")
    _pytest(session, *(f"packages/magpy-{pkg}/tests" for pkg in PACKAGES))
    conformance = ROOT.parent / "shared" / "conformance" / "check.py"
    if conformance.exists():
        for backend in ("eager", "inductor"):
            session.run("python", str(conformance), "--backend", backend)
    else:
        session.warn(f"conformance not run: {conformance} is missing")
    _pytest(session, *COMPAT_INTEGRATION, "-m", "not gpu and not slow")
    _pytest(
        session,
        "integration/test_hf_models.py",
        "-m",
        "not gpu and not slow",
        "-k",
        COMPAT_HF_MODELS,
    )


def _integration_session(session: nox.Session, *pytest_args: str, extras: str = "") -> None:
    _install_all(session, "pytest", "hypothesis")
    if extras:
        session.install("--quiet", "-e", f".[{extras}]")
    _pytest(session, "integration", *pytest_args)


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """Cross-package tests with everything installed; no GPU, nothing slow.

    Installs ``magpy[hf]`` (transformers: pure-Python wheels plus tokenizers/safetensors, no
    torch) so ``integration/test_hf_models.py`` runs, and ``magpy[extra-models]`` (monai and
    diffusers: ~15 MB of wheels, a few seconds; neither replaces the pinned torch) so
    ``integration/test_extra_models.py`` runs. Both build their models from configs and
    download no weights.
    """
    _integration_session(session, "-m", "not gpu and not slow", extras="hf,extra-models")


@nox.session(python=PYTHON, default=False)
def integration_slow(session: nox.Session) -> None:
    """The slow integration tests (opt-in); ``magpy[hf]`` and ``magpy[lightning]`` for the
    Hugging Face and Lightning trainers under ``magpy run`` (integration/test_magpy_run_*.py)."""
    _integration_session(session, "-m", "slow and not gpu", extras="hf,lightning")


@nox.session(python=PYTHON, default=False)
def distributed(session: nox.Session) -> None:
    """Every distributed integration test, slow ones included (opt-in): DDP and FSDP2
    (``integration/test_distributed.py``), tensor parallelism, its training steps through
    AOTAutograd and Inductor, 2-D FSDP2 x TP, the program's own collectives
    (``integration/test_tensor_parallel.py``); 2 gloo processes each (a 2x2 mesh: 4), minutes
    on two cores. ``nox -s integration`` runs one of each."""
    _install_all(session, "pytest", "hypothesis")
    _pytest(session, "integration/test_distributed.py", "integration/test_tensor_parallel.py",
            "-m", "not gpu")  # fmt: skip


@nox.session(python=PYTHON, default=False)
def integration_gpu(session: nox.Session) -> None:
    """GPU integration tests (opt-in); needs CUDA, installs triton via magpy[gpu]."""
    _integration_session(session, "-m", "gpu", extras="gpu")


@nox.session(python=PYTHON, default=False)
def differential(session: nox.Session) -> None:
    """The differential suite (``integration/test_differs_*.py``) against MagPy and TorchDynamo:
    the table of silent wrong values, wrong exceptions, frame-only differences and crashes per
    compiler (arguments after ``--`` go to ``integration/differential_report.py``, e.g.
    ``--backend inductor``)."""
    _install_all(session, "numpy", "pytest")
    session.run("python", "integration/differential_report.py", *session.posargs)


@nox.session(python=PYTHON, default=False)
def paritybench(session: nox.Session) -> None:
    """The fixed ParityBench dev sample (``integration/data/paritybench_dev_sample.txt``, 300
    files) under MagPy, gated: at least 99.5% of the counted cases one graph with no break, none
    wrong, no crash. ParityBench lives outside this repository: ``PARITYBENCH_DIR`` names its
    ``generated/`` folder (arguments after ``--`` go to ``integration/paritybench.py``, e.g.
    ``--mode both`` or ``--jobs 1``)."""
    folder = os.environ.get("PARITYBENCH_DIR")
    if not folder:
        session.error("set PARITYBENCH_DIR to ParityBench's generated/ folder")
    _install_all(session, "numpy", "pytest")
    session.run(
        "python",
        "-m",
        "integration.paritybench",
        folder,
        "--sample",
        "integration/data/paritybench_dev_sample.txt",
        "--require",
        "0.995",
        "--out",
        ".paritybench/sample.jsonl",
        *session.posargs,
    )


# --- user-facing entry points ------------------------------------------------------------------
# `demo` is the first command in README.md; `bench` produces the side-by-side tables.


@nox.session(python=PYTHON, default=False)
def demo(session: nox.Session) -> None:
    """Install everything and run `magpy demo` (arguments after `--` go to the demo)."""
    # numpy only so that `import torch` does not warn "Failed to initialize NumPy"; MagPy does
    # not use it.
    _install_all(session, "numpy")
    session.run("magpy", "demo", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Install everything (+ matplotlib) and run `magpy bench` (arguments after `--`)."""
    _install_all(session, "numpy", "matplotlib")
    session.run("magpy", "bench", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_dynamic(session: nox.Session) -> None:
    """Install everything and run `python -m integration.bench_dynamic` (arguments after `--`).

    Changing shapes and control flow: eager vs torch.compile vs MagPy, every recompile timed.
    """
    _install_all(session, "numpy")
    session.run("python", "-m", "integration.bench_dynamic", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_training(session: nox.Session) -> None:
    """Install everything and run ``python -m integration.bench_training`` (arguments after
    ``--``): whole training steps (forward, backward, optimizer) of ResNet-18, a transformer
    and an LSTM, eager vs torch.compile vs ``magpy.compile(step)``, compiles timed."""
    _install_all(session, "numpy")
    session.run("python", "-m", "integration.bench_training", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_tp(session: nox.Session) -> None:
    """Install everything and run ``python -m integration.bench_tp`` (arguments after ``--``):
    a tensor-parallel Llama-style block's forward and training step on 2 gloo ranks, one
    thread each, eager vs torch.compile vs MagPy, per-call medians, noise and graphs."""
    _install_all(session, "numpy")
    session.run("python", "-m", "integration.bench_tp", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_overhead(session: nox.Session) -> None:
    """Install everything (+ transformers) and run ``python -m integration.bench_overhead``:
    a cache hit's cost, MagPy vs TorchDynamo with a replay backend (arguments after ``--``)."""
    _install_all(session, "numpy")
    session.install("--quiet", "-e", ".[hf]")
    session.run("python", "-m", "integration.bench_overhead", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_warm_start(session: nox.Session) -> None:
    """Install everything and run ``python -m integration.bench_warm_start`` (arguments after
    ``--``): a new process's first call, cold, on warm Inductor/AOTAutograd caches, from
    persistent records and from a bundle (``save/load_cache_artifacts``), MagPy vs
    torch.compile vs eager, each in a fresh process."""
    _install_all(session, "numpy")
    session.run("python", "-m", "integration.bench_warm_start", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_first_calls(session: nox.Session) -> None:
    """Install everything (+ transformers, monai, diffusers) and run ``python -m
    integration.bench_first_calls``: the first two calls (capture plus the guard memo's arming)
    of every model in the suites, MagPy beside TorchDynamo (arguments after ``--``)."""
    _install_all(session, "numpy")
    session.install("--quiet", "-e", ".[hf,extra-models]")
    session.run("python", "-m", "integration.bench_first_calls", *session.posargs)


@nox.session(python=list(PYTHONS), default=False)
def bench_versions(session: nox.Session) -> None:
    """On each supported Python: ``python -m integration.bench_versions`` (first-call capture
    time and a hit's cost, MagPy beside TorchDynamo; arguments after ``--``)."""
    _install_all(session, "numpy")
    session.install("--quiet", "-e", ".[hf]")
    session.run("python", "-m", "integration.bench_versions", *session.posargs)


# --- packaging ---------------------------------------------------------------------------------


@nox.session(python=PYTHON, default=False)
def build(session: nox.Session) -> None:
    """Build sdist + wheel of every package and of the meta-package into dist/."""
    session.install("--quiet", "build")
    for path in [*(f"packages/magpy-{pkg}" for pkg in PACKAGES), "."]:
        session.run("python", "-m", "build", "--outdir", "dist", path)
