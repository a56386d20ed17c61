"""The thread state a record depends on besides its inputs and grad mode.

``Capture`` takes ``ambient_state()`` when it starts; each record's guard compares it again, as
it changes what the graph's operations compute or make.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ambient_state"]


def ambient_state() -> tuple[Any, ...]:
    """Thread state, besides grad mode, that changes what a recorded graph would compute or
    make: autocast (CPU and CUDA, with its dtype), the default dtype of factory functions,
    inference mode, and torch-function modes. Each record's guard compares it."""
    return (
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.get_default_dtype(),
        torch.is_inference_mode_enabled(),
        torch._C._len_torch_function_stack(),
    )
