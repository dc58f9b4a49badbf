"""Attention masks (notebook 03): bool, broadcastable to [batch, heads, q_len, k_len], True = may attend."""
import torch


def padding_mask(tokens, pad_idx):
    """[B, T] token ids -> [B, 1, 1, T]: every query may attend to every key that is not padding."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be a [batch, seq] tensor, got shape {list(tokens.shape)}")
    return (tokens != pad_idx)[:, None, None, :]


def causal_mask(size, device=None):
    """[1, 1, size, size], True at [i, j] iff j <= i: position i sees itself and the past, never the future."""
    if size < 1:
        raise ValueError(f"size must be a positive sequence length, got {size}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]


def target_mask(tokens, pad_idx):
    """[B, 1, T, T] for the decoder's self-attention: no padding keys and no future keys."""
    return padding_mask(tokens, pad_idx) & causal_mask(tokens.size(1), device=tokens.device)
