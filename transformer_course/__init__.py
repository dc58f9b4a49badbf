"""The course's shared package: finished components, data, plotting, and the training and evaluation commands.

Each notebook implements one part of the Transformer; the later notebooks import the finished
version of every earlier part from here, so a mistake in one notebook never breaks the next.
"""
from importlib import metadata as _metadata

try:  # the course's version is the package's, set once, in pyproject.toml
    __version__ = _metadata.version("transformer-course")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"

from .embeddings import PositionalEncoding, TokenEmbedding, positional_encoding
from .attention import MultiHeadAttention, merge_heads, scaled_dot_product_attention, split_heads
from .masks import causal_mask, padding_mask, target_mask
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, LayerNorm, PositionwiseFeedForward
from .model import Transformer
from .data import Vocab, build_vocab
from .training import label_smoothing_loss, noam_lr, train_step
from .run.checkpoints import load_checkpoint, save_checkpoint
from .decoding import beam_search, greedy_decode
from .bleu import corpus_bleu
from .gpt import (CausalSelfAttention, GPT, adamw_param_groups, apply_rope, generate, lm_loss, sample_next,
                  warmup_cosine_lr)
from .finetune import LoRALinear, add_lora, document_mask, pack_sequences, sft_example, sft_loss

__all__ = [
    # 01_positional_encoding
    "positional_encoding", "TokenEmbedding", "PositionalEncoding",
    # 02_attention
    "scaled_dot_product_attention",
    # 03_masking
    "padding_mask", "causal_mask", "target_mask",
    # 04_multi_head_attention
    "split_heads", "merge_heads", "MultiHeadAttention",
    # 05_layer_norm_feed_forward
    "LayerNorm", "PositionwiseFeedForward",
    # 06_transformer
    "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "Transformer",
    # 07_training
    "build_vocab", "Vocab", "label_smoothing_loss", "noam_lr", "train_step", "save_checkpoint", "load_checkpoint",
    # 08_decoding_bleu
    "greedy_decode", "beam_search", "corpus_bleu",
    # 09_gpt
    "apply_rope", "CausalSelfAttention", "GPT", "lm_loss", "adamw_param_groups", "warmup_cosine_lr", "sample_next",
    "generate",
    # 10_pretrain_finetune
    "pack_sequences", "document_mask", "sft_example", "sft_loss", "LoRALinear", "add_lora",
]
