"""BLEU (notebook 08): the metric from scratch, and the standard way to report it.

`corpus_bleu` is Papineni et al. (2002) on token lists: clipped n-gram precisions for n = 1..4 pooled
over the whole corpus, their geometric mean, times a brevity penalty. It gives the same number as
sacreBLEU run on the same tokens (`tokenize="none"`, `smooth_method="none"`).

Numbers computed on *your* tokens depend on your tokenizer, so papers report **sacreBLEU**: the
detokenised, cased output against the raw reference sentences, tokenised by sacreBLEU itself (13a),
with a signature that says exactly how the number was computed. `bleu_report` gives that figure and,
for comparison with older tutorials, corpus BLEU on lowercased tokens.
"""
import math
import re
from collections import Counter
from typing import NamedTuple

from .extras import import_extra

__all__ = ["ngram_counts", "bleu_statistics", "corpus_bleu", "sentence_bleu", "detokenize", "capitalize_first",
           "sacrebleu_score", "BleuReport", "bleu_report"]


def ngram_counts(tokens, n):
    """Counter of the n-grams (tuples) of one token list; n-grams never cross the list's ends."""
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _check_corpus(hypotheses, references):
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"one reference per hypothesis: got {len(hypotheses)} hypotheses and "
                         f"{len(references)} references")
    for what, sentences in (("hypotheses", hypotheses), ("references", references)):
        for sentence in sentences:
            if isinstance(sentence, str):
                raise ValueError(f"{what} must be token lists, got the string {sentence!r}: split it into tokens "
                                 "first (a string would be scored character by character)")
    return hypotheses, references


def bleu_statistics(hypotheses, references, max_n=4):
    """BLEU's sufficient statistics: (matches[n-1], totals[n-1] for n = 1..max_n, hypothesis length,
    reference length), each summed over the corpus. Matches are clipped by the reference's counts."""
    hypotheses, references = _check_corpus(hypotheses, references)
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        hyp_len += len(hyp)
        ref_len += len(ref)
        for n in range(1, max_n + 1):
            hyp_counts, ref_counts = ngram_counts(hyp, n), ngram_counts(ref, n)
            matches[n - 1] += sum(min(count, ref_counts[gram]) for gram, count in hyp_counts.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    return matches, totals, hyp_len, ref_len


def corpus_bleu(hypotheses, references, max_n=4):
    """Corpus BLEU in [0, 100] of token lists against one reference each, without smoothing.

    BLEU = BP * exp(mean over n of log p_n), p_n = clipped n-gram matches / hypothesis n-grams (summed
    over the corpus), BP = exp(1 - r / c) when the hypotheses' total length c is below the references'
    r, else 1. Any p_n = 0 makes BLEU 0.
    """
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    matches, totals, hyp_len, ref_len = bleu_statistics(hypotheses, references, max_n)
    if hyp_len == 0 or min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n
    brevity_penalty = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * brevity_penalty * math.exp(log_precision)


def sentence_bleu(hypothesis, reference, max_n=4):
    """BLEU of one sentence (corpus_bleu of a corpus of one). Averaging these over a test set is NOT
    corpus BLEU: short sentences weigh as much as long ones, and most get 0 without smoothing."""
    return corpus_bleu([hypothesis], [reference], max_n)


# ----------------------------------------------------------------------------- detokenising

_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", "%", ")", "]", "}", "...", "n't", "'s", "'re", "'ve", "'m",
                    "'ll", "'d", "'S", "N'T", "'"}
_NO_SPACE_AFTER = {"(", "[", "{", "$"}
_WORD = re.compile(r"\w")


def detokenize(tokens):
    """Token list -> a sentence as people write it: the inverse of spaCy's English tokenizer on ordinary text.

    No space before punctuation and clitics ("dog 's" -> "dog's", "do n't" -> "don't"), none inside
    hyphenated words ("t - shirt" -> "t-shirt") or after opening brackets; straight double quotes
    alternate between opening and closing. It restores about 99% of Multi30k's English sentences exactly.
    """
    text, quotes, glue_next = "", 0, False
    for i, token in enumerate(tokens):
        previous = tokens[i - 1] if i else None
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        space = bool(text) and not glue_next and token not in _NO_SPACE_BEFORE
        glue_next = token in _NO_SPACE_AFTER
        if token == "-" and previous and following and _WORD.match(previous[-1]) and _WORD.match(following[0]):
            space, glue_next = False, True      # a hyphen inside a word: "t - shirt" -> "t-shirt"
        elif token == '"':
            quotes += 1
            if quotes % 2:                      # an opening quote sticks to the next word
                glue_next = True
            else:                               # a closing one to the word before it
                space = False
        text += (" " if space else "") + token
    return text


# ----------------------------------------------------------------------------- reporting

def sacrebleu_score(hypotheses, references, **options):
    """sacreBLEU of detokenised hypothesis strings against raw reference strings (one each):
    a `sacrebleu.BLEUScore`, and its signature string. `options` go to `sacrebleu.metrics.BLEU`
    (the defaults are the standard: cased, 13a tokenisation, exp smoothing)."""
    metric = import_extra("sacrebleu.metrics", "the sacreBLEU score").BLEU(**options)  # only reporting needs it
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score, str(metric.get_signature())


class BleuReport(NamedTuple):
    sacrebleu: float          # cased, detokenised, sacreBLEU's own tokenisation: the number to report
    signature: str            # how sacreBLEU computed it
    sacrebleu_lc: float       # the same, case-insensitive (signature case:lc)
    signature_lc: str
    tokenized_lower: float    # corpus BLEU on lowercased tokens (older tutorials' figure)
    n_sentences: int

    def __str__(self):
        return (f"sacreBLEU {self.sacrebleu:.2f}  ({self.signature})\n"
                f"case-insensitive sacreBLEU {self.sacrebleu_lc:.2f}  ({self.signature_lc})\n"
                f"lowercased tokenised BLEU {self.tokenized_lower:.2f}  (corpus_bleu on lowercased tokens, "
                f"{self.n_sentences} sentences; comparable only with BLEU on the same tokens)")


def capitalize_first(text):
    """The first letter in upper case (the least a model trained on lowercased text can do about case)."""
    return text[:1].upper() + text[1:]


def bleu_report(hypothesis_tokens, reference_texts, reference_tokens=None, tokenize=None, capitalize=False,
                detokenizer=None):
    """Both BLEU figures for a test set.

    hypothesis_tokens: the model's output as token lists (no <bos>/<eos>/<pad>); reference_texts: the raw
    reference sentences; reference_tokens: the references as token lists (else `tokenize(reference_texts)`,
    default spaCy English as in `transformer_course.data`). With `capitalize` (for a model trained on
    lowercased text) each detokenised hypothesis starts with a capital letter before sacreBLEU scores it.
    `detokenizer`: tokens -> text for output that is not made of words (subword pieces); the text is then
    tokenised like the references for the lowercased tokenised figure.
    """
    hypothesis_tokens, reference_texts = list(hypothesis_tokens), list(reference_texts)
    if tokenize is None:
        from .data import tokenize as spacy_tokenize

        def tokenize(texts):
            return spacy_tokenize(texts, "en")
    if reference_tokens is None:
        reference_tokens = tokenize(reference_texts)
    texts = [(detokenizer or detokenize)(h) for h in hypothesis_tokens]
    if detokenizer is not None:
        hypothesis_tokens = tokenize(texts)
    if capitalize:
        texts = [capitalize_first(t) for t in texts]
    cased, signature = sacrebleu_score(texts, reference_texts)
    uncased, signature_lc = sacrebleu_score(texts, reference_texts, lowercase=True)
    lower = corpus_bleu([[t.lower() for t in h] for h in hypothesis_tokens],
                        [[t.lower() for t in r] for r in reference_tokens])
    return BleuReport(cased.score, signature, uncased.score, signature_lc, lower, len(hypothesis_tokens))
