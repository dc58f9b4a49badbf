"""Learning-rate schedules for training: the paper's (noam_lr, notebook 07's exercise) and a linear decay, as a
LambdaLR."""
import warnings
from functools import partial

import torch

from .training import noam_lr

__all__ = ["linear_decay_lr", "SCHEDULES", "lr_scheduler"]


def linear_decay_lr(step, d_model, warmup_steps, factor=1.0, total_steps=None):
    """The same warm-up and peak as noam_lr, then a straight line down to 0 at `total_steps`.

    When the number of steps is known in advance this ends better than the 1/sqrt(step) tail, which is still
    at half its peak after four times the warm-up: the last steps take small, precise steps instead."""
    step = max(step, 1)
    peak = noam_lr(warmup_steps, d_model, warmup_steps, factor)
    if step <= warmup_steps:
        return peak * step / warmup_steps
    return peak * max(0.0, (total_steps - step) / max(total_steps - warmup_steps, 1))


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
