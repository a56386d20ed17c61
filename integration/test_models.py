"""The bundled models (``integration/models``, size "small") through MagPy's eager backend.

Each model: ``magpy.explain`` reports the expected graphs and breaks, and over 3 calls on fresh
inputs the compiled model equals eager, with the expected records, hits and fallbacks. A model
MagPy captures as one graph goes through ``helpers.assert_compiles_like_eager`` (which also proves
that a cache hit runs none of the model's Python and that module state matches eager). For the
others ``EXPECT`` holds today's counts and says why; when MagPy improves, the counts change and
the test says so. About 10-30 s on 2 cores.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy
from magpy._cli import load_models

MODELS: dict[str, Callable[..., Any]] = load_models(Path(__file__).with_name("models")).MODELS
BATCH = 2


@dataclasses.dataclass(frozen=True)
class Expect:
    """What ``magpy.explain`` and ``magpy.stats`` report after 3 calls; ``warns``: a regex of the
    warning MagPy gives during the 3 calls (None: none)."""

    graphs: int = 1
    breaks: int = 0
    records: int = 1
    hits: int = 2
    fallbacks: int = 0
    warns: str | None = None
    explained: tuple[int, int] | None = None  # explain's (graphs, breaks) where they differ

    @property
    def explain_counts(self) -> tuple[int, int]:
        return self.explained or (self.graphs, self.breaks)

    @property
    def static(self) -> bool:
        return self == STATIC


STATIC = Expect()
EXPECT: dict[str, Expect] = {
    "resnet18": STATIC,
    "resnet50": STATIC,
    "densenet121": STATIC,
    "monodepth": STATIC,
    "qat_cnn": STATIC,
    "lstm": STATIC,
    "seq2seq": STATIC,
    "transformer": STATIC,
    "dynamic": STATIC,
    # `if not keep.any():` in each of the 9 gated blocks branches on a tensor's value: the
    # record assumes the outcomes the recording call took (9 checks after the graph); a call
    # whose policy skips other blocks records again (see test_blockdrop_skips_are_assumed)
    "blockdrop": STATIC,
}


def test_every_model_has_an_expectation() -> None:
    """EXPECT covers exactly the registry."""
    assert sorted(EXPECT) == sorted(MODELS)


def _warns(expect: Expect) -> Any:
    if expect.warns is None:
        return contextlib.nullcontext()
    # RuntimeWarning: MagPyWarning is one, and the runtime's site warnings are plain ones.
    return pytest.warns(RuntimeWarning, match=expect.warns)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_model_compiles_like_eager(name: str) -> None:
    """explain's graphs/breaks, then 3 fresh calls equal eager with the expected stats."""
    expect = EXPECT[name]
    model, make_inputs = MODELS[name]("small")
    with torch.no_grad():
        explained = magpy.explain(model)(*make_inputs(BATCH, 0))
        assert (
            explained.graph_count,
            explained.graph_break_count,
        ) == expect.explain_counts, f"{name}: explain says {explained}"
        if expect.static:
            H.assert_compiles_like_eager(
                model, lambda i: (list(make_inputs(BATCH, 1 + i)), {}), calls=3, backend="eager"
            )
            return
        reference = copy.deepcopy(model)
        compiled = magpy.compile(model, backend="eager")
        with _warns(expect):
            for i in range(3):
                args = make_inputs(BATCH, 1 + i)
                H.assert_same(compiled(*args), reference(*args), f"{name}, call {i}")
    st = magpy.stats(compiled)
    got = (st.graphs, st.breaks, st.records, st.hits, st.fallbacks)
    want = (expect.graphs, expect.breaks, expect.records, expect.hits, expect.fallbacks)
    assert got == want, (
        f"{name}: (graphs, breaks, records, hits, fallbacks) {got} != {want}: if MagPy now "
        f"captures more of it, update EXPECT ({compiled._magpy_state.eager_reason})"
    )


def test_blockdrop_skips_are_assumed() -> None:
    """Every assumption in BlockDrop is its `if not keep.any():`; with speculation off, every
    break is, reported at that line."""
    from magpy_runtime._config import config

    model, make_inputs = MODELS["blockdrop"]("small")
    with torch.no_grad():
        explained = magpy.explain(model)(*make_inputs(BATCH, 0))
        with config.patch(speculate=False):
            broken = magpy.explain(model)(*make_inputs(BATCH, 0))
    source = Path(__file__).with_name("models").joinpath("blockdrop.py").read_text()
    (line,) = [
        i for i, t in enumerate(source.splitlines(), 1) if t.strip().startswith("if not keep")
    ]
    assert len(explained.assumptions) == 9 and explained.graph_break_count == 0, explained
    for where in explained.assumptions:
        assert f"blockdrop.py:{line} (truth value" in where, where
    assert broken.break_reasons
    for reason in broken.break_reasons:
        assert "data-dependent" in reason.reason, reason
        assert (Path(reason.filename or "").name, reason.lineno) == ("blockdrop.py", line)


def test_blockdrop_other_skips_add_records() -> None:
    """A policy that skips other blocks misses the first record's checks and adds a record;
    then each policy's calls hit their own record, equal to eager."""
    model, make_inputs = MODELS["blockdrop"]("small")
    reference = copy.deepcopy(model)
    compiled = magpy.compile(model, backend="eager")
    spread = torch.linspace(-3.0, 3.0, len(model.gates))
    with torch.no_grad():
        for i in range(8):
            for m in (model, reference):  # parameter values are not guarded: the checks see it
                m.policy.fc.bias.copy_(spread if i % 2 else -spread)
            args = make_inputs(BATCH, 10 + i)
            H.assert_same(compiled(*args), reference(*args), f"call {i}")
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.assumption_misses, st.breaks) == (2, 6, 1, 0), st


def test_blockdrop_policy_drops_some_blocks() -> None:
    """The policy really skips blocks for some samples (so the branch is exercised)."""
    model, make_inputs = MODELS["blockdrop"]("small")
    with torch.no_grad():
        _, policy = model(*make_inputs(8, 0))
    assert 0 < float(policy.mean()) < 1


def test_dynamic_model_flag_flip_and_hooks() -> None:
    """Flipping `return_features` adds exactly one record; the hooks' feature list and the step
    counter match eager after every call, hits included."""
    model, make_inputs = MODELS["dynamic"]("small")
    reference = copy.deepcopy(model)
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        for i, flag in enumerate([False, False, True, True, False, True]):
            model.return_features = reference.return_features = flag
            args = make_inputs(BATCH, 10 + i)
            H.assert_same(compiled(*args), reference(*args), f"call {i}")
            H.assert_same(model.features, reference.features, f"call {i}: features")
            assert model.steps == reference.steps == i + 1
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses, st.breaks, st.fallbacks) == (2, 4, 2, 0, 0), st


def test_resnet18_with_out_of_place_relu() -> None:
    """ResNet-18 with `nn.ReLU()` instead of torchvision's in-place ones: one graph, too."""
    model, make_inputs = MODELS["resnet18"]("small", inplace_relu=False)
    with torch.no_grad():
        H.assert_compiles_like_eager(
            model, lambda i: (list(make_inputs(BATCH, 1 + i)), {}), calls=3, backend="eager"
        )


@pytest.mark.parametrize("size", ["small", "bench"])
def test_models_build_and_make_seeded_inputs(size: str) -> None:
    """`build(size)` gives an eval-mode module; `make_inputs(batch, seed)` is deterministic."""
    for name, build in MODELS.items():
        model, make_inputs = build(size)
        assert isinstance(model, torch.nn.Module) and not model.training, name
        a, b, c = make_inputs(3, 0), make_inputs(3, 0), make_inputs(3, 1)
        H.assert_same(a, b, f"{name}: same seed")
        assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True)), name
        batch_dim = 1 if name in ("lstm", "seq2seq") else 0  # (sequence, batch, ...) inputs
        assert {x.shape[batch_dim] for x in a} == {3}, name
