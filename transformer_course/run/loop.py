"""The whole training run behind `python -m transformer_course.train`: `train(config, out_dir)`.

It trains on Multi30k German→English with automatic device choice, mixed precision on a GPU, gradient
clipping, a checkpoint of the best validation loss (`best.pt`), a checkpoint to resume from (`last.pt`) and
a JSON log of losses and timings (`log.json`). A run is a `TrainingRun`, whose methods are its steps, in
the order `TrainingRun.run` takes them:

    load_data → build_model → build_optimizer → start_log → restore (when resuming)
    → train_epochs: per epoch train_epoch (train_batch, flush_window, save_last) and end_epoch
      (validate, keep_checkpoints, save_last)
    → finish (average_last_epochs, save_last)
"""
import copy
import json
import math
import os
import platform
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from ..progress import tqdm

from ..cpu import for_cpu_training
from ..data import PAD, TokenBatchSampler, collate_batch
from ..devices import amp_dtype, choose_device, precision_note
from ..model import build_model
from ..schedules import lr_scheduler
from ..training import amp_train_step
from .batches import batches_of, load_multi30k
from .checkpoints import average_checkpoints, plain_values, read_checkpoint, save_checkpoint
from .validation import teacher_forced_scores

__all__ = ["train", "RunOptions", "TrainingRun", "LossWindow"]


@dataclass(frozen=True)
class RunOptions:
    """How a run is carried out; what it trains is the configuration's business (configs.py).

    device: "auto" (a GPU when there is one), "cpu", "cuda", "cuda:1", "mps"; amp: mixed precision where it helps
    (devices.amp_dtype: a CUDA GPU, or a CPU with bfloat16 instructions);
    mirror, cache_dir: where Multi30k is read from and cached (see batches.load_multi30k);
    save_every_steps, save_every_seconds: how often last.pt is also written between epochs (None: never);
    log_every: training steps per entry of the log; progress: progress bars; print_fn: where messages go;
    model_builder: `model_builder(**config["model"])` builds the model (default: model.build_model; a notebook
    passes one that uses its own classes); compile: torch.compile the model for training (True: the inductor
    backend, or a backend's name), with dynamic shapes, since every batch has its own lengths. On the recipe
    it did not pay: two minutes of compiling, then steps 12 % slower on a 2-core CPU and 10 % faster on a GPU
    (README, "Compilation")."""
    device: str = "auto"
    amp: bool = True
    mirror: object = None
    cache_dir: object = None
    save_every_steps: int = None
    save_every_seconds: float = 600
    log_every: int = 10
    progress: bool = True
    print_fn: Callable = print
    model_builder: Callable = None
    compile: object = False


def train(config, out_dir, *, resume=False, **options):
    """Train a Transformer on Multi30k German→English as `config` says (see configs.CONFIGS / make_config),
    carried out as `options` (the fields of RunOptions, e.g. device="cpu", progress=False) say.

    Writes to `out_dir`: best.pt (the weights with the lowest validation loss so far), last.pt (everything
    needed to resume: weights, optimizer, schedule, position in the data, random state, log) and log.json
    (losses and timings). Validation runs at the end of every epoch; last.pt is also written every
    `save_every_steps` steps and every `save_every_seconds`, and when Ctrl-C stops the run. With `resume`
    the run in out_dir/last.pt goes on where it stopped, and ends at the same weights as an uninterrupted
    run. Returns the log (a dict, also in log.json).
    """
    options = RunOptions(**options)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    last_path = out_dir / "last.pt"
    if last_path.exists() and not resume:
        raise FileExistsError(f"{out_dir} already holds a run (last.pt): resume it (resume=True / --resume) "
                              "or choose another output folder")
    stored = read_checkpoint(last_path) if resume and last_path.exists() else None   # read once, used twice
    if stored is not None:
        done = _nothing_to_resume(out_dir, stored, config)
        if done is not None:
            options.print_fn(done)
            return json.loads(stored["log"])
    elif resume:
        options.print_fn(f"nothing to resume in {out_dir} (no last.pt): starting a new run")
    return TrainingRun(config, out_dir, options).run(resume_from=stored)


class LossWindow:
    """The training losses since the last log entry, kept as tensors on the device until it is written, so
    that the GPU is waited for once per entry instead of once per step."""

    def __init__(self):
        self.lr = None      # the learning rate of the window's first step
        self.restart()

    def restart(self):
        self.losses, self.tokens, self.started = [], [], time.perf_counter()

    def __len__(self):
        return len(self.losses)

    def add(self, loss, tokens, lr):
        """One step's loss (a tensor), its number of target tokens and its learning rate."""
        if not self.losses:
            self.lr = lr
        self.losses.append(loss)
        self.tokens.append(tokens)

    def take(self):
        """(the token-weighted mean loss, the number of tokens, the seconds since the window started), and
        start a new window."""
        losses = torch.stack(self.losses).float().cpu().tolist()
        tokens = sum(self.tokens)
        mean = sum(loss * n for loss, n in zip(losses, self.tokens)) / tokens
        seconds = time.perf_counter() - self.started
        self.restart()
        return mean, tokens, seconds


class TrainingRun:
    """One run of `train`: its settings, its data, model and optimizer, and where it is (`position`, saved in
    last.pt) and what it has seen (`log`, saved as log.json): what it trains is `config` (configs.py), how it
    is carried out `options` (a RunOptions). `run()` takes the steps in order."""

    def __init__(self, config, out_dir, options=None):
        self.config = copy.deepcopy(config)
        self.options = options or RunOptions()
        self.settings = self.config["train"]
        self.out_dir = Path(out_dir)
        self.last_path, self.best_path = self.out_dir / "last.pt", self.out_dir / "best.pt"
        self.device = choose_device(self.options.device)
        self.amp_dtype = amp_dtype(self.device, self.options.amp)
        self.compile_backend = "inductor" if self.options.compile is True else (self.options.compile or None)
        if self.compile_backend and self.compile_backend not in torch.compiler.list_backends(exclude_tags=()):
            raise ValueError(f"--compile {self.compile_backend}: not a torch.compile backend (one of "
                             f"{', '.join(torch.compiler.list_backends())}, or a debugging one)")
        self.position = {"epoch": 0, "batch": 0, "step": 0, "epoch_loss": 0.0, "epoch_tokens": 0}
        self.window = LossWindow()
        self.elapsed_before = 0.0                        # seconds trained before a resume
        self.run_started = self.last_save = time.perf_counter()

    def run(self, resume_from=None):
        """Every step, in order; returns the log. `resume_from`: what last.pt holds (read_checkpoint), to go
        on from where that run stopped."""
        self.load_data()
        self.build_model()
        self.build_optimizer()
        self.start_log()
        if resume_from is not None:
            self.restore(resume_from)
        self.log["runs"].append({"resumed_at_step": self.position["step"], "hardware": self.log["hardware"]})
        self.options.print_fn(precision_note(self.device, self.amp_dtype, self.options.amp))
        if self.compile_backend:
            self.options.print_fn(f"torch.compile ({self.compile_backend}): the first steps, and the first of each "
                                  "new batch shape, wait for the compiler")
        self.run_started = time.perf_counter()
        self.finish(self.train_epochs())
        return self.log

    # ------------------------------------------------------------------------- setting up

    def load_data(self):
        """Multi30k as the config's "data" section says; the model's vocabulary sizes follow from it."""
        started = time.perf_counter()
        self.data = load_multi30k(**self.config["data"], mirror=self.options.mirror, cache_dir=self.options.cache_dir)
        self.pad_idx = self.data.src_vocab.stoi[PAD]
        assert self.data.tgt_vocab.stoi[PAD] == self.pad_idx, "both vocabularies must put <pad> at the same id"
        self.config["model"].update(src_vocab_size=len(self.data.src_vocab), tgt_vocab_size=len(self.data.tgt_vocab),
                                    pad_idx=self.pad_idx)
        self.data_seconds = time.perf_counter() - started

    def build_model(self):
        torch.manual_seed(self.settings["seed"])
        self.model = (self.options.model_builder or build_model)(**self.config["model"]).to(self.device)
        if hasattr(self.model, "set_need_weights"):
            self.model.set_need_weights(False)   # fused attention kernels: faster, the weights are not needed here
        if self.device.type == "cpu":            # see transformer_course/cpu.py
            for_cpu_training(self.model)
        if self.compile_backend:                 # in place: the state dict keeps its names for the checkpoints
            self.model.compile(backend=self.compile_backend, dynamic=True)
        # The subword model travels in every checkpoint: the vocabulary alone cannot cut new text into pieces.
        self.tokenizer_entry = {"subword": self.data.subword.model_proto} if self.data.subword is not None else {}

    def build_optimizer(self):
        """Adam, the learning-rate schedule, the batches of every epoch, and loss scaling for float16."""
        tc = self.settings
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=tuple(tc["betas"]), eps=tc["eps"])
        self.sampler = TokenBatchSampler(self.data.train.lengths, tc["max_tokens"], shuffle=True, seed=tc["seed"])
        self.scheduler = lr_scheduler(self.optimizer, self.config["model"]["d_model"], tc["warmup_steps"],
                                      tc["lr_factor"], tc.get("schedule", "noam"), self._total_steps())
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None

    def _total_steps(self):
        """The run's number of steps, for the only schedule that needs it (linear); else None."""
        tc = self.settings
        if tc.get("schedule") != "linear":
            return None
        total = sum(len(self.sampler.batches(epoch)) for epoch in range(tc["epochs"]))
        return min(total, tc.get("max_steps") or total)

    def start_log(self):
        data = self.data
        self.log = {
            "config": plain_values(self.config), "hardware": _hardware(self.device),
            "amp": str(self.amp_dtype) if self.amp_dtype else None,
            "compile": self.compile_backend,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "data": {"train_pairs": len(data.train), "val_pairs": len(data.val), "src_vocab": len(data.src_vocab),
                     "tgt_vocab": len(data.tgt_vocab), "seconds": round(self.data_seconds, 2)},
            "steps": [], "epochs": [], "best": None, "elapsed_seconds": 0.0, "finished": False, "runs": []}

    def restore(self, state):
        """Go on from `state`, what last.pt holds: weights, optimizer, schedule, loss scale, random state,
        position and log (the tensors go to the model's device as they are loaded)."""
        _check_resumable(state["config"], self.config)
        if state["src_vocab"] != self.data.src_vocab.itos or state["tgt_vocab"] != self.data.tgt_vocab.itos:
            raise ValueError("cannot resume: the vocabularies built from the data differ from those in last.pt")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng_cpu"].cpu())
        if self.device.type == "cuda" and state.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(state["rng_cuda"].cpu(), self.device)
        self.position = dict(state["position"])
        old_log = json.loads(state["log"])
        for key in ("steps", "epochs", "best", "runs"):
            self.log[key] = old_log[key]
        self.elapsed_before = old_log["elapsed_seconds"]
        self.options.print_fn(f"resuming {self.out_dir} at epoch {self.position['epoch'] + 1}, step {self.position['step']}")

    # ------------------------------------------------------------------------- training

    def train_epochs(self):
        """Epoch after epoch until the last; why the run stopped before that (a step limit, Ctrl-C), or None."""
        self.model.train()
        self.last_save = time.perf_counter()
        with _stop_on_interrupt() as interrupt:
            while self.position["epoch"] < self.settings["epochs"]:
                stopped = self.train_epoch(interrupt)
                if stopped is not None:
                    return stopped
                self.end_epoch()
        return None

    def train_epoch(self, interrupt):
        """The rest of the current epoch's batches; why it stopped before the end, or None."""
        epoch, stopped = self.position["epoch"], None
        batches = self.sampler.batches(epoch)
        self.window.restart()
        bar = tqdm(total=len(batches), initial=self.position["batch"], leave=False, dynamic_ncols=True,
                   desc=f"epoch {epoch + 1}/{self.settings['epochs']}", disable=not self.options.progress)
        for indices in batches[self.position["batch"]:]:
            stopped = self._reason_to_stop(interrupt)
            if stopped is not None:
                break
            self.train_batch(indices)
            bar.update(1)
            if len(self.window) >= self.options.log_every:
                bar.set_postfix(loss=f"{self.flush_window():.3f}", lr=f"{self.window.lr:.2e}")
            if self._time_to_save():
                self.flush_window()
                self.save_last()
        bar.close()
        self.flush_window()
        return stopped

    def _reason_to_stop(self, interrupt):
        max_steps = self.settings.get("max_steps")
        if max_steps is not None and self.position["step"] >= max_steps:
            return f"max_steps={max_steps} reached"
        return "interrupted" if interrupt["stop"] else None

    def _time_to_save(self):
        every_steps, every_seconds = self.options.save_every_steps, self.options.save_every_seconds
        return bool((every_steps and self.position["step"] % every_steps == 0) or
                    (every_seconds and time.perf_counter() - self.last_save > every_seconds))

    def train_batch(self, indices):
        """One step on the training pairs `indices`."""
        src, tgt = collate_batch([self.data.train[i] for i in indices], self.pad_idx, self.pad_idx)
        src, tgt = src.to(self.device, non_blocking=True), tgt.to(self.device, non_blocking=True)  # [B, S], [B, T]
        lr = self.optimizer.param_groups[0]["lr"]
        tc = self.settings
        loss, _ = amp_train_step(self.model, src, tgt, self.optimizer, self.scheduler, self.pad_idx, tc["smoothing"],
                                 tc["clip"], self.amp_dtype, self.scaler)
        self.window.add(loss, int((tgt[:, 1:] != self.pad_idx).sum()), lr)
        self.position["batch"] += 1
        self.position["step"] += 1

    def flush_window(self):
        """Log the mean loss of the steps since the last entry, and return it (None when there were none)."""
        if not len(self.window):
            return None
        mean, tokens, seconds = self.window.take()
        if not math.isfinite(mean):
            raise FloatingPointError(f"the training loss became {mean} at step {self.position['step']}: lower the "
                                     "learning rate (lr_factor) or lengthen the warm-up")
        self.position["epoch_loss"] = self.position.get("epoch_loss", 0.0) + mean * tokens
        self.position["epoch_tokens"] = self.position.get("epoch_tokens", 0) + tokens
        self.log["steps"].append({"step": self.position["step"], "epoch": self.position["epoch"] + 1,
                                  "loss": round(mean, 5), "lr": self.window.lr,
                                  "tokens_per_second": round(tokens / seconds, 1),
                                  "elapsed_seconds": round(self.elapsed(), 2)})
        return mean

    # ------------------------------------------------------------------------- the end of an epoch, of the run

    def end_epoch(self):
        """Validate, keep the best weights (and those to average), save everything, go on to the next epoch."""
        epoch = self.position["epoch"] + 1                  # counted from 1, as printed and logged
        scores, record = self.validate()
        improved = self.keep_checkpoints(epoch, scores)
        self.options.print_fn(f"epoch {epoch}/{self.settings['epochs']}: train loss {record['train_loss']}, "
                      f"val loss {scores['loss']:.4f} (nll {scores['nll']:.4f}, perplexity {scores['perplexity']:.2f}, "
                      f"accuracy {scores['accuracy']:.1%}){' *best*' if improved else ''}, "
                      f"{self.elapsed():.0f} s")
        self.position.update(epoch=epoch, batch=0, epoch_loss=0.0, epoch_tokens=0)
        self.save_last()

    def validate(self):
        """The teacher-forced scores on the validation pairs, and the epoch's log record."""
        started = time.perf_counter()
        batches = batches_of(self.data.val, self.settings["max_tokens"], pad_idx=self.pad_idx)
        scores = teacher_forced_scores(self.model, batches, self.pad_idx, self.settings["smoothing"], self.device,
                                       self.amp_dtype)
        epoch_tokens = self.position.get("epoch_tokens", 0)
        train_loss = self.position.get("epoch_loss", 0.0) / epoch_tokens if epoch_tokens else None
        record = {"epoch": self.position["epoch"] + 1, "step": self.position["step"],
                  "train_loss": round(train_loss, 5) if train_loss is not None else None,
                  **{f"val_{k}": (round(v, 5) if isinstance(v, float) else v) for k, v in scores.items()},
                  "val_seconds": round(time.perf_counter() - started, 2), "elapsed_seconds": round(self.elapsed(), 2)}
        self.log["epochs"].append(record)
        return scores, record

    def keep_checkpoints(self, epoch, scores):
        """best.pt when the validation loss is the lowest so far (returns whether it is), and epochN.pt when
        the epoch is one of the last `average_last`."""
        best = self.log["best"]
        improved = best is None or scores["loss"] < best["val_loss"]
        if improved:
            self.log["best"] = {"epoch": epoch, "step": self.position["step"], "val_loss": round(scores["loss"], 5),
                                "val_nll": round(scores["nll"], 5)}
            self._save(self.best_path, epoch=epoch, step=self.position["step"], val_loss=scores["loss"],
                       val_nll=scores["nll"])
        if epoch > self.settings["epochs"] - (self.settings.get("average_last") or 0):
            self._save(self.out_dir / f"epoch{epoch}.pt", epoch=epoch, step=self.position["step"],
                       val_loss=scores["loss"])
        return improved

    def finish(self, stopped):
        """Record how the run ended, average the last epochs when it finished, save last.pt."""
        self.log["finished"] = stopped is None
        self.log["stopped"] = stopped
        if self.log["finished"] and self.settings.get("average_last"):
            self.average_last_epochs()
        self.save_last()
        if stopped is not None:
            self.options.print_fn(f"stopped at step {self.position['step']} ({stopped}): last.pt saved; resume with "
                          "resume=True (--resume)")

    def average_last_epochs(self):
        """averaged.pt: the mean of the weights of the last `average_last` epochs."""
        tc = self.settings
        # (a run resumed with a larger average_last has only the epochs its first settings kept)
        epochs = [e for e in range(tc["epochs"] - tc["average_last"] + 1, tc["epochs"] + 1)
                  if e >= 1 and (self.out_dir / f"epoch{e}.pt").exists()]
        average_checkpoints([self.out_dir / f"epoch{e}.pt" for e in epochs], self.out_dir / "averaged.pt")
        self.log["averaged"] = {"epochs": epochs, "path": "averaged.pt"}
        self.options.print_fn(f"averaged.pt: the mean of the weights of epochs {epochs}")

    # ------------------------------------------------------------------------- saving

    def elapsed(self):
        """Seconds of training, over every resume."""
        return self.elapsed_before + time.perf_counter() - self.run_started

    def _save(self, path, **extra):
        save_checkpoint(path, self.model, self.data.src_vocab, self.data.tgt_vocab, self.config,
                        **self.tokenizer_entry, **extra)

    def save_last(self):
        """last.pt, with everything needed to resume, and log.json."""
        self.log["elapsed_seconds"] = round(self.elapsed(), 2)
        cuda = self.device.type == "cuda"
        self._save(self.last_path, optimizer=self.optimizer.state_dict(), scheduler=self.scheduler.state_dict(),
                   scaler=self.scaler.state_dict() if self.scaler is not None else None,
                   rng_cpu=torch.get_rng_state(), rng_cuda=torch.cuda.get_rng_state(self.device) if cuda else None,
                   position=dict(self.position), log=json.dumps(self.log))
        self.write_log()
        self.last_save = time.perf_counter()

    def write_log(self):
        self.log["elapsed_seconds"] = round(self.elapsed(), 2)
        part = self.out_dir / ".log.json.part"
        part.write_text(json.dumps(self.log, indent=1))
        os.replace(part, self.out_dir / "log.json")


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
    old, new = flat(stored), flat(plain_values(config))
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
