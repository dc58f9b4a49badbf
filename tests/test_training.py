"""Training (notebook 07's finished functions and the trainer): the loss, the schedule and the training step
against independent references, checkpoints, and tiny end-to-end runs of `python -m transformer_course.train`
on a subset of the Multi30k mirror ($MULTI30K_MIRROR, else ../shared/data/multi30k next to the repository),
including resuming an interrupted run.
"""
import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.builders import tiny_model
from torch import nn

import transformer_course.run.loop as loop
from course_testkit.oracles.training import params, reference_step
from course_testkit.probes.training import batch
from transformer_course import Transformer, devices
from transformer_course.data import Vocab
from transformer_course.devices import amp_dtype, choose_device, cpu_has_bfloat16
from transformer_course.run.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint
from transformer_course.run.configs import CONFIGS, make_config
from transformer_course.run.loop import _check_resumable
from transformer_course.run.validation import teacher_forced_scores
from transformer_course.schedules import linear_decay_lr, lr_scheduler
from transformer_course.train import main
from transformer_course.training import label_smoothing_loss, noam_lr, train_step

MIRROR = Path(os.environ.get("MULTI30K_MIRROR", ""))  # conftest.py sets it when ../shared holds the mirror
needs_mirror = pytest.mark.skipif(not (MIRROR / "train.de.gz").exists(),
                                  reason=f"the Multi30k mirror is not at {MIRROR}: set MULTI30K_MIRROR")


# ----------------------------------------------------------------------------- label_smoothing_loss

@pytest.mark.parametrize("N, V, smoothing, ignore_index", [(7, 5, 0.1, -100), (12, 37, 0.25, 0), (30, 1000, 0.1, 3),
                                                           (5, 11, 0.0, -1), (4, 4, 1.0, 2)])
def test_label_smoothing_loss_equals_cross_entropy(N, V, smoothing, ignore_index):
    g = torch.Generator().manual_seed(N * V)
    logits = (torch.randn(N, V, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    target = torch.randint(0, V, (N,), generator=g)
    target[torch.rand(N, generator=g) < 0.3] = ignore_index
    target[0] = (ignore_index + 1) % V
    ours = label_smoothing_loss(logits, target, smoothing, ignore_index)
    (grad_ours,) = torch.autograd.grad(ours, logits)
    theirs = F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)
    (grad_theirs,) = torch.autograd.grad(theirs, logits)
    assert ours.shape == () and ours.dtype == torch.float64
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(grad_ours, grad_theirs)


def test_label_smoothing_loss_is_the_cross_entropy_against_the_smoothed_target():
    logits, target, s = torch.randn(6, 9, dtype=torch.float64), torch.tensor([0, 8, 3, 3, 1, 5]), 0.2
    q = (1 - s) * F.one_hot(target, 9).double() + s / 9
    expected = -(q * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(label_smoothing_loss(logits, target, s), expected)


def test_label_smoothing_loss_takes_leading_dimensions_and_half_precision():
    logits, target = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    torch.testing.assert_close(label_smoothing_loss(logits, target, 0.1, 0),
                               F.cross_entropy(logits.reshape(-1, 7), target.reshape(-1), label_smoothing=0.1,
                                               ignore_index=0))
    half = label_smoothing_loss(logits.bfloat16(), target)
    assert half.dtype == torch.float32  # the softmax runs in float32
    torch.testing.assert_close(half, F.cross_entropy(logits.bfloat16().float().reshape(-1, 7), target.reshape(-1),
                                                     label_smoothing=0.1))


def test_label_smoothing_loss_with_every_position_ignored_is_nan_like_pytorch():
    assert torch.isnan(label_smoothing_loss(torch.randn(3, 4), torch.zeros(3, dtype=torch.long), ignore_index=0))


# ----------------------------------------------------------------------------- noam_lr

def test_noam_lr_follows_the_paper():
    d, w = 512, 4000
    for step in (1, 10, 3999, 4000, 4001, 100_000):
        expected = step / (math.sqrt(d) * w ** 1.5) if step < w else 1 / math.sqrt(d * step)
        assert math.isclose(noam_lr(step, d, w), expected, rel_tol=1e-12)
    assert math.isclose(noam_lr(4000, d, w), (d * w) ** -0.5)
    assert math.isclose(noam_lr(50, 128, 10, factor=3.0), 3 * noam_lr(50, 128, 10))
    assert noam_lr(0, d, w) == noam_lr(1, d, w)


def test_lr_scheduler_sets_the_rate_of_each_step():
    optimizer = torch.optim.Adam([nn.Parameter(torch.zeros(2))], lr=1.0)
    scheduler = lr_scheduler(optimizer, 64, 10, factor=2.0)
    for step in range(25):
        assert math.isclose(optimizer.param_groups[0]["lr"], noam_lr(step, 64, 10, 2.0))
        optimizer.step()
        scheduler.step()


def test_linear_decay_warms_up_like_noam_then_falls_to_zero_at_the_last_step():
    d, w, total = 256, 40, 200
    for step in range(0, w + 1):
        assert math.isclose(linear_decay_lr(step, d, w, 0.5, total), noam_lr(step, d, w, 0.5), rel_tol=1e-12)
    peak = noam_lr(w, d, w, 0.5)
    assert math.isclose(linear_decay_lr(w + (total - w) // 2, d, w, 0.5, total), peak / 2, rel_tol=1e-12)
    rates = [linear_decay_lr(step, d, w, 0.5, total) for step in range(w, total + 5)]
    assert all(a > b for a, b in zip(rates, rates[1:total - w + 1])), "the rate falls at every step after warm-up"
    assert rates[total - w] == 0.0 and rates[-1] == 0.0, "the rate is 0 at the last step and stays there"


def test_scheduler_follows_the_chosen_schedule():
    optimizer = torch.optim.Adam([nn.Parameter(torch.zeros(2))], lr=1.0)
    scheduler = lr_scheduler(optimizer, 64, 10, factor=2.0, schedule="linear", total_steps=30)
    for step in range(35):
        assert math.isclose(optimizer.param_groups[0]["lr"], linear_decay_lr(step, 64, 10, 2.0, 30))
        optimizer.step()
        scheduler.step()
    with pytest.raises(ValueError, match="total_steps"):
        lr_scheduler(optimizer, 64, 10, schedule="linear")
    with pytest.raises(ValueError, match="schedule must be one of"):
        lr_scheduler(optimizer, 64, 10, schedule="cosine")


def test_a_run_whose_rate_reaches_zero_at_the_end_cannot_change_its_length_on_resume():
    noam = make_config("quick")
    longer = make_config("quick", train__epochs=noam["train"]["epochs"] + 2)
    _check_resumable(noam, longer)  # noam's rate does not depend on the length: allowed
    linear = make_config("quick", train__schedule="linear")
    with pytest.raises(ValueError, match="train.epochs"):
        _check_resumable(linear, make_config("quick", train__schedule="linear", train__epochs=9))
    with pytest.raises(ValueError, match="train.schedule"):
        _check_resumable(noam, linear)
    legacy = make_config("quick")
    del legacy["train"]["schedule"]  # a last.pt written before schedules could be chosen
    _check_resumable(legacy, noam)


# ----------------------------------------------------------------------------- train_step

@pytest.mark.parametrize("pad_idx, clip, smoothing", [(0, 100.0, 0.1), (2, 0.05, 0.2), (0, 1.0, 0.0)])
def test_train_step_equals_a_reference_step_on_a_copy(pad_idx, clip, smoothing):
    model = tiny_model(pad_idx)
    ref = copy.deepcopy(model)
    schedule = lambda step: [1.0, 0.1, 0.5][min(step, 2)]  # noqa: E731
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    ref_optimizer = torch.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    ref_scheduler = torch.optim.lr_scheduler.LambdaLR(ref_optimizer, schedule)
    for seed in (1, 2, 3):
        src, tgt = batch(pad_idx, seed)
        loss = train_step(model, src, tgt, optimizer, scheduler, pad_idx=pad_idx, smoothing=smoothing, clip=clip)
        expected = reference_step(ref, src, tgt, ref_optimizer, ref_scheduler, pad_idx, smoothing, clip)
        assert isinstance(loss, float) and math.isclose(loss, expected, rel_tol=1e-6)
        torch.testing.assert_close(params(model), params(ref))
        assert all(p.grad is None or not p.grad.any() for p in model.parameters()), "gradients are left zeroed"
    assert scheduler.last_epoch == 3


def test_train_step_clips_the_gradient_norm():
    model = tiny_model()
    before = params(model)
    src, tgt = batch()
    train_step(model, src, tgt, torch.optim.SGD(model.parameters(), lr=1.0), clip=0.01)
    assert math.isclose((params(model) - before).norm().item(), 0.01, rel_tol=1e-3)


def test_the_zero_grad_probe_sees_gradients_left_from_the_step_before():
    """Notebook 07's visible test of zero_grad: with SGD(lr=0) two steps on one batch compute the same gradient, so
    optimizer.step() receives it twice over when the first step's gradients were not cleared."""
    from course_testkit.probes.training import step_gradient_norms

    def without_zero_grad(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
        logits = model(src, tgt[:, :-1])
        loss = label_smoothing_loss(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), smoothing, pad_idx)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    first, second = step_gradient_norms(train_step, {})["norms"]
    assert first > 0 and math.isclose(first, second, rel_tol=1e-6)
    first, second = step_gradient_norms(without_zero_grad, {})["norms"]
    assert math.isclose(second, 2 * first, rel_tol=1e-5)


def test_the_train_step_tests_stand_in_for_the_loss_is_no_answer_but_reads_its_arguments_as_the_loss_does():
    """Notebook 07's tests give train_step a stand-in for label_smoothing_loss (probes.loss_double): its value is far
    from the label-smoothed loss, so that a judge sees which one a step used, and it depends on the labels, the
    smoothing and ignore_index as the loss does (with smoothing 0 it is the cross-entropy)."""
    from course_testkit.probes.training import loss_double

    double = loss_double(3)
    g = torch.Generator().manual_seed(0)
    logits, target = torch.randn(6, 9, generator=g), torch.randint(1, 9, (6,), generator=g)
    target[::2] = 0
    assert abs(double(logits, target, 0.1, 0) - label_smoothing_loss(logits, target, 0.1, 0)) > 0.5
    changed = logits.clone()
    changed[::2] += 5                                   # only the ignored positions
    torch.testing.assert_close(double(changed, target, 0.1, 0), double(logits, target, 0.1, 0))
    torch.testing.assert_close(double(logits, target, 0.0, 0), F.cross_entropy(logits, target, ignore_index=0))
    assert not torch.isclose(double(logits, target, 0.3, 0), double(logits, target, 0.1, 0))
    torch.testing.assert_close(double(logits.view(2, 3, 9), target.view(2, 3), 0.3, 0), double(logits, target, 0.3, 0))


# ----------------------------------------------------------------------------- teacher-forced scores, checkpoints

def test_evaluate_weights_every_token_once_and_keeps_the_mode():
    model = tiny_model(dropout=0.3).train()
    batches = [batch(0, 1), batch(0, 2, B=2, T=9)]
    scores = teacher_forced_scores(model, batches, pad_idx=0, smoothing=0.1)
    assert model.training
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(s, t[:, :-1]).reshape(-1, 13) for s, t in batches[:1]] +
                           [model(s, t[:, :-1]).reshape(-1, 13) for s, t in batches[1:]])
    labels = torch.cat([t[:, 1:].reshape(-1) for _, t in batches])
    assert scores["tokens"] == int((labels != 0).sum())
    assert math.isclose(scores["loss"], F.cross_entropy(logits, labels, label_smoothing=0.1, ignore_index=0).item(),
                        rel_tol=1e-5)
    assert math.isclose(scores["nll"], F.cross_entropy(logits, labels, ignore_index=0).item(), rel_tol=1e-5)
    assert math.isclose(scores["perplexity"], math.exp(scores["nll"]), rel_tol=1e-9)


def test_checkpoint_round_trip(tmp_path):
    model_kwargs = dict(src_vocab_size=11, tgt_vocab_size=13, d_model=16, n_heads=2, num_encoder_layers=1,
                        num_decoder_layers=2, d_ff=32, dropout=0.1, max_len=64, pad_idx=0)
    torch.manual_seed(0)
    model = Transformer(**model_kwargs)
    src_vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", *"abcdefg"])
    tgt_vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", *"hijklmnopq"[:9]])
    config = {"model": model_kwargs, "data": {"lowercase": True}, "train": {"betas": (0.9, 0.98)}}
    path = save_checkpoint(tmp_path / "sub" / "best.pt", model, src_vocab, tgt_vocab, config, epoch=3, val_loss=1.5)
    assert path.exists() and not list(path.parent.glob(".*.part"))
    loaded = load_checkpoint(path)
    assert isinstance(loaded["model"], Transformer) and not loaded["model"].training
    assert loaded["src_vocab"].itos == src_vocab.itos and loaded["tgt_vocab"].itos == tgt_vocab.itos
    assert loaded["config"]["model"] == model_kwargs and loaded["config"]["train"]["betas"] == [0.9, 0.98]
    assert loaded["epoch"] == 3 and loaded["val_loss"] == 1.5
    src, tgt = batch()
    model.eval()
    torch.testing.assert_close(loaded["model"](src, tgt), model(src, tgt), rtol=0, atol=0)
    with pytest.raises(ValueError, match="may not be called"):
        save_checkpoint(tmp_path / "x.pt", model, src_vocab, tgt_vocab, config, format=2)


def test_configs():
    assert set(CONFIGS) == {"quick", "full", "recipe"}
    config = make_config("quick", model__d_model=64, data__max_train_pairs=None)
    assert config["model"]["d_model"] == 64 and config["data"]["max_train_pairs"] is None
    assert CONFIGS["quick"]["model"]["d_model"] == 128  # a copy, not the original
    with pytest.raises(ValueError, match="unknown setting"):
        make_config("quick", model__width=3)
    with pytest.raises(ValueError, match="mode"):
        make_config("huge")
    assert choose_device("cpu") == torch.device("cpu")
    assert choose_device().type in ("cpu", "cuda", "mps")


# ----------------------------------------------------------------------------- the command line, end to end

TINY = ["--mode", "quick", "--max-train-pairs", "240", "--max-val-pairs", "60", "--d-model", "32", "--heads", "2",
        "--layers", "1", "--d-ff", "64", "--max-tokens", "400", "--warmup", "10", "--no-progress",
        "--save-every-seconds", "0"]


def run_cli(tmp_path, out, *extra):
    return main([*TINY, "--out", str(tmp_path / out), "--mirror", str(MIRROR),
                 "--cache-dir", str(tmp_path / "cache"), *extra])


def test_cli_help_runs_as_a_module():
    result = subprocess.run([sys.executable, "-m", "transformer_course.train", "--help"], capture_output=True,
                            text=True, check=True)
    assert "--mode" in result.stdout and "--resume" in result.stdout


@needs_mirror
def test_cli_trains_writes_checkpoints_and_a_log_and_resumes(tmp_path, capsys, monkeypatch):
    # an uninterrupted run of 2 epochs
    assert run_cli(tmp_path, "whole", "--epochs", "2") == 0
    whole = tmp_path / "whole"
    log = json.loads((whole / "log.json").read_text())
    assert log["finished"] and [e["epoch"] for e in log["epochs"]] == [1, 2]
    assert log["data"]["train_pairs"] == 240 and log["data"]["val_pairs"] == 60
    assert log["hardware"]["device"] == "cpu" and log["elapsed_seconds"] > 0
    steps_per_epoch = log["epochs"][0]["step"]
    assert log["epochs"][1]["step"] == 2 * steps_per_epoch > 4
    assert all(math.isfinite(e["val_loss"]) and e["val_loss"] < math.log(log["data"]["tgt_vocab"]) + 1
               for e in log["epochs"])
    best = load_checkpoint(whole / "best.pt")
    assert best["epoch"] == log["best"]["epoch"] and math.isclose(best["val_loss"], log["best"]["val_loss"], rel_tol=1e-4)
    assert best["config"]["model"]["d_model"] == 32 and best["config"]["model"]["src_vocab_size"] == len(best["src_vocab"])
    assert best["config"]["data"]["lowercase"] is True
    assert best["src_vocab"].itos[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["finished"] and summary["best"] == log["best"]

    # the same run, stopped in the middle of its first epoch and resumed: the same weights at the end
    stop_at = steps_per_epoch // 2
    assert run_cli(tmp_path, "resumed", "--epochs", "2", "--max-steps", str(stop_at)) == 0
    interrupted = json.loads((tmp_path / "resumed" / "log.json").read_text())
    assert not interrupted["finished"] and interrupted["steps"][-1]["step"] == stop_at and not interrupted["epochs"]
    capsys.readouterr()
    assert run_cli(tmp_path, "resumed", "--epochs", "2", "--max-steps", str(stop_at), "--resume") == 0
    assert f"the run already reached max_steps={stop_at}, nothing to resume" in capsys.readouterr().out
    assert run_cli(tmp_path, "resumed", "--epochs", "2") == 2, "an existing run is not overwritten without --resume"
    assert run_cli(tmp_path, "resumed", "--epochs", "2", "--resume", "--d-model", "64") == 2, "other settings: refused"
    reads = []    # last.pt is read once on resume: for the check that there is something to resume, and the restore
    monkeypatch.setattr(loop, "read_checkpoint", lambda path, *args, **kwargs: reads.append(Path(path).name)
                        or read_checkpoint(path, *args, **kwargs))
    assert run_cli(tmp_path, "resumed", "--epochs", "2", "--resume") == 0
    assert reads == ["last.pt"], f"resuming read {reads}"
    monkeypatch.undo()
    resumed = json.loads((tmp_path / "resumed" / "log.json").read_text())
    assert resumed["finished"] and [e["step"] for e in resumed["epochs"]] == [e["step"] for e in log["epochs"]]
    assert [r["resumed_at_step"] for r in resumed["runs"]] == [0, stop_at]
    for a, b in zip(resumed["epochs"], log["epochs"]):
        assert math.isclose(a["val_loss"], b["val_loss"], rel_tol=1e-5)
    torch.testing.assert_close(params(load_checkpoint(tmp_path / "resumed" / "last.pt")["model"]),
                               params(load_checkpoint(whole / "last.pt")["model"]))

    # --resume on a finished run says so and trains nothing; with more epochs it goes on
    before = (whole / "last.pt").stat().st_mtime_ns
    capsys.readouterr()
    assert run_cli(tmp_path, "whole", "--epochs", "2", "--resume") == 0
    assert f"{whole}: the run already finished its 2 epochs, nothing to resume; to train longer, resume with more " \
           "epochs (train.epochs > 2: --epochs N)" in capsys.readouterr().out
    assert (whole / "last.pt").stat().st_mtime_ns == before
    assert run_cli(tmp_path, "whole", "--epochs", "3", "--resume") == 0
    assert [e["epoch"] for e in json.loads((whole / "log.json").read_text())["epochs"]] == [1, 2, 3]


def test_bfloat16_is_chosen_on_a_cpu_only_where_it_has_the_instructions(tmp_path):
    flags = tmp_path / "cpuinfo"
    for line, native in (("flags : fpu avx2 avx512f", False), ("flags : fpu avx512f avx512_bf16", True),
                         ("flags : fpu amx_bf16 amx_tile", True)):
        flags.write_text(f"processor : 0\n{line}\n")
        assert cpu_has_bfloat16(flags) is native, line
    assert cpu_has_bfloat16(tmp_path / "absent") is False
    cpu = torch.device("cpu")
    assert amp_dtype(cpu) == (torch.bfloat16 if cpu_has_bfloat16() else None)
    assert amp_dtype(cpu, amp=False) is None


@needs_mirror
def test_a_cpu_with_bfloat16_trains_in_mixed_precision_and_says_so(tmp_path, capsys, monkeypatch):
    # autocast to bfloat16 runs on every CPU (emulated where it is not native): the same path as on one that has it
    monkeypatch.setattr(devices, "cpu_has_bfloat16", lambda: True)
    assert run_cli(tmp_path, "bf16", "--epochs", "1") == 0
    assert "precision: bfloat16 mixed precision (autocast) on cpu" in capsys.readouterr().out
    log = json.loads((tmp_path / "bf16" / "log.json").read_text())
    assert log["amp"] == "torch.bfloat16" and log["finished"]
    assert math.isfinite(log["epochs"][0]["val_loss"]) and log["epochs"][0]["val_loss"] < math.log(log["data"]["tgt_vocab"]) + 1
    assert run_cli(tmp_path, "float32", "--epochs", "1", "--no-amp") == 0
    assert "precision: float32 (mixed precision turned off)" in capsys.readouterr().out
    assert json.loads((tmp_path / "float32" / "log.json").read_text())["amp"] is None


COMPILED_RUN = """
import json, sys, torch
from transformer_course.train import main
assert main(sys.argv[1:]) == 0
print("graphs", torch._dynamo.utils.counters["stats"]["unique_graphs"])
"""


@needs_mirror
@pytest.mark.slow
def test_a_compiled_run_trains_through_dynamo_and_saves_weights_an_eager_model_loads(tmp_path):
    # a fresh interpreter, as a training run from the command line has
    out = tmp_path / "compiled"
    argv = [*TINY, "--epochs", "1", "--compile", "eager", "--out", str(out), "--mirror", str(MIRROR),
            "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run([sys.executable, "-c", COMPILED_RUN, *argv], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "torch.compile (eager)" in result.stdout
    assert int(result.stdout.split("graphs")[-1]) > 0, "dynamo compiled no graph"
    log = json.loads((out / "log.json").read_text())
    assert log["compile"] == "eager" and log["finished"] and math.isfinite(log["epochs"][0]["val_loss"])
    checkpoint = load_checkpoint(out / "best.pt")      # the names of an eager model's state dict
    assert not any("_orig_mod" in name for name in checkpoint["model"].state_dict())


@pytest.mark.parametrize("options, expected", [
    (["--mirror", "{tmp}/no-mirror"], "the Multi30k mirror {tmp}/no-mirror is not a folder"),
    (["--compile", "warp"], "--compile warp: not a torch.compile backend"),
    (["--device", "warp"], "unknown device 'warp'"),
    (["--resume"], "{tmp}/run/last.pt is not a checkpoint: it is a text file"),
])
def test_cli_names_bad_input_in_one_line(tmp_path, refused, options, expected):
    (tmp_path / "run").mkdir()
    if "--resume" in options:
        (tmp_path / "run" / "last.pt").write_text("not a checkpoint\n")
    argv = [*TINY, "--out", str(tmp_path / "run"), *(o.format(tmp=tmp_path) for o in options)]
    assert expected.format(tmp=tmp_path) in refused(main, argv)
