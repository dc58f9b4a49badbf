"""Notebook 07's exercises in their finished form, and the mixed-precision training step built on them:

    label_smoothing_loss   cross-entropy against (1 - s)·one_hot + s / V, padding ignored
    noam_lr                the paper's warm-up-then-decay learning rate (section 5.3)
    train_step             one teacher-forced step: forward, loss, backward, clip, update, schedule

The rest of training: schedules.py (the LambdaLR schedules) and devices.py beside this module, and the run/
subpackage, what `python -m transformer_course.train` is built from: run/configs.py (the training
configurations), run/batches.py (Multi30k as batches), run/loop.py (the whole run), run/validation.py
(validation loss, perplexity and accuracy) and run/checkpoints.py.
"""
import torch
from torch import nn

from .devices import autocast

__all__ = ["label_smoothing_loss", "noam_lr", "train_step", "amp_train_step"]


def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    """Mean over the positions whose target is not `ignore_index` of the cross-entropy between the model's
    distribution softmax(logits) and the smoothed target (1 - smoothing)·one_hot(target) + smoothing / V.

    `logits [N, V]` (any number of leading dimensions works), `target [N]`. The same value as
    `F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)`; NaN when every
    position is ignored, as there.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # a softmax over thousands of classes needs float32
    log_probs = logits.log_softmax(dim=-1)
    keep = target != ignore_index
    # The cross-entropy against the mixture splits in two: (1 - s)·NLL of the target + s·mean of -log p.
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss[keep].mean()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    """factor · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5): a linear warm-up for
    `warmup_steps` steps, then a decay with 1/sqrt(step). Step 0 counts as step 1."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def train_step(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
    """One teacher-forced training step; returns the loss (before the update) as a float.

    The decoder reads tgt[:, :-1] (<bos> w1 ... wn) and learns to predict tgt[:, 1:] (w1 ... wn <eos>).
    `clip=None` turns gradient clipping off.
    """
    logits = model(src, tgt[:, :-1])                                    # [B, T-1, V]
    loss = label_smoothing_loss(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                                smoothing=smoothing, ignore_index=pad_idx)
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    return loss.item()


def amp_train_step(model, src, tgt, optimizer, scheduler, pad_idx, smoothing, clip, amp_dtype, scaler):
    """train_step with optional mixed precision (autocast to `amp_dtype`, and loss scaling with `scaler` for
    float16). Returns (the loss as a tensor, not synchronised with the GPU; the gradient norm before clipping)."""
    with autocast(src.device, amp_dtype):
        logits = model(src, tgt[:, :-1])                                # [B, T-1, V]
    loss = label_smoothing_loss(logits.float().flatten(0, 1), tgt[:, 1:].flatten(), smoothing, pad_idx)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)           # clip the true gradients, not the scaled ones
    else:
        loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), clip) if clip is not None else None
    if scaler is not None:
        scaler.step(optimizer)               # skipped when the gradients overflowed
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach(), norm
