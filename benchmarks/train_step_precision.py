"""Time one training step of the course's Transformer in float32 and under bfloat16 autocast, on the CPU.

The same model (the recipe's sizes by default: d_model 256, 3+3 layers, batch 64) and batches; the two
precisions alternate step by step after a warm-up, and the figures are medians. `devices.amp_dtype` turns
bfloat16 on only where the CPU has the instructions (AVX512-BF16 or AMX); elsewhere autocast still runs,
emulated, and this benchmark shows what that would cost.

    python3 benchmarks/train_step_precision.py              # about a minute on 2 idle CPU cores
"""
import argparse
import os
import statistics

import torch

from train_step_vs_nn_transformer import random_batch, timed_train_step
from transformer_course.devices import cpu_has_bfloat16
from transformer_course.model import Transformer


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3, help="encoder layers and decoder layers (each)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Transformer(args.vocab, args.vocab, d_model=args.d_model, n_heads=4, num_encoder_layers=args.layers,
                        num_decoder_layers=args.layers, d_ff=4 * args.d_model, dropout=0.1).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    data = torch.Generator().manual_seed(0)
    batches = [tuple(random_batch(data, args.batch_size, 20, 30, args.vocab, 0) for _ in "st") for _ in range(4)]
    precisions = {"float32": None, "bfloat16 autocast": torch.bfloat16}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; bfloat16 instructions on this CPU: "
          f"{'yes' if cpu_has_bfloat16() else 'no (emulated)'}")
    print(f"d_model {args.d_model}, {args.layers}+{args.layers} layers, vocab {args.vocab}, batch {args.batch_size}")

    times = {name: [] for name in precisions}
    for step in range(args.warmup + args.steps):
        order = list(precisions) if step % 2 == 0 else list(precisions)[::-1]
        for name in order:
            with torch.autocast("cpu", dtype=precisions[name], enabled=precisions[name] is not None):
                timing = timed_train_step(model, optimizer, *batches[step % len(batches)], 0)
            if step >= args.warmup:
                times[name].append(timing["step"])
    for name, ms in times.items():
        print(f"{name:>18}: {statistics.median(ms):7.1f} ms per step (median of {len(ms)})")
    ratio = statistics.median(f / b for f, b in zip(times["float32"], times["bfloat16 autocast"]))
    print(f"float32 / bfloat16: {ratio:.2f} (median of the step-by-step ratios; > 1 means bfloat16 is faster)")


if __name__ == "__main__":
    main()
