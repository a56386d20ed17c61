"""MONAI and ``diffusers`` models (``integration/models/extra.py``) through MagPy (eager).

Built from tiny constructor arguments with random weights, fully offline (``HF_HUB_OFFLINE=1``;
nothing is fetched). Each test skips when its library is not installed (``pip install
magpy[extra-models]``). For every model: ``magpy.explain`` reports the expected graphs and
breaks, and over 3 calls on fresh inputs the compiled model gives the same output (a tensor, or
the same output class with equal compared fields) as eager, with the expected records, hits,
breaks and fallbacks (so a cache that never hits fails). All three are captured as one graph, so
they also go through ``helpers.assert_compiles_like_eager`` (module state and inputs compared).

What TorchDynamo 2.13 does with them (``python -m integration.hf_report --extra``): MONAI's
BasicUNet breaks 8 times (9 graphs) on ``torch.jit.isinstance``; the diffusers UNets are one
graph. MagPy captures each as one graph because it follows ``torch.jit.isinstance`` like any
Python code, reads ``inspect.signature`` of the attention processor as a guarded constant,
calls the processor object through its Python ``__call__``, and slices ``self.resnets[1:]``
as a ModuleList of entry paths. About 15 s on 2 cores (mostly importing the libraries).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import _integration_helpers as H
import pytest
import torch

from magpy._cli import load_models

os.environ["HF_HUB_OFFLINE"] = "1"

load_models(Path(__file__).with_name("models"))
EXTRA: Any = importlib.import_module("_magpy_bench_models.extra")
BATCH = 2
CALLS = 3


Expect = H.ModelCounts


STATIC = Expect()
EXPECT: dict[str, Expect] = {
    "monai_basic_unet": STATIC,
    "unet2d": STATIC,
    "unet2d_condition": STATIC,
    "autoencoder_kl": STATIC,
}


def _build(name: str) -> tuple[torch.nn.Module, Any]:
    """The model and its input maker; skips the test when the model's library is missing."""
    pytest.importorskip(EXTRA.EXTRA_PACKAGES[name])
    model, make_inputs = EXTRA.EXTRA_MODELS[name]()
    return model, make_inputs


def _compare(got: Any, want: Any, name: str, where: str) -> None:
    assert type(got) is type(want), f"{name}, {where}: {type(got).__name__}"
    fields = EXTRA.EXTRA_OUTPUTS[name]
    if not fields:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for field in fields:
        torch.testing.assert_close(
            getattr(got, field), getattr(want, field), rtol=1e-4, atol=1e-5, msg=field
        )


def test_every_model_has_an_expectation() -> None:
    """EXPECT, EXTRA_OUTPUTS and EXTRA_PACKAGES cover exactly the registry."""
    names = sorted(EXTRA.EXTRA_MODELS)
    assert sorted(EXPECT) == sorted(EXTRA.EXTRA_OUTPUTS) == sorted(EXTRA.EXTRA_PACKAGES) == names


@pytest.mark.parametrize("name", sorted(EXTRA.EXTRA_MODELS))
def test_extra_model_compiles_like_eager(name: str) -> None:
    """explain's counts, then 3 fresh calls equal eager with the expected stats."""
    model, make_inputs = _build(name)
    H.assert_model_counts(
        name,
        model,
        make_inputs,
        EXPECT[name],
        lambda got, want, where: _compare(got, want, name, where),
        batch=BATCH,
        calls=CALLS,
    )


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECT.items() if e == STATIC))
def test_static_extra_model_full_check(name: str) -> None:
    """The one-graph models pass the full check: the whole output, inputs and module state.

    MONAI's BasicUNet returns a plain tensor, so a hit must run none of MONAI's Python. The
    diffusers UNets return a ``BaseOutput`` dataclass that the mock builds by calling its class
    (whose ``__init__``/``__post_init__`` live in diffusers), so that check is off for them.
    """
    model, make_inputs = _build(name)
    with torch.no_grad():
        H.assert_compiles_like_eager(
            model,
            lambda i: ([], make_inputs(BATCH, 1 + i)),
            calls=CALLS,
            backend="eager",
            check_hits_run_no_user_code=not EXTRA.EXTRA_OUTPUTS[name],
        )


def test_extra_builders_are_offline_and_deterministic() -> None:
    """Same seed, same inputs; every installed model is in eval mode."""
    for name, build in EXTRA.EXTRA_MODELS.items():
        try:
            importlib.import_module(EXTRA.EXTRA_PACKAGES[name])
        except ImportError:
            continue
        model, make_inputs = build()
        assert isinstance(model, torch.nn.Module) and not model.training, name
        a, b = make_inputs(BATCH, 0), make_inputs(BATCH, 0)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert os.environ["HF_HUB_OFFLINE"] == "1"
