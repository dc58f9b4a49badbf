"""Notebook 10: pre-train a GPT on plain text, then fine-tune the same weights on a small labelled task.

    pack_sequences   a stream of tokenised documents, <eos> after each, cut into blocks of block_size tokens
    document_mask    the attention mask that keeps the documents of a packed block apart (and is causal)
    sft_example      a prompt and its answer -> inputs, targets and the loss mask on the answer (and <eos>)
    sft_loss         the cross-entropy averaged over the answer's tokens only
    LoRALinear       a frozen nn.Linear plus a trainable low-rank update (alpha / r) B A; merged() for inference
    add_lora         freeze a model and wrap the projections of its attention layers in LoRALinear

`sft_batch` pads examples into a batch; `trainable_parameters` counts what an optimizer would update. The
experiments of notebook 10 (pre-training against training from scratch, full fine-tuning against LoRA) are in
`transformer_course.pretrain_finetune`.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention

__all__ = ["pack_sequences", "document_mask", "sft_example", "sft_loss", "LoRALinear", "add_lora", "sft_batch",
           "trainable_parameters", "LORA_TARGETS"]

LORA_TARGETS = ("w_q", "w_k", "w_v", "w_o")     # the projections add_lora wraps in every attention layer


def pack_sequences(documents, block_size, eos_id):
    """Documents (lists of token ids) -> LongTensor [N, block_size]: the stream d0 <eos> d1 <eos> ... cut into
    consecutive blocks of block_size tokens; the last, incomplete block is dropped (no padding)."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    stream = [token for document in documents for token in (*document, eos_id)]
    n_blocks = len(stream) // block_size
    return torch.tensor(stream[:n_blocks * block_size], dtype=torch.long).view(n_blocks, block_size)


def document_mask(block, eos_id):
    """block [B, T] of packed documents -> bool [B, 1, T, T]: query i may attend to key j iff j <= i and both belong
    to the same document. An <eos> ends its document (it belongs to the one before it)."""
    ends = (block == eos_id).long()
    document = ends.cumsum(dim=1) - ends                                   # number of <eos> strictly before t
    same = document[:, :, None] == document[:, None, :]                      # [B, T, T]
    causal = torch.ones(block.size(1), block.size(1), dtype=torch.bool, device=block.device).tril()
    return (same & causal)[:, None]


def sft_example(prompt_ids, answer_ids, eos_id):
    """(inputs [L], targets [L], loss_mask [L]) of the sequence prompt + answer + <eos>, L = its length - 1:
    inputs is the sequence without its last token, targets without its first (targets[t] follows inputs[t]),
    loss_mask is True where the target is a token of the answer or the final <eos>."""
    prompt, answer = [int(t) for t in prompt_ids], [int(t) for t in answer_ids]
    if not prompt:
        raise ValueError("the prompt must hold at least one token: nothing predicts the first token")
    sequence = torch.tensor(prompt + answer + [eos_id], dtype=torch.long)
    loss_mask = torch.arange(1, len(sequence)) >= len(prompt)
    return sequence[:-1], sequence[1:], loss_mask


def sft_loss(logits, targets, loss_mask):
    """logits [B, L, V], targets [B, L], loss_mask [B, L] -> the mean cross-entropy of logits[b, t] against
    targets[b, t] over the positions loss_mask marks: one mean over every answer token of the batch."""
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return nll[loss_mask.flatten()].mean()


class LoRALinear(nn.Module):
    """A frozen nn.Linear `base` plus a trainable update of rank r: y = base(x) + (alpha / r) x Aᵀ Bᵀ.

    A [r, in_features] starts as nn.Linear's weights do (Kaiming-uniform, bound 1 / sqrt(in_features)), B
    [out_features, r] at zero, so that the wrapped layer starts equal to `base`. merged() returns one
    nn.Linear with the weight W + (alpha / r) B A and base's bias, for inference."""

    def __init__(self, base, r, alpha):
        super().__init__()
        if r < 1:
            raise ValueError(f"the rank r must be at least 1, got {r}")
        self.base, self.r, self.alpha, self.scale = base, r, alpha, alpha / r
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        self.A = nn.Parameter(torch.empty(r, base.in_features, device=base.weight.device, dtype=base.weight.dtype))
        self.B = nn.Parameter(torch.zeros(base.out_features, r, device=base.weight.device, dtype=base.weight.dtype))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))

    @property
    def in_features(self):
        return self.base.in_features

    @property
    def out_features(self):
        return self.base.out_features

    def forward(self, x):
        return self.base(x) + self.scale * F.linear(F.linear(x, self.A), self.B)

    @torch.no_grad()
    def merged(self):
        """One nn.Linear that computes what this layer computes: W + (alpha / r) B A, base's bias."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.base.bias is not None,
                           device=self.base.weight.device, dtype=self.base.weight.dtype)
        linear.weight.copy_(self.base.weight + self.scale * self.B @ self.A)
        if self.base.bias is not None:
            linear.bias.copy_(self.base.bias)
        return linear


def add_lora(model, r, alpha, lora_class=None):
    """Freeze every parameter of `model`, then replace the projections w_q, w_k, w_v and w_o of each of its
    attention layers (MultiHeadAttention, CausalSelfAttention) by LoRALinear(projection, r, alpha); the model,
    changed in place. `lora_class`: the LoRALinear to use (a notebook passes its own)."""
    lora_class = lora_class or LoRALinear
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for module in list(model.modules()):
        if isinstance(module, MultiHeadAttention):
            for name in LORA_TARGETS:
                setattr(module, name, lora_class(getattr(module, name), r, alpha))
    return model


def sft_batch(examples, pad_id):
    """[(inputs, targets, loss_mask), ...] -> (inputs [B, L], targets [B, L], loss_mask [B, L]) padded on the
    right: inputs and targets with pad_id, the mask with False (padding never counts)."""
    inputs, targets, masks = zip(*examples)
    pad = nn.utils.rnn.pad_sequence
    return (pad(list(inputs), batch_first=True, padding_value=pad_id),
            pad(list(targets), batch_first=True, padding_value=pad_id),
            pad(list(masks), batch_first=True, padding_value=False))


def trainable_parameters(model):
    """The number of parameters an optimizer of `model` would update (requires_grad), each shared one once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
