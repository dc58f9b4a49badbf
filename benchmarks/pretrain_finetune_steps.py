"""Time notebook 10's experiments step by step at one mode's size: milliseconds per pre-training, fine-tuning and
LoRA step, and one greedy scoring of test2016, to size the experiments on a machine before running them.

    python3 benchmarks/pretrain_finetune_steps.py --mode full --steps 500      # on a GPU: about a minute
    python3 benchmarks/pretrain_finetune_steps.py --mode smoke --steps 6       # a check that it runs (seconds)

The steps are the experiments' own (pretrain_finetune.pretrain and finetune_on, with the mode's batches, model and
learning rates), only fewer. Experiment 1 runs 1 pre-training and 6 fine-tunings of the mode's steps and scores 6
models; experiment 2 (with --pretrained) 2 fine-tunings, one with LoRA, and scores 2.
"""
import argparse
import dataclasses
import time

import torch

from transformer_course import finetune
from transformer_course import pretrain_finetune as pf
from transformer_course.devices import choose_device


def timed(label, device, fn):
    """fn(), its wall time printed (the GPU's queued work finished on both sides)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{label}: {time.perf_counter() - started:.2f} s", flush=True)
    return out


def per_step(log, steps):
    return f"  -> {1000 * log['seconds'] / steps:.1f} ms/step, loss over the last steps {pf.mean_tail(log['losses'])}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=tuple(pf.MODES), default="full")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--mirror", help="a folder with the official Multi30k files (default: $MULTI30K_MIRROR)")
    args = parser.parse_args()
    device, steps = choose_device(args.device), args.steps
    settings = dataclasses.replace(pf.MODES[args.mode], pretrain_steps=steps, finetune_steps=steps)
    fetch = {"mirror": args.mirror} if args.mirror else {}
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device.type == 'cuda' else device}, "
          f"mode {args.mode}, {steps} steps of each kind", flush=True)
    corpus = timed("corpus", device, lambda: pf.load_corpus(settings, **fetch))
    warm = dataclasses.replace(settings, pretrain_steps=20)
    timed("warm-up, 20 pre-training steps", device, lambda: pf.pretrain(warm, corpus, pf.COURSE_PARTS, device))
    model, log = timed(f"{steps} pre-training steps", device, lambda: pf.pretrain(settings, corpus, pf.COURSE_PARTS, device))
    print(per_step(log, steps), flush=True)
    examples = pf.sft_examples(corpus.data.train, pf.pair_subset(corpus.data.train, 1.0), corpus.ids, pf.COURSE_PARTS)
    log = timed(f"{steps} fine-tuning steps", device, lambda: pf.finetune_on(
        model, examples, settings, pf.COURSE_PARTS, device, settings.finetune_lr))
    print(per_step(log, steps), flush=True)
    timed("held-out LM loss", device, lambda: pf.pretraining_loss(model, corpus.val_blocks, device))
    score = timed("greedy test2016", device, lambda: pf.bleu(model, settings, corpus, device, "test", **fetch))
    print(f"  -> sacreBLEU {score}", flush=True)
    lora = finetune.add_lora(model, settings.lora_r, settings.lora_alpha).to(device)
    log = timed(f"{steps} LoRA steps", device, lambda: pf.finetune_on(
        lora, examples, settings, pf.COURSE_PARTS, device, settings.lora_lr))
    print(per_step(log, steps), flush=True)


if __name__ == "__main__":
    main()
