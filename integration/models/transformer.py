"""A small BERT-like encoder: token + position + segment embeddings, post-LayerNorm blocks of
multi-head self-attention and a GELU feed-forward, an attention mask over padding, and a pooler.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["BertLike", "build"]

MakeInputs = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]

# size -> (vocab, hidden, layers, heads, sequence length)
_SIZES = {"small": (1000, 64, 2, 4, 32), "bench": (8000, 256, 4, 4, 128)}


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.size()
        return x.view(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = F.softmax(scores + mask_bias, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return self.out(ctx.view(ctx.size(0), ctx.size(1), -1))


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = nn.Linear(hidden, hidden * 4)
        self.ffn_out = nn.Linear(hidden * 4, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attention(x, mask_bias))
        return self.ln2(x + self.ffn_out(F.gelu(self.ffn_in(x))))


class BertLike(nn.Module):
    def __init__(
        self, vocab: int, hidden: int, layers: int, heads: int, max_positions: int = 512
    ) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.segment = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, seq) ids and 0/1 mask -> (hidden states, pooled [CLS] vector)."""
        seq_len = input_ids.size(1)
        positions = torch.arange(seq_len, device=input_ids.device).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions)
        x = self.ln(x + self.segment(torch.zeros_like(input_ids)))
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


def build(size: str = "small") -> tuple[nn.Module, MakeInputs]:
    vocab, hidden, layers, heads, seq_len = _SIZES[size]
    torch.manual_seed(0)
    model = BertLike(vocab, hidden, layers, heads)

    def make_inputs(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab, (batch, seq_len), generator=g)
        lengths = torch.randint(seq_len // 2, seq_len + 1, (batch,), generator=g)
        mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
        return ids, mask

    return model.eval(), make_inputs
