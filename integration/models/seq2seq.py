"""A GRU encoder-decoder with (Luong, dot-product) attention and greedy decoding.

The encoder steps an ``nn.GRUCell`` over the source; the decoder runs a fixed number of steps,
attends over every encoder state, and feeds its own ``argmax`` back as the next input token (a
tensor, never read into Python, so the program stays static).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Seq2Seq", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor]]

# size -> (vocab, hidden, source length, decoded length)
_SIZES = {"small": (64, 64, 8, 6), "bench": (1000, 256, 24, 16)}
BOS = 1


class Encoder(nn.Module):
    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.cell = nn.GRUCell(hidden, hidden)

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``src``: (seq, batch) token ids -> (states (batch, seq, hidden), last state)."""
        emb = self.embed(src)
        h = emb.new_zeros(src.size(1), self.cell.hidden_size)
        states = []
        for t in range(src.size(0)):
            h = self.cell(emb[t], h)
            states.append(h)
        return torch.stack(states, 1), h


class AttnDecoder(nn.Module):
    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.cell = nn.GRUCell(hidden * 2, hidden)
        self.combine = nn.Linear(hidden * 2, hidden)
        self.out = nn.Linear(hidden, vocab)

    def step(
        self, token: torch.Tensor, h: torch.Tensor, context: torch.Tensor, enc: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.cell(torch.cat([self.embed(token), context], 1), h)
        scores = torch.bmm(enc, h.unsqueeze(2)).squeeze(2)  # (batch, seq)
        weights = F.softmax(scores, dim=1)
        context = torch.bmm(weights.unsqueeze(1), enc).squeeze(1)
        logits = self.out(torch.tanh(self.combine(torch.cat([h, context], 1))))
        return logits, h, context


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_len: int) -> None:
        super().__init__()
        self.encoder = Encoder(vocab, hidden)
        self.decoder = AttnDecoder(vocab, hidden)
        self.max_len = max_len

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding: (logits (len, batch, vocab), tokens (len, batch))."""
        enc, h = self.encoder(src)
        token = torch.full((src.size(1),), BOS, dtype=torch.long, device=src.device)
        context = torch.zeros_like(h)
        all_logits, tokens = [], []
        for _ in range(self.max_len):
            logits, h, context = self.decoder.step(token, h, context, enc)
            token = logits.argmax(1)
            all_logits.append(logits)
            tokens.append(token)
        return torch.stack(all_logits), torch.stack(tokens)


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    vocab, hidden, src_len, max_len = _SIZES[size]
    torch.manual_seed(0)
    model = Seq2Seq(vocab, hidden, max_len)

    def make_inputs(batch: int, seed: int) -> tuple[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(2, vocab, (src_len, batch), generator=g),)

    return model.eval(), make_inputs
