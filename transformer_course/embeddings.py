"""Tokens to vectors: scaled token embeddings and the sinusoidal positional encoding (notebook 01)."""
import math

import torch
from torch import nn


def positional_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The paper's sinusoidal table ``[max_len, d_model]``, sin and cos interleaved.

    PE[p, 2i] = sin(p / 10000^(2i/d_model)),  PE[p, 2i+1] = cos(p / 10000^(2i/d_model)).
    """
    if max_len <= 0 or d_model <= 0:
        raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin and cos come in pairs), got d_model={d_model}")
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)        # [max_len, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                   # 0, 2, 4, ...
    angle = position / 10000.0 ** (two_i / d_model)                            # [max_len, d_model/2]
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()  # computed in float64 so that large positions keep their precision


class TokenEmbedding(nn.Module):
    """A lookup table of token vectors, scaled by sqrt(d_model) as in the paper (section 3.4)."""

    def __init__(self, vocab_size: int, d_model: int, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.d_model = d_model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids [B, T] -> vectors [B, T, d_model]."""
        return self.embedding(tokens) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to a batch of embeddings, then applies dropout."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        # A buffer: saved and moved with the module, but never trained.
        self.register_buffer("pe", positional_encoding(max_len, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embeddings x [B, T, d_model] -> x + pe[:T] [B, T, d_model], then dropout."""
        length, max_len = x.size(1), self.pe.size(0)
        if length > max_len:
            raise ValueError(f"sequence length {length} exceeds max_len={max_len}; build PositionalEncoding with a larger max_len")
        return self.dropout(x + self.pe[:length])
