"""Benchmark models: our own clean implementations with random weights (nothing downloaded).

Each module exposes ``build(size="small") -> (model, make_inputs)`` where
``make_inputs(batch, seed) -> tuple`` returns fresh positional arguments for ``model``.
Sizes: ``"small"`` (a forward well under 50 ms on 2 CPU cores) and ``"bench"`` (larger).
Every model is returned in ``eval()`` mode; run it under ``torch.no_grad()`` for inference.

``MODELS`` maps a name to its ``build``; ``STATIC`` names those MagPy captures as one graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import (
    blockdrop,
    densenet,
    dynamic,
    lstm_cells,
    monodepth,
    qat_cnn,
    resnet,
    seq2seq,
    transformer,
)

__all__ = ["MODELS", "Builder"]

Builder = Callable[..., tuple[Any, Callable[[int, int], tuple[Any, ...]]]]

MODELS: dict[str, Builder] = {
    "resnet18": resnet.build_resnet18,
    "resnet50": resnet.build_resnet50,
    "densenet121": densenet.build,
    "monodepth": monodepth.build,
    "qat_cnn": qat_cnn.build,
    "lstm": lstm_cells.build,
    "seq2seq": seq2seq.build,
    "blockdrop": blockdrop.build,
    "transformer": transformer.build,
    "dynamic": dynamic.build,
}
