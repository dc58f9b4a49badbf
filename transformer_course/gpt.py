"""Notebook 09: from the translation Transformer to a GPT, a decoder-only language model.

A GPT keeps one stack of the Transformer: self-attention that only looks back (causal), each block Pre-LN, and
drops the encoder and the cross-attention. Positions enter through the rotary embedding (RoPE) of the queries
and keys instead of a table added to the input; the output layer reuses the token embedding (tied weights).

    apply_rope            rotary position embedding of [..., T, d] at given positions     (embeddings.py)
    CausalSelfAttention   multi-head causal self-attention with RoPE and a key/value cache
    GPTBlock, GPT         Pre-LN blocks, the final LayerNorm and the tied output layer
    lm_loss               next-token cross-entropy over the positions a mask marks
    sample_next           temperature, top-k and nucleus (top-p) sampling of the next token
    generate              greedy or sampled continuation of a prompt, with or without the cache
    adamw_param_groups    AdamW's two groups: weight decay for the Linear layers' matrices only (the course's rule)
    warmup_cosine_lr      linear warm-up, then a cosine decay                                (schedules.py)

`DecoderOnlyTranslator` turns a GPT into a translation model with the interface of the course's `Transformer`
(`forward(src, tgt)`, `encode`, `decode`, `generator`, `pad_idx`), so that the trainer, greedy decoding, beam
search and `evaluate` run it unchanged (recipes/multi30k_de_en_decoder_only.json).
"""
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import cache as incremental
from .attention import MultiHeadAttention, _fused_attention, merge_heads, scaled_dot_product_attention, split_heads
from .decoding import sampling_distribution
from .embeddings import apply_rope
from .layers import LayerNorm, PositionwiseFeedForward, residual
from .schedules import warmup_cosine_lr

__all__ = ["apply_rope", "CausalSelfAttention", "GPTBlock", "GPT", "lm_loss", "sample_next", "generate",
           "adamw_param_groups", "warmup_cosine_lr", "DecoderOnlyTranslator", "pack_pairs", "DECODER_ONLY_RECIPE"]

# The course's recipe with a GPT of about its size in place of the encoder-decoder (notebook 09's comparison):
# python -m transformer_course.reproduce --config <this file>, or python -m transformer_course.train --config <it>
DECODER_ONLY_RECIPE = Path(__file__).parent / "recipes" / "multi30k_de_en_decoder_only.json"


class CausalSelfAttention(MultiHeadAttention):
    """Multi-head self-attention in which position t sees positions <= t only, with RoPE on the queries and keys
    (never the values), and a key/value cache for generation.

    ``forward(x, cache=None)``: x [B, T, d_model] -> [B, T, d_model]. ``cache`` is None or a dict the layer
    keeps its rotated keys and values in ("k", "v": [B, H, t, d_k]): x then holds the T positions after the t
    cached ones, which are rotated at positions t, ..., t + T - 1 and attend to every cached key and to the
    new ones up to their own position.
    """

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__(d_model, n_heads, dropout)     # MultiHeadAttention's parts: w_q, w_k, w_v, w_o, dropout

    def forward(self, x, cache=None):
        q, k, v = (split_heads(y, self.n_heads) for y in self.project(x, x, x))        # [B, H, T, d_k]
        start = cache["k"].size(2) if cache is not None and "k" in cache else 0
        positions = torch.arange(start, start + x.size(1), device=x.device)
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if cache is not None:
            if start:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        return self.w_o(merge_heads(self._attend(q, k, v, start)))

    def _attend(self, q, k, v, start):
        """The attention of the new queries over all the keys; the mask is causal, shifted by the cached `start`."""
        mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril(diagonal=start)
        if self.need_weights:
            output, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
            self.attn = weights.detach()
            return output
        self.attn = None
        dropout_p = self.dropout.p if self.training else 0.0
        if start == 0:     # the plain causal mask: the fused kernel's own, fastest
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        return _fused_attention(q, k, v, mask, dropout_p)


class GPTBlock(nn.Module):
    """One Pre-LN block: x + attn(norm1(x)), then + feed_forward(norm2(x)) (notebook 06's residual, norm first)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)      # on each sublayer's output, before the residual sum

    def forward(self, x, cache=None):
        x = residual(x, lambda y: self.attn(y, cache), self.norm1, self.dropout, True)
        return residual(x, self.feed_forward, self.norm2, self.dropout, True)


class GPT(nn.Module):
    """A decoder-only language model: token ids [B, T] -> next-token logits [B, T, vocab_size].

    embed (no scaling, no positional table: RoPE is inside the attention) -> dropout -> n_layers GPTBlocks ->
    the final LayerNorm `norm` -> logits = norm(x) @ embed.weightᵀ (the output layer is the embedding, tied).
    ``cache``: None, or a dict the blocks keep their keys and values in (block i in cache[i]); pass an empty
    dict with the prompt, then the same dict with each new token.
    """

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=0.02)     # GPT-2's: the tied output starts near uniform
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
        self.norm = LayerNorm(d_model)

    def forward(self, tokens, cache=None):
        x = self.dropout(self.embed(tokens))
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache.setdefault(i, {}))
        return F.linear(self.norm(x), self.embed.weight)

    def set_need_weights(self, need_weights):
        """Whether the attention layers keep their weights in `attn` (True) or use the fused kernel (False, faster)."""
        for block in self.blocks:
            block.attn.need_weights = need_weights
        return self


def lm_loss(logits, tokens, loss_mask=None):
    """The mean next-token cross-entropy: logits [B, T, V] at position t predict tokens[:, t + 1].

    ``loss_mask [B, T]`` (bool) marks the tokens whose prediction counts (the target of a translation, not its
    source); loss_mask[:, 0] is never used, since nothing predicts the first token. None: every token after the
    first counts. The mean is over the counted tokens of the whole batch (NaN when none counts).
    """
    nll = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    if loss_mask is None:
        return nll.mean()
    return nll[loss_mask[:, 1:].flatten()].mean()


def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """Next tokens [B] drawn from logits [B, V]: softmax(logits / temperature), then top-k, then top-p (each on
    the renormalised result of the one before; decoding.sampling_distribution). temperature 0 is the argmax
    (the first of tied maxima); `generator` (a torch.Generator) makes the draw reproducible."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = sampling_distribution(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(model, prompt, max_new_tokens, cache=True, choose=None):
    """Continue prompt [B, T0] by max_new_tokens tokens: (tokens [B, T0 + N], logits [B, N, V] of each step).

    Each step's logits are those of the last position; `choose(logits [B, V])` picks the next tokens [B]
    (default: the argmax; e.g. lambda logits: sample_next(logits, 0.8)). With `cache` the model reads the
    prompt once and then one new token per step, keeping the keys and values in a dict; without it, the whole
    sequence is run again at every step. Both give the same logits."""
    choose = choose or (lambda logits: logits.argmax(dim=-1))
    store = {} if cache else None
    tokens, steps = prompt, []
    logits = model(prompt, cache=store)[:, -1]
    for step in range(max_new_tokens):
        steps.append(logits)
        tokens = torch.cat([tokens, choose(logits)[:, None]], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(tokens[:, -1:], cache=store)[:, -1] if cache else model(tokens)[:, -1]
    empty = prompt.new_zeros(prompt.size(0), 0, 0, dtype=torch.float)
    return tokens, torch.stack(steps, dim=1) if steps else empty


def adamw_param_groups(model, weight_decay):
    """AdamW's parameter groups: [{"params": the weight matrices of the nn.Linear layers, "weight_decay":
    weight_decay}, {"params": everything else, "weight_decay": 0.0}], each parameter once.

    This is the course's choice (minGPT's rule), not something AdamW prescribes: AdamW applies whatever decay
    each group asks for. Decay pulls a weight towards 0. A matrix that mixes features can afford that; a bias
    and a LayerNorm's gain and shift set a scale or an offset that decay would only drag towards 0. The
    embedding is left undecayed by convention. The usual reason, that most of its rows are rarely updated,
    holds for an untied input embedding only: tied, it is also the output matrix, and every row gets a
    gradient through the softmax at every step. GPT-1 and nanoGPT decay the tied matrix."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embeddings
    params = list(model.parameters())      # each parameter once, even when shared
    return [{"params": [p for p in params if id(p) in matrices], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in matrices], "weight_decay": 0.0}]


# ----------------------------------------------------------------------------- translation with a GPT

def pack_pairs(src, tgt, pad_idx):
    """One sequence per pair: the source's tokens (no padding), then the target's, padded on the right.

    src [B, S] and tgt [B, T], padded on the right -> (sequences [B, S + T], positions [B, T] of the target's
    tokens in them). Padding only ever follows a row's real tokens, so causal attention never reads it."""
    lengths = (src != pad_idx).sum(dim=1, keepdim=True)                         # [B, 1]
    positions = lengths + torch.arange(tgt.size(1), device=tgt.device)          # [B, T]
    sequences = torch.full((src.size(0), src.size(1) + tgt.size(1)), pad_idx, dtype=torch.long, device=src.device)
    sequences[:, :src.size(1)] = src
    return sequences.scatter(1, positions, tgt), positions


class DecoderOnlyTranslator(nn.Module):
    """A GPT that translates: it reads "source <eos> <bos> target" as one sequence (the target's <bos> is the
    separator) and is trained on the target's tokens only.

    It has the interface of the course's `Transformer` (the same keyword arguments, `forward(src, tgt)` ->
    logits [B, T, V] of the target positions, `encode`, `decode`, `generator`, `pad_idx`), so the trainer,
    greedy decoding, beam search and evaluate use it as they are. `encode` only hands the source on (there is
    no encoder); `decode` runs the GPT over source and target prefix and returns the target positions' logits,
    so `generator` is the identity. The GPT has `num_decoder_layers` blocks and needs one vocabulary for both
    languages. `gpt_class`: the GPT to build (a notebook passes its own)."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_encoder_layers=0,
                 num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, pad_idx=0, norm_first=True,
                 tie_embeddings=True, gpt_class=None):
        super().__init__()
        if src_vocab_size != tgt_vocab_size:
            raise ValueError("a decoder-only translator needs one vocabulary for both languages (tokenizer 'subword'), "
                             f"got sizes {src_vocab_size} and {tgt_vocab_size}")
        if num_encoder_layers or not norm_first or not tie_embeddings:
            raise ValueError("a decoder-only translator has no encoder (num_encoder_layers 0), Pre-LN blocks "
                             "(norm_first true) and tied embeddings (tie_embeddings true)")
        self.gpt = (gpt_class or GPT)(src_vocab_size, d_model, n_heads, num_decoder_layers, d_ff, dropout)
        self.pad_idx, self.max_len = pad_idx, max_len

    def encode(self, src, src_mask=None):
        """No encoder: the "memory" is the source ids [B, S] themselves."""
        return src

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        """Logits [B, T, V] of the target positions of "source, target prefix" (the masks are not needed: the
        GPT's attention is causal and the source carries no padding inside the sequence)."""
        sequences, positions = pack_pairs(memory, tgt, self.pad_idx)
        logits = self.gpt(sequences)
        return logits.gather(1, positions[:, :, None].expand(-1, -1, logits.size(-1)))

    def generator(self, logits):
        return logits

    def forward(self, src, tgt):
        return self.decode(tgt, src)

    def set_need_weights(self, need_weights):
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.need_weights = need_weights
        return self

    @torch.no_grad()
    def cached_greedy_decode(self, src, max_len, bos_idx, eos_idx):
        """What greedy_decode gives, row for row ([B, L]: <bos>, the argmax until <eos>, then padding), with the
        GPT's key/value cache: the sources of each length together (no padding inside a sequence), each read
        once, then one new token a step (cache.generate's loop). decoding.translate uses it when it is there."""
        lengths = (src != self.pad_idx).sum(dim=1)
        out = torch.full((src.size(0), max_len), self.pad_idx, dtype=torch.long, device=src.device)
        width = 1
        for length in lengths.unique().tolist():
            rows = (lengths == length).nonzero()[:, 0]
            ys = incremental.generate(self._stepper(src[rows, :length]), len(rows), max_len, bos_idx, eos_idx,
                                      self.pad_idx, lambda logits: logits.argmax(dim=-1), device=src.device)
            out[rows, :ys.size(1)] = ys
            width = max(width, ys.size(1))
        return out[:, :width]

    def _stepper(self, source):
        """step(tokens [B]) -> the next token's logits [B, V]: the first call reads the source and <bos>."""
        cache = {}

        def step(tokens):
            x = torch.cat([source, tokens[:, None]], dim=1) if not cache else tokens[:, None]
            return self.gpt(x, cache=cache)[:, -1]
        return step
