"""Oracles of notebook 03 (padding_mask, causal_mask, target_mask), shared by its hidden tests and
tests/test_components.py.

Every expected mask is brute force: a table built one sentence, query and key at a time from the rule the
mask stands for, never the course's solution (transformer_course.masks). The same tables built from the
rules of known mistakes name the mistake in the message. Every check takes the student's function as
``answer``, calls it and lays its values out as the expected shape (a wrong shape costs points in the shape
test only).

The tables compute a mask for the student, so they are helpers of their exercise in own_work's table: during
its tests an answer that calls them is refused.
"""
import torch

from .. import testing
from ..probing import returned


def _padding_table(tokens, pad_idx, rule=lambda real, t, count: real):
    """[B, 1, 1, T]: rule(whether position t is a real token, t, the number of real tokens in the sentence)."""
    ids = tokens.tolist()
    counts = [sum(i != pad_idx for i in row) for row in ids]
    return torch.tensor([[[[rule(ids[b][t] != pad_idx, t, counts[b]) for t in range(len(ids[b]))]]]
                         for b in range(len(ids))])


def _causal_table(size, rule=lambda i, j: j <= i):
    """[1, 1, size, size]: rule(query i, key j)."""
    return torch.tensor([[[[rule(i, j) for j in range(size)] for i in range(size)]]])


def _target_table(tokens, pad_idx, rule=lambda query_real, key_real, i, j: key_real and j <= i):
    """[B, 1, T, T]: rule(whether query i is a real token, whether key j is, i, j)."""
    ids = tokens.tolist()
    length = tokens.shape[1]
    return torch.tensor([[[[rule(ids[b][i] != pad_idx, ids[b][j] != pad_idx, i, j)
                            for j in range(length)] for i in range(length)]] for b in range(len(ids))])


def _answer_laid_out(answer, args, shape, what):
    return testing.laid_out_as(answer(*args), shape, what) != 0


def check_padding_values(answer, tokens, pad_idx):
    """answer(tokens, pad_idx) against the brute-force padding mask."""
    batch, length = tokens.shape
    what = f"padding_mask({tokens.tolist()}, pad_idx={pad_idx})"
    oracle = _padding_table(tokens, pad_idx)
    got = _answer_laid_out(answer, (tokens, pad_idx), [batch, 1, 1, length], what)
    testing.assert_close(got, oracle, what, atol=0, rtol=0, mistakes={
        "the polarity is inverted: True should mark the real tokens (may attend), False the padding": ~oracle,
        "pad_idx is ignored: the ids equal to pad_idx are padding, compare with pad_idx, not 0":
            (tokens != 0)[:, None, None, :],
        "ids smaller than pad_idx are marked as padding: only ids equal to pad_idx are padding (use !=, not >)":
            (tokens > pad_idx)[:, None, None, :],
        "it assumes the padding sits at the end of each sentence (a count of real tokens); "
        "mark each position by comparing its own id with pad_idx": _padding_table(tokens, pad_idx,
                                                                                   lambda real, t, count: t < count),
    })


def check_causal_values(answer, size):
    """answer(size) against the brute-force causal mask."""
    what = f"causal_mask({size})"
    got = _answer_laid_out(answer, (size,), [1, 1, size, size], what)
    oracle = _causal_table(size)
    testing.assert_close(got, oracle, what, atol=0, rtol=0, mistakes={
        "the polarity is inverted: True should mark the keys that may be attended (j <= i)": ~oracle,
        "it is upper- instead of lower-triangular: position i attends to the positions after it":
            _causal_table(size, lambda i, j: j >= i),
        "the diagonal is masked: position i must attend to itself (j <= i, not j < i)":
            _causal_table(size, lambda i, j: j < i),
        "position i attends to position i + 1, a future token (torch.tril with diagonal=1?)":
            _causal_table(size, lambda i, j: j <= i + 1),
        "nothing is masked: every position attends to every other": _causal_table(size, lambda i, j: True),
    })


def check_target_values(answer, tokens, pad_idx):
    """answer(tokens, pad_idx) against the brute-force target mask (padding and causal)."""
    batch, length = tokens.shape
    what = f"target_mask({tokens.tolist()}, pad_idx={pad_idx})"
    oracle = _target_table(tokens, pad_idx)
    got = _answer_laid_out(answer, (tokens, pad_idx), [batch, 1, length, length], what)

    def table(rule):
        return _target_table(tokens, pad_idx, rule)
    testing.assert_close(got, oracle, what, atol=0, rtol=0, mistakes={
        "the polarity is inverted: True should mark the keys that may be attended": ~oracle,
        "the two masks are combined with | (or) instead of & (and)":
            table(lambda qr, kr, i, j: kr or j <= i),
        "the padding part is missing: padded keys may be attended": table(lambda qr, kr, i, j: j <= i),
        "the causal part is missing: future keys may be attended": table(lambda qr, kr, i, j: kr),
        "the padded queries (rows) are masked instead of the padded keys (columns); padding_mask must "
        "not be transposed": table(lambda qr, kr, i, j: qr and j <= i),
        "the padded queries (rows) are masked as well as the padded keys (columns); only keys are masked":
            table(lambda qr, kr, i, j: qr and kr and j <= i),
        "the causal part is upper- instead of lower-triangular": table(lambda qr, kr, i, j: kr and j >= i),
        "the causal part masks the diagonal: position i must attend to itself (j <= i)":
            table(lambda qr, kr, i, j: kr and j < i),
        "a padded key on the diagonal is allowed (every query may attend to itself); padding keys are "
        "masked even there, and a row with no key left stays all False":
            table(lambda qr, kr, i, j: (kr and j <= i) or i == j),
    })


def returned_mask(facts, what):
    """What probes.masking.mask_facts sent of one call of the student's function, checked to be a tensor:
    the dict of its device ("device", "device_type"), "shape", "dtype" and "values" (None on 'meta')."""
    facts = returned(facts, what)
    assert facts["tensor"], f"{what} should return a torch.Tensor, got {facts['type']}"
    return facts


ANSWER_HELPERS = {"padding_mask": (_padding_table,), "causal_mask": (_causal_table,),
                  "target_mask": (_target_table,)}
