"""Oracles of notebook 08 (greedy_decode, beam_search, corpus_bleu): the judges of its test cells.

The probes (in the kernel) run the student's decoders on stand-in models whose scores come from tables
(course_testkit.probes.decoding_bleu: TableModel, the tables and the cases), and on a small real Transformer
whose table is read from its forward() (``forward_table``), and hand back what they returned
and what the stand-ins saw wrong; the checks here take that data (``found``) and read the expected values from
the same tables on Python lists: the greedy rows row by row, the beam search step by step as the contract
describes it, with the log-probabilities written out in float64. BLEU comes from sacreBLEU on the space-joined
tokens with its own tokenisation and smoothing off; its checks take the student's corpus_bleu (in a judge, its
results replayed, probing.replayed), so sacreBLEU runs only in the judge. Never from the course's solution
(transformer_course.decoding, transformer_course.bleu). Known mistakes are computed too, only to name a
mistake in a message. The hidden tests' cases come from the probes module, drawn from the grading run's secret:
a judge rebuilds them from its own copy of it (probing.secret_generator).
"""
import math
import zlib
from collections import Counter

import torch

from .. import testing
from ..probes import decoding_bleu as probes
from ..probing import Raised, outcome, paired  # noqa: F401  (notebook 08 imports them from here)


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
                   choose="penalised", n_offset=0, drop_finished=False, stop_when_top_finished=False, raw_scores=False,
                   shrink=False):
    """The contract's beam search on Python lists, with knobs that reproduce known mistakes (used to name them).
    ``shrink``: the beam shrinks for good, one place fewer for each finished hypothesis (CS224N's variant)."""
    live, finished = [(0.0, (bos,))], []
    while live and len(live[0][1]) < max_len and not (shrink and len(finished) >= beam_size):
        candidates = []
        for total, ids in live:
            if keep_finished_live and len(ids) > 1 and ids[-1] == eos:
                candidates.append((total, ids))
                continue
            lp = table(tuple(source), ids) if raw_scores else log_probs(table, source, ids)
            candidates += [(total + lp[token], ids + (token,)) for token in range(vocab_size)]
        candidates.sort(key=lambda c: -c[0])
        kept = candidates[:beam_size - len(finished) if shrink else beam_size]
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
    elif choose == "probability":      # the product of the probabilities, divided by the penalty
        key = lambda c: math.exp(c[0]) / ((5 + len(c[1]) - 1) / 6) ** alpha
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


EXPONENT = "length_penalty is the exponent, ((5 + n) / 6) ** length_penalty, not a factor"
FACTOR_PENALTY = ("length_penalty is used as a factor (then every length_penalty > 0 ranks the hypotheses as 1 does): "
                  + EXPONENT)


def beam_mistakes(table, source, beam_size, max_len, bos, eos, alpha, vocab_size):
    """What known mistakes would return, by description."""
    args = (table, source, beam_size, max_len, bos, eos)
    return {
        "the best hypothesis is chosen by its raw sum of log-probabilities: divide by the length penalty "
        "((5 + n) / 6) ** length_penalty before choosing": reference_beam(*args, alpha, vocab_size, choose="raw"),
        "n counts <bos>: n is the number of ids AFTER <bos> (<eos> included)":
            reference_beam(*args, alpha, vocab_size, n_offset=1),
        "the length_penalty argument is ignored (0.6 is used whatever it is)": reference_beam(*args, 0.6, vocab_size),
        FACTOR_PENALTY: reference_beam(*args, 1.0, vocab_size) if alpha else None,
        "the probabilities are multiplied, and the penalty divides their product (which favours short hypotheses): "
        "add log-probabilities (F.log_softmax), a negative sum that the penalty divides":
            reference_beam(*args, alpha, vocab_size, choose="probability"),
        "finished hypotheses stay in the beam and take its places: set them aside when they end in <eos>":
            reference_beam(*args, alpha, vocab_size, keep_finished_live=True),
        "the beam shrinks for good, one place fewer for every finished hypothesis (CS224N's variant): a finished "
        "hypothesis takes a place only in the step where it ends, and every step keeps beam_size extensions of the "
        "live hypotheses": reference_beam(*args, alpha, vocab_size, shrink=True),
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


GREEDY_HINT = ("Check the shapes: ys is [B, t]; model.decode(ys, memory, src_mask, tgt_mask) gives [B, t, d]; "
               "model.generator of its last position gives scores [B, vocab]; the next token is their argmax over "
               "the last dimension, [B], appended to ys as a column.")
BEAM_HINT = ("Check the shapes step by step: live hypotheses [k, t]; model.decode(live, memory.expand(k, -1, -1), "
             "src_mask, causal_mask(t)) gives [k, t, d]; the log-probabilities of the next token [k, vocab]; "
             "the candidates' sums, flattened, [k * vocab].")


def beam_outcome(result, what, alpha=None):
    """outcome() of a beam_search call with length_penalty=alpha: a division by zero with length_penalty=0 says
    where it comes from, other failures get the shapes' hint."""
    if isinstance(result, Raised) and result.type_name == "ZeroDivisionError" and alpha == 0:
        raise AssertionError(f"{what} failed with ZeroDivisionError: {result.message}. With length_penalty=0 the "
                             "penalty ((5 + n) / 6) ** 0 is 1: " + EXPONENT)
    return outcome(result, what, BEAM_HINT)


def saw_no_wrong_masks(result, what):
    problems = result["mask_problems"]
    assert not problems, f"{what}: the model saw wrong masks: " + "; ".join(sorted(problems))


def stopping_problem(out, max_len, eos, pad):
    """What is wrong with where the rows of a greedy_decode output end (None if nothing), whatever their tokens."""
    rows, length = out.tolist(), out.size(1)
    ends = [row.index(eos, 1) if eos in row[1:] else None for row in rows]
    for i, (row, end) in enumerate(zip(rows, ends)):
        if end is not None and any(t != pad for t in row[end + 1:]):
            return f"row {i} goes on after its <eos>. After a row's eos_idx it gets only model.pad_idx ({pad})"
    if length > max_len:
        return f"the rows have {length} ids, more than max_len={max_len} (<bos> included)"
    if all(end is not None for end in ends):
        if length > max(ends) + 1:
            return (f"every row had produced <eos> after {max(ends) + 1} ids, but decoding went on to {length}: "
                    "stop as soon as every row has ended")
    elif length < max_len:
        return (f"decoding stopped after {length} ids although row {ends.index(None)} had not produced <eos> "
                "(did it stop when the first row ended?): go on until every row has produced eos_idx, or max_len ids")
    return None


def telling_apart(named, stand_ins):
    """Of several mistakes that give the student's answer, those that also give the student's answers to the
    stand-in searches (probes.stand_in_searches, run by the probe), which tell them apart: keeping finished
    hypotheses live is not ignoring the length penalty."""
    for case, result in paired(probes.stand_in_searches(), stand_ins):
        try:
            got = as_id_list(outcome(result["out"], "beam_search"), "beam_search")
        except Exception:   # the answer's failure is reported by the test that called us
            continue
        produced = beam_mistakes(case.table, (3,), case.beam_size, case.max_len, 1, 2, case.alpha, case.vocab_size)
        named = [description for description in named if produced[description] == got] or named
    return named


def check_beam(case, result, what=None, stand_ins=()):
    """The answer's search of ``case`` (result: what the probe's run got) is the contract's."""
    table, beam_size, max_len, bos, eos, alpha, vocab_size = (case.table, case.beam_size, case.max_len, case.bos,
                                                              case.eos, case.alpha, case.vocab_size)
    source = tuple(unpadded(case.src, case.pad)[0])
    what = what or f"beam_search(model, src, beam_size={beam_size}, max_len={max_len}, length_penalty={alpha})"
    got = as_id_list(beam_outcome(result["out"], what, alpha), what)
    expected = reference_beam(table, source, beam_size, max_len, bos, eos, alpha, vocab_size)
    if got == expected:
        return
    saw_no_wrong_masks(result, what)
    if got and got[0] != bos:
        raise AssertionError(f"{what} returned {got}: the hypothesis should start with bos_idx={bos}")
    named = [description for description, produced in beam_mistakes(table, source, beam_size, max_len, bos, eos,
                                                                     alpha, vocab_size).items() if produced == got]
    if len(named) > 1:
        named = telling_apart(named, stand_ins)
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
        kind = got.get("__unsupported__") if isinstance(got, dict) else None   # a type probe data cannot hold
        raise AssertionError(f"{what} should return a number, got {kind or type(got).__name__}") from None
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


def greedy_what(case):
    return (f"greedy_decode(model, src {list(case.src.shape)}, max_len={case.max_len}, bos_idx={case.bos}, "
            f"eos_idx={case.eos})")


def check_greedy_decode_shape(found):
    """The hidden tests of `test_greedy_decode_shape` (found: probes.runs of probes.greedy_shape_cases())."""
    for case, result in paired(probes.greedy_shape_cases(), found):
        batch, max_len, bos, what = case.src.size(0), case.max_len, case.bos, greedy_what(case)
        out = outcome(result["out"], what, GREEDY_HINT)
        testing.check_tensor(out, what, dtype=torch.long)
        assert out.dim() == 2 and out.size(0) == batch, \
            f"{what} has shape {list(out.shape)}: expected [{batch}, L], one row per sentence"
        assert 1 <= out.size(1) <= max_len, (f"{what} has {out.size(1)} ids per row; it should have at least 1 "
                                             f"(<bos>) and at most max_len={max_len}, <bos> included")
        assert (out[:, 0] == bos).all(), f"{what} starts with {out[:, 0].tolist()}: every row starts with bos_idx={bos}"
        if max_len > 1:
            check_first_tokens(out, case, result, what)


def check_first_tokens(out, case, result, what):
    """The token after <bos> of every row is the model's first argmax (a value the shapes alone cannot give)."""
    expected = [row[1] for row in greedy_rows(case.table, unpadded(case.src, case.pad), case.max_len, case.bos, case.eos)]
    assert out.size(1) >= 2, (f"{what} returned <bos> alone: with max_len={case.max_len} every row gets at least one "
                              "token more (no row has ended before the first step)")
    got = out[:, 1].tolist()
    if got != expected:
        problems = result["mask_problems"]
        raise AssertionError(f"{what}: the tokens after <bos> should be {expected} (the argmax of the model's scores "
                             f"for each row), got {got}" + (". The model saw wrong masks: " + "; ".join(problems)
                                                           if problems else ""))


def check_greedy_rows(out, expected, what):
    for i, want in enumerate(expected):
        n = min(len(want), out.size(1))
        got = out[i, :n].tolist()
        if got != want[:n]:
            first = next(t for t in range(n) if got[t] != want[t])
            raise AssertionError(f"{what}: row {i} should begin {want[:n]}, got {got} (first difference at position "
                                 f"{first}). The next token is the argmax over the vocabulary of the scores at the "
                                 "last position, with the causal mask and the source's padding mask")


def real_greedy_rows(case):
    """Greedy decoding of the real Transformer's sources (probes.RealCase) with its forward(), one sentence at a time."""
    real, rows = probes.real_transformer(case.seed, case.bos, case.eos), []
    for row in case.src.tolist():
        source, ys = torch.tensor([[t for t in row if t != 0]]), torch.tensor([[case.bos]])
        while ys.size(1) < case.max_len and (ys.size(1) == 1 or ys[0, -1].item() != case.eos):
            with torch.no_grad():
                logits = real(source, ys)
            ys = torch.cat([ys, logits[0, -1].argmax().view(1, 1)], dim=1)
        rows.append(ys[0].tolist())
    return rows


def check_greedy_decode_values(found):
    """The hidden tests of `test_greedy_decode_values` (found: "cases", probes.runs of probes.greedy_value_cases(),
    "real": probes.real_run of probes.real_greedy_case())."""
    for (case, rows), result in paired(probes.greedy_value_cases(), found["cases"]):
        batch, what = case.src.size(0), greedy_what(case)
        out = outcome(result["out"], what, GREEDY_HINT)
        saw_no_wrong_masks(result, what)
        assert out.dim() == 2 and out.size(0) == batch, f"{what} has shape {list(out.shape)}, expected [{batch}, L]"
        check_greedy_rows(out, greedy_rows(case.table, rows, case.max_len, case.bos, case.eos), what)
    case = probes.real_greedy_case()
    what = f"greedy_decode(a real Transformer, src {list(case.src.shape)}, max_len={case.max_len}, ...)"
    out = outcome(found["real"], what, GREEDY_HINT)
    testing.check_tensor(out, what, dtype=torch.long)
    for row, want in enumerate(real_greedy_rows(case)):
        n = min(len(want), out.size(1))
        assert out[row, :n].tolist() == want[:n], (
            f"{what}: row {row} should begin {want[:n]}, got {out[row, :n].tolist()}. Does every step use the causal "
            "mask and src_mask = padding_mask(src, model.pad_idx)?")


def check_greedy_decode_stopping(found):
    """The hidden tests of `test_greedy_decode_stopping` (found: probes.runs of probes.greedy_stopping_cases())."""
    results = paired(probes.greedy_stopping_cases(), found)
    for case, result in results["random"] + results["copy"]:
        what = greedy_what(case)
        out = outcome(result["out"], what, GREEDY_HINT)
        problem = stopping_problem(out, case.max_len, case.eos, case.pad)
        assert problem is None, f"{what} = {out.tolist()}: {problem}"
    # Where the copy model's rows end is known: after its source and <eos>, or not within max_len.
    for case, result in results["copy"]:
        out, what = result["out"], f"greedy_decode(copy_model, {case.src.tolist()}, max_len={case.max_len}, ...)"
        for row, (source, ids) in enumerate(zip(unpadded(case.src, case.pad), out.tolist())):
            end = len(source) + 1 if len(source) + 2 <= case.max_len else None
            got = ids.index(case.eos, 1) if case.eos in ids[1:] else None
            assert got == end, (f"{what} = {out.tolist()}: row {row} should "
                                + (f"say <eos> (eos_idx={case.eos}) at position {end}, after repeating its source"
                                   if end is not None else f"not reach <eos> within max_len={case.max_len} ids")
                                + (f", not at position {got}" if got is not None else "")
                                + ". The next token is the argmax of the model's scores at the last position")


def check_beam_search_basics(found):
    """The hidden tests of `test_beam_search_basics` (found: probes.beam_basics_probe)."""
    results = paired(probes.beam_basics_cases(), found["cases"])
    # beam_size=1 is greedy decoding (an answer may call greedy_decode for it: the tests' double's row is accepted)
    for case, result in results[:-2]:
        bos, eos, max_len = case.bos, case.eos, case.max_len
        what = f"beam_search(model, src, beam_size=1, max_len={max_len}, bos_idx={bos}, eos_idx={eos})"
        got = as_id_list(outcome(result["out"], what, BEAM_HINT), what)
        expected = greedy_rows(case.table, unpadded(case.src, case.pad), max_len, bos, eos)[0]
        assert got[:1] == [bos], f"{what} returned {got}: the hypothesis starts with bos_idx={bos}"
        assert len(got) <= max_len, f"{what} returned {len(got)} ids, more than max_len={max_len} (<bos> included)"
        assert eos not in got[1:-1], f"{what} returned {got}: it goes on after <eos>"
        if got == double_row(case):
            continue
        saw_no_wrong_masks(result, what)
        assert got == expected, f"{what} returned {got}; with beam_size=1 beam search is greedy decoding: {expected}"
    # the copy model with a wider beam: the contract's search returns its source, then <eos>
    check_beam(*results[-2])
    # max_len=1: only <bos>
    case, result = results[-1]
    what = f"beam_search(model, src, beam_size={case.beam_size}, max_len=1, bos_idx={case.bos}, eos_idx={case.eos})"
    got = as_id_list(outcome(result["out"], what, BEAM_HINT), what)
    assert got == [case.bos], f"{what} returned {got}: with room for one id the answer is [bos_idx] = [{case.bos}]"
    check_real_beam(probes.real_beam_case("beam_search basics real", beam_sizes=(2, 3)), found["real"])


def double_row(case):
    """The row the tests' greedy_decode double (probes.greedy_double) gives for ``case``, cut after its <eos>."""
    row = probes.double_rows(case.src, case.max_len, case.bos, case.eos, case.pad, case.vocab_size)[0].tolist()
    return row[:row.index(case.eos, 1) + 1] if case.eos in row[1:] else row


def brute_force_best(case):
    """The best hypothesis of ``case`` by its penalised score (alpha 0.6 unless the case says otherwise), over every
    hypothesis of at most max_len ids that never says <pad> or <bos>."""
    alpha = 0.6 if case.alpha is None else case.alpha
    source = tuple(unpadded(case.src, case.pad)[0])
    words = [w for w in range(case.vocab_size) if w not in (case.pad, case.bos)]
    best = (-math.inf, None)

    def visit(ids, total):
        nonlocal best
        if len(ids) > 1 and (ids[-1] == case.eos or len(ids) == case.max_len):
            best = max(best, (penalised(total, ids, alpha), list(ids)), key=lambda b: b[0])
            return
        lp = log_probs(case.table, source, ids)
        for word in words:
            visit(ids + (word,), total + lp[word])
    visit((case.bos,), 0.0)
    return best[1]


def check_beam_search_search(found):
    """The hidden tests of `test_beam_search_search` (found: probes.beam_search_probe)."""
    results, stand_ins = paired(probes.beam_search_cases(), found["cases"]), found["stand_ins"]
    # The contract's search on random tables, step by step.
    for case, result in results["random"]:
        check_beam(case, result, stand_ins=stand_ins)
    # Where greedy decoding misses the best hypothesis (found by brute force over all of them), a beam of 4 finds it:
    # each table was searched twice, with the default length_penalty and with 0.6 given.
    brute_force = results["brute_force"]
    for (case, result), (given, given_result) in zip(brute_force[::2], brute_force[1::2]):
        best = brute_force_best(case)
        what = (f"beam_search(model, src, beam_size=4, max_len=5, bos_idx={case.bos}, eos_idx={case.eos}) with a random "
                "table on which greedy decoding misses the best hypothesis")
        got = as_id_list(outcome(result["out"], what, BEAM_HINT), what)
        if got != best:
            check_beam(given, given_result, what, stand_ins=stand_ins)
            raise AssertionError(f"{what} returned {got}; the best hypothesis (by brute force) is {best}")
    # Finished hypotheses are kept: <eos> at once wins for every beam size; <eos> is the best first step, yet a
    # longer hypothesis wins with the penalty: the search must go on; a finished hypothesis takes a place of the beam
    # only in the step where it ends.
    for name in ("early_end", "eos_first", "eos_kept"):
        for case, result in results[name]:
            check_beam(case, result, stand_ins=stand_ins)
    check_real_beam(probes.real_beam_case("beam_search search real", beam_sizes=(3, 4)), found["real"])


def check_beam_search_length_penalty(found):
    """The hidden tests of `test_beam_search_length_penalty` (found: probes.beam_penalty_probe)."""
    for case, result in paired(probes.beam_penalty_cases(), found["cases"]):
        check_beam(case, result, stand_ins=found["stand_ins"])
    check_real_beam(probes.real_beam_case("beam_search length penalty real", beam_sizes=(2, 4), alphas=(0.0, 2.0)),
                    found["real"])


def forward_table(model, src):
    """The scores a Transformer gives the token after ``prefix``, read from its forward() on the sentence without
    its padding (its own masks): the table of a real model, for reference_beam."""
    source = torch.tensor([[t for t in src[0].tolist() if t != model.pad_idx]])
    cache = {}

    def table(_, prefix):
        if prefix not in cache:
            with torch.no_grad():
                cache[prefix] = model(source, torch.tensor([prefix]))[0, -1].double().tolist()
        return cache[prefix]
    return table


REAL_MODEL_HINT = ("A real model has nothing but encode, decode, generator and pad_idx: use only model.encode, model.decode "
                   "and model.generator, with src_mask = padding_mask(src, model.pad_idx) and the causal mask at every step")


def check_real_beam(case, result):
    """The answer's search with a real Transformer (probes.RealCase; result: probes.real_run) is the contract's: the
    same hypothesis, or one whose penalised score is the same up to float32 rounding."""
    model = probes.real_transformer(case.seed, case.bos, case.eos)
    table, source = forward_table(model, case.src), ()
    alpha = 0.6 if case.alpha is None else case.alpha
    what = (f"beam_search(a real Transformer, src {list(case.src.shape)}, beam_size={case.beam_size}, "
            f"max_len={case.max_len}, bos_idx={case.bos}, eos_idx={case.eos}, length_penalty={case.alpha})")
    if isinstance(result, Raised) and result.type_name != "AssertionError" and not (
            result.type_name == "ZeroDivisionError" and case.alpha == 0):
        raise AssertionError(f"{what} failed with {result.type_name}: {result.message}. {REAL_MODEL_HINT}")
    got = as_id_list(beam_outcome(result, what, case.alpha), what)
    expected = reference_beam(table, source, case.beam_size, case.max_len, case.bos, case.eos, alpha,
                              model.generator.out_features)
    if got == expected:
        return
    assert got[:1] == [case.bos], f"{what} returned {got}: the hypothesis should start with bos_idx={case.bos}"
    valid = len(got) <= case.max_len and all(0 <= t < model.generator.out_features for t in got)
    score = penalised(total_log_prob(table, source, got), got, alpha) if valid else -math.inf
    best = penalised(total_log_prob(table, source, expected), expected, alpha)
    assert abs(score - best) <= 1e-5 * max(1.0, abs(best)), (
        f"{what} returned {got}, but the contract's search returns {expected} (penalised score {best:.4f}"
        + (f" against {score:.4f}" if valid else "") + f"). {REAL_MODEL_HINT}")


def check_bleu_cases(corpus_bleu, cases):
    for args, what in cases:
        check_bleu(corpus_bleu, *args[:2], what, *args[2:])


def check_corpus_bleu_values(corpus_bleu):
    """The hidden tests of `test_corpus_bleu_values` (in a judge, corpus_bleu replays probes.bleu_results)."""
    check_bleu_cases(corpus_bleu, probes.bleu_value_cases())


def check_corpus_bleu_parts(corpus_bleu):
    """The hidden tests of `test_corpus_bleu_parts`."""
    check_bleu_cases(corpus_bleu, probes.bleu_part_cases())


def check_corpus_bleu_edge_cases(corpus_bleu):
    """The hidden tests of `test_corpus_bleu_edge_cases`."""
    check_bleu_cases(corpus_bleu, probes.bleu_edge_cases())
