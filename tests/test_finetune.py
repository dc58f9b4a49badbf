"""Notebook 10's package side: the finished pre-training and fine-tuning parts (transformer_course.finetune), their
tests' probes and oracles with several secrets, LoRA inside notebook 09's GPT, and the experiments' command."""
import json
import os

import pytest
import torch

from course_testkit.oracles import pretrain_finetune as oracle
from course_testkit.probes import pretrain_finetune as probes
from course_testkit.probing import judging_with, pack, unpack
from transformer_course import finetune
from transformer_course.gpt import GPT

MIRROR = os.environ.get("MULTI30K_MIRROR")


def round_trip(found):
    """The probe's data as the judge gets it."""
    return unpack(pack(found))


def lora_with_double(model, r, alpha):
    return finetune.add_lora(model, r, alpha, lora_class=probes.LoRADouble)


def check_everything(tag):
    """Every exercise's checks on the course's finished part, with the inputs of test `tag` (None: the visible)."""
    for cases_of, run, check, answer in ((probes.pack_cases, probes.pack_runs, oracle.check_pack, finetune.pack_sequences),
                                         (probes.mask_cases, probes.mask_runs, oracle.check_document_mask,
                                          finetune.document_mask),
                                         (probes.sft_cases, probes.sft_runs, oracle.check_sft_example, finetune.sft_example),
                                         (probes.sft_loss_cases, probes.sft_loss_runs, oracle.check_sft_loss,
                                          finetune.sft_loss)):
        cases = cases_of(tag)
        check(round_trip(run(answer, cases)), cases)
    for kind, check in (("init", oracle.check_lora_init), ("forward", oracle.check_lora_forward),
                        ("merge", oracle.check_lora_merge)):
        check(round_trip(probes.lora_runs(finetune.LoRALinear, kind, tag)), probes.lora_seeds(tag))
    oracle.check_add_lora(round_trip(probes.add_lora_runs(lora_with_double, tag)), tag)


@pytest.mark.parametrize("seed", [1, 20261128, 987654321])
def test_the_finished_parts_pass_their_checks_whatever_the_secret(seed):
    check_everything(None)
    with judging_with(seed):
        check_everything("hidden")


def test_the_checks_name_known_mistakes():
    cases = probes.pack_cases()
    no_eos = [torch.tensor(oracle.packed(docs, size, eos, "no eos")) for docs, size, eos in cases]
    with pytest.raises(AssertionError, match="no <eos> between"):
        oracle.check_pack({"values": no_eos, "errors": probes.pack_runs(finetune.pack_sequences, cases)["errors"]}, cases)
    cases = probes.mask_cases()
    with pytest.raises(AssertionError, match="not causal"):
        oracle.check_document_mask([oracle.brute_mask(b, e, "not causal")[:, None] for b, e in cases], cases)
    cases = probes.sft_loss_cases()
    runs = probes.sft_loss_runs(lambda logits, targets, mask: torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), targets.flatten()), cases)
    with pytest.raises(AssertionError, match="every position is averaged"):
        oracle.check_sft_loss(round_trip(runs), cases)


def test_pack_sequences_and_document_mask_by_hand():
    blocks = finetune.pack_sequences([[5, 6, 7], [8], [9, 10]], 3, 2)
    assert blocks.tolist() == [[5, 6, 7], [2, 8, 2], [9, 10, 2]]
    mask = finetune.document_mask(torch.tensor([[5, 2, 7, 8]]), 2)[0, 0]
    assert mask.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    with pytest.raises(ValueError):
        finetune.pack_sequences([[1]], 0, 2)


def test_the_sft_example_and_loss_are_notebook_09s_lm_loss_on_the_answer():
    from transformer_course.gpt import lm_loss
    inputs, targets, mask = finetune.sft_example([4, 5, 6], [7, 8], 2)
    assert (inputs.tolist(), targets.tolist(), mask.tolist()) == ([4, 5, 6, 7, 8], [5, 6, 7, 8, 2], [False, False, True,
                                                                                                    True, True])
    logits = torch.randn(1, 6, 9)
    sequence = torch.tensor([[4, 5, 6, 7, 8, 2]])
    answer = torch.tensor([[False, False, False, True, True, True]])
    assert torch.allclose(finetune.sft_loss(logits[:, :-1], targets[None], mask[None]), lm_loss(logits, sequence, answer))


def test_lora_inside_the_gpt_starts_as_it_and_merges_back():
    torch.manual_seed(0)
    model = GPT(17, 16, 4, 2, 24, dropout=0.0).eval()
    tokens = torch.randint(0, 17, (2, 7))
    with torch.no_grad():
        before = model(tokens)
        finetune.add_lora(model, 4, 8)
        assert torch.equal(model(tokens), before), "B = 0: the wrapped model is the pre-trained one"
        for module in model.modules():
            if isinstance(module, finetune.LoRALinear):
                module.B.normal_()
        wrapped = model(tokens)
        assert not torch.allclose(wrapped, before)
        for block in model.blocks:
            for name in finetune.LORA_TARGETS:
                setattr(block.attn, name, getattr(block.attn, name).merged())
        assert torch.allclose(model(tokens), wrapped, atol=1e-5)
    lora = finetune.add_lora(GPT(17, 16, 4, 2, 24), 4, 8)
    assert finetune.trainable_parameters(lora) == 2 * 4 * 4 * (16 + 16)


@pytest.mark.slow
@pytest.mark.skipif(not MIRROR, reason="needs the Multi30k mirror (../shared/data/multi30k)")
def test_the_experiments_command_runs_in_smoke_mode(tmp_path):
    from transformer_course.pretrain_finetune import main
    assert main(["pretraining", "--mode", "smoke", "--out", str(tmp_path / "pre"), "--device", "cpu"]) == 0
    result = json.loads((tmp_path / "pre" / "results.json").read_text())
    assert [(row["fraction"], row["start"]) for row in result["rows"]] == [
        (f, s) for f in (0.01, 0.1, 1.0) for s in ("pre-trained", "from scratch")]
    assert main(["lora", "--mode", "smoke", "--out", str(tmp_path / "lora"), "--device", "cpu",
                 "--pretrained", str(tmp_path / "pre" / "pretrained.pt")]) == 0
    rows = json.loads((tmp_path / "lora" / "results.json").read_text())["rows"]
    assert rows[1]["trainable"] < rows[0]["trainable"]
