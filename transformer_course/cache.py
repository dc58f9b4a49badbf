"""Incremental decoding with a key/value cache (notebook 08).

`greedy_decode` runs the decoder over the whole prefix at every step. Because of the causal mask, the
states of positions 1..t-1 do not change when token t is appended, so neither do the keys and values
their self-attention computed: they can be kept (the *cache*) and each step can run the decoder on the
newest token only. The keys and values of the cross-attention are projections of the encoder's memory,
the same at every step, so they are computed once.

`IncrementalDecoder` reads the weights of the course's `Transformer` (its `MultiHeadAttention`,
`DecoderLayer` and `Decoder`, post-LN or pre-LN) and leaves those classes as they are. It reproduces
the model's eval-mode computation: call it under `model.eval()` (dropout would break the equality).
"""
import torch

from .attention import merge_heads, scaled_dot_product_attention, split_heads
from .layers import residual
from .masks import padding_mask

__all__ = ["IncrementalDecoder", "cached_greedy_decode", "generate"]


def _heads(mha, linear, x):
    """One projection of x [B, T, D], cut into heads: [B, H, T, d_k]."""
    return split_heads(linear(x), mha.n_heads)


def _attend(mha, x, keys, values, mask):
    """Multi-head attention of the queries projected from x [B, 1, D] over given keys and values [B, H, T, d_k]."""
    output, _ = scaled_dot_product_attention(_heads(mha, mha.w_q, x), keys, values, mask)
    return mha.w_o(merge_heads(output))


class _LayerCache:
    """One decoder layer's cache: self-attention keys/values of the tokens so far, and cross-attention
    keys/values of the memory (computed once)."""

    def __init__(self, layer, memory):
        self.layer = layer
        self.cross_k = _heads(layer.cross_attn, layer.cross_attn.w_k, memory)     # [B, H, S, d_k]
        self.cross_v = _heads(layer.cross_attn, layer.cross_attn.w_v, memory)
        self.self_k = self.self_v = None                                          # [B, H, t, d_k]

    def _self_attention(self, x):
        mha = self.layer.self_attn
        k, v = _heads(mha, mha.w_k, x), _heads(mha, mha.w_v, x)
        self.self_k = k if self.self_k is None else torch.cat([self.self_k, k], dim=2)
        self.self_v = v if self.self_v is None else torch.cat([self.self_v, v], dim=2)
        # The newest token may attend to every token so far: the causal mask's last row is all True.
        return _attend(mha, x, self.self_k, self.self_v, None)

    def step(self, x, src_mask):
        """The layer's output for the newest position, x [B, 1, D] -> [B, 1, D], as DecoderLayer.forward computes it."""
        layer = self.layer
        x = residual(x, self._self_attention, layer.norm1, layer.dropout, layer.norm_first)
        x = residual(x, lambda y: _attend(layer.cross_attn, y, self.cross_k, self.cross_v, src_mask),
                     layer.norm2, layer.dropout, layer.norm_first)
        return residual(x, layer.feed_forward, layer.norm3, layer.dropout, layer.norm_first)

    def tensors(self):
        return [t for t in (self.self_k, self.self_v, self.cross_k, self.cross_v) if t is not None]


class IncrementalDecoder:
    """Encodes src [B, S] once; then `step(tokens)` feeds the next target token of every row ([B] ids, <bos>
    first) and returns the logits of the token after it, [B, vocab] — the same as the last position of
    `model(src, tokens so far)`, for the cost of running the decoder on one position."""

    def __init__(self, model, src):
        self.model = model
        self.src_mask = padding_mask(src, model.pad_idx)
        memory = model.encode(src, self.src_mask)
        self.layers = [_LayerCache(layer, memory) for layer in model.decoder.layers]
        self.length = 0     # tokens fed so far

    def step(self, tokens):
        model, position = self.model, self.length
        if position >= model.pos_encoding.pe.size(0):
            raise ValueError(f"position {position} is past the positional encoding's max_len {model.pos_encoding.pe.size(0)}")
        x = model.pos_encoding.dropout(model.tgt_embed(tokens[:, None]) + model.pos_encoding.pe[position])
        for cache in self.layers:
            x = cache.step(x, self.src_mask)
        if model.decoder.norm is not None:     # pre-LN's final LayerNorm
            x = model.decoder.norm(x)
        self.length += 1
        return model.generator(x[:, 0])

    def cache_bytes(self, self_attention_only=True):
        """Bytes held by the cache: the self-attention keys and values (2 x B x H x t x d_k per layer), plus
        with self_attention_only=False the cross-attention ones of the memory (2 x B x H x S x d_k per layer)."""
        tensors = [t for c in self.layers for t in (c.tensors()[:2] if self_attention_only else c.tensors())]
        return sum(t.numel() * t.element_size() for t in tensors)


def generate(step, batch_size, max_len, bos_idx, eos_idx, pad_idx, choose, device=None):
    """The decoding loop: rows start with <bos>; `step(tokens [B])` gives the logits of the next token,
    `choose(logits [B, V])` picks it. After a row's <eos> it only gets pad_idx; the loop stops when every
    row has produced <eos> or the rows have max_len ids. Returns [B, L]."""
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1 (room for <bos>), got {max_len}")
    ys = torch.full((batch_size, 1), bos_idx, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    while ys.size(1) < max_len and not finished.all():
        next_tokens = choose(step(ys[:, -1]).float()).masked_fill(finished, pad_idx)
        ys = torch.cat([ys, next_tokens[:, None]], dim=1)
        finished |= next_tokens == eos_idx
    return ys


@torch.no_grad()
def cached_greedy_decode(model, src, max_len, bos_idx, eos_idx):
    """`greedy_decode` with a key/value cache: the same tokens, each step running the decoder on the newest
    token only. Needs the course's `Transformer` (it reads the decoder layers' weights)."""
    if src.dim() != 2:
        raise ValueError(f"src must be a [batch, seq] tensor of ids, got shape {list(src.shape)}")
    decoder = IncrementalDecoder(model, src)
    return generate(decoder.step, src.size(0), max_len, bos_idx, eos_idx, model.pad_idx,
                    lambda logits: logits.argmax(dim=-1), device=src.device)
