"""How well a model predicts each next token of reference translations (teacher forcing): the validation
loss, cross-entropy, perplexity and accuracy that training reports. Scoring the model's own translations
with BLEU is `transformer_course.evaluate`'s job."""
import math

import torch

from ..devices import autocast
from ..training import label_smoothing_loss

__all__ = ["teacher_forced_scores"]


@torch.no_grad()
def teacher_forced_scores(model, batches, pad_idx=0, smoothing=0.1, device=None, amp_dtype=None, loss_function=None):
    """Teacher-forced scores over `batches` (an iterable of (src, tgt)), every target token counting once:

    loss (label-smoothed with `smoothing`, comparable with the training loss), nll (plain cross-entropy),
    perplexity = exp(nll), accuracy (how often the most likely next token is the right one), tokens.
    The model is put in eval mode and put back in the mode it was in. `loss_function`: the
    label_smoothing_loss to use (a notebook passes its own; default the package's).
    """
    loss_function = loss_function or label_smoothing_loss
    was_training = model.training
    model.eval()
    device = device if device is not None else next(model.parameters()).device
    loss = nll = 0.0
    correct = tokens = 0
    try:
        for src, tgt in batches:
            src, tgt = src.to(device), tgt.to(device)
            with autocast(device, amp_dtype):
                logits = model(src, tgt[:, :-1])                                # [B, T-1, V]
            logits, labels = logits.float().flatten(0, 1), tgt[:, 1:].flatten()  # [B*(T-1), V], [B*(T-1)]
            keep = labels != pad_idx
            n = int(keep.sum())
            if n == 0:
                continue
            loss += loss_function(logits, labels, smoothing, pad_idx).item() * n
            nll += loss_function(logits, labels, 0.0, pad_idx).item() * n
            correct += int((logits.argmax(-1) == labels)[keep].sum())
            tokens += n
    finally:
        model.train(was_training)
    n = max(tokens, 1)
    return {"loss": loss / n, "nll": nll / n, "perplexity": math.exp(min(nll / n, 50.0)),
            "accuracy": correct / n, "tokens": tokens}
