"""Notebook 08: the tests' stand-in models, their tables and inputs, shared by the kernel and the judges.

The probes run the student's decoders on ``TableModel``s and on a small real Transformer (in the kernel) and
hand back what they returned and what the stand-ins saw wrong (``mask_problems``); the judges (transformer_course.
oracles.decoding_bleu, in the grader) decode the same tables themselves, from the same cases built here. The hidden
tests' cases are drawn from the grading run's secret (probing.secret_generator): table seeds, sizes, sources,
special ids, and every id of the designed tables renamed (``relabeled``), so the kernel and the judge build the
same cases and no answer can know them in advance. beam_search's tests give it ``greedy_double`` for
greedy_decode. BLEU's probes record the student's corpus_bleu on the corpora listed here (their tokens renamed
from the secret); sacreBLEU runs only in the judge. Nothing here knows an expected value, and nothing here
decodes: the kernel must not find a search it could call.
"""
import math
import random
import zlib
from collections import namedtuple

import torch
from torch import nn

from transformer_course.masks import padding_mask, target_mask
from ..probing import attempt, record_calls, secret_generator, secret_seed


class TableModel(nn.Module):
    """A stand-in for a trained Transformer: the scores of the token after `prefix` (target ids, <bos> first)
    are table(source, prefix), `source` being the source ids without padding.

    Like a real decoder, position t of decode() sees only what the masks let it see: with the causal (or
    target) mask and the source's padding mask its scores are table(source, tgt[b, :t+1]); otherwise it sees
    other tokens and gives other scores, and `mask_problems` says what was wrong.
    """

    def __init__(self, vocab_size, table, pad_idx=0):
        super().__init__()
        self.vocab_size, self.table, self.pad_idx = vocab_size, table, pad_idx
        self.generator = nn.Identity()                  # decode() already returns the scores
        self.anchor = nn.Parameter(torch.zeros(1))      # so that next(model.parameters()).device works
        self.mask_problems = set()

    def _mask(self, mask, shape, name):
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError(f"{name} must be a torch.bool tensor (True = may attend), got "
                             f"{getattr(mask, 'dtype', type(mask).__name__)}")
        try:
            return torch.broadcast_to(mask, shape).cpu()
        except RuntimeError:
            raise RuntimeError(f"{name} of shape {list(mask.shape)} does not broadcast to "
                               f"[batch, heads, q_len, k_len] = {list(shape)}") from None

    def encode(self, src, src_mask):
        batch, length = src.shape
        seen = (torch.ones(batch, length, dtype=torch.bool) if src_mask is None
                else self._mask(src_mask, (batch, 1, 1, length), "encode's src_mask").reshape(batch, length))
        return torch.stack([src.float(), seen.float().to(src.device)], dim=-1)   # memory: ids and what was seen

    def _note_target_mask(self, allowed, causal, tgt_mask):
        if tgt_mask is None:
            self.mask_problems.add("decode was called with tgt_mask=None: pass the causal mask")
        elif (allowed == ~causal).all():
            self.mask_problems.add("the tgt_mask has the wrong polarity (True must mean 'may attend')")
        elif (allowed & ~causal).any():
            self.mask_problems.add("the tgt_mask lets a position see later tokens: use the causal mask")
        elif not (allowed == causal).all():
            self.mask_problems.add("the tgt_mask hides tokens a position should see")

    def decode(self, tgt, memory, src_mask, tgt_mask):
        batch, length = tgt.shape
        if memory.size(0) != batch:
            if memory.size(0) != 1:
                raise RuntimeError(f"memory has batch size {memory.size(0)} but tgt has {batch}")
            memory = memory.expand(batch, *memory.shape[1:])
        src, seen = memory[..., 0].round().long().cpu(), memory[..., 1].cpu() > 0.5
        cross = (torch.ones(batch, length, src.size(1), dtype=torch.bool) if src_mask is None
                 else self._mask(src_mask, (batch, 1, length, src.size(1)), "decode's src_mask")[:, 0])
        allowed = (torch.ones(batch, length, length, dtype=torch.bool) if tgt_mask is None
                   else self._mask(tgt_mask, (batch, 1, length, length), "tgt_mask")[:, 0])
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        scores = torch.empty(batch, length, self.vocab_size)
        for b in range(batch):
            ids, real = tgt[b].tolist(), src[b] != self.pad_idx
            source = tuple(src[b][real].tolist())
            row_ok = (allowed[b] == causal).all(dim=1).tolist()
            if self.pad_idx not in ids and length > 1:
                self._note_target_mask(allowed[b], causal, tgt_mask)
            for t in range(length):
                source_ok = bool((seen[b] == real).all() and (cross[b, t] == real).all())
                if not source_ok:
                    self.mask_problems.add("the source's padding was not masked: pass src_mask = "
                                           "padding_mask(src, model.pad_idx) to encode and decode")
                if source_ok and all(row_ok[:t + 1]):
                    offset = 4 * zlib.crc32(repr((source, ids[:t + 1])).encode()) / 2 ** 32   # logits, not log-probs
                    scores[b, t] = torch.as_tensor(self.table(source, tuple(ids[:t + 1])), dtype=torch.float32) + offset
                else:      # the position sees something else: other scores, as in a real model
                    key = (src[b].tolist(), seen[b].tolist(), cross[b, t].tolist(),
                           [(j, ids[j], allowed[b, j].tolist()) for j in range(length) if allowed[b, t, j]])
                    generator = torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))
                    scores[b, t] = 3 * torch.randn(self.vocab_size, generator=generator)
        return scores.to(tgt.device)

    def forward(self, src, tgt):
        src_mask = padding_mask(src, self.pad_idx)
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, target_mask(tgt, self.pad_idx)))


# ----------------------------------------------------------------------------- the tables

def copy_table(vocab_size, babble=3, pad_idx=0, bos_idx=1, eos_idx=2):
    """A model that repeats its source, then says <eos> (and, asked to go on, `babble` forever)."""
    def table(source, prefix):
        scores = [0.0] * vocab_size
        scores[pad_idx] = scores[bos_idx] = -30.0
        done = len(prefix) - 1
        scores[source[done] if done < len(source) else eos_idx if done == len(source) else babble] = 5.0
        return scores
    return table


def random_table(vocab_size, seed, eos_bias=0.7, pad_idx=0, bos_idx=1, eos_idx=2):
    """Random scores for every (source, prefix); <eos> gets likelier as the prefix grows."""
    def table(source, prefix):
        generator = torch.Generator().manual_seed(zlib.crc32(repr((seed, source, prefix)).encode()))
        scores = 2 * torch.randn(vocab_size, generator=generator, dtype=torch.float64)
        scores[eos_idx] += eos_bias * (len(prefix) - 3)
        scores[pad_idx] = scores[bos_idx] = -30.0
        return scores.tolist()
    return table


def _log_probs_of(steps, vocab_size):
    probs = [1e-6] * vocab_size
    for token, p in steps.items():
        probs[token] = p
    return [math.log(p) for p in probs]


def early_end_table(source, prefix, vocab_size=6):
    """<eos> at once (0.4) beats every longer sentence: after any first word the model is unsure of everything."""
    steps = {2: 0.4, 3: 0.35, 4: 0.25} if len(prefix) == 1 else {2: 0.1, 3: 0.3, 4: 0.3, 5: 0.3}
    return _log_probs_of(steps, vocab_size)


def short_or_long_table(source, prefix, vocab_size=5):
    """<eos> at once (0.45) against "w w w <eos>" (0.55 * 0.9 ** 3): the length penalty prefers the long one."""
    steps = {2: 0.45, 3: 0.55} if len(prefix) == 1 else {3: 0.9, 2: 0.1} if len(prefix) < 4 else {2: 0.9, 3: 0.1}
    return _log_probs_of(steps, vocab_size)


def n_trap_table(source, prefix, vocab_size=5):
    """<eos> at once (0.45) against [w w w <eos>] with log P = -1.005: with n counted right the long one wins at
    alpha = 0.6, with n counting <bos> the short one."""
    steps = {1: {2: 0.45, 3: 0.55}, 2: {3: 0.88, 2: 0.12}, 3: {3: 0.88, 2: 0.12}, 4: {2: 0.8595, 3: 0.1405}}
    return _log_probs_of(steps.get(len(prefix), {2: 0.5, 3: 0.5}), vocab_size)


def beam_slot_table(source, prefix, vocab_size=7):
    """Ids 3-6 are "a", "x", "y", "w". <eos> at once (0.25) is kept in the first step, beside "a" (0.74); after
    "a", "x" (0.5) leads nowhere and "y" (0.45) to <eos> (0.99): "a y <eos>" (0.33) is the best. A beam of 2 finds
    it only if the second step again keeps 2 extensions; a beam that shrank for good keeps "a x" alone."""
    steps = {(1,): {3: 0.74, 2: 0.25, 4: 0.005, 5: 0.005}, (1, 3): {4: 0.5, 5: 0.45, 6: 0.05},
             (1, 3, 4): {3: 0.3, 4: 0.26, 5: 0.24, 6: 0.2}, (1, 3, 5): {2: 0.99, 6: 0.01}}
    return _log_probs_of(steps.get(tuple(prefix), {2: 0.9, 6: 0.1}), vocab_size)


def eos_kept_table(source, prefix, vocab_size=7):
    """Ids 3-6 are "a", "x", "y", "w". <eos> at once (0.3) is kept in the first step, beside "a" (0.7); after "a",
    "x" (0.6) leads nowhere and "y" (0.4) to <eos> (0.99): "a y <eos>" (0.277, -1.08 with the penalty against -1.20
    for <eos> at once) is the best. A beam of 2 finds it only if <eos> at once gives its place back after the first
    step; one that keeps finished hypotheses among its places keeps "a x" alone beside it."""
    steps = {(1,): {2: 0.3, 3: 0.7}, (1, 3): {4: 0.6, 5: 0.4}, (1, 3, 4): {3: 0.28, 4: 0.26, 5: 0.24, 6: 0.22},
             (1, 3, 5): {2: 0.99, 6: 0.01}}
    return _log_probs_of(steps.get(tuple(prefix), {2: 0.9, 6: 0.1}), vocab_size)


def likelier_long_table(source, prefix, vocab_size=5):
    """<eos> at once (0.4) against "w w w <eos>" (0.6 * 0.9 ** 3 = 0.44): the long one is likelier, and wins by
    its log-probability with or without the penalty; a product of probabilities divided by the penalty (0.44 /
    1.28) prefers the short one."""
    steps = {2: 0.4, 3: 0.6} if len(prefix) == 1 else {3: 0.9, 2: 0.1} if len(prefix) < 4 else {2: 0.9, 3: 0.1}
    return _log_probs_of(steps, vocab_size)


def eos_first_table(source, prefix, vocab_size=5):
    """<eos> is the best first step, yet a longer hypothesis wins with the penalty: the search must go on."""
    steps = {2: 0.5, 3: 0.45} if len(prefix) == 1 else {2: 0.99, 3: 0.01} if len(prefix) >= 4 else {2: 0.01, 3: 0.99}
    return _log_probs_of(steps, vocab_size)


# ----------------------------------------------------------------------------- the cases, and running them

# One decoding of a stand-in model: its table, vocabulary size and pad_idx; the arguments of the call
# (beam_size and length_penalty only for beam_search; a length_penalty of None is left to its default).
Case = namedtuple("Case", "table vocab_size src max_len bos eos pad beam_size alpha",
                  defaults=(1, 2, 0, None, None))


def draw(generator, low, high):
    """An int in [low, high], drawn from a torch.Generator."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def draw_float(generator, low, high):
    """A number in [low, high] with two decimals (readable in a message), drawn from a torch.Generator."""
    return round(low + (high - low) * torch.rand(1, generator=generator).item(), 2)


def draw_specials(generator, vocab_size):
    """(pad, bos, eos): three different ids, pad never 0 (so that an answer that assumes <pad> = 0 shows)."""
    pad = draw(generator, 1, vocab_size - 1)
    others = [i for i in range(vocab_size) if i != pad]
    bos, eos = (others[i] for i in torch.randperm(len(others), generator=generator)[:2].tolist())
    return pad, bos, eos


def draw_words(generator, words, length):
    """`length` words of `words`, no two neighbours the same."""
    sentence = []
    while len(sentence) < length:
        word = words[draw(generator, 0, len(words) - 1)]
        if not sentence or word != sentence[-1]:
            sentence.append(word)
    return sentence


def padded(rows, pad, width=None):
    """Lists of ids -> a [len(rows), width] LongTensor, padded with `pad` on the right."""
    width = width or max(map(len, rows))
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.long)


def random_batch(seed, vocab_size, specials, size):
    """A random table, and `size` random sources of 1 to `size` words (the first one shorter than `size`, so that
    there is padding): as lists, and padded into [size, size]."""
    pad, bos, eos = specials
    table = random_table(vocab_size, seed, pad_idx=pad, bos_idx=bos, eos_idx=eos)
    words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
    generator = random.Random(seed)
    lengths = [generator.randint(1, max(1, size - 1))] + [generator.randint(1, size) for _ in range(size - 1)]
    rows = [[generator.choice(words) for _ in range(length)] for length in lengths]
    return table, rows, padded(rows, pad, size)


def secret_random_batch(generator, size, vocab_sizes=(6, 9)):
    """``random_batch`` with its seed, vocabulary size and special ids drawn from ``generator``: (case fields, rows)."""
    vocab_size = draw(generator, *vocab_sizes)
    pad, bos, eos = draw_specials(generator, vocab_size)
    table, rows, src = random_batch(draw(generator, 0, 2 ** 31), vocab_size, (pad, bos, eos), size)
    return dict(table=table, vocab_size=vocab_size, src=src, bos=bos, eos=eos, pad=pad), rows


def secret_copy_case(generator, lengths, max_len, vocab_size=9):
    """The copy model (which babbles after <eos>) on sources of the given lengths, its special ids and words drawn
    from ``generator``: row i ends with <eos> after lengths[i] + 2 ids."""
    pad, bos, eos = draw_specials(generator, vocab_size)
    words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
    rows = [draw_words(generator, words, length) for length in lengths]
    table = copy_table(vocab_size, babble=words[draw(generator, 0, len(words) - 1)], pad_idx=pad, bos_idx=bos, eos_idx=eos)
    return Case(table, vocab_size, padded(rows, pad), max_len, bos, eos, pad)


def relabeled(table, order):
    """``table`` with its ids renamed: id i becomes order[i]; ids of ``order`` past the table's vocabulary are
    words it gives its lowest score. Every search finds the same hypotheses, renamed (the log-probabilities
    move with their ids)."""
    original = {new: old for old, new in enumerate(order)}

    def renamed(source, prefix):
        scores = table(tuple(original[t] for t in source), tuple(original[t] for t in prefix))
        out = [min(scores)] * len(order)
        for old, score in enumerate(scores):
            out[order[old]] = score
        return out
    return renamed


def renamed(case, generator, extra_words=2):
    """``case`` with every id renamed at random, its specials included, and up to ``extra_words`` unlikely words
    added to the vocabulary: the same search under names drawn from ``generator``."""
    order = torch.randperm(case.vocab_size + draw(generator, 0, extra_words), generator=generator).tolist()
    src = torch.tensor([[order[t] for t in row] for row in case.src.tolist()], dtype=torch.long)
    return case._replace(table=relabeled(case.table, order), vocab_size=len(order), src=src, bos=order[case.bos],
                         eos=order[case.eos], pad=order[case.pad])


def run(answer, case, keywords=()):
    """The answer on a fresh stand-in model of ``case`` (greedy_decode when it has no beam_size): what it returned
    (or Raised), and the model's log of what it saw wrong. ``keywords``: the arguments passed by name."""
    model = TableModel(case.vocab_size, case.table, pad_idx=case.pad)
    names = ["src", "beam_size", "max_len", "bos_idx", "eos_idx", "length_penalty"]
    values = [case.src, case.beam_size, case.max_len, case.bos, case.eos, case.alpha]
    given = [(n, v) for n, v in zip(names, values) if v is not None]
    out = attempt(answer, model, *[v for n, v in given if n not in keywords], **{n: v for n, v in given if n in keywords})
    return {"out": out, "mask_problems": sorted(model.mask_problems)}


def runs(answer, cases):
    """``run`` on each case of a list, or of each list in a dict of them (the same keys come back)."""
    if isinstance(cases, dict):
        return {name: runs(answer, group) for name, group in cases.items()}
    return [run(answer, case) for case in cases]


# ----------------------------------------------------------------------------- greedy_decode

def greedy_shape_cases():
    """Random batches of 1 to 6 sentences with max_len from 1 to 9, and the copy model on sources too long to end
    within max_len: sizes, tables and special ids drawn from the secret."""
    generator = secret_generator("greedy_decode shape")
    cases = []
    for batch, max_len in [(1, (5, 8)), ((4, 6), (6, 9)), ((2, 4), (1, 1)), ((2, 3), (2, 2)), ((3, 5), (5, 8))]:
        batch = batch if isinstance(batch, int) else draw(generator, *batch)
        fields, _ = secret_random_batch(generator, batch)
        cases.append(Case(max_len=draw(generator, *max_len), **fields))
    max_len = draw(generator, 2, 4)
    cases.append(secret_copy_case(generator, [draw(generator, max_len - 1, 6) for _ in range(draw(generator, 2, 4))],
                                  max_len))
    return cases


def greedy_value_cases():
    """(case, its sources as lists) of random batches, and of the copy model: drawn from the secret."""
    generator = secret_generator("greedy_decode values")
    cases = []
    for max_len in [(8, 10), (10, 14), (5, 7), (9, 11), (16, 22)]:
        fields, rows = secret_random_batch(generator, 5)
        cases.append((Case(max_len=draw(generator, *max_len), **fields), rows))
    copy = secret_copy_case(generator, [draw(generator, 2, 6) for _ in range(4)], 12)
    return cases + [(copy, [[t for t in row if t != copy.pad] for row in copy.src.tolist()])]


# A small real Transformer: 11 source and 13 target ids, <pad> 0 on both sides.
RealCase = namedtuple("RealCase", "seed src max_len bos eos beam_size alpha", defaults=(None, None))


def real_transformer(seed, bos=None, eos=None):
    """A small real Transformer (weights from ``seed``), in eval mode. Its generator never says <pad> (0) or
    ``bos`` (as a trained model would not), and favours ``eos`` a little, so that hypotheses end."""
    from transformer_course.model import Transformer
    from ..testing import same_random_numbers

    with same_random_numbers(seed):
        model = Transformer(11, 13, d_model=16, n_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32).eval()
    with torch.no_grad():
        for token, shift in ((0, -30.0), (bos, -30.0), (eos, 1.5)):
            if token is not None:
                model.generator.bias[token] += shift
    return model


def draw_real_specials(generator):
    """(bos, eos): two different target ids other than <pad> (0)."""
    bos, eos = (1 + i for i in torch.randperm(12, generator=generator)[:2].tolist())
    return bos, eos


def real_greedy_case():
    """Three sources of different lengths (one of 4 words, one of 1 or 2) for the real Transformer, its weights,
    bos_idx, eos_idx and max_len drawn from the secret."""
    generator = secret_generator("greedy_decode real")
    bos, eos = draw_real_specials(generator)
    lengths = [4, draw(generator, 1, 2), draw(generator, 1, 4)]
    rows = [torch.randint(1, 11, (length,), generator=generator).tolist() for length in lengths]
    return RealCase(secret_seed("greedy_decode real weights"), padded(rows, 0), draw(generator, 7, 10), bos, eos)


def real_run(answer, case):
    """The answer on the real Transformer of ``case``: greedy_decode(model, src, max_len, bos_idx, eos_idx), or,
    with a beam_size, beam_search(model, src, beam_size, max_len, bos_idx, eos_idx[, length_penalty])."""
    model = real_transformer(case.seed, case.bos, case.eos)
    if case.beam_size is None:
        return attempt(answer, model, case.src, case.max_len, case.bos, case.eos)
    alpha = () if case.alpha is None else (case.alpha,)
    return attempt(answer, model, case.src, case.beam_size, case.max_len, case.bos, case.eos, *alpha)


def greedy_stopping_cases():
    """Random batches (max_len from 1 to 40), and the copy model (which babbles after <eos>): sources of different
    lengths with max_len=30, and sources too long to end within max_len. Drawn from the secret."""
    generator = secret_generator("greedy_decode stopping")
    cases = []
    for max_len in [(10, 14), (4, 4), (25, 35), (8, 10), (3, 3), (2, 2), (40, 40), (1, 1)]:
        fields, _ = secret_random_batch(generator, 4, vocab_sizes=(5, 9))
        cases.append(Case(max_len=draw(generator, *max_len), **fields))
    lengths = torch.randperm(6, generator=generator)[:3] + 1                    # three different lengths, 1 to 6
    max_len = draw(generator, 3, 5)
    copies = [secret_copy_case(generator, lengths.tolist(), 30),
              secret_copy_case(generator, [draw(generator, 1, 6)], 30),
              secret_copy_case(generator, [draw(generator, max_len - 1, 6) for _ in range(2)], max_len)]
    return {"random": cases, "copy": copies}


def greedy_values_probe(answer):
    """The hidden value tests' probe: the answer on the random batches, and on the real Transformer."""
    return {"cases": runs(answer, [case for case, _ in greedy_value_cases()]), "real": real_run(answer, real_greedy_case())}


def copy_runs(answer, src, max_lens):
    """greedy_decode(copy_model, src, max_len=..., bos_idx=1, eos_idx=2) for each max_len: the visible tests."""
    return [run(answer, Case(copy_table(9), 9, torch.tensor(src), max_len), keywords=("max_len", "bos_idx", "eos_idx"))
            for max_len in max_lens]


# ----------------------------------------------------------------------------- beam_search

def double_rows(src, max_len, bos_idx, eos_idx, pad_idx, vocab_size):
    """What ``greedy_double`` returns: rows of greedy_decode's form (<bos>, then words and <eos> followed by
    padding, or, for a row that never ends, words up to max_len ids, where greedy_decode stops) whose words are
    drawn from the secret and the arguments, not from any model."""
    bos, eos, pad, max_len = int(bos_idx), int(eos_idx), int(pad_idx), int(max_len)
    words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
    generator = random.Random(f"{secret_seed('greedy double')}:{src.tolist()}:{max_len}:{bos}:{eos}:{pad}")
    rows = []
    for _ in range(src.size(0)):
        if max_len > 1 and generator.random() < 0.75:           # ends: words, <eos>, then padding
            n = generator.randint(1, max_len - 1)               # ids after <bos>, the <eos> included
            rows.append([bos] + [generator.choice(words) for _ in range(n - 1)] + [eos])
        else:                                                   # never ends: words up to max_len
            rows.append([bos] + [generator.choice(words) for _ in range(max_len - 1)])
    return padded(rows, pad).to(src.device)


def greedy_double(model, src, max_len, bos_idx, eos_idx):
    """A stand-in for greedy_decode in beam_search's tests (not a decoder: it never runs the model): rows of
    greedy_decode's form whose words are pseudo-random (``double_rows``). beam_search need not call greedy_decode;
    an answer that does (for beam_size=1) gets these rows, and the judges accept what follows from them, so that a
    mistake in greedy_decode costs points in greedy_decode's tests only."""
    return double_rows(src, max_len, bos_idx, eos_idx, model.pad_idx, getattr(model, "vocab_size", None) or 8)


def stand_in_searches():
    """Searches on which known mistakes of beam_search differ: they tell the mistakes apart (every two of them
    give different answers on at least one). The random tables part a beam that shrinks for good from finished
    hypotheses kept in the beam (seed 32), a length penalty used as a factor from one ignored (seed 24, 5
    words) and finished hypotheses kept in the beam from a search that stops when the best extension ends
    (seed 24, 6 words). They only name a mistake (its message); they decide no test, so they need no secret."""
    src = torch.tensor([[3]])
    return [Case(short_or_long_table, 5, src, 10, beam_size=2, alpha=0.6),
            Case(short_or_long_table, 5, src, 10, beam_size=2, alpha=0.0),
            Case(early_end_table, 6, src, 8, beam_size=2, alpha=0.6),
            Case(beam_slot_table, 7, src, 6, beam_size=2, alpha=0.6),
            Case(likelier_long_table, 5, src, 10, beam_size=2, alpha=0.6),
            Case(n_trap_table, 5, src, 10, beam_size=2, alpha=0.6),
            Case(random_table(4, 32, eos_bias=2.5), 4, src, 6, beam_size=2, alpha=0.6),
            Case(random_table(5, 24), 5, src, 7, beam_size=3, alpha=1.5),
            Case(random_table(6, 24), 6, src, 7, beam_size=3, alpha=0.6)]


def real_beam_case(tag, beam_sizes=(2, 4), alphas=(0.6, 0.6)):
    """One source sentence (with 0 to 2 pads) for the real Transformer, its weights, bos_idx, eos_idx, beam_size,
    max_len and length_penalty drawn from the secret."""
    generator = secret_generator(tag)
    bos, eos = draw_real_specials(generator)
    words = torch.randint(1, 11, (draw(generator, 2, 5),), generator=generator).tolist()
    src = padded([words], 0, len(words) + draw(generator, 0, 2))
    return RealCase(secret_seed(tag + " weights"), src, draw(generator, 5, 8), bos, eos, draw(generator, *beam_sizes),
                    draw_float(generator, *alphas))


def beam_basics_cases():
    """beam_size=1 on random tables; the copy model with a wider beam; max_len=1. Drawn from the secret."""
    generator = secret_generator("beam_search basics")
    cases = []
    for max_len in [(6, 9), (10, 13), (5, 7), (3, 4)]:
        vocab_size = draw(generator, 6, 8)
        pad, bos, eos = draw_specials(generator, vocab_size)
        table = random_table(vocab_size, draw(generator, 0, 2 ** 31), pad_idx=pad, bos_idx=bos, eos_idx=eos)
        words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
        src = torch.tensor([draw_words(generator, words, 3) + [pad]])
        cases.append(Case(table, vocab_size, src, draw(generator, *max_len), bos, eos, pad, beam_size=1))
    length = draw(generator, 1, 5)
    copy = secret_copy_case(generator, [length], length + draw(generator, 2, 5))
    cases.append(copy._replace(beam_size=draw(generator, 2, 4), alpha=0.6))
    vocab_size = draw(generator, 5, 8)
    pad, bos, eos = draw_specials(generator, vocab_size)
    table = random_table(vocab_size, draw(generator, 0, 2 ** 31), pad_idx=pad, bos_idx=bos, eos_idx=eos)
    words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
    cases.append(Case(table, vocab_size, torch.tensor([draw_words(generator, words, 2)]), 1, bos, eos, pad,
                      beam_size=draw(generator, 2, 4)))
    return cases


def beam_basics_probe(answer):
    """The hidden basic tests' probe: the answer on the tables, and on a real Transformer with a beam of 2 or 3."""
    return {"cases": runs(answer, beam_basics_cases()),
            "real": real_run(answer, real_beam_case("beam_search basics real", beam_sizes=(2, 3)))}


# Random tables of 6 words (source [3, 4, 5], beam 4, max_len 5, alpha 0.6) on which greedy decoding misses the best
# hypothesis, found by brute force, and a beam of 4 finds it (tests/test_decoding.py checks every one).
BRUTE_FORCE_SEEDS = (1, 2, 3, 10, 16, 19, 27, 29, 36, 38, 50, 54, 61, 62, 66, 71, 72, 73, 74, 77,
                     79, 81, 90, 93, 94, 96, 97, 98, 99, 110, 112, 120, 126, 129, 134, 138, 153, 155, 158, 161)


def brute_force_cases(generator, count=3):
    """``count`` of the BRUTE_FORCE_SEEDS tables, chosen and renamed by ``generator``; each twice, with the default
    length_penalty and with 0.6 given."""
    cases = []
    for index in torch.randperm(len(BRUTE_FORCE_SEEDS), generator=generator)[:count].tolist():
        case = Case(random_table(6, BRUTE_FORCE_SEEDS[index]), 6, torch.tensor([[3, 4, 5]]), 5, beam_size=4)
        case = renamed(case, generator, extra_words=0)        # no extra words: the brute force stays quick
        cases += [case, case._replace(alpha=0.6)]
    return cases


def beam_search_cases():
    """The contract's search on random tables; where greedy decoding misses the best hypothesis (each table
    twice: with the default length_penalty, then with 0.6 given); finished hypotheses kept; <eos> the best first
    step; a finished hypothesis that must give its place back. Every table's ids renamed, and the random ones
    drawn, from the secret."""
    generator = secret_generator("beam_search search")
    src = torch.tensor([[3, 4, 5, 0]])
    random_cases = [Case(random_table(vocab_size, draw(generator, 0, 2 ** 31)), vocab_size, src, max_len,
                         beam_size=beam_size, alpha=alpha)
                    for vocab_size, beam_size, max_len, alpha in [(6, 2, 6, 0.6), (6, 3, 6, 0.6), (7, 4, 7, 0.6),
                                                                  (6, 5, 5, 1.0), (8, 3, 8, 0.0), (6, 2, 7, 2.0),
                                                                  (6, 8, 5, 0.6)]]
    return {
        "random": [renamed(case, generator) for case in random_cases],
        "brute_force": brute_force_cases(generator),
        "early_end": [renamed(Case(early_end_table, 6, torch.tensor([[3]]), 8, beam_size=beam_size, alpha=0.6), generator)
                      for beam_size in (2, 4, 6)],
        "eos_first": [renamed(Case(eos_first_table, 5, torch.tensor([[3]]), 8, beam_size=2, alpha=0.6), generator)],
        "eos_kept": [renamed(Case(eos_kept_table, 7, torch.tensor([[3]]), 6, beam_size=2, alpha=0.6), generator)],
    }


def beam_penalty_cases():
    """The designed tables with several length penalties, and random tables: renamed, and drawn, from the secret."""
    generator = secret_generator("beam_search length penalty")
    src = torch.tensor([[3]])
    cases = [Case(n_trap_table, 5, src, 10, beam_size=2, alpha=0.6)]
    cases += [Case(short_or_long_table, 5, src, 10, beam_size=2, alpha=alpha) for alpha in (0.0, 0.3, 1.0, 2.0)]
    cases += [Case(random_table(6, draw(generator, 0, 2 ** 31), eos_bias=0.3), 6, torch.tensor([[3, 4]]), 7,
                   beam_size=3, alpha=alpha) for alpha in (0.0, 1.5, 3.0, 0.6)]
    return [renamed(case, generator) for case in cases]


def beam_probe(answer, cases, real_case):
    """The hidden beam tests' probe: the answer on every case, on the stand-in searches, and on a real Transformer."""
    return {"cases": runs(answer, cases), "stand_ins": runs(answer, stand_in_searches()), "real": real_run(answer, real_case)}


def beam_search_probe(answer):
    return beam_probe(answer, beam_search_cases(), real_beam_case("beam_search search real", beam_sizes=(3, 4)))


def beam_penalty_probe(answer):
    return beam_probe(answer, beam_penalty_cases(),
                      real_beam_case("beam_search length penalty real", beam_sizes=(2, 4), alphas=(0.0, 2.0)))


# ----------------------------------------------------------------------------- corpus_bleu

def as_number(value):
    """A result of corpus_bleu as probe data: a number's subclass (numpy's float64, say) or any type float()
    takes becomes a float; tensors and plain data stay as they are (the judge says what is wrong with them)."""
    if isinstance(value, torch.Tensor) or value is None or type(value) in (bool, int, float, str, list, tuple, dict):
        return value
    try:
        return float(value)
    except Exception:   # not a number: the judge names its type
        return value


def bleu_of(corpus_bleu, *args, **kwargs):
    """One result of corpus_bleu (or Raised), as probe data."""
    return attempt(lambda: as_number(corpus_bleu(*args, **kwargs)))


def bleu_results(corpus_bleu, cases):
    """The answer's BLEU for every case ((hypotheses, references[, max_n]), what), by call (probing.replayed)."""
    return record_calls(lambda *args: as_number(corpus_bleu(*args)), [(args, {}) for args, _ in cases])


def renamed_tokens(cases, tag):
    """``cases`` with every token renamed by a one-to-one map drawn from the secret: BLEU depends only on which
    tokens are equal, so every score, and every known mistake's score, stays what it was."""
    vocabulary = sorted({t for args, _ in cases for corpus in args[:2] for sentence in corpus for t in sentence})
    codes = torch.randperm(10 * len(vocabulary) + 100, generator=secret_generator(tag))[:len(vocabulary)].tolist()
    name = {token: f"t{code}" for token, code in zip(vocabulary, codes)}
    return [((*([[name[t] for t in s] for s in corpus] for corpus in args[:2]), *args[2:]), what) for args, what in cases]


def bleu_value_cases():
    """Random corpora, then hypotheses longer and shorter than their references: drawn, and renamed, from the secret."""
    generator = secret_generator("corpus_bleu values")
    cases = []
    for number in range(12):
        words = [f"w{i}" for i in range(draw(generator, 3, 8))]
        n_sentences = draw(generator, 1, 6)

        def sentence():
            return draw_sentence(generator, words, draw(generator, 4, 14))
        hypotheses = [sentence() for _ in range(n_sentences)]
        references = [sentence() for _ in range(n_sentences)]
        cases.append(((hypotheses, references), f"corpus_bleu of random corpus {number} ({n_sentences} sentences)"))
    references = [s.split() for s in ["a man in a blue shirt is standing on a ladder .",
                                      "two young girls are playing in the sand at the beach .",
                                      "a dog runs through the grass with a ball in its mouth ."]]
    longer = [s.split() for s in ["a man in a blue shirt is standing on a tall ladder cleaning a window .",
                                  "two young girls are playing together in the sand at the beach .",
                                  "a brown dog runs through the green grass with a ball in its mouth ."]]
    shorter = [s.split() for s in ["a man in a blue shirt is on a ladder .", "two girls playing in the sand .",
                                   "a dog runs with a ball ."]]
    cases += [((longer, references), "corpus_bleu(hypotheses longer than their references, references)"),
              ((shorter, references), "corpus_bleu(hypotheses shorter than their references, references)")]
    return renamed_tokens(cases, "corpus_bleu values names")


def draw_sentence(generator, words, length):
    """`length` words drawn from `words` (repeats allowed)."""
    return [words[i] for i in torch.randint(0, len(words), (length,), generator=generator).tolist()]


def bleu_part_cases():
    """Clipping, brevity, a missing 4-gram match, the corpus lengths, unequal precisions, sentence boundaries:
    the tokens renamed from the secret."""
    return renamed_tokens([
        (([["the", "the", "the", "cat", "the", "the", "cat", "sat"], ["a", "b", "c", "d", "e"]],
          [["the", "cat", "sat", "on", "the", "mat"], ["a", "b", "c", "d", "e"]]), "corpus_bleu with repeated n-grams"),
        (([["a", "a", "a", "a", "a", "a"]], [["a", "a", "a", "b", "a", "a", "a"]], 2),
         "corpus_bleu(['a a a a a a'], ['a a a b a a a'], max_n=2), its tokens renamed"),
        (([["a", "b", "c", "d", "e", "f", "g", "h"], ["x", "y", "z", "q"], ["p", "q", "r", "s", "t"]],
          [["a", "b", "c", "d", "e", "f", "g", "h", "i"], ["x", "y", "w", "q", "r"], ["p", "q", "r", "s", "t", "u"]]),
         "corpus_bleu of three sentences, one without any 4-gram match"),
        (([["a", "b", "c", "d", "e", "f", "g", "h"], ["x", "y", "z", "w"]],
          [["a", "b", "c", "d", "e", "f"], ["x", "y", "z", "w", "v"]]), "corpus_bleu with c > r but one short hypothesis"),
        (([["a", "b", "c", "d", "e"], ["x", "y", "z", "w", "v", "u"]],
          [["a", "b", "c", "d", "e", "f", "g"], ["x", "y", "z", "w", "v", "u"]]), "corpus_bleu with c < r"),
        (([["a", "b", "c", "d", "e"], ["f", "g", "h", "i", "j"]], [["a", "b", "c", "x", "e"], ["f", "g", "y", "i", "j"]], 2),
         "corpus_bleu with unequal precisions"),
        (([["a", "b", "c", "d"], ["e", "f", "g", "h"]], [["a", "b", "c", "d", "e", "f"], ["g", "h"]]),
         "corpus_bleu where n-grams across the sentence boundary would match"),
    ], "corpus_bleu parts names")


def bleu_edge_cases():
    """Empty hypotheses, short ones, no bigram match, a shuffle, max_n from 1 to 3, an empty reference: the tokens
    renamed from the secret."""
    reference = ["a", "man", "rides", "a", "horse", "."]
    return renamed_tokens([
        (([[]], [reference]), "corpus_bleu([[]], [reference]) (an empty hypothesis)"),
        (([[], []], [reference, reference]), "corpus_bleu of two empty hypotheses"),
        (([[], reference], [reference, reference]), "corpus_bleu(one empty and one perfect hypothesis)"),
        (([["a", "man"]], [reference]), "corpus_bleu of a hypothesis shorter than 4 tokens"),
        (([["a", "x", "man", "y", "rides"]], [reference]), "corpus_bleu with no bigram match"),
        (([["horse", "a", "rides", "man", "a"]], [reference]), "corpus_bleu of a shuffled hypothesis"),
        (([["a", "man", "rides", "a", "horse"]], [reference], 2), "corpus_bleu(..., max_n=2)"),
        (([["a", "man", "x", "a", "horse", "."]], [reference], 1), "corpus_bleu(..., max_n=1)"),
        (([["a", "man", "rides", "a", "horse", ".", "."]], [reference], 3), "corpus_bleu(..., max_n=3)"),
        (([reference], [[]]), "corpus_bleu against an empty reference")], "corpus_bleu edge names")
