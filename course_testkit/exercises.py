"""What the course knows about each notebook's exercises, written once; torch-free, so the grader reads it cheaply.

``NOTEBOOKS`` maps each assignment (its folder name) to its exercises, in the course's order
(../shared/exercise-contract.md). ``FINISHED`` maps each exercise to the pieces of the course package
(transformer_course) that hold its finished version, as ``"module.name"`` (a subpackage's module dotted:
``"run.loop.name"``): the answer first, then the helpers that do its work. While notebook N is graded, the grading
kernel sees a copy of the package without the finished pieces of notebook N and of every later notebook
(autograder/execution/stripped.py), except a piece an earlier notebook's finished parts still need.
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

# assignment -> the name of its modules in the tests' kit, the notebook's name without its number:
# course_testkit/probes/<name>.py (the kernel's half) and course_testkit/oracles/<name>.py (the judges'; 01 has none).
TEST_MODULES = {assignment: assignment.split("_", 1)[1] for assignment in NOTEBOOKS}

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


# assignment -> the course package's extras its install cell installs besides the package (pyproject's
# [project.optional-dependencies]): spaCy, sacreBLEU and SentencePiece only for the notebooks that tokenise or score
# (autograder/release.py writes them into the install cells).
EXTRAS = {"07_training": ("text",), "08_decoding_bleu": ("text",), "09_gpt": ("text",), "10_pretrain_finetune": ("text",)}

# assignment -> what its kernels import on first use and is slow to import: torch._dynamo (1.1-1.5 s), on an
# optimizer's first step (07-10) and on a first operation on the 'meta' device (03's device tests, 06's count of the
# base model's parameters), and spaCy (0.6 s), when the data cells first tokenise (07, 09, 10). The kernel server
# imports these before it forks a kernel of such an assignment (autograder/execution/dispatch.py): 2-3 s less per submission
# of 07 and 09. A missing entry costs each kernel that time, nothing else (tests/test_autograde.py checks the table
# against what the solution notebooks import).
KERNEL_FIRST_USE_IMPORTS = {"03_masking": ("torch._dynamo",), "06_transformer": ("torch._dynamo",),
                            "07_training": ("torch._dynamo", "spacy"), "08_decoding_bleu": ("torch._dynamo",),
                            "09_gpt": ("torch._dynamo", "spacy"), "10_pretrain_finetune": ("torch._dynamo", "spacy")}

# assignment -> what its judges import on first use: torch._dynamo (1-3 s), which an optimizer's first step imports
# (07, 09), and sacreBLEU (0.5 s), the BLEU oracle's (08). The grader's fork server imports them too when one of
# these assignments is graded (autograder/execution/local_workers.py). A missing entry costs each worker that time, nothing
# else (tests/test_grader.py checks the table against the oracles the notebooks import).
JUDGES_FIRST_USE_IMPORTS = {"07_training": ("torch._dynamo",), "08_decoding_bleu": ("sacrebleu",),
                            "09_gpt": ("torch._dynamo",)}

# Exercises with about one way to write them: the course's own solution scores the similarity report's copy
# threshold or more against the package's version, so the code cannot tell a copy from an honest answer: only the
# same text (comments and docstrings too) is flagged as a copy there (autograder/similarity.py).
# tests/test_library_answers.py checks that this is exactly the exercises whose solution reaches the threshold.
NOT_COMPARED = frozenset({"target_mask", "PositionwiseFeedForward", "Encoder", "Decoder", "noam_lr", "train_step"})

def notebook_of(exercise):
    """The assignment whose exercise ``exercise`` is (KeyError for a name that is none)."""
    return next(assignment for assignment, names in NOTEBOOKS.items() if exercise in names)
