"""Tokens to vectors: scaled token embeddings and the sinusoidal positional encoding (notebook 01), and the rotary
position embedding that notebook 01 compares it with."""
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


def apply_rope(x: torch.Tensor, positions=None, base: float = 10000.0) -> torch.Tensor:
    """The rotary position embedding (RoPE; Su et al. 2021, RoFormer) of queries or keys ``x [..., T, d]``.

    Pair i of the vector at position p, (x[2i], x[2i+1]), is rotated by the angle p * w_i with
    w_i = base^(-2i/d), d = x.size(-1): the sinusoidal encoding's formula with the head dimension d_k in place
    of d_model. The pairs are interleaved as in the RoFormer paper. ``positions [T]`` defaults to 0, 1, ...,
    T-1. A dot product of a rotated query at p and a rotated key at q then depends on p - q, never on p or q
    alone.

    The angles are computed in float64 (a position of a few thousand times a frequency near 1 loses digits in
    float32) on x's device, or on the CPU where the device has no float64 (Apple's MPS); the cosines and sines
    are cast to x.dtype. (Built on the CPU and copied to a GPU, they would make every call wait for the GPU.)
    """
    d = x.size(-1)
    if d % 2:
        raise ValueError(f"the last dimension must be even (rotations act on pairs), got {d}")
    where = torch.device("cpu") if x.device.type == "mps" else x.device
    if positions is None:
        positions = torch.arange(x.size(-2), device=where)
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=where) / d)          # [d/2]
    angle = positions.detach().to(device=where, dtype=torch.float64).unsqueeze(-1) * omega   # [T, d/2], float64
    cos = torch.cos(angle).to(device=x.device, dtype=x.dtype)
    sin = torch.sin(angle).to(device=x.device, dtype=x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


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
            raise ValueError(f"sequence length {length} exceeds max_len={max_len}; "
                             "build PositionalEncoding with a larger max_len")
        return self.dropout(x + self.pe[:length])
