"""Train the course's Transformer on Multi30k German→English from the command line.

    python -m transformer_course.train --mode quick --out runs/quick            # a few minutes on a CPU
    python -m transformer_course.train --mode full --out runs/full              # on a GPU (Colab, any CUDA machine)
    python -m transformer_course.train --mode full --out runs/full --resume     # go on after an interruption
    python -m transformer_course.train --config transformer_course/recipes/multi30k_de_en_decoder_only.json --out runs/gpt

Writes OUT/best.pt (the weights with the best validation loss), OUT/last.pt (to resume) and OUT/log.json
(losses and timings). Load a checkpoint with transformer_course.load_checkpoint. Every setting of
the mode can be changed with an option (see --help); `--max-train-pairs 0` means all 29,000 pairs.
"""
import argparse
import json
import sys

import torch

from .data import Multi30kError
from .run.configs import CONFIGS, load_config, make_config
from .run.loop import train
from .schedules import SCHEDULES

# option -> (section, key, type)
OVERRIDES = {
    "epochs": ("train", "epochs", int),
    "max_steps": ("train", "max_steps", int),
    "warmup": ("train", "warmup_steps", int),
    "lr_factor": ("train", "lr_factor", float),
    "schedule": ("train", "schedule", str),
    "smoothing": ("train", "smoothing", float),
    "clip": ("train", "clip", float),
    "seed": ("train", "seed", int),
    "max_train_pairs": ("data", "max_train_pairs", int),
    "max_val_pairs": ("data", "max_val_pairs", int),
    "max_tokens": ("train", "max_tokens", int),
    "min_freq": ("data", "min_freq", int),
    "d_model": ("model", "d_model", int),
    "heads": ("model", "n_heads", int),
    "layers": ("model", ("num_encoder_layers", "num_decoder_layers"), int),
    "d_ff": ("model", "d_ff", int),
    "dropout": ("model", "dropout", float),
}


def add_run_options(p, out_help):
    """The options of every training command: where to write, where the data is, resume, device, threads."""
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument("--mirror", help="folder with the six official Multi30k .gz files (default: $MULTI30K_MIRROR, "
                                    "else they are downloaded into the cache)")
    p.add_argument("--cache-dir", help="download and token cache (default: $MULTI30K_CACHE or ~/.cache/...)")
    p.add_argument("--resume", action="store_true", help="go on with the run in OUT/last.pt (same settings)")
    p.add_argument("--device", default="auto", help="auto (a CUDA GPU if there is one), cpu, cuda, cuda:1, mps")
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: PyTorch's choice)")
    p.add_argument("--no-amp", dest="amp", action="store_false",
                   help="float32 only (default: mixed precision on a GPU and on a CPU with bfloat16 instructions)")
    p.add_argument("--compile", nargs="?", const=True, default=False, metavar="BACKEND",
                   help="torch.compile the model for training (default backend: inductor). Measured on the recipe: "
                        "no faster on a 2-core CPU, a little on a GPU, and minutes to compile (README)")


def parser():
    p = argparse.ArgumentParser(prog="python -m transformer_course.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=sorted(CONFIGS), default="quick",
                   help="quick: a small model on a subset (CPU, minutes); full: all of Multi30k, a bigger model (GPU)")
    p.add_argument("--config", help="a configuration file (JSON, e.g. transformer_course/recipes/*.json) instead of "
                                    "a mode; the options below still change its settings")
    add_run_options(p, "folder for best.pt, last.pt and log.json")
    p.add_argument("--save-every-steps", type=int, help="also write last.pt every N steps")
    p.add_argument("--save-every-seconds", type=float, default=600, help="also write last.pt this often (default 600)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    group = p.add_argument_group("settings of the mode (default: the mode's)")
    for option, (section, key, kind) in OVERRIDES.items():
        keys = key if isinstance(key, tuple) else (key,)
        default = CONFIGS["quick"][section][keys[0]], CONFIGS["full"][section][keys[0]]
        group.add_argument("--" + option.replace("_", "-"), type=kind,
                           choices=sorted(SCHEDULES) if option == "schedule" else None,
                           help=f"{section}.{'/'.join(keys)} (quick: {default[0]}, full: {default[1]})")
    return p


def config_from(args):
    overrides = {}
    for option, (section, key, _) in OVERRIDES.items():
        value = getattr(args, option)
        if value is None:
            continue
        if option in ("max_train_pairs", "max_val_pairs", "max_steps") and value <= 0:
            value = None  # 0: no limit
        for k in (key if isinstance(key, tuple) else (key,)):
            overrides[f"{section}__{k}"] = value
    if args.config is None:
        return make_config(args.mode, **overrides)
    try:
        config = load_config(args.config)
    except OSError as error:
        raise ValueError(f"--config {args.config}: {error.strerror or error}") from None
    for name, value in overrides.items():
        section, _, key = name.partition("__")
        config[section][key] = value
    return config


def main(argv=None):
    args = parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        config = config_from(args)
        log = train(config, args.out, resume=args.resume, device=args.device, amp=args.amp, compile=args.compile,
                    mirror=args.mirror, cache_dir=args.cache_dir, save_every_steps=args.save_every_steps,
                    save_every_seconds=args.save_every_seconds, progress=args.progress)
    except (FileExistsError, ValueError, Multi30kError) as error:   # a bad setting, device, mirror or last.pt
        print(f"error: {error}", file=sys.stderr)
        return 2
    best = log["best"]
    summary = {"finished": log["finished"], "steps": log["steps"][-1]["step"] if log["steps"] else 0,
               "best": best, "elapsed_seconds": log["elapsed_seconds"], "out": str(args.out)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
