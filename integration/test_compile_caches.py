"""Inductor's FX graph cache and AOTAutograd's cache across processes (issue 23, "Caches").

MagPy compiles each graph inside a ``TracingContext`` whose fake mode has a ``ShapeEnv`` (as
``torch.compile`` does), so a second process with the same ``TORCHINDUCTOR_CACHE_DIR`` loads
the compiled graphs from the caches instead of compiling them again. Each case runs a small
program in fresh processes, one after the other, on one cache folder; the program checks
every output (and a training step's parameters) against eager and prints torch's cache
counters (``torch._dynamo.utils.counters``) and ``magpy.stats`` as JSON.

The default run has the two processes of an inference model (about 55 s on 2 busy cores, most
of it the first process's compile); a training step, the variants (``inductor_fast_random``,
``mode=``, dynamic sizes), a changed constant and the caches switched off are ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.inductor

# The program each process runs: argv[1] names the cases (comma-separated), argv[2] a scale
# the inference model multiplies its output by (a constant of its graph).
CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    import torch
    from torch import nn
    import magpy
    from magpy_codegen import shape_guard
    from torch._dynamo.utils import counters

    torch.set_num_threads(1)
    cases, scale = sys.argv[1].split(","), float(sys.argv[2])
    stats = {}

    def net():
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
            nn.Linear(4 * 6 * 6, 8), nn.GELU(),
        ).eval()

    def scaled(model):
        def run(x):
            return model(x) * scale
        return run

    def inference(backend, **options):
        model = net()
        compiled = magpy.compile(scaled(model), backend=backend, **options)
        with torch.no_grad():
            for i in range(3):
                x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(i))
                torch.testing.assert_close(compiled(x), scaled(model)(x), rtol=1e-4, atol=1e-5)
        return compiled

    def dynamic():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).eval()
        compiled = magpy.compile(model, backend="inductor", dynamic=True)
        with torch.no_grad():
            for n in (2, 5, 3):
                x = torch.randn(n, 8)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        return compiled

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def sgd(model):
        def step(x, y):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
            model.zero_grad()
            return loss
        return step

    def training():
        model, reference = mlp(), mlp()
        compiled, eager = magpy.compile(sgd(model), backend="inductor"), sgd(reference)
        for i in range(4):
            g = torch.Generator().manual_seed(i)
            x, y = torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)
            torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-4, atol=1e-5)
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
        return compiled

    CASES = {
        "inference": lambda: inference("inductor"),
        "fast_random": lambda: inference("inductor_fast_random"),
        "mode": lambda: inference("inductor", mode="max-autotune-no-cudagraphs"),
        "dynamic": dynamic,
        "training": training,
    }
    guards = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            compiled = CASES[case]()
            st = magpy.stats(compiled)
            stats[case] = {"records": st.records, "graphs": st.graphs,
                           "breaks": st.breaks, "fallbacks": st.fallbacks}
            guards[case] = [str(shape_guard(r.graph_module))
                            for r in compiled._magpy_state.records if r.graph_module is not None]
    print(json.dumps({
        "inductor": {k: v for k, v in counters["inductor"].items() if "cache" in k},
        "aot_autograd": {k: v for k, v in counters["aot_autograd"].items() if "cache" in k},
        "stats": stats,
        "shape_guards": guards,
    }))
    """
)


def run_child(
    tmp: Path, cases: str, *, scale: float = 2.0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One fresh process running ``CHILD`` on ``cases`` with the cache folder ``tmp/cache``;
    its JSON line. The caches are switched on explicitly (an environment that turned them off
    would make these tests meaningless), unless ``env`` says otherwise; compiles happen in
    the call (no background compile) and no persistent records are read."""
    script = tmp / "child.py"
    script.write_text(CHILD)
    own = ("MAGPY_RECORDS_DIR", "MAGPY_BACKGROUND_COMPILE")
    child_env = {k: v for k, v in os.environ.items() if k not in own} | {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp / "cache"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    proc = subprocess.run(
        [sys.executable, str(script), cases, str(scale)],
        env=child_env | (env or {}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def fx(run: dict[str, Any], what: str) -> int:
    return int(run["inductor"].get(f"fxgraph_cache_{what}", 0))


def aot(run: dict[str, Any], what: str) -> int:
    return int(run["aot_autograd"].get(f"autograd_cache_{what}", 0))


def assert_cold(run: dict[str, Any], graphs: int) -> None:
    """Every graph compiled and went into both caches: misses, saved, no bypass."""
    assert (fx(run, "miss"), fx(run, "hit"), fx(run, "bypass")) == (graphs, 0, 0), run
    assert (aot(run, "miss"), aot(run, "saved"), aot(run, "bypass")) == (graphs, graphs, 0), run


def assert_warm(run: dict[str, Any], graphs: int) -> None:
    """Every graph came out of both caches: hits only."""
    assert (fx(run, "hit"), fx(run, "miss"), fx(run, "bypass")) == (graphs, 0, 0), run
    assert (aot(run, "hit"), aot(run, "miss"), aot(run, "bypass")) == (graphs, 0, 0), run


def one_graph_each(run: dict[str, Any]) -> None:
    for case, st in run["stats"].items():
        assert (st["records"], st["graphs"], st["breaks"], st["fallbacks"]) == (1, 1, 0, 0), case


@pytest.fixture(scope="module")
def inference_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ...]:
    """An inference model, compiled by a first and then a second process on one (initially
    empty) cache folder."""
    tmp = tmp_path_factory.mktemp("caches")
    return run_child(tmp, "inference"), run_child(tmp, "inference")


def test_the_first_process_compiles_into_the_caches(inference_runs: Any) -> None:
    """No "No shape env" bypass: the graph misses and is saved by Inductor and AOTAutograd
    (its ``x.flatten(1)`` included: AOTAutograd caches methods of values it knows)."""
    first, _ = inference_runs
    one_graph_each(first)
    assert_cold(first, graphs=1)


def test_the_second_process_loads_the_graph_from_the_caches(inference_runs: Any) -> None:
    """Same program, new process: an FX graph cache and an AOTAutograd cache hit (the outputs
    still equal eager's: checked in the child), and still no shape guard (static sizes)."""
    first, second = inference_runs
    one_graph_each(second)
    assert_warm(second, graphs=1)
    assert second["stats"] == first["stats"]
    assert second["shape_guards"] == first["shape_guards"] == {"inference": ["None"]}


@pytest.mark.slow
def test_a_training_step_hits_the_caches(tmp_path: Path) -> None:
    """A whole training step (forward, backward, SGD update: one joint graph) compiled by a
    second process comes from both caches; its losses and parameters equal eager's."""
    first = run_child(tmp_path, "training")
    one_graph_each(first)
    assert_cold(first, graphs=1)
    second = run_child(tmp_path, "training")
    one_graph_each(second)
    assert_warm(second, graphs=1)


@pytest.mark.slow
def test_variants_hit_the_caches_too(tmp_path: Path) -> None:
    """Inductor with its own random kernels, Inductor with a ``mode``, and a graph with
    symbolic sizes (``dynamic=True``) hit both caches in a second process; the symbolic
    graph's shape guard after the hit is the one the compile gave."""
    cases = "fast_random,mode,dynamic"
    first = run_child(tmp_path, cases)
    one_graph_each(first)
    assert_cold(first, graphs=3)
    second = run_child(tmp_path, cases)
    one_graph_each(second)
    assert_warm(second, graphs=3)
    assert second["shape_guards"] == first["shape_guards"]
    # (Linear(8, 16) fixed the features: the hit must bring that guard back, too)
    assert "L['t0'].size()[1] == 8" in second["shape_guards"]["dynamic"][0]


@pytest.mark.slow
def test_a_changed_constant_is_not_served_from_the_cache(tmp_path: Path) -> None:
    """The cache key covers the graph's constants: a program that multiplies by another scale
    compiles anew (and equals eager), the first scale's program still hits."""
    assert_cold(run_child(tmp_path, "inference", scale=2.0), graphs=1)
    assert_cold(run_child(tmp_path, "inference", scale=3.0), graphs=1)
    assert_warm(run_child(tmp_path, "inference", scale=2.0), graphs=1)


@pytest.mark.slow
def test_caches_switched_off_stay_off(tmp_path: Path) -> None:
    """``TORCHINDUCTOR_FX_GRAPH_CACHE=0``: MagPy does not turn the caches back on; nothing is
    looked up, so nothing hits, in the second process either."""
    off = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
    for _ in range(2):
        run = run_child(tmp_path, "inference", env=off)
        assert fx(run, "hit") == fx(run, "miss") == aot(run, "hit") == aot(run, "saved") == 0, run
