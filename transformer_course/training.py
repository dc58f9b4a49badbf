"""Training the Transformer (notebook 07): label smoothing, the learning-rate schedule, one training step,
checkpoints, and the whole training run behind `python -m transformer_course.train`.

The first three functions are notebook 07's exercises in their finished form:

    label_smoothing_loss   cross-entropy against (1 - s)·one_hot + s / V, padding ignored
    noam_lr                the paper's warm-up-then-decay learning rate (section 5.3)
    train_step             one teacher-forced step: forward, loss, backward, clip, update, schedule

`train(config, out_dir)` trains on Multi30k German→English with automatic device choice, mixed precision
on a GPU, gradient clipping, a checkpoint of the best validation loss (`best.pt`), a checkpoint to resume
from (`last.pt`) and a JSON log of losses and timings (`log.json`). `load_checkpoint` rebuilds the model
and the vocabularies from either checkpoint.
"""
import copy
import json
import math
import os
import pickle
import platform
import signal
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from tqdm.auto import tqdm

from .cpu import flush_denormals, use_fast_dropout
from .data import (PAD, SPECIALS, TokenBatchSampler, TranslationDataset, Vocab, build_vocab, collate_batch,
                   default_cache_dir, load_split, tokenize)
from .model import Transformer
from .subword import SubwordTokenizer

__all__ = [
    "label_smoothing_loss", "noam_lr", "lr_scheduler", "train_step", "evaluate",
    "save_checkpoint", "load_checkpoint", "read_checkpoint", "CheckpointError", "choose_device",
    "CONFIGS", "RECIPE_FILE", "make_config", "load_config", "TrainingData", "load_multi30k", "batches_of",
    "average_checkpoints", "train",
]


# ----------------------------------------------------------------------------- notebook 07's exercises

def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    """Mean over the positions whose target is not `ignore_index` of the cross-entropy between the model's
    distribution softmax(logits) and the smoothed target (1 - smoothing)·one_hot(target) + smoothing / V.

    `logits [N, V]` (any number of leading dimensions works), `target [N]`. The same value as
    `F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)`; NaN when every
    position is ignored, as there.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # a softmax over thousands of classes needs float32
    log_probs = logits.log_softmax(dim=-1)
    keep = target != ignore_index
    # The cross-entropy against the mixture splits in two: (1 - s)·NLL of the target + s·mean of -log p.
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss[keep].mean()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    """factor · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5): a linear warm-up for
    `warmup_steps` steps, then a decay with 1/sqrt(step). Step 0 counts as step 1."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


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
            warnings.warn(f"the optimizer's lr is {group['lr']}, not 1.0: the schedule multiplies it")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def train_step(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
    """One teacher-forced training step; returns the loss (before the update) as a float.

    The decoder reads tgt[:, :-1] (<bos> w1 ... wn) and learns to predict tgt[:, 1:] (w1 ... wn <eos>).
    `clip=None` turns gradient clipping off.
    """
    logits = model(src, tgt[:, :-1])                                    # [B, T-1, V]
    loss = label_smoothing_loss(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                                smoothing=smoothing, ignore_index=pad_idx)
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    return loss.item()


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, batches, pad_idx=0, smoothing=0.1, device=None, amp_dtype=None):
    """Teacher-forced scores over `batches` (an iterable of (src, tgt)), every target token counting once:

    loss (label-smoothed with `smoothing`, comparable with the training loss), nll (plain cross-entropy),
    perplexity = exp(nll), accuracy (how often the most likely next token is the right one), tokens.
    The model is put in eval mode and put back in the mode it was in.
    """
    was_training = model.training
    model.eval()
    device = device if device is not None else next(model.parameters()).device
    totals = {"loss": 0.0, "nll": 0.0, "correct": 0, "tokens": 0}
    try:
        for src, tgt in batches:
            src, tgt = src.to(device), tgt.to(device)
            with _autocast(device, amp_dtype):
                logits = model(src, tgt[:, :-1])
            logits, labels = logits.float().flatten(0, 1), tgt[:, 1:].flatten()
            keep = labels != pad_idx
            n = int(keep.sum())
            if n == 0:
                continue
            totals["loss"] += label_smoothing_loss(logits, labels, smoothing, pad_idx).item() * n
            totals["nll"] += label_smoothing_loss(logits, labels, 0.0, pad_idx).item() * n
            totals["correct"] += int((logits.argmax(-1) == labels)[keep].sum())
            totals["tokens"] += n
    finally:
        model.train(was_training)
    n = max(totals["tokens"], 1)
    nll = totals["nll"] / n
    return {"loss": totals["loss"] / n, "nll": nll, "perplexity": math.exp(min(nll, 50.0)),
            "accuracy": totals["correct"] / n, "tokens": totals["tokens"]}


# ----------------------------------------------------------------------------- checkpoints

def save_checkpoint(path, model, src_vocab, tgt_vocab, config, **extra):
    """Save the model's weights, both vocabularies, the config (its "model" entry: the Transformer's keyword
    arguments) and any extra entries. Written to a temporary file and renamed, so `path` is never half-written."""
    if "model" not in config:
        raise ValueError("config needs a 'model' entry with the Transformer's keyword arguments")
    reserved = {"model", "src_vocab", "tgt_vocab", "config", "format"} & set(extra)
    if reserved:
        raise ValueError(f"extra entries may not be called {sorted(reserved)}")
    state = {"format": 1, "model": model.state_dict(), "src_vocab": list(src_vocab.itos),
             "tgt_vocab": list(tgt_vocab.itos), "config": _plain(config), **extra}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class CheckpointError(ValueError):
    """The file is not a checkpoint of this course: missing, a folder, not written by torch.save, or weights
    without the model's settings and vocabularies. The message names the file and says what was expected."""


CHECKPOINT_ENTRIES = ("model", "src_vocab", "tgt_vocab", "config")
_WRITTEN_BY = "a checkpoint written by python -m transformer_course.train or save_checkpoint (OUT/best.pt, OUT/last.pt)"


def read_checkpoint(path, map_location="cpu"):
    """The dict that the checkpoint file `path` holds (torch.load, weights only), checked to be one that
    `save_checkpoint` wrote: CheckpointError otherwise."""
    path = Path(path)
    if path.is_dir():
        inside = ", ".join(sorted(p.name for p in path.glob("*.pt")))
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: name "
                              + (f"one of the checkpoints in it ({inside})" if inside else _WRITTEN_BY))
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist: name {_WRITTEN_BY}") from None
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({error.strerror or error})") from None
    except Exception as error:   # torch.load fails in many ways (KeyError, EOFError, ...) on what it did not write
        raise CheckpointError(f"{path} is not a checkpoint: {_unreadable(path, error)}; name {_WRITTEN_BY}") from None
    if isinstance(state, dict) and state and all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} holds model weights only (a state_dict), without the model's settings and "
                              f"vocabularies: name {_WRITTEN_BY}, which holds all three")
    missing = [key for key in CHECKPOINT_ENTRIES if not isinstance(state, dict) or key not in state]
    if missing:
        raise CheckpointError(f"{path} is not a checkpoint of this course: it lacks {missing}; name {_WRITTEN_BY}")
    return state


def _unreadable(path, error):
    """Why torch.load could not read `path`, in words."""
    head = path.read_bytes()[:4096]
    if isinstance(error, pickle.UnpicklingError) and head.startswith(b"PK"):
        return "it holds Python objects besides weights and plain values (a model saved whole with torch.save(model)?)"
    if not head:
        return "it is empty"
    if b"\0" in head:
        return "torch.load cannot read it (not a file written by torch.save, or a damaged one)"
    best = path.parent / "best.pt"
    return "it is a text file" + (f" (the run's checkpoint is {best})" if best.exists() and best != path else "")


def load_checkpoint(path, map_location="cpu"):
    """A checkpoint written by `save_checkpoint`, as a dict: "model" (a Transformer rebuilt from the config,
    weights loaded, in eval mode), "src_vocab" and "tgt_vocab" (Vocab), "config" (a plain dict) and the
    extra entries it was saved with ("subword", when there is one, as a SubwordTokenizer). A file that is
    not such a checkpoint raises CheckpointError, which says so."""
    state = read_checkpoint(path, map_location)
    state.pop("format", None)
    try:
        model = Transformer(**state["config"]["model"])
        model.load_state_dict(state["model"])
    except (TypeError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path}: the weights do not fit the model that its config describes "
                              f"({str(error).strip().splitlines()[0]})") from None
    if isinstance(map_location, (str, torch.device)):
        model.to(map_location)
    state.update(model=model.eval(), src_vocab=Vocab(state["src_vocab"]), tgt_vocab=Vocab(state["tgt_vocab"]))
    if state.get("subword") is not None:
        state["subword"] = SubwordTokenizer(state["subword"])
    return state


def average_checkpoints(paths, out_path):
    """Save to `out_path` the element-wise mean of the weights of the checkpoints in `paths` (the same model,
    e.g. the last epochs of one run), with the vocabularies, config and subword model of the last one.
    The average lies in the middle of the region the last updates wandered through, and usually
    translates better than any single one of them."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    states = [read_checkpoint(p) for p in paths]
    weights = [state["model"] for state in states]
    if any(w.keys() != weights[0].keys() for w in weights):
        raise ValueError(f"the checkpoints {[str(p) for p in paths]} do not hold the same model")
    mean = {key: (sum(w[key].double() for w in weights) / len(weights)).to(weights[0][key].dtype)
            if weights[0][key].is_floating_point() else weights[0][key] for key in weights[0]}
    last = states[-1]
    extra = {k: v for k, v in last.items() if k not in ("format", "model", "src_vocab", "tgt_vocab", "config")}
    model = Transformer(**last["config"]["model"])
    model.load_state_dict(mean)
    return save_checkpoint(out_path, model, Vocab(last["src_vocab"]), Vocab(last["tgt_vocab"]), last["config"],
                           **{**extra, "averaged": [str(p.name) for p in paths]})


def _plain(value):
    """A JSON-like copy (dicts, lists, numbers, strings, None), as the checkpoint and the log store it."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    raise TypeError(f"a config holds plain values only, got {type(value).__name__}: {value!r}")


# ----------------------------------------------------------------------------- configurations

# "quick": a small model on a subset, a few minutes on a laptop CPU (notebook 07 and CI use it).
# "full": all of Multi30k with the paper's base model sizes but 3 layers a side (6 overfit these 29k pairs),
# for a GPU (expect a minute or two an epoch on a Colab T4 with mixed precision).
CONFIGS = {
    "quick": {
        "model": {"d_model": 128, "n_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "d_ff": 256,
                  "dropout": 0.1, "max_len": 256, "norm_first": False, "tie_embeddings": False},
        "data": {"max_train_pairs": 5000, "max_val_pairs": 500, "min_freq": 2, "lowercase": True,
                 "tokenizer": "spacy", "vocab_size": None},
        "train": {"epochs": 6, "max_tokens": 1500, "warmup_steps": 200, "lr_factor": 1.0, "schedule": "noam",
                  "smoothing": 0.1, "clip": 1.0,
                  "betas": [0.9, 0.98], "eps": 1e-9, "seed": 0, "max_steps": None, "average_last": 0},
    },
    "full": {
        "model": {"d_model": 512, "n_heads": 8, "num_encoder_layers": 3, "num_decoder_layers": 3, "d_ff": 2048,
                  "dropout": 0.1, "max_len": 256, "norm_first": False, "tie_embeddings": False},
        "data": {"max_train_pairs": None, "max_val_pairs": None, "min_freq": 2, "lowercase": True,
                 "tokenizer": "spacy", "vocab_size": None},
        "train": {"epochs": 20, "max_tokens": 4096, "warmup_steps": 2000, "lr_factor": 1.0, "schedule": "noam",
                  "smoothing": 0.1, "clip": 1.0,
                  "betas": [0.9, 0.98], "eps": 1e-9, "seed": 0, "max_steps": None, "average_last": 0},
    },
}
SECTIONS = ("model", "data", "train", "evaluate")

# "recipe": the course's best model (transformer_course/recipes/multi30k_de_en.json), behind
# `python -m transformer_course.reproduce`: subwords, tied embeddings, averaged weights, beam search.
RECIPE_FILE = Path(__file__).parent / "recipes" / "multi30k_de_en.json"


def load_config(path):
    """A configuration file (JSON with "model", "data" and "train" sections, optionally "evaluate") as a dict;
    the sections missing from it, and the keys missing from them, come from CONFIGS["full"]."""
    try:
        stored = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a JSON configuration ({error})") from None
    unknown = sorted(set(stored) - set(SECTIONS) - {"about", "mode"})
    if unknown:
        raise ValueError(f"{path}: unknown sections {unknown}; a configuration has {list(SECTIONS)}")
    config = copy.deepcopy(CONFIGS["full"])
    config.setdefault("evaluate", {"beam_size": 4, "alpha": 0.6})
    for section in SECTIONS:
        extra = sorted(set(stored.get(section, {})) - set(config[section]))
        if extra:
            raise ValueError(f"{path}: unknown settings {section}.{extra}; known: {sorted(config[section])}")
        config[section].update(stored.get(section, {}))
    return config


CONFIGS["recipe"] = load_config(RECIPE_FILE)


def make_config(mode="quick", **overrides):
    """A copy of CONFIGS[mode] with overrides given as section__key=value, e.g. model__d_model=256,
    train__epochs=3, data__max_train_pairs=None."""
    if mode not in CONFIGS:
        raise ValueError(f"mode must be one of {sorted(CONFIGS)}, got {mode!r}")
    config = copy.deepcopy(CONFIGS[mode])
    config["mode"] = mode
    for name, value in overrides.items():
        section, _, key = name.partition("__")
        if section not in SECTIONS or key not in config.get(section, {}):
            raise ValueError(f"unknown setting {name!r}: use section__key with a key of {CONFIGS[mode]}")
        config[section][key] = value
    return config


def choose_device(device="auto"):
    """"auto": the GPU when there is one (CUDA, else Apple's MPS), else the CPU. Any other name is checked:
    ValueError for one PyTorch does not know or this machine does not have."""
    if device not in (None, "auto"):
        try:
            chosen = torch.device(device)
        except RuntimeError:
            raise ValueError(f"unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps") from None
        mps = getattr(torch.backends, "mps", None)
        if (chosen.type == "cuda" and not torch.cuda.is_available()) or \
                (chosen.type == "mps" and not (mps is not None and mps.is_available())):
            raise ValueError(f"device {device!r} is not available on this machine: use cpu, or auto (a GPU if "
                             "there is one)")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _amp_dtype(device, amp):
    """Mixed precision on a CUDA GPU: bfloat16 on Ampere or newer (no loss scaling needed), else float16 with
    loss scaling (e.g. Colab's T4, where bfloat16 would only be emulated)."""
    if not amp or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.get_device_capability(device)[0] >= 8 else torch.float16


def _autocast(device, amp_dtype):
    if amp_dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=amp_dtype)


# ----------------------------------------------------------------------------- data

class TrainingData(NamedTuple):
    train: TranslationDataset
    val: TranslationDataset
    src_vocab: Vocab
    tgt_vocab: Vocab
    subword: SubwordTokenizer = None   # the joint subword model, when the data is cut into subwords


def load_multi30k(max_train_pairs=None, max_val_pairs=None, min_freq=2, lowercase=True, tokenizer="spacy",
                  vocab_size=None, mirror=None, cache_dir=None):
    """Multi30k's train and validation pairs (the first `max_*_pairs` of each; None: all) as
    TranslationDatasets, with vocabularies built from those training pairs.

    tokenizer="spacy": words, one vocabulary per language (tokens seen at least `min_freq` times);
    "subword": SentencePiece BPE learnt on both languages' training text, `vocab_size` pieces, one vocabulary
    shared by both sides. `mirror`: a folder with the official files (default $MULTI30K_MIRROR, else
    download into the cache)."""
    if tokenizer not in ("spacy", "subword"):
        raise ValueError(f"tokenizer must be 'spacy' or 'subword', got {tokenizer!r}")
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    texts = {}
    for split, limit in (("train", max_train_pairs), ("val", max_val_pairs)):
        german, english = load_split(split, cache_dir=cache_dir, mirror=mirror, progress=False)
        texts[split] = (german[:limit], english[:limit])
    if tokenizer == "spacy":
        tokens = {split: (tokenize(german, "de", lowercase, cache_dir / "tokens"),
                          tokenize(english, "en", lowercase, cache_dir / "tokens"))
                  for split, (german, english) in texts.items()}
        src_vocab = build_vocab(tokens["train"][0], min_freq=min_freq)
        tgt_vocab = build_vocab(tokens["train"][1], min_freq=min_freq)
        subword = None
    else:
        if lowercase:
            texts = {split: [[t.lower() for t in side] for side in pair] for split, pair in texts.items()}
        subword = SubwordTokenizer.train(texts["train"][0] + texts["train"][1], vocab_size or 8000,
                                         cache_dir=cache_dir / "tokens")
        tokens = {split: (subword.encode(german), subword.encode(english))
                  for split, (german, english) in texts.items()}
        src_vocab = tgt_vocab = Vocab([*SPECIALS, *(p for p in subword.pieces if p not in SPECIALS)])
    return TrainingData(TranslationDataset(*tokens["train"], src_vocab, tgt_vocab),
                        TranslationDataset(*tokens["val"], src_vocab, tgt_vocab), src_vocab, tgt_vocab, subword)


def batches_of(dataset, max_tokens, shuffle=False, seed=0, epoch=0, pad_idx=0):
    """The padded (src, tgt) batches of one epoch of `dataset`, cut by TokenBatchSampler (similar lengths
    together, at most `max_tokens` padded tokens a side); shuffled with `shuffle`, as epoch `epoch` of `seed`."""
    sampler = TokenBatchSampler(dataset.lengths, max_tokens, shuffle=shuffle, seed=seed)
    for indices in sampler.batches(epoch):
        yield collate_batch([dataset[i] for i in indices], pad_idx, pad_idx)


# ----------------------------------------------------------------------------- the training run

def _amp_train_step(model, src, tgt, optimizer, scheduler, pad_idx, smoothing, clip, amp_dtype, scaler):
    """train_step with optional mixed precision (autocast, and loss scaling for float16)."""
    with _autocast(src.device, amp_dtype):
        logits = model(src, tgt[:, :-1])
    loss = label_smoothing_loss(logits.float().flatten(0, 1), tgt[:, 1:].flatten(), smoothing, pad_idx)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)           # clip the true gradients, not the scaled ones
    else:
        loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), clip) if clip is not None else None
    if scaler is not None:
        scaler.step(optimizer)               # skipped when the gradients overflowed
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach(), norm


def _hardware(device):
    info = {"device": str(device), "torch": torch.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


@contextmanager
def _stop_on_interrupt():
    """Ctrl-C (or Jupyter's stop button) sets a flag, so the loop stops after the current step and saves;
    a second Ctrl-C interrupts at once."""
    state = {"stop": False}
    try:
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            if state["stop"]:
                raise KeyboardInterrupt
            state["stop"] = True
            print("\ninterrupted: stopping after this step and saving last.pt (Ctrl-C again to stop at once)")

        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not in the main thread: leave Ctrl-C alone
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_resumable(stored, config):
    """The run in last.pt may go on with a different number of epochs or steps, but not with another model,
    other data or other hyperparameters (nor another length when the schedule decays to 0 at the end)."""
    free = ("train.epochs", "train.max_steps") if config["train"].get("schedule", "noam") == "noam" else ()
    free += ("train.average_last",)  # only which epochs are kept and averaged at the end: training is the same

    def flat(c):
        settings = {f"{s}.{k}": v for s in ("model", "data", "train") for k, v in c[s].items()}
        settings.setdefault("train.schedule", "noam")  # runs from before the schedule could be chosen
        return {k: v for k, v in settings.items() if k not in free}
    old, new = flat(stored), flat(_plain(config))
    differences = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                   if old.get(k) != new.get(k)]
    if differences:
        raise ValueError("cannot resume: the settings differ from those of the run in last.pt ("
                         + "; ".join(differences) + "). Use the same settings (with the noam schedule the number "
                         "of epochs or the step limit may change), or start a new run in another folder.")


def _nothing_to_resume(out_dir, stored, config):
    """Why resuming the run in last.pt (`stored`) with `config` would train nothing, or None."""
    log, position, tc = json.loads(stored["log"]), stored["position"], config["train"]
    if log.get("finished") and position["epoch"] >= tc["epochs"]:
        done = f"finished its {position['epoch']} epochs"
        how = f"more epochs (train.epochs > {position['epoch']}: --epochs N)"
    elif tc.get("max_steps") is not None and position["step"] >= tc["max_steps"]:
        done = f"reached max_steps={tc['max_steps']}"
        how = f"a higher step limit (train.max_steps > {position['step']}: --max-steps N)"
    else:
        return None
    how = f"resume with {how}" if tc.get("schedule", "noam") == "noam" else \
        "start a new run in another folder (the linear schedule has decayed to 0)"
    return f"{out_dir}: the run already {done}, nothing to resume; to train longer, {how}"


def train(config, out_dir, *, resume=False, device="auto", amp=True, mirror=None, cache_dir=None,
          save_every_steps=None, save_every_seconds=600, log_every=10, progress=True, print_fn=print):
    """Train a Transformer on Multi30k German→English as `config` says (see CONFIGS / make_config).

    Writes to `out_dir`: best.pt (the weights with the lowest validation loss so far), last.pt (everything
    needed to resume: weights, optimizer, schedule, position in the data, random state, log) and log.json
    (losses and timings). Validation runs at the end of every epoch; last.pt is also written every
    `save_every_steps` steps and every `save_every_seconds`, and when Ctrl-C stops the run. With `resume`
    the run in out_dir/last.pt goes on where it stopped, and ends at the same weights as an uninterrupted
    run. Returns the log (a dict, also in log.json).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    last_path, best_path, log_path = out_dir / "last.pt", out_dir / "best.pt", out_dir / "log.json"
    if last_path.exists() and not resume:
        raise FileExistsError(f"{out_dir} already holds a run (last.pt): resume it (resume=True / --resume) "
                              "or choose another output folder")
    if resume and last_path.exists():
        stored = read_checkpoint(last_path)
        done = _nothing_to_resume(out_dir, stored, config)
        if done is not None:
            print_fn(done)
            return json.loads(stored["log"])
    config = copy.deepcopy(config)
    tc = config["train"]
    device = choose_device(device)
    amp_dtype = _amp_dtype(device, amp)
    started = time.perf_counter()

    data = load_multi30k(**config["data"], mirror=mirror, cache_dir=cache_dir)
    pad_idx = data.src_vocab.stoi[PAD]
    assert data.tgt_vocab.stoi[PAD] == pad_idx, "both vocabularies must put <pad> at the same id"
    config["model"].update(src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab), pad_idx=pad_idx)
    data_seconds = time.perf_counter() - started

    torch.manual_seed(tc["seed"])
    model = Transformer(**config["model"]).to(device)
    if hasattr(model, "set_need_weights"):
        model.set_need_weights(False)  # fused attention kernels: faster, the weights are not needed here
    if device.type == "cpu":           # see transformer_course/cpu.py
        flush_denormals()
        use_fast_dropout(model)
    # The subword model travels in every checkpoint: the vocabulary alone cannot cut new text into pieces.
    tokenizer_entry = {"subword": data.subword.model_proto} if data.subword is not None else {}
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=tuple(tc["betas"]), eps=tc["eps"])
    train_sampler = TokenBatchSampler(data.train.lengths, tc["max_tokens"], shuffle=True, seed=tc["seed"])
    total_steps = None
    if tc.get("schedule") == "linear":    # the only schedule that needs the run's length
        total_steps = sum(len(train_sampler.batches(epoch)) for epoch in range(tc["epochs"]))
        total_steps = min(total_steps, tc.get("max_steps") or total_steps)
    scheduler = lr_scheduler(optimizer, config["model"]["d_model"], tc["warmup_steps"], tc["lr_factor"],
                               tc.get("schedule", "noam"), total_steps)
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None

    log = {"config": _plain(config), "hardware": _hardware(device), "amp": str(amp_dtype) if amp_dtype else None,
           "parameters": sum(p.numel() for p in model.parameters()),
           "data": {"train_pairs": len(data.train), "val_pairs": len(data.val), "src_vocab": len(data.src_vocab),
                    "tgt_vocab": len(data.tgt_vocab), "seconds": round(data_seconds, 2)},
           "steps": [], "epochs": [], "best": None, "elapsed_seconds": 0.0, "finished": False, "runs": []}
    position = {"epoch": 0, "batch": 0, "step": 0, "epoch_loss": 0.0, "epoch_tokens": 0}
    elapsed_before = 0.0
    if resume and last_path.exists():
        state = read_checkpoint(last_path, map_location=device)
        _check_resumable(state["config"], config)
        if state["src_vocab"] != data.src_vocab.itos or state["tgt_vocab"] != data.tgt_vocab.itos:
            raise ValueError("cannot resume: the vocabularies built from the data differ from those in last.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng_cpu"].cpu())
        if device.type == "cuda" and state.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(state["rng_cuda"].cpu(), device)
        position = dict(state["position"])
        old_log = json.loads(state["log"])
        for key in ("steps", "epochs", "best", "runs"):
            log[key] = old_log[key]
        elapsed_before = old_log["elapsed_seconds"]
        print_fn(f"resuming {out_dir} at epoch {position['epoch'] + 1}, step {position['step']}")
    elif resume:
        print_fn(f"nothing to resume in {out_dir} (no last.pt): starting a new run")
    log["runs"].append({"resumed_at_step": position["step"], "hardware": log["hardware"]})

    run_started = time.perf_counter()

    def elapsed():
        return elapsed_before + time.perf_counter() - run_started

    def write_log():
        log["elapsed_seconds"] = round(elapsed(), 2)
        path = out_dir / ".log.json.part"
        path.write_text(json.dumps(log, indent=1))
        os.replace(path, log_path)

    def save_last():
        log["elapsed_seconds"] = round(elapsed(), 2)
        save_checkpoint(last_path, model, data.src_vocab, data.tgt_vocab, config, **tokenizer_entry,
                        optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                        scaler=scaler.state_dict() if scaler is not None else None,
                        rng_cpu=torch.get_rng_state(),
                        rng_cuda=torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                        position=dict(position), log=json.dumps(log))
        write_log()

    max_steps = tc.get("max_steps")
    last_save = time.perf_counter()
    stopped = None
    window = {"losses": [], "tokens": [], "started": time.perf_counter(), "lr": None}

    def flush():
        """Log the mean loss of the steps since the last flush (one GPU sync for all of them)."""
        if not window["losses"]:
            return None
        losses = torch.stack(window["losses"]).float().cpu().tolist()
        tokens = sum(window["tokens"])
        mean = sum(l * n for l, n in zip(losses, window["tokens"])) / tokens
        if not math.isfinite(mean):
            raise FloatingPointError(f"the training loss became {mean} at step {position['step']}: lower the "
                                     "learning rate (lr_factor) or lengthen the warm-up")
        position["epoch_loss"] = position.get("epoch_loss", 0.0) + mean * tokens
        position["epoch_tokens"] = position.get("epoch_tokens", 0) + tokens
        log["steps"].append({"step": position["step"], "epoch": position["epoch"] + 1, "loss": round(mean, 5),
                             "lr": window["lr"],
                             "tokens_per_second": round(tokens / (time.perf_counter() - window["started"]), 1),
                             "elapsed_seconds": round(elapsed(), 2)})
        window.update(losses=[], tokens=[], started=time.perf_counter())
        return mean

    model.train()
    with _stop_on_interrupt() as interrupt:
        while position["epoch"] < tc["epochs"] and stopped is None:
            epoch = position["epoch"]
            batches = train_sampler.batches(epoch)
            window["started"] = time.perf_counter()
            bar = tqdm(total=len(batches), initial=position["batch"], desc=f"epoch {epoch + 1}/{tc['epochs']}",
                       disable=not progress, leave=False, dynamic_ncols=True)
            for indices in batches[position["batch"]:]:
                if max_steps is not None and position["step"] >= max_steps:
                    stopped = f"max_steps={max_steps} reached"
                    break
                if interrupt["stop"]:
                    stopped = "interrupted"
                    break
                src, tgt = collate_batch([data.train[i] for i in indices], pad_idx, pad_idx)
                src, tgt = src.to(device, non_blocking=True), tgt.to(device, non_blocking=True)
                if not window["losses"]:
                    window["lr"] = optimizer.param_groups[0]["lr"]  # the rate of the window's first step
                loss, _ = _amp_train_step(model, src, tgt, optimizer, scheduler, pad_idx, tc["smoothing"],
                                          tc["clip"], amp_dtype, scaler)
                window["losses"].append(loss)
                window["tokens"].append(int((tgt[:, 1:] != pad_idx).sum()))
                position["batch"] += 1
                position["step"] += 1
                bar.update(1)
                if len(window["losses"]) >= log_every:
                    bar.set_postfix(loss=f"{flush():.3f}", lr=f"{window['lr']:.2e}")
                if (save_every_steps and position["step"] % save_every_steps == 0) or \
                        (save_every_seconds and time.perf_counter() - last_save > save_every_seconds):
                    flush()
                    save_last()
                    last_save = time.perf_counter()
            bar.close()
            flush()
            if stopped is not None:
                break
            # end of the epoch: validate, keep the best weights, save everything
            val_started = time.perf_counter()
            scores = evaluate(model, batches_of(data.val, tc["max_tokens"], pad_idx=pad_idx), pad_idx,
                              tc["smoothing"], device, amp_dtype)
            epoch_tokens = position.get("epoch_tokens", 0)
            record = {"epoch": epoch + 1, "step": position["step"],
                      "train_loss": round(position.get("epoch_loss", 0.0) / epoch_tokens, 5) if epoch_tokens else None,
                      **{f"val_{k}": (round(v, 5) if isinstance(v, float) else v) for k, v in scores.items()},
                      "val_seconds": round(time.perf_counter() - val_started, 2),
                      "elapsed_seconds": round(elapsed(), 2)}
            log["epochs"].append(record)
            improved = log["best"] is None or scores["loss"] < log["best"]["val_loss"]
            if improved:
                log["best"] = {"epoch": epoch + 1, "step": position["step"], "val_loss": round(scores["loss"], 5),
                               "val_nll": round(scores["nll"], 5)}
                save_checkpoint(best_path, model, data.src_vocab, data.tgt_vocab, config, **tokenizer_entry,
                                epoch=epoch + 1, step=position["step"], val_loss=scores["loss"], val_nll=scores["nll"])
            if epoch + 1 > tc["epochs"] - (tc.get("average_last") or 0):   # kept for the average at the end
                save_checkpoint(out_dir / f"epoch{epoch + 1}.pt", model, data.src_vocab, data.tgt_vocab, config,
                                **tokenizer_entry, epoch=epoch + 1, step=position["step"], val_loss=scores["loss"])
            print_fn(f"epoch {epoch + 1}/{tc['epochs']}: train loss {record['train_loss']}, "
                     f"val loss {scores['loss']:.4f} (nll {scores['nll']:.4f}, perplexity {scores['perplexity']:.2f}, "
                     f"accuracy {scores['accuracy']:.1%}){' *best*' if improved else ''}, "
                     f"{elapsed():.0f} s")
            position.update(epoch=epoch + 1, batch=0, epoch_loss=0.0, epoch_tokens=0)
            save_last()
            last_save = time.perf_counter()
    log["finished"] = stopped is None
    log["stopped"] = stopped
    if log["finished"] and tc.get("average_last"):
        # (a run resumed with a larger average_last has only the epochs its first settings kept)
        epochs = [e for e in range(tc["epochs"] - tc["average_last"] + 1, tc["epochs"] + 1)
                  if e >= 1 and (out_dir / f"epoch{e}.pt").exists()]
        average_checkpoints([out_dir / f"epoch{e}.pt" for e in epochs], out_dir / "averaged.pt")
        log["averaged"] = {"epochs": epochs, "path": "averaged.pt"}
        print_fn(f"averaged.pt: the mean of the weights of epochs {log['averaged']['epochs']}")
    save_last()
    if stopped is not None:
        print_fn(f"stopped at step {position['step']} ({stopped}): last.pt saved; resume with resume=True (--resume)")
    return log
