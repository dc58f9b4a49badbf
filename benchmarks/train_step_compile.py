"""Time training steps of the recipe's Transformer eager and under `torch.compile`, compile time counted.

The same model twice (the recipe's sizes, same initial weights), trained on the same batches of the shapes a
token-budget sampler makes (`--max-tokens` tokens, sentences of 10 to 28 tokens, so every batch has its own
[batch, length]); the compiled copy uses dynamic shapes, as `--compile` of the training commands does. The
first pass over all the shapes is the warm-up (the compiled copy compiles, and recompiles for new shapes,
there); then both copies take the same batches, interleaved, and the figures are medians.

    python3 benchmarks/train_step_compile.py                  # about 4 minutes on 2 idle CPU cores
    python3 benchmarks/train_step_compile.py --device cuda
    python3 benchmarks/train_step_compile.py --amp            # under the mixed precision `train` would choose
"""
import argparse
import statistics
import time

import torch

from train_step_vs_nn_transformer import random_batch, timed_train_step
from transformer_course.run.configs import RECIPE_FILE, load_config
from transformer_course.cpu import for_cpu_training
from transformer_course.devices import amp_dtype, autocast, precision_note
from transformer_course.model import build_model

LENGTHS = (10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 24, 28)


def recipe_model(vocab, device):
    """The recipe's model as `train` prepares it: fused attention, and on a CPU its two fixes (cpu.py)."""
    torch.manual_seed(0)
    model = build_model(src_vocab_size=vocab, tgt_vocab_size=vocab, pad_idx=0, **load_config(RECIPE_FILE)["model"])
    model.set_need_weights(False)
    if device.type == "cpu":
        for_cpu_training(model)
    return model.to(device).train()


def synchronised_step(model, optimizer, src, tgt, device, dtype):
    with autocast(device, dtype):      # around the whole step, as in train_step_precision.py
        milliseconds = timed_train_step(model, optimizer, src, tgt, 0)["step"]
    if device.type == "cuda":
        started = time.perf_counter()
        torch.cuda.synchronize(device)
        milliseconds += (time.perf_counter() - started) * 1e3
    return milliseconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the shapes, after the warm-up")
    parser.add_argument("--amp", action="store_true", help="autocast as `train` would (bfloat16 on a GPU and on a CPU "
                        "with bfloat16 instructions; float32 elsewhere)")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = amp_dtype(device, args.amp)
    data = torch.Generator().manual_seed(0)
    batches = [tuple(random_batch(data, args.max_tokens // length, length - 4, length, args.vocab, 0).to(device)
                     for _ in "st") for length in LENGTHS]
    models = {"eager": recipe_model(args.vocab, device), "compiled": recipe_model(args.vocab, device)}
    models["compiled"].compile(dynamic=True)
    optimizers = {name: torch.optim.Adam(model.parameters(), lr=1e-4) for name, model in models.items()}
    print(f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads); {len(LENGTHS)} batch "
          f"shapes of about {args.max_tokens} tokens; {precision_note(device, dtype, args.amp)}")

    warm_up, times = {}, {name: [] for name in models}
    for name in models:
        started = time.perf_counter()
        for src, tgt in batches:
            synchronised_step(models[name], optimizers[name], src, tgt, device, dtype)
        warm_up[name] = time.perf_counter() - started
    for _ in range(args.rounds):
        for src, tgt in batches:
            for name in models:
                times[name].append(synchronised_step(models[name], optimizers[name], src, tgt, device, dtype))

    for name in models:
        print(f"{name:>9}: first pass over the shapes {warm_up[name]:6.1f} s, then {statistics.median(times[name]):7.1f} "
              f"ms per step (median of {len(times[name])})")
    saved = (statistics.median(times["eager"]) - statistics.median(times["compiled"])) / 1e3
    overhead = warm_up["compiled"] - warm_up["eager"]
    verdict = f"compiling pays after {overhead / saved:.0f} steps" if saved > 0 else "the compiled step is not faster"
    print(f"compile time (first pass, compiled minus eager): {overhead:.1f} s; {verdict}")


if __name__ == "__main__":
    main()
