"""Notebook 10's two experiments: does pre-training pay, and full fine-tuning against LoRA.

    python -m transformer_course.pretrain_finetune pretraining --mode quick --out runs/pretraining   # CPU, minutes
    python -m transformer_course.pretrain_finetune lora --mode quick --out runs/lora \\
        --pretrained runs/pretraining/pretrained.pt                                                    # reuses its GPT
    python -m transformer_course.pretrain_finetune pretraining --mode full --out runs/pretraining-full  # GPU

1. pretraining: a GPT is pre-trained on the monolingual text of Multi30k's training split (each German and each
   English caption a document of its own, shuffled, so that no caption sits next to its translation; packed into
   blocks with <eos> between documents), then fine-tuned as a decoder-only translator ("German <eos> <bos>
   English <eos>", the loss on the English and its <eos> only) on 1 %, 10 % and 100 % of the parallel pairs.
   The same GPT trained from scratch on the same pairs, for the same number of steps, is the baseline. Each is
   scored with sacreBLEU (greedy decoding) on test_2016_flickr and on the held-out test_2017_flickr (when the
   data has it), and the pre-training loss on held-out captions is measured before and after fine-tuning.
2. lora: the pre-trained GPT fine-tuned on one fraction of the pairs in full and with LoRA on the attention
   projections: BLEU, trainable parameters, seconds per step, and what each forgot of the pre-training.

Each writes OUT/results.json and OUT/results.md. ``--mode smoke`` takes seconds (the autograder's and the tests'),
``quick`` minutes on a CPU, ``full`` a GPU's settings. The notebook calls the same functions with its own parts.
"""
import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import nn

from . import finetune
from .data import BOS, EOS, HELD_OUT, PAD, Multi30kError
from .gpt import GPT, DecoderOnlyTranslator, adamw_param_groups, lm_loss
from .schedules import warmup_cosine_lr

FRACTIONS = (0.01, 0.1, 1.0)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a mode fixes. Steps are optimizer steps; lr are the peaks of warm-up + cosine."""
    vocab_size: int
    max_train_pairs: int = None        # None: all 29,000
    max_val_pairs: int = None
    model: dict = dataclasses.field(default_factory=dict)
    block_size: int = 64
    pretrain_batch: int = 32
    pretrain_steps: int = 400
    pretrain_lr: float = 2e-3
    finetune_batch: int = 32
    finetune_steps: int = 200
    finetune_lr: float = 3e-4          # from the pre-trained weights
    scratch_lr: float = 2e-3           # the baseline from scratch: the pre-training's rate
    lora_lr: float = 2e-3
    lora_r: int = 8
    lora_alpha: int = 16
    lora_fraction: float = 0.1
    warmup: float = 0.1                # the fraction of the steps spent warming up
    test_limit: int = None             # translate only the first sentences of each test set (None: all)
    fractions: tuple = FRACTIONS


MODES = {
    "smoke": Settings(vocab_size=300, max_train_pairs=300, max_val_pairs=40,
                      model=dict(d_model=32, n_heads=2, n_layers=2, d_ff=64), block_size=32, pretrain_batch=8,
                      pretrain_steps=4, finetune_batch=8, finetune_steps=4, test_limit=8),
    "quick": Settings(vocab_size=2000, max_val_pairs=500, model=dict(d_model=128, n_heads=4, n_layers=3, d_ff=512),
                      pretrain_steps=600, finetune_steps=300, test_limit=500),
    "full": Settings(vocab_size=8000, model=dict(d_model=256, n_heads=4, n_layers=6, d_ff=1024), block_size=128,
                     pretrain_batch=64, pretrain_steps=8000, pretrain_lr=1e-3, finetune_batch=64, finetune_steps=4000,
                     finetune_lr=2e-4, scratch_lr=1e-3, lora_lr=1e-3),
}


class Parts(NamedTuple):
    """The pieces the experiments are made of: the course's finished ones by default, a notebook's own instead."""
    GPT: Callable = GPT
    pack_sequences: Callable = finetune.pack_sequences
    sft_example: Callable = finetune.sft_example
    sft_loss: Callable = finetune.sft_loss
    add_lora: Callable = finetune.add_lora


COURSE_PARTS = Parts()


class Corpus(NamedTuple):
    data: object               # run.batches.TrainingData: pairs as ids, the joint vocabulary, the subword model
    documents: list            # the pre-training documents (lists of ids), German and English captions, shuffled
    val_blocks: torch.Tensor   # held-out captions packed: the pre-training loss is measured on them
    ids: dict                  # "<pad>", "<bos>", "<eos>" -> id


# ----------------------------------------------------------------------------- data

def load_corpus(settings, parts=COURSE_PARTS, **fetch_options):
    """Multi30k cut into lowercased joint BPE pieces, the monolingual documents and the held-out blocks."""
    from .run.batches import load_multi30k

    data = load_multi30k(settings.max_train_pairs, settings.max_val_pairs, lowercase=True, tokenizer="subword",
                         vocab_size=settings.vocab_size, **fetch_options)
    ids = {token: data.src_vocab.stoi[token] for token in (PAD, BOS, EOS)}
    return Corpus(data, monolingual(data.train, seed=0), parts.pack_sequences(
        monolingual(data.val, seed=1), settings.block_size, ids[EOS]), ids)


def monolingual(dataset, seed):
    """Every German and every English sentence of a TranslationDataset as a document of its own (its pieces'
    ids, without <bos> and <eos>), in a shuffled order: a caption and its translation are not neighbours."""
    documents = [src[:-1].tolist() for src in dataset.src] + [tgt[1:-1].tolist() for tgt in dataset.tgt]
    order = torch.randperm(len(documents), generator=torch.Generator().manual_seed(seed)).tolist()
    return [documents[i] for i in order]


def pair_subset(dataset, fraction, seed=0):
    """The indices of `fraction` of the pairs (at least one), drawn once: 1 % is inside 10 %, inside 100 %."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    return order[:max(1, round(fraction * len(dataset)))]


def sft_examples(dataset, indices, ids, parts):
    """Translation pairs as supervised fine-tuning examples: prompt "German <eos> <bos>", answer the English."""
    return [parts.sft_example(dataset.src[i].tolist() + [ids[BOS]], dataset.tgt[i][1:-1].tolist(), ids[EOS])
            for i in indices]


# ----------------------------------------------------------------------------- training

def new_gpt(settings, corpus, parts, device, seed=0):
    torch.manual_seed(seed)
    return parts.GPT(len(corpus.data.src_vocab), dropout=0.1, **settings.model).to(device)


def optimizer_and_schedule(model, lr, steps, warmup):
    """AdamW (notebook 09's decay groups, the frozen parameters left out) with warm-up + cosine down to lr / 10."""
    groups = [{**g, "params": [p for p in g["params"] if p.requires_grad]} for g in adamw_param_groups(model, 0.1)]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=1.0, betas=(0.9, 0.95))
    warmup_steps = min(max(1, round(warmup * steps)), steps - 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine_lr(s, lr, warmup_steps, steps,
                                                                                      lr / 10))
    return optimizer, schedule


def train_loop(model, batches, loss_of, lr, steps, warmup):
    """`steps` optimizer steps on `batches` (an endless iterator), the loss from loss_of(model, batch).
    Returns {"losses", "seconds", "tokens"}."""
    optimizer, schedule = optimizer_and_schedule(model, lr, steps, warmup)
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train()
    losses, tokens, started = [], 0, time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        loss = loss_of(model, batch)
        loss.backward()
        nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        tokens += batch[0].numel()
    model.eval()
    return {"losses": losses, "seconds": time.perf_counter() - started, "tokens": tokens}


def endless(items, batch_size, seed, collate):
    """Random batches of `items` for ever: each pass a new permutation."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(items), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1 if len(order) >= batch_size else 1, batch_size):
            yield collate([items[i] for i in order[start:start + batch_size]])


def pretrain(settings, corpus, parts, device):
    """A new GPT trained with the next-token loss on the packed monolingual documents: (model, log)."""
    blocks = parts.pack_sequences(corpus.documents, settings.block_size, corpus.ids[EOS])
    model = new_gpt(settings, corpus, parts, device)
    batches = endless(list(blocks), settings.pretrain_batch, 0, lambda rows: (torch.stack(rows).to(device),))
    log = train_loop(model, batches, lambda m, batch: lm_loss(m(batch[0]), batch[0]), settings.pretrain_lr,
                     settings.pretrain_steps, settings.warmup)
    return model, {**log, "blocks": len(blocks), "parameters": count(model)}


def finetune_on(model, examples, settings, parts, device, lr, seed=0):
    """`settings.finetune_steps` steps of supervised fine-tuning of `model` on `examples`: the log."""
    def collate(chosen):
        return tuple(t.to(device) for t in finetune.sft_batch(chosen, 0))

    batches = endless(examples, settings.finetune_batch, seed, collate)
    return train_loop(model, batches, lambda m, b: parts.sft_loss(m(b[0]), b[1], b[2]), lr, settings.finetune_steps,
                      settings.warmup)


def count(model):
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def pretraining_loss(model, blocks, device, batch_size=64):
    """The mean next-token loss (nats per token) on packed held-out blocks: what the pre-training optimised."""
    model.eval()
    total = sum(float(lm_loss(model(b.to(device)), b.to(device))) * len(b) for b in blocks.split(batch_size))
    return total / len(blocks)


# ----------------------------------------------------------------------------- scoring

def translator_of(model, settings, corpus):
    """The GPT as notebook 09's DecoderOnlyTranslator (the same weights), for the course's greedy decoding."""
    vocab = len(corpus.data.src_vocab)
    sizes = settings.model
    return DecoderOnlyTranslator(vocab, vocab, sizes["d_model"], sizes["n_heads"], 0, sizes["n_layers"], sizes["d_ff"],
                                 pad_idx=corpus.ids[PAD], gpt_class=lambda *args: model).eval()


def bleu(model, settings, corpus, device, split="test", **fetch_options):
    """Cased sacreBLEU of greedy translations of a test set, or None when the data has no such split."""
    from .evaluate import evaluate

    try:
        scored = evaluate(translator_of(model, settings, corpus), corpus.data.src_vocab, corpus.data.tgt_vocab,
                          split=split, beam_size=1, limit=settings.test_limit, lowercase=True,
                          subword=corpus.data.subword, device=device, max_extra=20, **fetch_options)
    except Multi30kError:
        return None
    return round(scored.report.sacrebleu, 2)


def scores(model, settings, corpus, device, fetch_options):
    return {"test2016": bleu(model, settings, corpus, device, "test", **fetch_options),
            "test2017": bleu(model, settings, corpus, device, HELD_OUT, **fetch_options)}


def tflop(parameters, tokens):
    """Training compute, 6 x parameters x tokens (forward and backward; an upper estimate for LoRA)."""
    return 6 * parameters * tokens / 1e12


# ----------------------------------------------------------------------------- the experiments

def pretraining_experiment(settings, corpus, parts=COURSE_PARTS, device="cpu", fetch_options=None, report=print):
    """Experiment 1: one pre-training, then for each fraction of the pairs the pre-trained GPT fine-tuned and the
    same GPT trained from scratch, the same steps. Returns {"pretraining": its log, "rows": one per run,
    "state": the pre-trained weights}."""
    pretrained, pre_log = pretrain(settings, corpus, parts, device)
    state = {name: value.detach().clone() for name, value in pretrained.state_dict().items()}
    before = pretraining_loss(pretrained, corpus.val_blocks, device)
    pre_log = {**{k: v for k, v in pre_log.items() if k != "losses"}, "final_loss": mean_tail(pre_log["losses"]),
               "held_out_loss": round(before, 3), "tflop": round(tflop(pre_log["parameters"], pre_log["tokens"]), 3)}
    report(f"pre-training: {pre_log['parameters']:,} parameters, {settings.pretrain_steps} steps, "
           f"{pre_log['tokens']:,} tokens, {pre_log['seconds']:.0f} s; held-out loss {before:.3f}")
    rows = []
    for fraction in settings.fractions:
        indices = pair_subset(corpus.data.train, fraction)
        examples = sft_examples(corpus.data.train, indices, corpus.ids, parts)
        for start in ("pre-trained", "from scratch"):
            model = new_gpt(settings, corpus, parts, device, seed=1)
            if start == "pre-trained":
                model.load_state_dict(state)
            lr = settings.finetune_lr if start == "pre-trained" else settings.scratch_lr
            log = finetune_on(model, examples, settings, parts, device, lr)
            compute = tflop(count(model), log["tokens"]) + (pre_log["tflop"] if start == "pre-trained" else 0.0)
            rows.append({"fraction": fraction, "pairs": len(indices), "start": start, "lr": lr,
                         "steps": settings.finetune_steps, "seconds": round(log["seconds"], 1),
                         "final_loss": mean_tail(log["losses"]), "tflop": round(compute, 3),
                         "held_out_lm_loss": round(pretraining_loss(model, corpus.val_blocks, device), 3),
                         **scores(model, settings, corpus, device, fetch_options or {})})
            report(row_line(rows[-1]))
    return {"pretraining": pre_log, "rows": rows, "state": state}


def lora_experiment(settings, corpus, state, parts=COURSE_PARTS, device="cpu", fetch_options=None, report=print):
    """Experiment 2: the pre-trained weights `state` fine-tuned on settings.lora_fraction of the pairs, in full and
    with LoRA (rank settings.lora_r on every attention projection). One row per method."""
    indices = pair_subset(corpus.data.train, settings.lora_fraction)
    examples = sft_examples(corpus.data.train, indices, corpus.ids, parts)
    rows = []
    for method in ("full fine-tuning", "LoRA"):
        model = new_gpt(settings, corpus, parts, device, seed=1)
        model.load_state_dict(state)
        before = pretraining_loss(model, corpus.val_blocks, device)
        lr = settings.finetune_lr
        if method == "LoRA":
            model = parts.add_lora(model, settings.lora_r, settings.lora_alpha).to(device)
            lr = settings.lora_lr
        log = finetune_on(model, examples, settings, parts, device, lr)
        rows.append({"method": method, "pairs": len(indices), "lr": lr, "steps": settings.finetune_steps,
                     "trainable": finetune.trainable_parameters(model), "parameters": count(model),
                     "ms_per_step": round(1000 * log["seconds"] / settings.finetune_steps, 1),
                     "final_loss": mean_tail(log["losses"]), "held_out_lm_loss_before": round(before, 3),
                     "held_out_lm_loss_after": round(pretraining_loss(model, corpus.val_blocks, device), 3),
                     **scores(model, settings, corpus, device, fetch_options or {})})
        report(lora_line(rows[-1]))
    return {"rows": rows}


def mean_tail(losses, n=20):
    tail = losses[-n:]
    return round(sum(tail) / len(tail), 3) if tail else None


def _bleu_text(value):
    return "  n/a" if value is None else f"{value:5.2f}"


def row_line(row):
    return (f"{row['fraction']:6.0%} {row['pairs']:6,} pairs  {row['start']:12s}  test2016 {_bleu_text(row['test2016'])}"
            f"  test2017 {_bleu_text(row['test2017'])}  fine-tuning {row['seconds']:.0f} s, {row['tflop']:.3f} TFLOP in all,"
            f"  held-out LM loss {row['held_out_lm_loss']:.3f}")


def lora_line(row):
    return (f"{row['method']:16s} {row['trainable']:>9,} of {row['parameters']:,} trainable  {row['ms_per_step']:6.1f} ms/step"
            f"  test2016 {_bleu_text(row['test2016'])}  test2017 {_bleu_text(row['test2017'])}  held-out LM loss "
            f"{row['held_out_lm_loss_before']:.3f} -> {row['held_out_lm_loss_after']:.3f}")


def pretraining_table(result):
    """Experiment 1 as a Markdown table."""
    lines = ["| pairs | start | fine-tuning lr | sacreBLEU test2016 | sacreBLEU test2017 | fine-tuning s | compute, TFLOP "
             "(pre-training included) | held-out LM loss |", "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['fraction']:.0%} ({row['pairs']:,}) | {row['start']} | {row['lr']:g} | "
                     f"{_bleu_text(row['test2016']).strip()} | {_bleu_text(row['test2017']).strip()} | {row['seconds']:.0f} | "
                     f"{row['tflop']:.3f} | {row['held_out_lm_loss']:.3f} |")
    pre = result["pretraining"]
    lines.append(f"\nPre-training: {pre['parameters']:,} parameters, {pre['tokens']:,} tokens in {pre['blocks']:,} blocks, "
                 f"{pre['seconds']:.0f} s, {pre['tflop']:.3f} TFLOP; held-out LM loss {pre['held_out_loss']:.3f}.")
    return "\n".join(lines) + "\n"


def lora_table(result):
    """Experiment 2 as a Markdown table."""
    lines = ["| method | trainable parameters | lr | ms per step | sacreBLEU test2016 | sacreBLEU test2017 | held-out LM "
             "loss before → after |", "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['method']} | {row['trainable']:,} of {row['parameters']:,} | {row['lr']:g} | "
                     f"{row['ms_per_step']:.1f} | {_bleu_text(row['test2016']).strip()} | "
                     f"{_bleu_text(row['test2017']).strip()} | {row['held_out_lm_loss_before']:.3f} → "
                     f"{row['held_out_lm_loss_after']:.3f} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the command

def parser():
    p = argparse.ArgumentParser(prog="python -m transformer_course.pretrain_finetune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=("pretraining", "lora"))
    p.add_argument("--mode", choices=tuple(MODES), default="quick")
    p.add_argument("--out", required=True, help="folder for results.json, results.md (and pretrained.pt)")
    p.add_argument("--pretrained", help="lora: the pretrained.pt an earlier `pretraining` run wrote (else pre-train)")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda, ...")
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch")
    p.add_argument("--mirror", help="a folder with the official Multi30k files (default: $MULTI30K_MIRROR)")
    p.add_argument("--fractions", type=float, nargs="+", metavar="F",
                   help=f"pretraining: fine-tune on these fractions of the pairs only (default: {' '.join(map(str, FRACTIONS))})")
    return p


def main(argv=None):
    from .devices import choose_device

    args = parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    settings, device, out = MODES[args.mode], choose_device(args.device), Path(args.out)
    if args.fractions:
        if not all(0 < f <= 1 for f in args.fractions):
            parser().error("--fractions: each fraction is above 0 and at most 1, e.g. --fractions 0.01 0.1")
        settings = dataclasses.replace(settings, fractions=tuple(args.fractions))
    out.mkdir(parents=True, exist_ok=True)
    fetch_options = {"mirror": args.mirror} if args.mirror else {}
    started = time.perf_counter()
    corpus = load_corpus(settings, **fetch_options)
    if args.experiment == "pretraining":
        result = pretraining_experiment(settings, corpus, device=device, fetch_options=fetch_options)
        torch.save({"state": result.pop("state"), "settings": dataclasses.asdict(settings)}, out / "pretrained.pt")
        table = pretraining_table(result)
    else:
        if args.pretrained:
            state = torch.load(args.pretrained, map_location="cpu", weights_only=True)["state"]
        else:
            state = pretraining_experiment(dataclasses.replace(settings, fractions=()), corpus, device=device)["state"]
        result = lora_experiment(settings, corpus, state, device=device, fetch_options=fetch_options)
        table = lora_table(result)
    result.update(mode=args.mode, settings=dataclasses.asdict(settings), device=str(device),
                  minutes=round((time.perf_counter() - started) / 60, 1),
                  command="python -m transformer_course.pretrain_finetune " + " ".join(argv or sys.argv[1:]))
    (out / "results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "results.md").write_text(table, encoding="utf-8")
    print("\n" + table + f"\n{result['minutes']} min on {device}; results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
