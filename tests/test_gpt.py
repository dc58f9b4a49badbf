"""Notebook 09's package side: the finished GPT parts (transformer_course.gpt), their tests' probes and oracles,
the decoder-only translator behind the recipe, and what the grading kernels of 01, 08 and 09 withhold."""
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import transformer_course as course
from autograder.execution.stripped import withheld
from course_testkit.oracles import gpt as oracle
from course_testkit.probes import gpt as probes
from course_testkit.probing import judging_with, pack, unpack
from transformer_course import gpt
from transformer_course.data import Vocab
from transformer_course.decoding import beam_search, greedy_decode
from transformer_course.model import Transformer, build_model
from transformer_course.run.checkpoints import load_checkpoint, save_checkpoint
from transformer_course.run.configs import CONFIGS, load_config

MIRROR = os.environ.get("MULTI30K_MIRROR")


def round_trip(found):
    """The probe's data as the judge gets it."""
    return unpack(pack(found))


def tiny_gpt(seed=0, vocab=13, layers=2):
    torch.manual_seed(seed)
    return gpt.GPT(vocab, 16, 4, layers, 24, dropout=0.0).eval()


# ----------------------------------------------------------------------------- the finished parts pass their tests

def rope_checks():
    oracle.check_rope_values(round_trip(probes.rope_runs(course.apply_rope, probes.ROPE_VISIBLE)), probes.ROPE_VISIBLE)
    oracle.check_rope_values(round_trip(probes.rope_runs(course.apply_rope, *probes.hidden_rope_cases())),
                             *probes.hidden_rope_cases())
    for cases in ((probes.ROPE_RELATIVE,), probes.hidden_relative_cases()):
        oracle.check_rope_relative(round_trip(probes.rope_scores(course.apply_rope, *cases)), *cases)


def attention_checks(monkeypatch):
    """The course's layer rotates with RoPE itself (accepted: the contract lets an answer do so), then with the stand-in
    in its place (what an answer that calls apply_rope gets in the tests)."""
    double = probes.RopeDouble(hidden=True)
    for patch in (False, True):
        if patch:
            monkeypatch.setattr(gpt, "apply_rope", double)
        for cases in ((probes.ATTENTION_VISIBLE,), probes.hidden_attention_cases()):
            runs = round_trip(probes.attention_runs(course.CausalSelfAttention, *cases))
            oracle.check_attention_values(runs, double, *cases)
            oracle.check_attention_cache(runs, double, *cases)
        oracle.check_attention_dropout(round_trip(probes.attention_dropout_run(course.CausalSelfAttention)), double)
    sizes = probes.hidden_attention_parts()
    oracle.check_attention_parts(round_trip(probes.attention_facts(course.CausalSelfAttention, sizes)), sizes)


def gpt_checks(monkeypatch):
    double = probes.attention_double(hidden=True)
    monkeypatch.setattr(gpt, "CausalSelfAttention", double)
    oracle.check_gpt_structure(round_trip(probes.gpt_facts(course.GPT)), double.mixing)
    oracle.check_gpt_structure(round_trip(probes.gpt_facts(course.GPT, *probes.hidden_gpt_sizes())), double.mixing,
                               *probes.hidden_gpt_sizes())
    for cases in ((probes.GPT_VISIBLE,), probes.hidden_gpt_cases()):
        oracle.check_gpt_values(round_trip(probes.gpt_runs(course.GPT, *cases)), double.mixing, *cases)
    oracle.check_gpt_dropout(round_trip(probes.gpt_dropout_run(course.GPT, *probes.hidden_gpt_dropout_case())),
                             double.mixing, *probes.hidden_gpt_dropout_case())


def schedule_checks():
    cases, errors = probes.hidden_schedule_cases()
    for values, wrong in ((probes.SCHEDULE_VISIBLE, probes.SCHEDULE_ERRORS), (cases, errors)):
        oracle.check_schedule(round_trip(probes.schedule_values(course.warmup_cosine_lr, values)), values)
        oracle.check_schedule_errors(round_trip(probes.schedule_errors(course.warmup_cosine_lr, wrong)), wrong)


CHECKS = {
    "apply_rope": lambda monkeypatch: rope_checks(),
    "CausalSelfAttention": attention_checks,
    "GPT": gpt_checks,
    "lm_loss": lambda monkeypatch: [oracle.check_lm_loss(round_trip(probes.lm_loss_runs(course.lm_loss, *cases)), *cases)
                                    for cases in ((probes.LM_LOSS_VISIBLE,), probes.hidden_lm_loss_cases())],
    "adamw_param_groups": lambda monkeypatch: oracle.check_param_groups(round_trip(probes.param_groups_run(
        course.adamw_param_groups, *probes.hidden_param_groups_case(), wider=True)), *probes.hidden_param_groups_case(),
        wider=True),
    "warmup_cosine_lr": lambda monkeypatch: schedule_checks(),
    "sample_next": lambda monkeypatch: oracle.check_samples(round_trip(probes.sample_runs(
        course.sample_next, probes.hidden_sample_cases())), probes.hidden_sample_cases()),
    "generate": lambda monkeypatch: [oracle.check_generate(round_trip(probes.generate_runs(course.generate, *cases)), *cases)
                                     for cases in ((probes.GENERATE_VISIBLE,), probes.hidden_generate_cases())],
}


@pytest.mark.parametrize("exercise", CHECKS)
def test_the_finished_parts_pass_their_exercises_checks(exercise, monkeypatch):
    CHECKS[exercise](monkeypatch)


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


# ----------------------------------------------------------------------------- the hidden inputs, for many secrets

SECRETS = range(40)


def float32_angles(x, positions, base=10000.0):
    d = x.size(-1)
    angles = positions.float()[:, None] * base ** (-torch.arange(0, d, 2).float() / d)
    first, second = x[..., 0::2], x[..., 1::2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)


def test_the_hidden_rope_tests_name_float32_angles_and_the_stand_in_is_no_rope_for_every_secret():
    for secret in SECRETS:
        with judging_with(secret):
            cases = probes.hidden_rope_cases()
            with pytest.raises(AssertionError, match="lost precision"):
                oracle.check_rope_values(round_trip(probes.rope_runs(float32_angles, *cases)), *cases)
            with pytest.raises(AssertionError):
                oracle.check_rope_values(round_trip(probes.rope_runs(probes.RopeDouble(hidden=True), *cases)), *cases)


def drawn_exactly(distribution):
    """Draws [N_DRAWS] whose frequencies are the distribution's (to 1 / N_DRAWS)."""
    counts = (distribution * probes.N_DRAWS).round().long()
    counts[counts.argmax()] += probes.N_DRAWS - counts.sum()
    return torch.repeat_interleave(torch.arange(len(distribution)), counts)


def test_every_known_sampling_mistake_is_caught_and_named_for_every_secret():
    """The first hidden case a mistake changes names it, or a mistake that draws from the same distribution there
    (top-p applied first of all is top-p measured before top-k where the temperature is 1)."""
    for secret in SECRETS:
        with judging_with(secret):
            cases = probes.hidden_sample_cases()
        for variant in oracle.SAMPLE_MISTAKES:
            for rows, settings in cases:
                probs = probes.sample_rows(rows)[0]
                wrong = oracle.distribution(probs, **settings, variant=variant)
                if (wrong - oracle.distribution(probs, **settings)).abs().max() > 0.03:
                    break
            else:
                raise AssertionError(f"secret {secret}: no hidden case shows {variant}")
            with pytest.raises(AssertionError) as failure:
                oracle.check_draws(drawn_exactly(wrong), probs, settings, len(probs), "sample_next")
            alike = [text for other, (shows, text) in oracle.SAMPLE_MISTAKES.items() if shows(settings) and
                     (oracle.distribution(probs, **settings, variant=other) - wrong).abs().max() < 0.02]
            assert any(text in str(failure.value) for text in alike), (secret, variant, str(failure.value))


def test_the_correct_layers_pass_the_hidden_dropout_tests_for_every_secret():
    for secret in range(10):
        with judging_with(secret):
            rope, double, case = probes.RopeDouble(hidden=True), probes.attention_double(hidden=True), \
                probes.hidden_gpt_dropout_case()
            oracle.check_attention_dropout(round_trip(probes.attention_dropout_run(course.CausalSelfAttention)), rope)
            found = probes.gpt_dropout_run(lambda *args, **kwargs: patched_gpt(double, *args, **kwargs), *case)
            oracle.check_gpt_dropout(round_trip(found), double.mixing, *case)


def patched_gpt(attention, *args, **kwargs):
    """The course's GPT, built with ``attention`` for its blocks' attention."""
    original = gpt.CausalSelfAttention
    gpt.CausalSelfAttention = attention
    try:
        return gpt.GPT(*args, **kwargs)
    finally:
        gpt.CausalSelfAttention = original


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
    from transformer_course.run.loop import train

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

def test_nothing_of_notebook_09_is_in_its_grading_kernel_and_none_of_its_answers_in_an_earlier_ones():
    """09's tests put stand-ins where they need a part of 09 (probes.RopeDouble, probes.attention_double): its kernel
    keeps none of the finished parts, helpers included."""
    answers = {("embeddings", "apply_rope"), ("gpt", "CausalSelfAttention"), ("gpt", "GPT"), ("gpt", "lm_loss"),
               ("gpt", "adamw_param_groups"), ("schedules", "warmup_cosine_lr"), ("gpt", "sample_next"), ("gpt", "generate")}
    helpers = {("gpt", "GPTBlock"), ("decoding", "sampling_distribution"), ("decoding", "top_k_filter"),
               ("decoding", "top_p_filter")}
    assert answers | helpers <= set(withheld("09_gpt"))
    for earlier in ("01_positional_encoding", "08_decoding_bleu"):
        assert answers <= set(withheld(earlier)), earlier
