"""Two CPU-only slowdowns of training, and their fixes (used by `train` when it runs on a CPU).

Denormal numbers. Adam keeps a running mean of squared gradients; for rarely seen tokens it decays
towards zero and reaches the denormal range (below 1.2e-38), where x86 arithmetic is many times slower.
After a few hundred steps the optimizer step alone can take seconds. Flushing denormals to zero costs
nothing in accuracy.

Dropout's random numbers. `nn.Dropout` draws one Bernoulli sample per element with a scalar generator:
about a quarter of a small Transformer's training step on two cores. `FastDropout` draws 32 random bits
at a time and cuts them into four bytes, one per element, about five times faster. Its probability is
rounded to a multiple of 1/256 (0.3 becomes 77/256 = 0.3008).

Also helpers for the notebooks' timings: `torch_threads` (run a block on n threads), `fastest` and
`seconds_by_length`.
"""
import time
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["FastDropout", "use_fast_dropout", "flush_denormals", "for_cpu_training", "torch_threads", "fastest",
           "seconds_by_length"]


class FastDropout(nn.Dropout):
    """nn.Dropout whose mask is made of random bytes on a CPU (elsewhere it is nn.Dropout)."""

    def forward(self, x):
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return super().forward(x)
        dropped = round(self.p * 256)                 # a byte below this drops its element
        if dropped >= 256:
            return torch.zeros_like(x)
        n = x.numel()
        words = torch.randint(-2 ** 31, 2 ** 31 - 1, ((n + 3) // 4,), dtype=torch.int32, device=x.device)
        keep = words.view(torch.uint8)[:n].view(x.shape) >= dropped
        return x * keep * (256.0 / (256 - dropped))


def use_fast_dropout(model):
    """Replace every nn.Dropout of `model` by a FastDropout with the same probability; returns the model."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                fast = FastDropout(child.p)
                fast.train(child.training)
                setattr(module, name, fast)
    return model


def flush_denormals():
    """Treat denormal floats as zero from now on (where the CPU supports it); returns whether it does."""
    return torch.set_flush_denormal(True)


def for_cpu_training(model):
    """Both fixes, as `train` applies them on a CPU: denormals flushed to zero, FastDropout in `model`
    (returned)."""
    flush_denormals()
    return use_fast_dropout(model)


@contextmanager
def torch_threads(n):
    """Run the block with PyTorch on n CPU threads, then go back to as many as before. One thread gives
    steadier timings on a machine whose cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fastest(fn, repeats=3):
    """The shortest of `repeats` wall-clock times of fn(), in seconds (the least disturbed run)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def seconds_by_length(runs, lengths, repeats=2):
    """{name: [fastest(lambda: run(n)) for n in lengths]} for each `run` of `runs` (name -> run(n)), on one CPU
    thread."""
    with torch_threads(1):
        return {name: [fastest(lambda: run(n), repeats) for n in lengths] for name, run in runs.items()}
