"""BLEU from scratch (transformer_course.bleu) against sacreBLEU, and the report helpers.

Oracle: sacrebleu's BLEU on the space-joined tokens with tokenize="none", smooth_method="none".
"""
import os
import random
from pathlib import Path

import pytest
import sacrebleu

from course_testkit.oracles.decoding_bleu import sacre
from transformer_course.bleu import (
    bleu_report,
    bleu_statistics,
    capitalize_first,
    corpus_bleu,
    detokenize,
    ngram_counts,
    sacrebleu_score,
    sentence_bleu,
)

REAL_MIRROR = Path(os.environ.get("MULTI30K_MIRROR") or Path(__file__).resolve().parents[2] / "shared/data/multi30k")


def random_corpus(rng, n_sentences, vocab=6, lengths=(0, 12)):
    words = [f"w{i}" for i in range(vocab)]
    def sentence():
        return [rng.choice(words) for _ in range(rng.randint(*lengths))]
    return [sentence() for _ in range(n_sentences)], [sentence() for _ in range(n_sentences)]


@pytest.mark.parametrize("seed", range(40))
def test_matches_sacrebleu_on_random_corpora(seed):
    rng = random.Random(seed)
    hypotheses, references = random_corpus(rng, rng.randint(1, 8), vocab=rng.choice([2, 4, 8]),
                                            lengths=(rng.randint(0, 3), rng.randint(4, 15)))
    for max_n in (1, 2, 3, 4):
        assert corpus_bleu(hypotheses, references, max_n) == pytest.approx(sacre(hypotheses, references, max_n),
                                                                          abs=1e-9)


def test_the_default_is_sacrebleu_corpus_bleu():
    hypotheses = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "is", "running", "in", "the", "park", "today"]]
    references = [["the", "cat", "is", "on", "the", "mat"], ["a", "dog", "is", "running", "in", "the", "park"]]
    expected = sacrebleu.corpus_bleu([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]],
                                     tokenize="none", smooth_method="none").score
    assert corpus_bleu(hypotheses, references) == pytest.approx(expected, abs=1e-9)
    assert 0 < expected < 100


def test_edge_cases():
    ref = ["a", "b", "c", "d", "e"]
    assert corpus_bleu([ref], [ref]) == pytest.approx(100.0)
    assert corpus_bleu([[]], [ref]) == 0.0                                  # empty hypothesis
    assert corpus_bleu([[], []], [ref, ref]) == 0.0
    assert corpus_bleu([["a", "b", "c"]], [ref]) == 0.0                     # no 4-grams at all
    assert corpus_bleu([["a", "x", "b", "y", "c"]], [ref]) == 0.0           # no 2-gram matches
    assert corpus_bleu([["a", "b", "c"]], [ref], max_n=3) == pytest.approx(sacre([["a", "b", "c"]], [ref], 3))
    # clipping: "the" counts at most as often as in the reference
    assert bleu_statistics([["the"] * 7], [["the", "cat", "the"]], max_n=1)[0] == [2]
    # longer than the reference: no brevity penalty
    long = ref + ["f", "g"]
    assert corpus_bleu([long], [ref]) == pytest.approx(100 * (5 / 7 * 4 / 6 * 3 / 5 * 2 / 4) ** 0.25)
    # shorter: penalty exp(1 - r / c)
    assert corpus_bleu([ref[:4]], [ref]) == pytest.approx(100 * 2.718281828459045 ** (1 - 5 / 4))


def test_corpus_level_is_not_the_average_of_sentence_level():
    hypotheses = [["a", "b", "c", "d", "e", "f"], ["x", "y", "z"]]
    references = [["a", "b", "c", "d", "e", "f"], ["x", "y", "q", "r"]]
    corpus = corpus_bleu(hypotheses, references)
    average = sum(sentence_bleu(h, r) for h, r in zip(hypotheses, references)) / 2
    assert corpus == pytest.approx(sacre(hypotheses, references))
    assert average == pytest.approx(50.0)          # the second sentence has no 4-gram: 0
    assert corpus > 60


def test_ngrams_do_not_cross_sentences():
    assert ngram_counts(["a", "b"], 3) == {}
    hypotheses, references = [["a", "b"], ["c", "d"]], [["a", "b"], ["c", "d"]]
    matches, totals, _, _ = bleu_statistics(hypotheses, references)
    assert totals == [4, 2, 0, 0] and matches == [4, 2, 0, 0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        corpus_bleu([["a"]], [["a"], ["b"]])
    with pytest.raises(ValueError, match="token lists"):
        corpus_bleu(["a cat"], [["a", "cat"]])
    with pytest.raises(ValueError):
        corpus_bleu([["a"]], [["a"]], max_n=0)


@pytest.mark.parametrize("tokens, text", [
    (["A", "man", "'s", "t", "-", "shirt", ",", "a", "dog", "."], "A man's t-shirt, a dog."),
    (["He", "does", "n't", "say", '"', "hello", '"', "(", "loudly", ")", "!"], 'He doesn\'t say "hello" (loudly)!'),
    (["a", "-", "b", "costs", "$", "5", ":", "ok", "?"], "a-b costs $5: ok?"),
    ([], ""),
])
def test_detokenize(tokens, text):
    assert detokenize(tokens) == text


@pytest.mark.skipif(not (REAL_MIRROR / "val.en.gz").exists(), reason="no Multi30k mirror")
def test_detokenize_restores_multi30k():
    from transformer_course.data import load_split, tokenize
    _, english = load_split("val", mirror=REAL_MIRROR)
    english = [" ".join(s.split()) for s in english]
    restored = [detokenize(tokens) for tokens in tokenize(english, "en")]
    assert sum(r == e for r, e in zip(restored, english)) / len(english) > 0.99


def test_bleu_report():
    references = ["A man's dog runs in the park.", "Two children play soccer on the grass.", "A woman is cooking."]
    tokens = [["A", "man", "'s", "dog", "runs", "in", "the", "park", "."],
              ["Two", "children", "play", "soccer", "on", "the", "grass", "."],
              ["A", "woman", "is", "cooking", "."]]
    report = bleu_report(tokens, references, tokens)
    assert report.sacrebleu == pytest.approx(100.0) and report.tokenized_lower == pytest.approx(100.0)
    assert "case:mixed" in report.signature and "tok:13a" in report.signature and "nrefs:1" in report.signature
    hypotheses = [["a", "man", "'s", "cat", "runs", "in", "a", "park", "."],
                  ["Two", "kids", "play", "soccer", "on", "the", "grass", "."],
                  ["A", "woman", "cooks", "."]]
    report = bleu_report(hypotheses, references, tokens)
    expected = sacrebleu.corpus_bleu([detokenize(h) for h in hypotheses], [references]).score
    assert report.sacrebleu == pytest.approx(expected)
    lowered = corpus_bleu([[t.lower() for t in h] for h in hypotheses], [[t.lower() for t in r] for r in tokens])
    assert report.tokenized_lower == pytest.approx(lowered)
    assert report.n_sentences == 3 and "sacreBLEU" in str(report)
    lowered = [[t.lower() for t in h] for h in hypotheses]
    capitalised = bleu_report(lowered, references, tokens, capitalize=True)
    expected = sacrebleu.corpus_bleu([capitalize_first(detokenize(h)) for h in lowered], [references]).score
    assert capitalised.sacrebleu == pytest.approx(expected)
    assert capitalised.sacrebleu_lc == pytest.approx(sacrebleu.corpus_bleu([detokenize(h) for h in lowered], [references],
                                                                            lowercase=True).score)
    assert "case:lc" in capitalised.signature_lc
    score, signature = sacrebleu_score(["a b"], ["a b"], lowercase=True)
    assert "case:lc" in signature and score.score == pytest.approx(0.0)  # too short for 4-grams: exp smoothing
