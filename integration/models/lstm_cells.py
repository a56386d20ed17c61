"""A stacked LSTM built from ``nn.LSTMCell``s, stepped over the sequence in a Python loop.

The loop runs ``x.size(0)`` times: a tracer unrolls it into one graph per sequence length;
MagPy, after a few lengths, runs it in chunks of 16, 8 and 4 unrolled iterations and a tail.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

__all__ = ["CellLSTM", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (input size, hidden size, layers, sequence length)
_SIZES = {"small": (32, 64, 2, 8), "bench": (256, 512, 2, 32)}


class CellLSTM(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.cells = nn.ModuleList(
            nn.LSTMCell(input_size if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers)
        )
        self.head = nn.Linear(hidden_size, input_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: (seq, batch, input); returns (seq, batch, input)."""
        seq_len, batch = x.size(0), x.size(1)
        state = [
            (x.new_zeros(batch, self.hidden_size), x.new_zeros(batch, self.hidden_size))
            for _ in self.cells
        ]
        outputs = []
        for t in range(seq_len):
            h = x[t]
            for i, cell in enumerate(self.cells):
                state[i] = cell(h, state[i])
                h = state[i][0]
            outputs.append(self.head(h))
        return torch.stack(outputs)


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    input_size, hidden, layers, seq_len = _SIZES[size]
    torch.manual_seed(0)
    model = CellLSTM(input_size, hidden, layers)

    def make_inputs(batch: int, seed: int) -> tuple[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(seq_len, batch, input_size, generator=g),)

    return model.eval(), make_inputs
