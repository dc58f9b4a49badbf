"""What the course knows about each notebook's exercises, written once; torch-free, so the grader reads it cheaply.

``NOTEBOOKS`` maps each assignment (its folder name) to its exercises, in the course's order
(../shared/exercise-contract.md). ``FINISHED`` maps each exercise to the pieces of this package that hold its
finished version, as ``"module.name"``: the answer first, then the helpers that do its work. While notebook N
is graded, the grading kernel sees a copy of the package without the finished pieces of notebook N and of
every later notebook (autograder/stripped.py), except a piece an earlier notebook's finished parts still need.
"""
NOTEBOOKS = {
    "01_positional_encoding": ("positional_encoding", "TokenEmbedding", "PositionalEncoding"),
    "02_attention": ("scaled_dot_product_attention",),
    "03_masking": ("padding_mask", "causal_mask", "target_mask"),
    "04_multi_head_attention": ("split_heads", "merge_heads", "MultiHeadAttention"),
    "05_layer_norm_feed_forward": ("LayerNorm", "PositionwiseFeedForward"),
    "06_transformer": ("EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "Transformer"),
    "07_training": ("build_vocab", "label_smoothing_loss", "noam_lr", "train_step"),
    "08_decoding_bleu": ("greedy_decode", "beam_search", "corpus_bleu"),
    "09_gpt": ("apply_rope", "CausalSelfAttention", "GPT", "lm_loss", "adamw_param_groups", "warmup_cosine_lr",
               "sample_next", "generate"),
    "10_pretrain_finetune": ("pack_sequences", "document_mask", "sft_example", "sft_loss", "LoRALinear", "add_lora"),
}

# assignment -> the name of its modules in the hidden tests' kit: transformer_course/probes/<name>.py (the kernel's
# half) and transformer_course/oracles/<name>.py (the judges'; 01 has none).
TEST_MODULES = {
    "01_positional_encoding": "positional_encoding",
    "02_attention": "attention",
    "03_masking": "masking",
    "04_multi_head_attention": "multi_head",
    "05_layer_norm_feed_forward": "layer_norm",
    "06_transformer": "transformer",
    "07_training": "training",
    "08_decoding_bleu": "decoding",
    "09_gpt": "gpt",
    "10_pretrain_finetune": "finetune",
}

FINISHED = {
    "positional_encoding": ("embeddings.positional_encoding",),
    "TokenEmbedding": ("embeddings.TokenEmbedding",),
    "PositionalEncoding": ("embeddings.PositionalEncoding",),
    "scaled_dot_product_attention": ("attention.scaled_dot_product_attention", "attention._fused_attention"),
    "padding_mask": ("masks.padding_mask",),
    "causal_mask": ("masks.causal_mask",),
    "target_mask": ("masks.target_mask",),
    "split_heads": ("attention.split_heads",),
    "merge_heads": ("attention.merge_heads",),
    "MultiHeadAttention": ("attention.MultiHeadAttention", "attention._fused_attention", "attention._stacked_linear"),
    "LayerNorm": ("layers.LayerNorm",),
    "PositionwiseFeedForward": ("layers.PositionwiseFeedForward",),
    "EncoderLayer": ("layers.EncoderLayer", "layers.residual"),
    "DecoderLayer": ("layers.DecoderLayer", "layers.residual"),
    "Encoder": ("layers.Encoder",),
    "Decoder": ("layers.Decoder",),
    "Transformer": ("model.Transformer",),
    "build_vocab": ("data.build_vocab",),
    "label_smoothing_loss": ("training.label_smoothing_loss",),
    "noam_lr": ("training.noam_lr",),
    "train_step": ("training.train_step", "training.amp_train_step"),
    "greedy_decode": ("decoding.greedy_decode", "decoding._next_log_probs"),
    "beam_search": ("decoding.beam_search", "decoding.beam_search_batch", "decoding._Beam", "decoding.beam_search_tree"),
    "corpus_bleu": ("bleu.corpus_bleu", "bleu.bleu_statistics"),
    "apply_rope": ("embeddings.apply_rope",),
    "CausalSelfAttention": ("gpt.CausalSelfAttention",),
    "GPT": ("gpt.GPT", "gpt.GPTBlock"),
    "lm_loss": ("gpt.lm_loss",),
    "adamw_param_groups": ("gpt.adamw_param_groups",),
    "warmup_cosine_lr": ("schedules.warmup_cosine_lr",),
    "sample_next": ("gpt.sample_next", "decoding.sampling_distribution", "decoding.top_k_filter",
                    "decoding.top_p_filter"),
    "generate": ("gpt.generate",),
    "pack_sequences": ("finetune.pack_sequences",),
    "document_mask": ("finetune.document_mask",),
    "sft_example": ("finetune.sft_example",),
    "sft_loss": ("finetune.sft_loss",),
    "LoRALinear": ("finetune.LoRALinear",),
    "add_lora": ("finetune.add_lora",),
}


def notebook_of(exercise):
    """The assignment whose exercise ``exercise`` is (KeyError for a name that is none)."""
    return next(assignment for assignment, names in NOTEBOOKS.items() if exercise in names)
