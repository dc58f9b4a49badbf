"""Oracles of notebook 03 (padding_mask, causal_mask, target_mask), shared by its hidden tests and
tests/test_components.py.

Every expected mask is brute force: a table built one sentence, query and key at a time from the rule the
mask stands for, never the course's solution (transformer_course.masks). The same tables built from the
rules of known mistakes name the mistake in the message. Every check takes the student's function as
``answer``, calls it and lays its values out as the expected shape (a wrong shape costs points in the shape
test only).

target_mask's tests give it stand-ins for padding_mask and causal_mask (probes.masking: random masks, not
answers), and the contract lets an answer compute either part itself: its checks combine every padding part it
may have used with every causal part, by the same rules.
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


def _target_table(real, allowed, rule=lambda query_real, key_real, a, a_t, diagonal: key_real and a):
    """[B, 1, T, T]: rule(whether query i is a real token, whether key j is, allowed[i][j], allowed[j][i], i == j),
    from ``real`` (the keys a padding part lets through, [B][T]) and ``allowed`` (a causal part, [T][T])."""
    length = len(allowed)
    return torch.tensor([[[[rule(row[i], row[j], allowed[i][j], allowed[j][i], i == j) for j in range(length)]
                           for i in range(length)]] for row in real])


# What known mistakes make of target_mask, as rules of _target_table; each description names its mistake.
TARGET_MISTAKES = {
    "the polarity is inverted: True should mark the keys that may be attended":
        lambda qr, kr, a, a_t, diagonal: not (kr and a),
    "the padding part is inverted (True at the padding keys): is the polarity inverted? True means may attend":
        lambda qr, kr, a, a_t, diagonal: not kr and a,
    "the two masks are combined with | (or) instead of & (and): a key may be attended only if both masks allow it, "
    "so use &": lambda qr, kr, a, a_t, diagonal: kr or a,
    "the padding part is missing: padded keys may be attended; & the causal mask with padding_mask(tokens, pad_idx)":
        lambda qr, kr, a, a_t, diagonal: a,
    "the causal part is missing: future keys may be attended; & the padding mask with causal_mask(T)":
        lambda qr, kr, a, a_t, diagonal: kr,
    "the padded queries (rows) are masked instead of the padded keys (columns): only the padded keys are masked, "
    "never the queries; padding_mask has shape [B, 1, 1, T] and must not be transposed":
        lambda qr, kr, a, a_t, diagonal: qr and a,
    "the padded queries (rows) are masked as well as the padded keys (columns): only the keys are masked, never the "
    "queries": lambda qr, kr, a, a_t, diagonal: qr and kr and a,
    "the causal part is upper- instead of lower-triangular": lambda qr, kr, a, a_t, diagonal: kr and a_t,
    "the causal part masks the diagonal: position i must attend to itself (j <= i)":
        lambda qr, kr, a, a_t, diagonal: kr and a and not diagonal,
    "a padded key on the diagonal is allowed (every query may attend to itself); padding keys are masked everywhere, "
    "on the diagonal too, and a row with no key left stays all False":
        lambda qr, kr, a, a_t, diagonal: (kr and a) or diagonal,
}


def _answer_laid_out(answer, args, shape, what):
    return testing.laid_out_as(answer(*args), shape, what) != 0


def _padding_mistakes(tokens, pad_idx, oracle):
    """What known mistakes make of padding_mask(tokens, pad_idx), by description."""
    return {
        "the polarity is inverted: True should mark the real tokens (may attend), False the padding": ~oracle,
        "pad_idx is ignored: the ids equal to pad_idx are padding, compare with pad_idx, not 0":
            (tokens != 0)[:, None, None, :],
        "ids smaller than pad_idx are marked as padding: only ids equal to pad_idx are padding (use !=, not >)":
            (tokens > pad_idx)[:, None, None, :],
        "it assumes the padding sits at the end of each sentence (a count of real tokens); "
        "mark each position by comparing its own id with pad_idx": _padding_table(tokens, pad_idx,
                                                                                   lambda real, t, count: t < count),
    }


def _causal_mistakes(size, oracle):
    """What known mistakes make of causal_mask(size), by description."""
    return {
        "the polarity is inverted: True should mark the keys that may be attended (j <= i)": ~oracle,
        "it is upper- instead of lower-triangular: position i attends to the positions after it":
            _causal_table(size, lambda i, j: j >= i),
        "the diagonal is masked: position i must attend to itself (j <= i, not j < i)":
            _causal_table(size, lambda i, j: j < i),
        "position i attends to position i + 1, a future token (torch.tril with diagonal=1?)":
            _causal_table(size, lambda i, j: j <= i + 1),
        "nothing is masked: every position attends to every other": _causal_table(size, lambda i, j: True),
    }


def check_padding_values(answer, tokens, pad_idx):
    """answer(tokens, pad_idx) against the brute-force padding mask."""
    batch, length = tokens.shape
    what = f"padding_mask({tokens.tolist()}, pad_idx={pad_idx})"
    oracle = _padding_table(tokens, pad_idx)
    got = _answer_laid_out(answer, (tokens, pad_idx), [batch, 1, 1, length], what)
    testing.assert_close(got, oracle, what, atol=0, rtol=0, mistakes=_padding_mistakes(tokens, pad_idx, oracle))


def check_causal_values(answer, size):
    """answer(size) against the brute-force causal mask."""
    what = f"causal_mask({size})"
    got = _answer_laid_out(answer, (size,), [1, 1, size, size], what)
    oracle = _causal_table(size)
    testing.assert_close(got, oracle, what, atol=0, rtol=0, mistakes=_causal_mistakes(size, oracle))


def _one_of(got, tables, what, explained):
    """got equals one of ``tables``; else AssertionError(explained), with the first entry that differs from the
    nearest of them."""
    if any(torch.equal(got, table) for table in tables):
        return
    nearest = min(tables, key=lambda table: (got != table).sum().item())
    index = testing.divmod_index((got != nearest).flatten().nonzero()[0].item(), got.shape)
    raise AssertionError(f"{what} {explained} (at index {list(index)} it gives {bool(got[index])})")


def check_padding_like(got, tokens, pad_idx, what):
    """For a cell that grades something else (shapes, errors): the mask ``got`` returned for (tokens, pad_idx), laid
    out as [B, 1, 1, T], is the padding mask, or wrong in a way check_padding_values names (graded there)."""
    got = testing.laid_out_as(got, [*tokens.shape[:1], 1, 1, tokens.shape[1]], what) != 0
    oracle = _padding_table(tokens, pad_idx)
    _one_of(got, [oracle, *_padding_mistakes(tokens, pad_idx, oracle).values()], what,
            "should be True where tokens != pad_idx and False at the padding")


def check_causal_like(got, size, what):
    """For a cell that grades something else: ``got``, laid out as [1, 1, size, size], is the causal mask, or wrong
    in a way check_causal_values names (graded there)."""
    got = testing.laid_out_as(got, [1, 1, size, size], what) != 0
    oracle = _causal_table(size)
    _one_of(got, [oracle, *_causal_mistakes(size, oracle).values()], what,
            "should be True at [..., i, j] where j <= i and False elsewhere")


def _target_parts(tokens, pad_idx, paddings, causals):
    """Every (real [B][T], allowed [T][T]) target_mask may combine: the true padding and causal parts (what an
    answer computes itself), and the given ones (what the stand-ins for padding_mask and causal_mask returned)."""
    length = tokens.shape[1]
    reals = [_padding_table(tokens, pad_idx)] + [testing.laid_out_as(p, [len(tokens), 1, 1, length], "padding") != 0
                                                  for p in paddings or []]
    alloweds = [_causal_table(length)] + [testing.laid_out_as(c, [1, 1, length, length], "causal") != 0
                                          for c in causals or []]
    return [(r[:, 0, 0].tolist(), a[0, 0].tolist()) for r in reals for a in alloweds]


def check_target_values(answer, tokens, pad_idx, paddings=None, causals=None):
    """answer(tokens, pad_idx) against the brute-force target mask: a padding part & a causal part, each the true one
    or one of ``paddings`` / ``causals`` (what the test's stand-ins for padding_mask / causal_mask return)."""
    batch, length = tokens.shape
    what = f"target_mask({tokens.tolist()}, pad_idx={pad_idx})"
    got = _answer_laid_out(answer, (tokens, pad_idx), [batch, 1, length, length], what)
    parts = _target_parts(tokens, pad_idx, paddings, causals)
    expected = [_target_table(real, allowed) for real, allowed in parts]
    if any(torch.equal(got, table) for table in expected):
        return
    for description, rule in TARGET_MISTAKES.items():
        if any(torch.equal(got, _target_table(real, allowed, rule)) for real, allowed in parts):
            raise AssertionError(f"{what} is wrong: it looks like {description}")
    _one_of(got, expected, what, "should be padding_mask(tokens, pad_idx) & causal_mask(T)"
            + (" (in this test, what the stand-ins for them returned, or the masks themselves)" if paddings else ""))


def check_target_like(got, tokens, pad_idx, what, paddings=None, causals=None):
    """For a cell that grades something else: ``got``, laid out as [B, 1, T, T], is a target mask (check_target_values'
    parts) or wrong in a way it names."""
    length = tokens.shape[1]
    got = testing.laid_out_as(got, [len(tokens), 1, length, length], what) != 0
    parts = _target_parts(tokens, pad_idx, paddings, causals)
    rules = [lambda qr, kr, a, a_t, diagonal: kr and a, *TARGET_MISTAKES.values()]
    _one_of(got, [_target_table(real, allowed, rule) for rule in rules for real, allowed in parts], what,
            "should be padding_mask(tokens, pad_idx) & causal_mask(T)")


def returned_mask(facts, what):
    """What probes.masking.mask_facts sent of one call of the student's function, checked to be a tensor:
    the dict of its device ("device", "device_type"), "shape", "dtype" and "values" (None on 'meta')."""
    facts = returned(facts, what)
    assert facts["tensor"], f"{what} should return a torch.Tensor, got {facts['type']}"
    return facts
