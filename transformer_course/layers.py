"""The Transformer's building blocks: LayerNorm and feed-forward (notebook 05), layers and stacks (notebook 06).

Post-LN (norm_first=False, the paper): x = norm(x + dropout(sublayer(x))).
Pre-LN  (norm_first=True):             x = x + dropout(sublayer(norm(x))).
"""
import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention


class LayerNorm(nn.Module):
    """Normalise each vector over its features, then scale and shift:

        gamma * (x - mean) / sqrt(var + eps) + beta,   mean and biased var over the last dimension.
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        """x [..., d_model] -> the same shape, each vector normalised."""
        # F.layer_norm is exactly the formula above, fused into one kernel forward and backward:
        # about 10x faster than writing it out, which matters with 2-3 norms in every layer.
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)


class PositionwiseFeedForward(nn.Module):
    """The same two-layer ReLU network applied to every position on its own."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [B, T, d_model] -> [B, T, d_ff] inside -> [B, T, d_model]."""
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


def residual(x, sublayer, norm, dropout, norm_first):
    """One sublayer wrapped in its residual connection, with the LayerNorm after (Post-LN) or before (Pre-LN)."""
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward network."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)  # on each sublayer's output, before the residual sum
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        """x [B, S, d_model], src_mask [B, 1, 1, S] (or broadcastable) -> [B, S, d_model]."""
        x = residual(x, lambda y: self.self_attn(y, y, y, src_mask), self.norm1, self.dropout, self.norm_first)
        return residual(x, self.feed_forward, self.norm2, self.dropout, self.norm_first)


class DecoderLayer(nn.Module):
    """Masked self-attention over the target, cross-attention to the encoder's memory, then feed-forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """x [B, T, d_model], memory [B, S, d_model], src_mask [B, 1, 1, S], tgt_mask [B, 1, T, T]
        -> [B, T, d_model]."""
        x = residual(x, lambda y: self.self_attn(y, y, y, tgt_mask), self.norm1, self.dropout, self.norm_first)
        # Queries come from the target, keys and values from the source: src_mask hides source padding.
        x = residual(x, lambda y: self.cross_attn(y, memory, memory, src_mask),
                     self.norm2, self.dropout, self.norm_first)
        return residual(x, self.feed_forward, self.norm3, self.dropout, self.norm_first)


class Encoder(nn.Module):
    """n_layers distinct EncoderLayers, then (Pre-LN only) a final LayerNorm: Pre-LN never normalises the
    residual stream itself, so its output needs one."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        """Embedded source x [B, S, d_model] -> memory [B, S, d_model]."""
        for layer in self.layers:
            x = layer(x, src_mask)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """n_layers distinct DecoderLayers, each attending to the same encoder memory; final LayerNorm for Pre-LN."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """Embedded target x [B, T, d_model], memory [B, S, d_model] -> decoder states [B, T, d_model]."""
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x if self.norm is None else self.norm(x)
