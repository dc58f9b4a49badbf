"""The full encoder-decoder Transformer of "Attention Is All You Need" (notebook 06).

Reading order. The model is assembled from the package's other files, bottom up, as the notebooks build it:

    embeddings.py   positional_encoding, TokenEmbedding, PositionalEncoding        notebook 01
    attention.py    scaled_dot_product_attention                                   notebook 02
    masks.py        padding_mask, causal_mask, target_mask                         notebook 03
    attention.py    split_heads, merge_heads, MultiHeadAttention                   notebook 04
    layers.py       LayerNorm, PositionwiseFeedForward                             notebook 05
    layers.py       residual, EncoderLayer, DecoderLayer, Encoder, Decoder         notebook 06
    model.py        Transformer (this file)                                        notebook 06

One forward pass, with its shapes (B sentences, S source tokens, T target tokens, D = d_model):

    src [B, S] -> src_embed, pos_encoding -> [B, S, D] -> encoder -> memory [B, S, D]
    tgt [B, T] -> tgt_embed, pos_encoding -> [B, T, D] -> decoder (reads memory) -> [B, T, D]
               -> generator -> logits [B, T, tgt_vocab_size]

Translating (decoding.py, cache.py) calls `encode` once per sentence and `decode` once per new token.
"""
from torch import nn

from .attention import MultiHeadAttention
from .embeddings import PositionalEncoding, TokenEmbedding
from .layers import Decoder, Encoder
from .masks import padding_mask, target_mask


class Transformer(nn.Module):
    """Source tokens -> encoder memory; target tokens + memory -> decoder states -> next-token logits."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, pad_idx=0, norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("tie_embeddings needs one vocabulary for both languages, got sizes "
                             f"{src_vocab_size} and {tgt_vocab_size}")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=pad_idx)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=pad_idx)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)  # no parameters: shared by both sides
        self.encoder = Encoder(num_encoder_layers, d_model, n_heads, d_ff, dropout, norm_first)
        self.decoder = Decoder(num_decoder_layers, d_model, n_heads, d_ff, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        self.pad_idx = pad_idx
        if tie_embeddings:
            # One matrix for source embedding, target embedding and output layer (the paper, section 3.4).
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight
        # Xavier-uniform for every matrix, embeddings included (so their padding rows are not zero:
        # padding keys are masked out and padding_idx keeps those rows from being trained).
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if tie_embeddings:
            # The shared matrix as in tensor2tensor and fairseq: N(0, 1/d_model), so that the scaled token
            # vectors are as large as the positional encoding (Xavier's 0.016 made them a third of its size,
            # and learning waited for them to grow) and the output logits start with unit spread.
            nn.init.normal_(self.src_embed.embedding.weight, std=d_model ** -0.5)

    def encode(self, src, src_mask):
        """Source ids [B, S], src_mask [B, 1, 1, S] -> memory [B, S, d_model]."""
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        """Target ids [B, T], memory [B, S, d_model], src_mask [B, 1, 1, S], tgt_mask [B, 1, T, T]
        -> decoder states [B, T, d_model] (the generator turns them into logits)."""
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt):
        """Source ids [B, S], target ids [B, T] -> next-token logits [B, T, tgt_vocab_size]."""
        src_mask = padding_mask(src, self.pad_idx)   # [B, 1, 1, S]
        tgt_mask = target_mask(tgt, self.pad_idx)    # [B, 1, T, T]
        memory = self.encode(src, src_mask)           # [B, S, d_model]
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))

    def set_need_weights(self, need_weights):
        """Whether every attention layer keeps its weights in `attn` (True) or uses the fused kernel (False, faster)."""
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.need_weights = need_weights
        return self


def build_model(architecture="encoder_decoder", **kwargs):
    """The model a configuration's "model" section describes: this Transformer, or with architecture
    "decoder_only" a GPT that translates (gpt.DecoderOnlyTranslator, notebook 09), with the same arguments."""
    if architecture == "encoder_decoder":
        return Transformer(**kwargs)
    if architecture == "decoder_only":
        from .gpt import DecoderOnlyTranslator
        return DecoderOnlyTranslator(**kwargs)
    raise ValueError(f"architecture must be 'encoder_decoder' or 'decoder_only', got {architecture!r}")
