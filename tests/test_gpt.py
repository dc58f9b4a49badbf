"""Notebook 09's package side: the finished GPT parts (transformer_course.gpt), their tests' probes and oracles,
the decoder-only translator behind the recipe, and what the grading kernels of 01, 08 and 09 keep."""
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import transformer_course as course
from autograder.sandbox import package_folder
from autograder.stripped import withheld
from transformer_course import gpt
from transformer_course.checkpoints import load_checkpoint, save_checkpoint
from transformer_course.configs import CONFIGS, load_config
from transformer_course.data import Vocab
from transformer_course.decoding import beam_search, greedy_decode
from transformer_course.model import Transformer, build_model
from transformer_course.oracles import gpt as oracle
from transformer_course.probes import gpt as probes
from transformer_course.probing import pack, unpack

MIRROR = os.environ.get("MULTI30K_MIRROR")


def round_trip(found):
    """The probe's data as the judge gets it."""
    return unpack(pack(found))


def tiny_gpt(seed=0, vocab=13, layers=2):
    torch.manual_seed(seed)
    return gpt.GPT(vocab, 16, 4, layers, 24, dropout=0.0).eval()


# ----------------------------------------------------------------------------- the finished parts pass their tests

CHECKS = {
    "apply_rope": lambda: [oracle.check_rope_values(round_trip(probes.rope_runs(course.apply_rope, cases)), cases)
                           for cases in (probes.ROPE_VISIBLE, probes.ROPE_HIDDEN)] and oracle.check_rope_relative(
        round_trip(probes.rope_scores(course.apply_rope, probes.ROPE_RELATIVE)), probes.ROPE_RELATIVE),
    "CausalSelfAttention": lambda: [
        check(round_trip(probes.attention_runs(course.CausalSelfAttention, cases)), cases)
        for cases in (probes.ATTENTION_VISIBLE, probes.ATTENTION_HIDDEN)
        for check in (oracle.check_attention_values, oracle.check_attention_cache)],
    "GPT": lambda: [oracle.check_gpt_structure(round_trip(probes.gpt_facts(course.GPT)))] + [
        oracle.check_gpt_values(round_trip(probes.gpt_runs(course.GPT, cases)), cases)
        for cases in (probes.GPT_VISIBLE, probes.GPT_HIDDEN)],
    "lm_loss": lambda: oracle.check_lm_loss(round_trip(probes.lm_loss_runs(
        course.lm_loss, probes.LM_LOSS_VISIBLE + probes.LM_LOSS_HIDDEN)), probes.LM_LOSS_VISIBLE + probes.LM_LOSS_HIDDEN),
    "adamw_param_groups": lambda: oracle.check_param_groups(
        round_trip(probes.param_groups_run(course.adamw_param_groups, 0.3, seed=1)), 0.3, seed=1),
    "warmup_cosine_lr": lambda: oracle.check_schedule(round_trip(probes.schedule_values(
        course.warmup_cosine_lr, probes.SCHEDULE_VISIBLE + probes.SCHEDULE_HIDDEN)),
        probes.SCHEDULE_VISIBLE + probes.SCHEDULE_HIDDEN),
    "sample_next": lambda: oracle.check_samples(round_trip(probes.sample_runs(course.sample_next, probes.SAMPLE_HIDDEN)),
                                                probes.SAMPLE_HIDDEN),
    "generate": lambda: oracle.check_generate(round_trip(probes.generate_runs(
        course.generate, probes.GENERATE_VISIBLE + probes.GENERATE_HIDDEN)), probes.GENERATE_VISIBLE + probes.GENERATE_HIDDEN),
}


@pytest.mark.parametrize("exercise", CHECKS)
def test_the_finished_parts_pass_their_exercises_checks(exercise):
    CHECKS[exercise]()


def test_the_checks_name_known_mistakes():
    half_split = lambda x, positions, base=10000.0: oracle.rotated(x, positions, base, layout="half").to(x.dtype)  # noqa: E731
    with pytest.raises(AssertionError, match="half-split layout"):
        oracle.check_rope_values(round_trip(probes.rope_runs(half_split, probes.ROPE_VISIBLE)), probes.ROPE_VISIBLE)

    def temperature_after_softmax(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        return course.sample_next(logits, 1.0 if temperature else 0, top_k, top_p, generator)
    with pytest.raises(AssertionError, match="after the softmax"):
        oracle.check_samples(round_trip(probes.sample_runs(temperature_after_softmax, probes.SAMPLE_VISIBLE)),
                             probes.SAMPLE_VISIBLE)

    def prompt_counted(logits, tokens, loss_mask=None):
        return course.lm_loss(logits, tokens)
    with pytest.raises(AssertionError, match="the prompt's included"):
        oracle.check_lm_loss(round_trip(probes.lm_loss_runs(prompt_counted, probes.LM_LOSS_VISIBLE)),
                             probes.LM_LOSS_VISIBLE)


def test_the_distributions_of_the_visible_sampling_tests_are_the_hand_computed_ones():
    probs = probes.SAMPLE_ROWS["a"]
    by_hand = {(): [0.05, 0.30, 0.10, 0.40, 0.15], (("temperature", 0.5),): [0.0088, 0.3158, 0.0351, 0.5614, 0.0789],
               (("temperature", 2.0),): [0.1061, 0.2599, 0.1501, 0.3001, 0.1838],
               (("top_k", 2),): [0, 3 / 7, 0, 4 / 7, 0], (("top_p", 0.6),): [0, 3 / 7, 0, 4 / 7, 0],
               (("temperature", 0.5), ("top_p", 0.8)): [0, 0.36, 0, 0.64, 0]}
    for settings, expected in by_hand.items():
        torch.testing.assert_close(oracle.distribution(probs, **dict(settings)), torch.tensor(expected, dtype=torch.float64),
                                   atol=1e-4, rtol=0)


# ----------------------------------------------------------------------------- the finished parts themselves

def test_rope_scores_depend_on_the_offset_only_and_match_the_complex_form():
    q, k = torch.randn(2, 1, 1, 16, dtype=torch.float64), torch.randn(2, 1, 1, 16, dtype=torch.float64)

    def score(p, r):
        return (course.apply_rope(q, torch.tensor([p])) * course.apply_rope(k, torch.tensor([r]))).sum(-1)
    torch.testing.assert_close(score(3, 1), score(1003, 1001))
    x = torch.randn(2, 3, 5, 8)
    torch.testing.assert_close(course.apply_rope(x, torch.arange(5)).double(), oracle.rotated(x, torch.arange(5)))


def test_the_cache_gives_the_logits_of_recomputation():
    model = tiny_gpt()
    tokens = torch.randint(0, 13, (3, 9))
    cache = {}
    chunks = [model(part, cache=cache) for part in tokens.split([4, 1, 3, 1], dim=1)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), model(tokens), atol=1e-5, rtol=1e-5)
    assert set(cache) == {0, 1} and cache[0]["k"].shape == (3, 4, 9, 4)
    model.set_need_weights(True)     # the explicit attention, with its weights kept, gives the same
    torch.testing.assert_close(model(tokens), model.set_need_weights(False)(tokens), atol=1e-5, rtol=1e-5)


def test_generate_with_and_without_the_cache_and_sampling():
    model = tiny_gpt()
    prompt = torch.randint(0, 13, (2, 3))
    cached, cached_logits = course.generate(model, prompt, 6)
    full, full_logits = course.generate(model, prompt, 6, cache=False)
    assert torch.equal(cached, full) and cached.shape == (2, 9)
    torch.testing.assert_close(cached_logits, full_logits, atol=1e-5, rtol=1e-5)
    logits = torch.tensor([[1.0, 3.0, 3.0], [0.0, -1.0, 2.0]])
    assert course.sample_next(logits, temperature=0).tolist() == [1, 2]
    assert course.sample_next(logits, top_p=1e-9).tolist() == [1, 2]
    drawn = [course.sample_next(logits, generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(*drawn)


def test_adamw_groups_of_a_gpt_decay_its_linear_matrices_only():
    model = tiny_gpt()
    decay, rest = course.adamw_param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = sorted(names[id(p)] for p in decay["params"])
    assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    assert all(n.endswith(("w_q.weight", "w_k.weight", "w_v.weight", "w_o.weight", "linear1.weight", "linear2.weight"))
               for n in decayed) and len(decayed) == 2 * 6
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))
    torch.optim.AdamW([decay, rest], lr=1e-3).step()


def test_warmup_cosine_lr():
    assert course.warmup_cosine_lr(0, 1.0, 10, 110) == 0.0
    assert course.warmup_cosine_lr(10, 1.0, 10, 110) == 1.0
    assert abs(course.warmup_cosine_lr(60, 1.0, 10, 110, 0.2) - 0.6) < 1e-12
    assert course.warmup_cosine_lr(500, 1.0, 10, 110, 0.2) == 0.2
    with pytest.raises(ValueError, match="warmup_steps < total_steps"):
        course.warmup_cosine_lr(0, 1.0, 10, 10)


# ----------------------------------------------------------------------------- translation with a GPT

def translator(vocab=15, seed=0):
    torch.manual_seed(seed)
    return gpt.DecoderOnlyTranslator(vocab, vocab, d_model=16, n_heads=2, num_decoder_layers=2, d_ff=24,
                                     dropout=0.0, pad_idx=0).eval()


def test_pack_pairs_puts_each_target_right_after_its_source():
    src = torch.tensor([[5, 6, 3, 0], [7, 3, 0, 0]])
    tgt = torch.tensor([[1, 8, 9, 2], [1, 4, 2, 0]])
    sequences, positions = gpt.pack_pairs(src, tgt, pad_idx=0)
    assert sequences.tolist() == [[5, 6, 3, 1, 8, 9, 2, 0], [7, 3, 1, 4, 2, 0, 0, 0]]
    assert positions.tolist() == [[3, 4, 5, 6], [2, 3, 4, 5]]


def test_the_translator_is_its_gpt_on_the_packed_sequence_and_its_loss_counts_the_target_only():
    model = translator()
    src = torch.tensor([[5, 6, 3, 0], [7, 3, 0, 0]])
    tgt = torch.tensor([[1, 8, 9, 2], [1, 4, 2, 0]])
    logits = model(src, tgt[:, :-1])                                             # [B, T - 1, V]
    torch.testing.assert_close(logits[1, :2], model.gpt(torch.tensor([[7, 3, 1, 4]]))[0, 2:])   # padding never read
    sequences, positions = gpt.pack_pairs(src, tgt, 0)
    target = torch.zeros_like(sequences, dtype=torch.bool).scatter(1, positions[:, 1:], tgt[:, 1:] != 0)
    torch.testing.assert_close(course.lm_loss(model.gpt(sequences), sequences, target),
                               F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0))
    ids = greedy_decode(model, src, 6, bos_idx=1, eos_idx=2)
    assert ids.shape[0] == 2 and (ids[:, 0] == 1).all()
    assert beam_search(model, src[:1], 3, 6, 1, 2)[0] == 1


def test_the_translators_cached_greedy_decoding_is_greedy_decode():
    model = translator(vocab=20)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():                       # large random weights: outputs that differ from row to row
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    src = torch.tensor([[5, 6, 3, 0, 0], [7, 3, 0, 0, 0], [8, 9, 10, 11, 3], [4, 3, 0, 0, 0], [12, 3, 0, 0, 0]])
    for eos in (2, 4, 13):                      # never, in some rows, in every row
        assert torch.equal(model.cached_greedy_decode(src, 12, 1, eos), greedy_decode(model, src, 12, 1, eos))


def test_the_translator_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="one vocabulary"):
        gpt.DecoderOnlyTranslator(10, 12)
    with pytest.raises(ValueError, match="no encoder"):
        gpt.DecoderOnlyTranslator(10, 10, num_encoder_layers=2)
    with pytest.raises(ValueError, match="architecture must be"):
        build_model(architecture="encoder_only")


def test_the_decoder_only_recipe_is_the_recipe_with_a_gpt_of_about_its_size():
    recipe, decoder_only = CONFIGS["recipe"], load_config(gpt.DECODER_ONLY_RECIPE)
    assert decoder_only["model"]["architecture"] == "decoder_only"
    assert decoder_only["data"] == recipe["data"] and decoder_only["evaluate"] == recipe["evaluate"]
    assert decoder_only["train"] == recipe["train"]
    sizes = {key: value for key, value in decoder_only["model"].items() if key != "architecture"}
    vocab = 8003
    gpt_model = build_model(architecture="decoder_only", src_vocab_size=vocab, tgt_vocab_size=vocab, **sizes)
    transformer = build_model(src_vocab_size=vocab, tgt_vocab_size=vocab, **recipe["model"])
    assert isinstance(transformer, Transformer)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert abs(count(gpt_model) / count(transformer) - 1) < 0.1, (count(gpt_model), count(transformer))


def test_a_decoder_only_checkpoint_reloads_as_one(tmp_path):
    model = translator()
    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>"] + [f"w{i}" for i in range(11)])
    config = {"model": {"architecture": "decoder_only", "src_vocab_size": 15, "tgt_vocab_size": 15, "d_model": 16,
                        "n_heads": 2, "num_encoder_layers": 0, "num_decoder_layers": 2, "d_ff": 24, "dropout": 0.0}}
    loaded = load_checkpoint(save_checkpoint(tmp_path / "best.pt", model, vocab, vocab, config))["model"]
    src, tgt = torch.tensor([[5, 6, 3]]), torch.tensor([[1, 8, 9]])
    assert isinstance(loaded, gpt.DecoderOnlyTranslator)
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt))


@pytest.mark.skipif(not MIRROR, reason="needs the Multi30k mirror (../shared/data/multi30k)")
def test_the_trainer_trains_a_decoder_only_translator(tmp_path):
    from transformer_course.training_run import train

    config = load_config(gpt.DECODER_ONLY_RECIPE)
    config["model"].update(d_model=16, n_heads=2, d_ff=32, num_decoder_layers=1)
    config["data"].update(max_train_pairs=120, max_val_pairs=20, vocab_size=200)
    config["train"].update(epochs=1, warmup_steps=2, average_last=0)
    log = train(config, tmp_path, progress=False, print_fn=lambda *args: None)
    assert log["finished"] and log["best"] is not None
    assert isinstance(load_checkpoint(Path(tmp_path) / "best.pt")["model"], gpt.DecoderOnlyTranslator)


def test_train_takes_a_configuration_file_and_its_options_change_it(refused):
    from transformer_course import train

    args = train.parser().parse_args(["--config", str(gpt.DECODER_ONLY_RECIPE), "--out", "x", "--epochs", "2",
                                      "--d-model", "64"])
    config = train.config_from(args)
    assert config["model"]["architecture"] == "decoder_only" and config["model"]["d_model"] == 64
    assert config["train"]["epochs"] == 2 and config["data"]["tokenizer"] == "subword"
    assert "--config missing.json" in refused(train.main, ["--config", "missing.json", "--out", "x"])


# ----------------------------------------------------------------------------- the grading kernels

def test_what_the_grading_kernels_keep_of_notebook_09():
    source = package_folder()
    for_09 = withheld("09_gpt", source)
    assert ("gpt", "GPT") in for_09 and ("gpt", "generate") in for_09 and ("schedules", "warmup_cosine_lr") in for_09
    assert ("embeddings", "apply_rope") not in for_09 and ("gpt", "CausalSelfAttention") not in for_09   # substituted
    for_08 = withheld("08_decoding_bleu", source)
    assert ("gpt", "sample_next") in for_08
    assert not {("decoding", name) for name in ("sampling_distribution", "top_k_filter", "top_p_filter")} & set(for_08)
    for earlier in ("01_positional_encoding", "02_attention"):   # 09's exercise, absent from every earlier kernel
        assert ("embeddings", "apply_rope") in withheld(earlier, source), earlier
