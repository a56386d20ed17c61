"""``torch.manual_seed(s)``: a reseeding the mock makes again on every run (``libs.stdlib.draws``).

The call resets torch's default generators (the CPU one, and CUDA's); the mock makes it again
before the graph, so the random operations of the graph that follow it in the program draw from
the reseeded state, as in eager (the ``inductor`` backend draws from the default generator too,
``fallback_random``). A random operation of the graph *before* the reseeding would run after it
on a hit: that is a break. On a miss after it, the generators are put back as they were (the CPU
state, and every CUDA device's once CUDA is up).
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.frame import FrameMonitor
from ..stdlib.draws import SEED_FUNCTIONS, GeneratorKind

__all__: list[str] = []


def _state(_g: Any) -> Any:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _restore(_g: Any, state: Any) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _before_graph(m: FrameMonitor) -> None:
    if m.cap.draws_random:
        raise m.unsupported("torch.manual_seed after the graph drew random numbers")


_TORCH = GeneratorKind(frozenset({"manual_seed"}), _state, _restore)
SEED_FUNCTIONS[id(torch.manual_seed)] = (
    torch.manual_seed,
    torch.default_generator,
    _TORCH,
    _before_graph,
)
