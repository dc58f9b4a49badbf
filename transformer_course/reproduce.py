"""`python -m transformer_course.reproduce`: the course's best Multi30k German→English result, from scratch.

    python -m transformer_course.reproduce --out runs/recipe                  # 30-45 min of training on 2 CPU cores
    python -m transformer_course.reproduce --out runs/recipe --resume         # go on after an interruption
    python -m transformer_course.reproduce --config my.json --out runs/mine   # another configuration file

One command does everything: fetch Multi30k (or read --mirror), learn the subword vocabulary, train with the
recipe (transformer_course/recipes/multi30k_de_en.json), average the last epochs' weights, choose between the
averaged weights and the best single epoch (and between length penalties, when the configuration lists
several) by BLEU on the validation set (never the test set), and translate test_2016_flickr with beam search.
It prints sacreBLEU (cased, detokenised, with its signature) and lowercased tokenised BLEU, and writes
OUT/results.json and OUT/results.md. The same model then translates test_2017_flickr, a test set that nothing in
the course was chosen on (a mirror without its two files leaves it unscored, and says so).
"""
import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from .data import HELD_OUT, Multi30kError
from .devices import choose_device
from .evaluate import evaluate
from .run.checkpoints import load_checkpoint
from .run.configs import RECIPE_FILE, load_config
from .run.loop import train
from .train import add_run_options


def parser():
    p = argparse.ArgumentParser(prog="python -m transformer_course.reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(RECIPE_FILE), help="configuration file (default: the course's recipe)")
    add_run_options(p, "folder for the checkpoints, the log and the results")
    p.add_argument("--limit", type=int, help="translate only the first N sentences of val and test (a quick check; "
                                           "the figures are then not comparable with anything)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    return p


def read_config(path):
    """load_config(path), with a missing or unreadable file as a ValueError that names the option."""
    try:
        return load_config(path)
    except OSError as error:
        raise ValueError(f"--config {path}: {error.strerror or error}") from None


def alphas(config):
    """The length penalties to try on the validation set: the configuration's "alpha", a number or a list."""
    alpha = config["evaluate"]["alpha"]
    return [float(a) for a in alpha] if isinstance(alpha, (list, tuple)) else [float(alpha)]


def score(checkpoint_path, split, config, alpha, device, fetch_options, progress, limit=None):
    """BLEU of one checkpoint on one split, with the configuration's beam size and length penalty `alpha`."""
    checkpoint = load_checkpoint(checkpoint_path, map_location=device)
    model = checkpoint["model"].to(device)
    model.set_need_weights(False)
    return evaluate(model, checkpoint["src_vocab"], checkpoint["tgt_vocab"], split=split,
                    beam_size=config["evaluate"]["beam_size"], alpha=alpha,
                    lowercase=bool(config["data"].get("lowercase")), subword=checkpoint.get("subword"),
                    limit=limit, device=device, progress=progress, **fetch_options)


def results_table(results):
    """The README's results row as Markdown."""
    test = results["test"]
    return ("| model | sacreBLEU | lowercased tokenised BLEU | training time | hardware | command |\n"
            "|---|---|---|---|---|---|\n"
            f"| {results['checkpoint']}, α {results['alpha']} | {test['sacrebleu']:.1f} | {test['tokenized_lower_bleu']:.1f} | "
            f"{results['training_minutes']:.0f} min | {results['hardware']} | `{results['command']}` |\n\n"
            f"sacreBLEU signature: `{test['signature']}`\n" + held_out_line(results["test_2017"]))


def held_out_line(figures):
    """results.md's line on the held-out test set."""
    if "sacrebleu" not in figures:
        return f"\n{figures['split']}: not scored ({figures['not_scored']})\n"
    return (f"\nHeld out, {figures['split']} ({figures['sentences']} sentences): sacreBLEU {figures['sacrebleu']:.1f}, "
            f"lowercased tokenised BLEU {figures['tokenized_lower_bleu']:.1f}\n")


def choose_on_val(out, config, device, fetch_options, args):
    """Model selection on the validation set only: the averaged weights or the best single epoch, and the
    length penalty when the configuration lists several. Returns (checkpoint name, alpha, the val figures)."""
    candidates = [(name, alpha) for name in ("averaged.pt", "best.pt") if (out / name).exists()
                  for alpha in alphas(config)]
    val_scores = {}
    for name, alpha in candidates:
        val_scores[name, alpha] = score(out / name, "val", config, alpha, device, fetch_options, args.progress,
                                        args.limit).report
        print(f"val  {name:12s} alpha {alpha:.1f}   sacreBLEU {val_scores[name, alpha].sacrebleu:6.2f}   "
              f"lowercased tokenised BLEU {val_scores[name, alpha].tokenized_lower:6.2f}")
    chosen, alpha = max(candidates, key=lambda candidate: val_scores[candidate].sacrebleu)
    validation = {f"{name} alpha={a}": {"sacrebleu": round(r.sacrebleu, 2),
                                        "tokenized_lower_bleu": round(r.tokenized_lower, 2)}
                  for (name, a), r in val_scores.items()}
    return chosen, alpha, validation


def figures_of(split, evaluation):
    """What results.json keeps of one test set's Evaluation."""
    report = evaluation.report
    return {"split": split, "sentences": report.n_sentences, "sacrebleu": round(report.sacrebleu, 2),
            "signature": report.signature, "sacrebleu_lc": round(report.sacrebleu_lc, 2),
            "tokenized_lower_bleu": round(report.tokenized_lower, 2), "translate_seconds": round(evaluation.seconds, 1)}


def held_out(checkpoint_path, config, alpha, device, fetch_options, args):
    """test_2017_flickr's figures for the chosen model, or why it was not scored (its files are optional in a
    mirror, and a failed download must not cost the hour of training before it)."""
    try:
        evaluation = score(checkpoint_path, HELD_OUT, config, alpha, device, fetch_options, args.progress, args.limit)
    except Multi30kError as error:
        print(f"{HELD_OUT}: not scored ({error})", file=sys.stderr)
        return {"split": HELD_OUT, "not_scored": str(error)}
    return figures_of(HELD_OUT, evaluation)


def main(argv=None):
    args = parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    fetch_options = {key: value for key, value in (("mirror", args.mirror), ("cache_dir", args.cache_dir))
                     if value is not None}
    started = time.perf_counter()
    try:
        config = read_config(args.config)
        log = train(config, out, resume=args.resume, device=args.device, amp=args.amp, compile=args.compile,
                    mirror=args.mirror, cache_dir=args.cache_dir, progress=args.progress)
    except (FileExistsError, ValueError, Multi30kError) as error:   # a bad setting, device, mirror or last.pt
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not log["finished"]:
        print(f"training stopped before the end ({log.get('stopped')}): run again with --resume", file=sys.stderr)
        return 1
    device = choose_device(args.device)
    chosen, alpha, validation = choose_on_val(out, config, device, fetch_options, args)
    test = score(out / chosen, "test", config, alpha, device, fetch_options, args.progress, args.limit)
    report = test.report
    (out / "test_translations.txt").write_text("".join(t + "\n" for t in test.texts), encoding="utf-8")
    test_2017 = held_out(out / chosen, config, alpha, device, fetch_options, args)
    hardware = log["hardware"]
    results = {
        "checkpoint": chosen, "alpha": alpha, "config": config, "validation": validation,
        "test": figures_of("test_2016_flickr", test), "test_2017": test_2017,
        "training_minutes": round(log["elapsed_seconds"] / 60, 1),
        "total_minutes": round((time.perf_counter() - started) / 60, 1),
        "hardware": hardware.get("gpu") or f"{hardware['cpu_count']}-core CPU ({hardware['cpu']}), "
                                            f"{hardware['torch_threads']} threads",
        "torch": hardware["torch"], "precision": log["amp"] or "torch.float32", "compile": log.get("compile"),
        "parameters": log["parameters"],
        "command": "python -m transformer_course.reproduce " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    (out / "results.md").write_text(results_table(results), encoding="utf-8")
    print(f"\ntest_2016_flickr with {chosen}, alpha {alpha} (chosen on val), {report.n_sentences} sentences:")
    print(f"sacreBLEU                  {report.sacrebleu:6.2f}   {report.signature}")
    print(f"lowercased tokenised BLEU  {report.tokenized_lower:6.2f}   (corpus BLEU on lowercased spaCy tokens)")
    if "sacrebleu" in test_2017:
        print(f"{HELD_OUT} (held out): sacreBLEU {test_2017['sacrebleu']:6.2f}   "
              f"lowercased tokenised BLEU {test_2017['tokenized_lower_bleu']:6.2f}")
    print(f"training {results['training_minutes']} min on {results['hardware']}; results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
