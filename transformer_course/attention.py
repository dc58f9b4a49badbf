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


def _check_shapes(query, key, value):
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query and key need the same last dimension d_k, got {query.size(-1)} and {key.size(-1)}")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key and value need the same length (one value per key), got {key.size(-2)} and {value.size(-2)}")


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    """softmax(q kᵀ / sqrt(d_k)) v over the last two dimensions; returns (output, weights before dropout)."""
    _check_mask(mask)
    _check_shapes(query, key, value)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))   # [..., Tq, Tk]
    if mask is not None:
        # The most negative finite number rather than -inf: a fully masked row then gives a
        # uniform softmax instead of 0/0 = NaN, and the masked_fill below zeroes it.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    dropped = dropout(weights) if dropout is not None else weights
    return dropped @ value, weights                                       # [..., Tq, d_v], [..., Tq, Tk]


def _fused_attention(query, key, value, mask, dropout_p):
    """The same result as scaled_dot_product_attention's output, from PyTorch's fused kernel (no weights)."""
    _check_mask(mask)
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p)
    # Some PyTorch versions return NaN for a query with no key to attend to: let such a row
    # attend everywhere (finite), then zero its output as the explicit version does.
    no_key = ~mask.any(dim=-1, keepdim=True)                                # [..., Tq, 1]
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | no_key, dropout_p=dropout_p)
    return output.masked_fill(no_key, 0.0)


def split_heads(x, n_heads):
    """[B, T, D] -> [B, n_heads, T, D // n_heads]; head h holds features h*d_k:(h+1)*d_k."""
    if x.dim() != 3:
        raise ValueError(f"x must be [batch, seq, d_model], got shape {list(x.shape)}")
    batch, length, d_model = x.shape
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"the last dimension ({d_model}) must be divisible by n_heads ({n_heads}), a positive number")
    return x.view(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x):
    """[B, H, T, d_k] -> [B, T, H * d_k], the inverse of split_heads."""
    if x.dim() != 4:
        raise ValueError(f"x must be [batch, heads, seq, d_k], got shape {list(x.shape)}")
    batch, n_heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_heads * d_k)


def _stacked_linear(x, *linears):
    """Several nn.Linear of the same input at once, their outputs side by side on the last dimension."""
    weight = torch.cat([linear.weight for linear in linears])
    bias = torch.cat([linear.bias for linear in linears])
    return F.linear(x, weight, bias)


class MultiHeadAttention(nn.Module):
    """n_heads attentions in parallel, each on its own d_model / n_heads slice of projected features.

    With ``need_weights`` True (the default) the weights of the last forward are kept in ``attn``
    [B, H, Tq, Tk]; set it to False to use PyTorch's fused kernel instead (faster, ``attn`` is None).
    """

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if n_heads < 1 or d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads}), a positive number")
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)  # on the attention weights
        self.need_weights = True
        self.attn = None

    def project(self, query, key, value):
        """(w_q(query), w_k(key), w_v(value)). Projections of one input share one bigger matrix multiply:
        the same result, faster than two or three small ones. Projections that are not plain nn.Linear (a LoRA
        wrapper of notebook 10, say) are called one by one."""
        if not all(type(linear) is nn.Linear for linear in (self.w_q, self.w_k, self.w_v)):
            return self.w_q(query), self.w_k(key), self.w_v(value)
        if query is key is value:  # self-attention
            return _stacked_linear(query, self.w_q, self.w_k, self.w_v).chunk(3, dim=-1)
        if key is value:           # cross-attention: keys and values both read the encoder's memory
            return (self.w_q(query), *_stacked_linear(key, self.w_k, self.w_v).chunk(2, dim=-1))
        return self.w_q(query), self.w_k(key), self.w_v(value)

    def forward(self, query, key, value, mask=None):
        """query [B, Tq, d_model], key and value [B, Tk, d_model], mask broadcastable to [B, H, Tq, Tk]
        -> [B, Tq, d_model]."""
        q, k, v = (split_heads(x, self.n_heads) for x in self.project(query, key, value))  # [B, H, T, d_k]
        if self.need_weights:
            output, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)   # [B, H, Tq, d_k]
            self.attn = weights.detach()  # kept for inspection, not for backprop
        else:
            dropout_p = self.dropout.p if self.training else 0.0
            output = _fused_attention(q, k, v, mask, dropout_p)
            self.attn = None
        return self.w_o(merge_heads(output))                          # [B, H, Tq, d_k] -> [B, Tq, d_model]
