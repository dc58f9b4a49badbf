"""Attention: scaled dot-product attention (notebook 02) and multi-head attention (notebook 04).

Masks are bool tensors broadcastable to [batch, heads, q_len, k_len]; True means "may attend".
A query whose every key is masked gets zero weights and a zero output, never NaN.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def _check_mask(mask):
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be a torch.bool tensor (True = may attend), got dtype {mask.dtype}")


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    """softmax(q kᵀ / sqrt(d_k)) v over the last two dimensions; returns (output, weights before dropout)."""
    _check_mask(mask)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))   # [..., Tq, Tk]
    if mask is not None:
        # The most negative finite number rather than -inf: a fully masked row then gives a
        # uniform softmax instead of 0/0 = NaN, and the masked_fill below zeroes it.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    dropped = dropout(weights) if dropout is not None else weights
    return dropped @ value, weights


def _fused_attention(query, key, value, mask, dropout_p):
    """The same result as scaled_dot_product_attention's output, from PyTorch's fused kernel (no weights)."""
    _check_mask(mask)
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p)
    # Some PyTorch versions return NaN for a query with no key to attend to: let such a row
    # attend everywhere (finite), then zero its output as the explicit version does.
    has_key = mask.any(dim=-1, keepdim=True)                                # [..., Tq, 1]
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | ~has_key, dropout_p=dropout_p)
    return output.masked_fill(~has_key, 0.0)


def split_heads(x, n_heads):
    """[B, T, D] -> [B, n_heads, T, D // n_heads]; head h holds features h*d_k:(h+1)*d_k."""
    batch, length, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(f"the last dimension ({d_model}) must be divisible by n_heads ({n_heads})")
    return x.view(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x):
    """[B, H, T, d_k] -> [B, T, H * d_k], the inverse of split_heads."""
    batch, n_heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_heads * d_k)


class MultiHeadAttention(nn.Module):
    """n_heads attentions in parallel, each on its own d_model / n_heads slice of projected features.

    With ``need_weights`` True (the default) the weights of the last forward are kept in ``attn``
    [B, H, Tq, Tk]; set it to False to use PyTorch's fused kernel instead (faster, ``attn`` is None).
    """

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)  # on the attention weights
        self.need_weights = True
        self.attn = None

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.n_heads)   # [B, H, Tq, d_k]
        k = split_heads(self.w_k(key), self.n_heads)     # [B, H, Tk, d_k]
        v = split_heads(self.w_v(value), self.n_heads)   # [B, H, Tk, d_k]
        if self.need_weights:
            output, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
            self.attn = weights.detach()  # kept for inspection, not for backprop
        else:
            dropout_p = self.dropout.p if self.training else 0.0
            output = _fused_attention(q, k, v, mask, dropout_p)
            self.attn = None
        return self.w_o(merge_heads(output))
