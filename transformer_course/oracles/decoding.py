"""Oracles of notebook 08 (greedy_decode, beam_search, corpus_bleu), shared by its hidden tests.

The test models are tables of scores (the notebook's TableModel), so the expected values are read from the
table on Python lists: the greedy rows row by row, the beam search step by step as the contract describes it,
with the log-probabilities written out in float64; BLEU comes from sacreBLEU on the space-joined tokens with its
own tokenisation and smoothing off. Never from the course's solution (transformer_course.decoding,
transformer_course.bleu). Known mistakes are computed too, only to name a mistake in a message. Every check
takes the student's function and the notebook's test models (TableModel and its tables), and the notebook's
namespace where the test puts the course's finished greedy_decode in place of the student's.

The functions that compute an exercise's answer are helpers of that exercise in own_work's table: during its
tests an answer that calls them is refused.
"""
import itertools
import math
import random
import zlib
from collections import Counter

import torch

import transformer_course as course

from .. import testing
from ..model import Transformer


def log_probs(table, source, prefix):
    """log-softmax of the table's scores, in float64."""
    scores = [float(s) for s in table(tuple(source), tuple(prefix))]
    top = max(scores)
    norm = top + math.log(sum(math.exp(s - top) for s in scores))
    return [s - norm for s in scores]


def total_log_prob(table, source, ids):
    return sum(log_probs(table, source, ids[:t])[ids[t]] for t in range(1, len(ids)))


def greedy_rows(table, sources, max_len, bos, eos):
    """Each sentence decoded on its own: lists of ids ending at <eos> or at max_len ids."""
    rows = []
    for source in sources:
        prefix = [bos]
        while len(prefix) < max_len and (len(prefix) == 1 or prefix[-1] != eos):
            scores = table(tuple(source), tuple(prefix))
            prefix.append(max(range(len(scores)), key=lambda i: scores[i]))
        rows.append(prefix)
    return rows


def unpadded(src, pad):
    return [[t for t in row if t != pad] for row in src.tolist()]


def call(function, what, hint=None):
    """Run the student's code; an error deep inside becomes a message that says where to look."""
    try:
        return function()
    except NotImplementedError:
        raise
    except AssertionError:
        raise
    except Exception as error:
        raise AssertionError(f"{what} failed with {type(error).__name__}: {error}" + (f". {hint}" if hint else "")) from None


def penalised(total, ids, alpha, n_offset=0):
    return total / ((5 + len(ids) - 1 + n_offset) / 6) ** alpha


def reference_beam(table, source, beam_size, max_len, bos, eos, alpha, vocab_size, keep_finished_live=False,
                   choose="penalised", n_offset=0, drop_finished=False, stop_when_top_finished=False, raw_scores=False):
    """The contract's beam search on Python lists, with knobs that reproduce known mistakes (used to name them)."""
    live, finished = [(0.0, (bos,))], []
    while live and len(live[0][1]) < max_len:
        candidates = []
        for total, ids in live:
            if keep_finished_live and len(ids) > 1 and ids[-1] == eos:
                candidates.append((total, ids))
                continue
            lp = table(tuple(source), ids) if raw_scores else log_probs(table, source, ids)
            candidates += [(total + lp[token], ids + (token,)) for token in range(vocab_size)]
        candidates.sort(key=lambda c: -c[0])
        kept = candidates[:beam_size]
        if keep_finished_live:
            live = kept
            if all(ids[-1] == eos for _, ids in kept) or max(len(ids) for _, ids in kept) >= max_len:
                break
            continue
        if not drop_finished:
            finished += [c for c in kept if c[1][-1] == eos]
        live = [c for c in kept if c[1][-1] != eos]
        if stop_when_top_finished and kept[0][1][-1] == eos:
            break
    pool = finished + live
    if choose == "raw":
        key = lambda c: c[0]
    else:
        key = lambda c: penalised(c[0], c[1], alpha, n_offset)
    return list(max(pool, key=key)[1]) if pool else []


def logits_table(table):
    """What a search that forgets log_softmax adds up: TableModel's raw scores (the table plus its offset)."""
    def scores(source, prefix):
        offset = 4 * zlib.crc32(repr((tuple(source), list(prefix))).encode()) / 2 ** 32
        raw = [float(s) + offset for s in table(tuple(source), tuple(prefix))]
        return raw
    return scores


def beam_mistakes(table, source, beam_size, max_len, bos, eos, alpha, vocab_size):
    """What known mistakes would return, by description."""
    args = (table, source, beam_size, max_len, bos, eos)
    return {
        "the best hypothesis is chosen by its raw sum of log-probabilities: divide by the length penalty "
        "((5 + n) / 6) ** length_penalty before choosing": reference_beam(*args, alpha, vocab_size, choose="raw"),
        "n counts <bos>: n is the number of ids AFTER <bos> (<eos> included)":
            reference_beam(*args, alpha, vocab_size, n_offset=1),
        "the length_penalty argument is ignored (0.6 is used whatever it is)": reference_beam(*args, 0.6, vocab_size),
        "finished hypotheses stay in the beam and take its places: set them aside when they end in <eos>":
            reference_beam(*args, alpha, vocab_size, keep_finished_live=True),
        "finished hypotheses are dropped: keep every kept extension that ends in <eos> aside, and choose among "
        "them and the live ones at the end": reference_beam(*args, alpha, vocab_size, drop_finished=True),
        "the search stops as soon as the best extension ends in <eos>: go on while any hypothesis is live":
            reference_beam(*args, alpha, vocab_size, stop_when_top_finished=True),
        "the generator's raw scores are added up: turn them into log-probabilities with F.log_softmax first":
            reference_beam(logits_table(table), *args[1:], alpha, vocab_size, raw_scores=True),
    }


def as_id_list(result, what):
    if isinstance(result, torch.Tensor):
        assert result.dim() == 1, (f"{what} should return one hypothesis as a list of ids, got a tensor of shape "
                                   f"{list(result.shape)}")
        result = result.tolist()
    assert isinstance(result, (list, tuple)), f"{what} should return a list of ids, got {type(result).__name__}"
    return [int(i) for i in result]


def stand_ins(short_or_long_table, early_end_table):
    """(table, vocab_size, beam_size, max_len, alpha) of searches on which known mistakes differ."""
    return [(short_or_long_table, 5, 2, 10, 0.6), (short_or_long_table, 5, 2, 10, 0.0), (early_end_table, 6, 2, 8, 0.6)]


def telling_apart(named, beam_search, TableModel, searches):
    """Of several mistakes that give the student's answer, those that also give the student's answers to the
    stand-in searches, which tell them apart: keeping finished hypotheses live is not ignoring the length penalty."""
    for table, vocab_size, beam_size, max_len, alpha in searches:
        try:
            got = as_id_list(beam_search(TableModel(vocab_size, table), torch.tensor([[3]]), beam_size, max_len, 1, 2,
                                         alpha), "beam_search")
        except Exception:   # the answer's failure is reported by the test that called us
            continue
        produced = beam_mistakes(table, (3,), beam_size, max_len, 1, 2, alpha, vocab_size)
        named = [description for description in named if produced[description] == got] or named
    return named


def check_beam(beam_search, model, table, src, beam_size, max_len, bos, eos, alpha, vocab_size, what=None,
               searches=()):
    source = tuple(unpadded(src, model.pad_idx)[0])
    what = what or f"beam_search(model, src, beam_size={beam_size}, max_len={max_len}, length_penalty={alpha})"
    got = as_id_list(call(lambda: beam_search(model, src, beam_size, max_len, bos, eos, alpha), what,
                          "check the shapes step by step (live hypotheses [k, t], scores [k, vocab])"), what)
    expected = reference_beam(table, source, beam_size, max_len, bos, eos, alpha, vocab_size)
    if got == expected:
        return
    assert not model.mask_problems, f"{what}: the model saw wrong masks: {'; '.join(sorted(model.mask_problems))}"
    if got and got[0] != bos:
        raise AssertionError(f"{what} returned {got}: the hypothesis should start with bos_idx={bos}")
    named = [description for description, produced in beam_mistakes(table, source, beam_size, max_len, bos, eos,
                                                                     alpha, vocab_size).items() if produced == got]
    if len(named) > 1:
        named = telling_apart(named, beam_search, type(model), searches)
    if named:
        raise AssertionError(f"{what} returned {got}, expected {expected}: it looks like " + "; or ".join(named))
    def score(ids):
        if not ids or ids[0] != bos:
            return float("nan")
        return penalised(total_log_prob(table, source, ids), ids, alpha)
    raise AssertionError(f"{what} returned {got} (score {score(got):.4f}), but the contract's search returns "
                         f"{expected} (score {score(expected):.4f}): keep the beam_size best extensions by their "
                         "sum of log-probabilities, set those ending in <eos> aside, stop when none is live or "
                         "the live ones have max_len ids, then choose by the penalised score")


def n_trap_table(source, prefix, vocab_size=5):
    """<eos> at once (0.45) against [w w w <eos>] with log P = -1.005: with n counted right the long one wins at
    alpha = 0.6, with n counting <bos> the short one."""
    probs = [1e-6] * vocab_size
    steps = {1: {2: 0.45, 3: 0.55}, 2: {3: 0.88, 2: 0.12}, 3: {3: 0.88, 2: 0.12}, 4: {2: 0.8595, 3: 0.1405}}
    for token, p in steps.get(len(prefix), {2: 0.5, 3: 0.5}).items():
        probs[token] = p
    return [math.log(p) for p in probs]


def sacre(hypotheses, references, max_n=4):
    """The oracle: sacreBLEU on the space-joined tokens, its own tokenisation and smoothing off."""
    from sacrebleu.metrics import BLEU  # imported here: only these tests need it

    metric = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
    return metric.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score


def variant(hyps, refs, max_n=4, clip=True, brevity="standard", mean="geometric", level="corpus", across=False,
            scale=100.0, denominator="hypothesis"):
    """BLEU with a known mistake (only used to name a mistake; the oracle is sacreBLEU)."""
    if level == "sentence":
        scores = [variant([h], [r], max_n, clip, brevity, mean, "corpus", False, scale, denominator)
                  for h, r in zip(hyps, refs)]
        return sum(scores) / len(scores)
    if across:
        hyps, refs = [[t for h in hyps for t in h]], [[t for r in refs for t in r]]
    matches, totals = [0] * max_n, [0] * max_n
    c, r = sum(len(h) for h in hyps), sum(len(x) for x in refs)
    bps = []
    for h, ref in zip(hyps, refs):
        bps.append(1.0 if len(h) >= len(ref) else math.exp(1 - len(ref) / len(h)) if h else 0.0)
        for n in range(1, max_n + 1):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum((min(k, rc[g]) if clip else (k if g in rc else 0)) for g, k in hc.items())
            totals[n - 1] += sum((rc if denominator == "reference" else hc).values())
    if c == 0 or min(totals) == 0:
        return 0.0
    ps = [m / t for m, t in zip(matches, totals)]
    if mean == "geometric":
        if min(ps) == 0:
            return 0.0
        combined = math.exp(sum(math.log(p) for p in ps) / max_n)
    else:
        combined = sum(ps) / max_n
    bp = {"standard": 1.0 if c >= r else math.exp(1 - r / c),
          "inverted": 1.0 if c >= r else math.exp(1 - c / r),
          "always": math.exp(1 - r / c),
          "none": 1.0,
          "sentence": sum(bps) / len(bps)}[brevity]
    return scale * bp * combined


def bleu_mistakes(hyps, refs, max_n=4):
    return {
        "the average of sentence-level BLEU scores: BLEU pools the n-gram counts and lengths of the whole corpus "
        "first, then combines them once": lambda: variant(hyps, refs, max_n, level="sentence"),
        "matches are not clipped: a hypothesis n-gram counts at most as often as it occurs in the reference "
        "(min of the two counts)": lambda: variant(hyps, refs, max_n, clip=False),
        "the brevity penalty is inverted: it is exp(1 - r / c) with r the reference length and c the hypothesis "
        "length, when c < r": lambda: variant(hyps, refs, max_n, brevity="inverted"),
        "the brevity penalty is applied to long hypotheses too: it is 1 when c >= r":
            lambda: variant(hyps, refs, max_n, brevity="always"),
        "there is no brevity penalty": lambda: variant(hyps, refs, max_n, brevity="none"),
        "the brevity penalty is averaged over sentences: it uses the corpus lengths c and r":
            lambda: variant(hyps, refs, max_n, brevity="sentence"),
        "the precisions are combined by an arithmetic mean: BLEU takes their geometric mean, "
        "exp(sum(log p_n) / max_n)": lambda: variant(hyps, refs, max_n, mean="arithmetic"),
        "n-grams are counted across sentence boundaries (the corpus joined into one long sentence): count them "
        "sentence by sentence": lambda: variant(hyps, refs, max_n, across=True),
        "the score is in [0, 1]: BLEU is reported in [0, 100]": lambda: variant(hyps, refs, max_n, scale=1.0),
        "the precisions are divided by the number of reference n-grams (that is recall): divide by the number of "
        "hypothesis n-grams": lambda: variant(hyps, refs, max_n, denominator="reference"),
        "max_n is ignored (always 4)": lambda: variant(hyps, refs, 4),
    }


def check_bleu(corpus_bleu, hyps, refs, what, max_n=None):
    args = (hyps, refs) if max_n is None else (hyps, refs, max_n)
    got = call(lambda: corpus_bleu(*args), what)
    try:
        got = float(got)
    except (TypeError, ValueError):
        raise AssertionError(f"{what} should return a number, got {type(got).__name__}") from None
    assert math.isfinite(got), f"{what} returned {got}: BLEU is a finite number in [0, 100] (0 when some p_n is 0)"
    expected = sacre(hyps, refs, max_n or 4)
    if abs(got - expected) <= 1e-6 + 1e-6 * abs(expected):
        return
    for description, produced in bleu_mistakes(hyps, refs, max_n or 4).items():
        try:
            value = produced()
        except (ZeroDivisionError, ValueError):
            continue
        if abs(got - value) <= 1e-6 + 1e-6 * abs(value):
            raise AssertionError(f"{what} gives {got:.4f}, expected {expected:.4f}: it looks like {description}")
    raise AssertionError(f"{what} gives {got:.4f}, expected {expected:.4f} (sacreBLEU on the same tokens)")


def random_batch(TableModel, random_table, seed, vocab_size, specials, size):
    """A random table and its model, and `size` random sources of 1 to `size` words padded into [size, size]."""
    pad, bos, eos = specials
    table = random_table(vocab_size, seed, pad_idx=pad, bos_idx=bos, eos_idx=eos)
    model = TableModel(vocab_size, table, pad_idx=pad)
    words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
    generator = random.Random(seed)
    rows = [[generator.choice(words) for _ in range(generator.randint(1, size))] for _ in range(size)]
    src = torch.full((size, size), pad)
    for i, row in enumerate(rows):
        src[i, :len(row)] = torch.tensor(row)
    return table, model, rows, src


def check_greedy_decode_shape(greedy_decode, TableModel, random_table, GREEDY_HINT):
    """The hidden tests of `test_greedy_decode_shape`."""
    for batch, max_len, bos, eos, pad in [(1, 6, 1, 2, 0), (5, 8, 1, 2, 0), (3, 1, 1, 2, 0), (2, 2, 1, 2, 0),
                                           (4, 7, 6, 0, 3)]:
        table = random_table(8, seed=batch, pad_idx=pad, bos_idx=bos, eos_idx=eos)
        model = TableModel(8, table, pad_idx=pad)
        torch.manual_seed(batch)
        src = torch.randint(0, 8, (batch, 5))
        src[src == pad] = (pad + 1) % 8
        src[0, 3:] = pad
        what = f"greedy_decode(model, src {list(src.shape)}, max_len={max_len}, bos_idx={bos}, eos_idx={eos})"
        out = call(lambda: greedy_decode(model, src, max_len, bos, eos), what, GREEDY_HINT)
        testing.check_tensor(out, what, dtype=torch.long)
        assert out.dim() == 2 and out.size(0) == batch, \
            f"{what} has shape {list(out.shape)}: expected [{batch}, L], one row per sentence"
        assert 1 <= out.size(1) <= max_len, (f"{what} has {out.size(1)} ids per row; it should have at least 1 "
                                             f"(<bos>) and at most max_len={max_len}, <bos> included")
        assert (out[:, 0] == bos).all(), f"{what} starts with {out[:, 0].tolist()}: every row starts with bos_idx={bos}"


def check_greedy_decode_values(greedy_decode, TableModel, random_table, GREEDY_HINT):
    """The hidden tests of `test_greedy_decode_values`."""
    for seed, vocab_size, max_len, (pad, bos, eos) in [(0, 7, 9, (0, 1, 2)), (1, 7, 12, (0, 1, 2)), (2, 9, 6, (0, 1, 2)),
                                                       (3, 8, 10, (5, 7, 0)), (4, 6, 20, (0, 1, 2))]:
        table, model, rows, src = random_batch(TableModel, random_table, seed, vocab_size, (pad, bos, eos), 5)
        what = f"greedy_decode(model, src [5, 5], max_len={max_len}, bos_idx={bos}, eos_idx={eos})"
        out = call(lambda: greedy_decode(model, src, max_len, bos, eos), what, GREEDY_HINT)
        assert not model.mask_problems, f"{what}: the model saw wrong masks: " + "; ".join(sorted(model.mask_problems))
        expected = greedy_rows(table, rows, max_len, bos, eos)
        assert out.dim() == 2 and out.size(0) == 5, f"{what} has shape {list(out.shape)}, expected [5, L]"
        for i, want in enumerate(expected):
            n = min(len(want), out.size(1))
            got = out[i, :n].tolist()
            if got != want[:n]:
                first = next(t for t in range(n) if got[t] != want[t])
                raise AssertionError(f"{what}: row {i} should begin {want[:n]}, got {got} (first difference at position "
                                     f"{first}). The next token is the argmax over the vocabulary of the scores at the "
                                     "last position, with the causal mask and the source's padding mask")
    torch.manual_seed(0)
    real = Transformer(11, 13, d_model=16, n_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 4, 3, 0, 0], [10, 2, 0, 0, 0]])
    out = call(lambda: greedy_decode(real, src, 9, 1, 2), "greedy_decode(a real Transformer, ...)", GREEDY_HINT)
    for row in range(3):
        ys = torch.tensor([[1]])
        while ys.size(1) < 9 and (ys.size(1) == 1 or ys[0, -1].item() != 2):
            with torch.no_grad():
                logits = real(src[row:row + 1, :int((src[row] != 0).sum())], ys)
            ys = torch.cat([ys, logits[0, -1].argmax().view(1, 1)], dim=1)
        n = min(ys.size(1), out.size(1))
        assert out[row, :n].tolist() == ys[0, :n].tolist(), (
            f"greedy_decode with a real Transformer: row {row} should begin {ys[0, :n].tolist()}, got "
            f"{out[row, :n].tolist()}. Does every step use the causal mask and src_mask = padding_mask(src, pad)?")


def check_greedy_decode_stopping(greedy_decode, TableModel, random_table, copy_table, stopping_problem, GREEDY_HINT):
    """The hidden tests of `test_greedy_decode_stopping`."""
    for seed, vocab_size, max_len, (pad, bos, eos) in [(0, 7, 12, (0, 1, 2)), (5, 7, 4, (0, 1, 2)), (6, 9, 30, (0, 1, 2)),
                                                       (3, 8, 10, (5, 7, 0)), (7, 6, 3, (4, 2, 5)), (8, 7, 2, (0, 1, 2)),
                                                       (9, 5, 40, (0, 1, 2)), (10, 7, 1, (0, 1, 2))]:
        _, model, _, src = random_batch(TableModel, random_table, seed, vocab_size, (pad, bos, eos), 4)
        what = f"greedy_decode(model, src [4, 4], max_len={max_len}, bos_idx={bos}, eos_idx={eos})"
        out = call(lambda: greedy_decode(model, src, max_len, bos, eos), what, GREEDY_HINT)
        problem = stopping_problem(out, max_len, eos, pad)
        assert problem is None, f"{what} = {out.tolist()}: {problem}"
    model = TableModel(9, copy_table(9))
    for src in (torch.tensor([[3, 4], [5, 6], [7, 8]]), torch.tensor([[4, 4, 4, 4, 4]])):
        out = call(lambda: greedy_decode(model, src, 30, 1, 2), "greedy_decode(copy_model, ...)", GREEDY_HINT)
        problem = stopping_problem(out, 30, 2, 0)
        assert problem is None, f"greedy_decode(copy_model, {src.tolist()}, max_len=30, 1, 2) = {out.tolist()}: {problem}"


def check_beam_search_basics(beam_search, TableModel, random_table, BEAM_HINT, namespace):
    """The hidden tests of `test_beam_search_basics`."""
    with testing.substituted(namespace, greedy_decode=course.decoding.greedy_decode):
        # beam_size=1 is greedy decoding
        for seed, vocab_size, max_len, (pad, bos, eos) in [(0, 7, 8, (0, 1, 2)), (1, 6, 12, (0, 1, 2)),
                                                           (2, 8, 6, (5, 7, 0)), (3, 7, 3, (0, 1, 2))]:
            table = random_table(vocab_size, seed, pad_idx=pad, bos_idx=bos, eos_idx=eos)
            model = TableModel(vocab_size, table, pad_idx=pad)
            words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
            src = torch.tensor([words[:3] + [pad]])
            what = f"beam_search(model, src, beam_size=1, max_len={max_len}, bos_idx={bos}, eos_idx={eos})"
            got = as_id_list(call(lambda: beam_search(model, src, 1, max_len, bos, eos), what, BEAM_HINT), what)
            expected = greedy_rows(table, [words[:3]], max_len, bos, eos)[0]
            assert got[:1] == [bos], f"{what} returned {got}: the hypothesis starts with bos_idx={bos}"
            assert len(got) <= max_len, f"{what} returned {len(got)} ids, more than max_len={max_len} (<bos> included)"
            assert eos not in got[1:-1], f"{what} returned {got}: it goes on after <eos>"
            assert not model.mask_problems, f"{what}: the model saw wrong masks: " + "; ".join(sorted(model.mask_problems))
            assert got == expected, f"{what} returned {got}; with beam_size=1 beam search is greedy decoding: {expected}"
        # max_len=1: only <bos>
        model = TableModel(7, random_table(7, 9))
        got = as_id_list(call(lambda: beam_search(model, torch.tensor([[3, 4]]), 3, 1, 1, 2), "beam_search(..., max_len=1)",
                              BEAM_HINT), "beam_search(..., max_len=1)")
        assert got == [1], f"beam_search(..., max_len=1) returned {got}: with room for one id the answer is [bos_idx]"


def check_beam_search_search(beam_search, TableModel, random_table, early_end_table, short_or_long_table, BEAM_HINT,
                             namespace):
    """The hidden tests of `test_beam_search_search`."""
    searches = stand_ins(short_or_long_table, early_end_table)
    with testing.substituted(namespace, greedy_decode=course.decoding.greedy_decode):
        # The contract's search on random tables, step by step.
        for seed, vocab_size, beam_size, max_len, alpha in [(0, 6, 2, 6, 0.6), (1, 6, 3, 6, 0.6), (2, 7, 4, 7, 0.6),
                                                            (3, 6, 5, 5, 1.0), (4, 8, 3, 8, 0.0), (5, 6, 2, 7, 2.0),
                                                            (6, 6, 8, 5, 0.6)]:
            table = random_table(vocab_size, seed)
            model = TableModel(vocab_size, table)
            check_beam(beam_search, model, table, torch.tensor([[3, 4, 5, 0]]), beam_size, max_len, 1, 2, alpha, vocab_size, searches=searches)
        # Where greedy decoding misses the best hypothesis (found by brute force over all of them), a beam of 4 finds it.
        for seed in (1, 2, 10, 36):
            table = random_table(6, seed)
            model = TableModel(6, table)
            best = max((ids for n in range(2, 6) for ids in ([1] + list(body) for body in itertools.product([2, 3, 4, 5], repeat=n - 1))
                        if 2 not in ids[1:-1] and (ids[-1] == 2 or len(ids) == 5)),
                       key=lambda ids: penalised(total_log_prob(table, (3, 4, 5), ids), ids, 0.6))
            what = f"beam_search(model, src, beam_size=4, max_len=5) with random_table(6, seed={seed})"
            got = as_id_list(call(lambda: beam_search(model, torch.tensor([[3, 4, 5]]), 4, 5, 1, 2), what, BEAM_HINT), what)
            if got != best:
                check_beam(beam_search, model, table, torch.tensor([[3, 4, 5]]), 4, 5, 1, 2, 0.6, 6, what, searches=searches)
                raise AssertionError(f"{what} returned {got}; the best hypothesis (by brute force) is {best}")
        # Finished hypotheses are kept: <eos> at once wins for every beam size.
        model = TableModel(6, early_end_table)
        for beam_size in (2, 4, 6):
            check_beam(beam_search, model, early_end_table, torch.tensor([[3]]), beam_size, 8, 1, 2, 0.6, 6, searches=searches)
        # <eos> is the best first step, yet a longer hypothesis wins with the penalty: the search must go on.
        def eos_first_table(source, prefix, vocab_size=5):
            probs = [1e-6] * vocab_size
            probs[2], probs[3] = (0.5, 0.45) if len(prefix) == 1 else (0.99, 0.01) if len(prefix) >= 4 else (0.01, 0.99)
            return [math.log(p) for p in probs]
        model = TableModel(5, eos_first_table)
        check_beam(beam_search, model, eos_first_table, torch.tensor([[3]]), 2, 8, 1, 2, 0.6, 5, searches=searches)
        # Other special ids, and padding in the source.
        table = random_table(8, 11, pad_idx=5, bos_idx=7, eos_idx=0)
        model = TableModel(8, table, pad_idx=5)
        check_beam(beam_search, model, table, torch.tensor([[3, 4, 6, 5, 5]]), 3, 7, 7, 0, 0.6, 8, searches=searches)


def check_beam_search_length_penalty(beam_search, TableModel, random_table, short_or_long_table, early_end_table,
                                     namespace):
    """The hidden tests of `test_beam_search_length_penalty`."""
    searches = stand_ins(short_or_long_table, early_end_table)
    with testing.substituted(namespace, greedy_decode=course.decoding.greedy_decode):
        model = TableModel(5, n_trap_table)
        check_beam(beam_search, model, n_trap_table, torch.tensor([[3]]), 2, 10, 1, 2, 0.6, 5, searches=searches)
        for alpha in (0.0, 0.3, 1.0, 2.0):
            model = TableModel(5, short_or_long_table)
            check_beam(beam_search, model, short_or_long_table, torch.tensor([[3]]), 2, 10, 1, 2, alpha, 5, searches=searches)
        for seed, alpha in [(12, 0.0), (13, 1.5), (14, 3.0), (15, 0.6)]:
            table = random_table(6, seed, eos_bias=0.3)
            model = TableModel(6, table)
            check_beam(beam_search, model, table, torch.tensor([[3, 4]]), 3, 7, 1, 2, alpha, 6, searches=searches)


def check_corpus_bleu_values(corpus_bleu):
    """The hidden tests of `test_corpus_bleu_values`."""
    for seed in range(12):
        generator = random.Random(seed)
        words = [f"w{i}" for i in range(generator.choice([3, 5, 8]))]
        n_sentences = generator.randint(1, 6)
        def sentence():
            return [generator.choice(words) for _ in range(generator.randint(4, 14))]
        hypotheses = [sentence() for _ in range(n_sentences)]
        references = [sentence() for _ in range(n_sentences)]
        check_bleu(corpus_bleu, hypotheses, references, f"corpus_bleu of random corpus {seed} ({n_sentences} sentences)")
    references = [s.split() for s in ["a man in a blue shirt is standing on a ladder .",
                                      "two young girls are playing in the sand at the beach .",
                                      "a dog runs through the grass with a ball in its mouth ."]]
    longer = [s.split() for s in ["a man in a blue shirt is standing on a tall ladder cleaning a window .",
                                  "two young girls are playing together in the sand at the beach .",
                                  "a brown dog runs through the green grass with a ball in its mouth ."]]
    shorter = [s.split() for s in ["a man in a blue shirt is on a ladder .", "two girls playing in the sand .",
                                   "a dog runs with a ball ."]]
    check_bleu(corpus_bleu, longer, references, "corpus_bleu(hypotheses longer than their references, references)")
    check_bleu(corpus_bleu, shorter, references, "corpus_bleu(hypotheses shorter than their references, references)")


def check_corpus_bleu_parts(corpus_bleu):
    """The hidden tests of `test_corpus_bleu_parts`."""
    check_bleu(corpus_bleu, [["the", "the", "the", "cat", "the", "the", "cat", "sat"], ["a", "b", "c", "d", "e"]],
               [["the", "cat", "sat", "on", "the", "mat"], ["a", "b", "c", "d", "e"]], "corpus_bleu with repeated n-grams")
    check_bleu(corpus_bleu, [["a", "a", "a", "a", "a", "a"]], [["a", "a", "a", "b", "a", "a", "a"]], "corpus_bleu(['a a a a a a'], ['a a a b a a a'])",
               max_n=2)
    hypotheses = [["a", "b", "c", "d", "e", "f", "g", "h"], ["x", "y", "z", "q"], ["p", "q", "r", "s", "t"]]
    references = [["a", "b", "c", "d", "e", "f", "g", "h", "i"], ["x", "y", "w", "q", "r"], ["p", "q", "r", "s", "t", "u"]]
    check_bleu(corpus_bleu, hypotheses, references, "corpus_bleu of three sentences, one without any 4-gram match")
    check_bleu(corpus_bleu, [["a", "b", "c", "d", "e", "f", "g", "h"], ["x", "y", "z", "w"]],
               [["a", "b", "c", "d", "e", "f"], ["x", "y", "z", "w", "v"]], "corpus_bleu with c > r but one short hypothesis")
    check_bleu(corpus_bleu, [["a", "b", "c", "d", "e"], ["x", "y", "z", "w", "v", "u"]],
               [["a", "b", "c", "d", "e", "f", "g"], ["x", "y", "z", "w", "v", "u"]], "corpus_bleu with c < r")
    check_bleu(corpus_bleu, [["a", "b", "c", "d", "e"], ["f", "g", "h", "i", "j"]], [["a", "b", "c", "x", "e"], ["f", "g", "y", "i", "j"]],
               "corpus_bleu with unequal precisions", max_n=2)
    check_bleu(corpus_bleu, [["a", "b", "c", "d"], ["e", "f", "g", "h"]], [["a", "b", "c", "d", "e", "f"], ["g", "h"]],
               "corpus_bleu where n-grams across the sentence boundary would match")


def check_corpus_bleu_edge_cases(corpus_bleu):
    """The hidden tests of `test_corpus_bleu_edge_cases`."""
    reference = ["a", "man", "rides", "a", "horse", "."]
    check_bleu(corpus_bleu, [[]], [reference], "corpus_bleu([[]], [reference]) (an empty hypothesis)")
    check_bleu(corpus_bleu, [[], []], [reference, reference], "corpus_bleu of two empty hypotheses")
    check_bleu(corpus_bleu, [[], reference], [reference, reference], "corpus_bleu(one empty and one perfect hypothesis)")
    check_bleu(corpus_bleu, [["a", "man"]], [reference], "corpus_bleu of a hypothesis shorter than 4 tokens")
    check_bleu(corpus_bleu, [["a", "x", "man", "y", "rides"]], [reference], "corpus_bleu with no bigram match")
    check_bleu(corpus_bleu, [["horse", "a", "rides", "man", "a"]], [reference], "corpus_bleu of a shuffled hypothesis")
    check_bleu(corpus_bleu, [["a", "man", "rides", "a", "horse"]], [reference], "corpus_bleu(..., max_n=2)", max_n=2)
    check_bleu(corpus_bleu, [["a", "man", "x", "a", "horse", "."]], [reference], "corpus_bleu(..., max_n=1)", max_n=1)
    check_bleu(corpus_bleu, [["a", "man", "rides", "a", "horse", ".", "."]], [reference], "corpus_bleu(..., max_n=3)", max_n=3)
    check_bleu(corpus_bleu, [reference], [[]], "corpus_bleu against an empty reference")


_BEAM = (log_probs, total_log_prob, penalised, reference_beam, logits_table, beam_mistakes)
ANSWER_HELPERS = {"greedy_decode": (log_probs, greedy_rows), "beam_search": _BEAM,
                  "corpus_bleu": (sacre, variant, bleu_mistakes)}
