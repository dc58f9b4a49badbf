"""Learning-rate schedules for training: the paper's (noam_lr, notebook 07's exercise) and a linear decay, as a
LambdaLR; and the warm-up then cosine decay of GPT training (warmup_cosine_lr, notebook 09's exercise)."""
import math
import warnings
from functools import partial

import torch

from .training import noam_lr

__all__ = ["linear_decay_lr", "warmup_cosine_lr", "SCHEDULES", "lr_scheduler"]


def linear_decay_lr(step, d_model, warmup_steps, factor=1.0, total_steps=None):
    """The same warm-up and peak as noam_lr, then a straight line down to 0 at `total_steps`.

    When the number of steps is known in advance this ends better than the 1/sqrt(step) tail, which is still
    at half its peak after four times the warm-up: the last steps take small, precise steps instead."""
    step = max(step, 1)
    peak = noam_lr(warmup_steps, d_model, warmup_steps, factor)
    if step <= warmup_steps:
        return peak * step / warmup_steps
    return peak * max(0.0, (total_steps - step) / max(total_steps - warmup_steps, 1))


def warmup_cosine_lr(step, peak_lr, warmup_steps, total_steps, min_lr=0.0):
    """The learning rate of step `step` (0, 1, 2, ... as LambdaLR counts): peak_lr * step / warmup_steps during
    the warm-up, then half a cosine from peak_lr at step warmup_steps down to min_lr at total_steps, and min_lr
    after that:  min_lr + (peak_lr - min_lr) * (1 + cos(pi * progress)) / 2,
    progress = (step - warmup_steps) / (total_steps - warmup_steps)."""
    if warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got warmup_steps={warmup_steps}, "
                         f"total_steps={total_steps}")
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


SCHEDULES = {"noam": noam_lr, "linear": linear_decay_lr}


def lr_scheduler(optimizer, d_model, warmup_steps, factor=1.0, schedule="noam", total_steps=None):
    """A LambdaLR that sets the learning rate of step `step` (after `step` calls of `.step()`) by one of
    SCHEDULES: noam_lr (the paper's), or linear_decay_lr, which needs `total_steps`.

    LambdaLR multiplies the optimizer's own learning rate, so create the optimizer with lr=1.0."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {schedule!r}")
    rate = partial(SCHEDULES[schedule], d_model=d_model, warmup_steps=warmup_steps, factor=factor)
    if schedule == "linear":
        if not total_steps:
            raise ValueError("the linear schedule needs total_steps, the number of training steps")
        rate = partial(rate, total_steps=total_steps)
    for group in optimizer.param_groups:
        if group["lr"] != 1.0:
            warnings.warn(f"the optimizer's lr is {group['lr']}, not 1.0: the schedule multiplies it", stacklevel=2)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
