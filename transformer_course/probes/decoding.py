"""Notebook 08: the tests' stand-in models, their tables and inputs, shared by the kernel and the judges.

The probes run the student's decoders on ``TableModel``s (in the kernel) and hand back what they returned and
what the stand-ins saw wrong (their call log, ``mask_problems``); the judges (transformer_course.oracles.
decoding, in the grader) decode the same tables themselves, from the same cases built here from the same
seeds. BLEU's probes record the student's corpus_bleu on the corpora listed here; sacreBLEU runs only in the
judge. Nothing here knows an expected value.
"""
import math
import random
import zlib
from collections import namedtuple

import torch
from torch import nn

from ..masks import padding_mask, target_mask
from ..probing import attempt, record_calls


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


def random_batch(seed, vocab_size, specials, size):
    """A random table, and `size` random sources of 1 to `size` words: as lists, and padded into [size, size]."""
    pad, bos, eos = specials
    table = random_table(vocab_size, seed, pad_idx=pad, bos_idx=bos, eos_idx=eos)
    words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
    generator = random.Random(seed)
    rows = [[generator.choice(words) for _ in range(generator.randint(1, size))] for _ in range(size)]
    src = torch.full((size, size), pad)
    for i, row in enumerate(rows):
        src[i, :len(row)] = torch.tensor(row)
    return table, rows, src


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


def greedy_shape_cases():
    cases = []
    for batch, max_len, bos, eos, pad in [(1, 6, 1, 2, 0), (5, 8, 1, 2, 0), (3, 1, 1, 2, 0), (2, 2, 1, 2, 0),
                                           (4, 7, 6, 0, 3)]:
        src = torch.randint(0, 8, (batch, 5), generator=torch.Generator().manual_seed(batch))
        src[src == pad] = (pad + 1) % 8
        src[0, 3:] = pad
        table = random_table(8, seed=batch, pad_idx=pad, bos_idx=bos, eos_idx=eos)
        cases.append(Case(table, 8, src, max_len, bos, eos, pad))
    return cases


def greedy_value_cases():
    """(case, its sources as lists) of random batches."""
    cases = []
    for seed, vocab_size, max_len, (pad, bos, eos) in [(0, 7, 9, (0, 1, 2)), (1, 7, 12, (0, 1, 2)), (2, 9, 6, (0, 1, 2)),
                                                       (3, 8, 10, (5, 7, 0)), (4, 6, 20, (0, 1, 2))]:
        table, rows, src = random_batch(seed, vocab_size, (pad, bos, eos), 5)
        cases.append((Case(table, vocab_size, src, max_len, bos, eos, pad), rows))
    return cases


REAL_SOURCE = [[5, 6, 7, 8, 2], [9, 4, 3, 0, 0], [10, 2, 0, 0, 0]]


def real_transformer():
    """A small real Transformer (seed 0), in eval mode."""
    from ..model import Transformer
    from ..testing import same_random_numbers

    with same_random_numbers(0):
        return Transformer(11, 13, d_model=16, n_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32).eval()


COPY_SOURCES = ([[3, 4], [5, 6], [7, 8]], [[4, 4, 4, 4, 4]])


def greedy_stopping_cases():
    """Random batches, and the copy model (which babbles after <eos>) with max_len=30."""
    cases = []
    for seed, vocab_size, max_len, (pad, bos, eos) in [(0, 7, 12, (0, 1, 2)), (5, 7, 4, (0, 1, 2)), (6, 9, 30, (0, 1, 2)),
                                                       (3, 8, 10, (5, 7, 0)), (7, 6, 3, (4, 2, 5)), (8, 7, 2, (0, 1, 2)),
                                                       (9, 5, 40, (0, 1, 2)), (10, 7, 1, (0, 1, 2))]:
        table, _, src = random_batch(seed, vocab_size, (pad, bos, eos), 4)
        cases.append(Case(table, vocab_size, src, max_len, bos, eos, pad))
    return {"random": cases, "copy": [Case(copy_table(9), 9, torch.tensor(src), 30) for src in COPY_SOURCES]}


def greedy_values_probe(answer):
    """The hidden value tests' probe: the answer on the random batches, and on the real Transformer."""
    return {"cases": runs(answer, [case for case, _ in greedy_value_cases()]),
            "real": attempt(answer, real_transformer(), torch.tensor(REAL_SOURCE), 9, 1, 2)}


def copy_runs(answer, src, max_lens):
    """greedy_decode(copy_model, src, max_len=..., bos_idx=1, eos_idx=2) for each max_len: the visible tests."""
    return [run(answer, Case(copy_table(9), 9, torch.tensor(src), max_len), keywords=("max_len", "bos_idx", "eos_idx"))
            for max_len in max_lens]


def stand_in_searches():
    """Searches on which known mistakes of beam_search differ: they tell the mistakes apart (every two of them
    give different answers on at least one). The random tables part a beam that shrinks for good from finished
    hypotheses kept in the beam (seed 32), a length penalty used as a factor from one ignored (seed 24, 5
    words) and finished hypotheses kept in the beam from a search that stops when the best extension ends
    (seed 24, 6 words)."""
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


def beam_basics_cases():
    """beam_size=1 on random tables, then max_len=1."""
    cases = []
    for seed, vocab_size, max_len, (pad, bos, eos) in [(0, 7, 8, (0, 1, 2)), (1, 6, 12, (0, 1, 2)),
                                                       (2, 8, 6, (5, 7, 0)), (3, 7, 3, (0, 1, 2))]:
        table = random_table(vocab_size, seed, pad_idx=pad, bos_idx=bos, eos_idx=eos)
        words = [w for w in range(vocab_size) if w not in (pad, bos, eos)]
        cases.append(Case(table, vocab_size, torch.tensor([words[:3] + [pad]]), max_len, bos, eos, pad, beam_size=1))
    cases.append(Case(random_table(7, 9), 7, torch.tensor([[3, 4]]), 1, beam_size=3))
    return cases


BRUTE_FORCE_SEEDS = (1, 2, 10, 36)


def beam_search_cases():
    """The contract's search on random tables; where greedy decoding misses the best hypothesis (each table
    twice: with the default length_penalty, then with 0.6 given); finished hypotheses kept; <eos> the best first
    step; other special ids and padding in the source."""
    src = torch.tensor([[3, 4, 5, 0]])
    return {
        "random": [Case(random_table(vocab_size, seed), vocab_size, src, max_len, beam_size=beam_size, alpha=alpha)
                   for seed, vocab_size, beam_size, max_len, alpha in [(0, 6, 2, 6, 0.6), (1, 6, 3, 6, 0.6),
                                                                       (2, 7, 4, 7, 0.6), (3, 6, 5, 5, 1.0),
                                                                       (4, 8, 3, 8, 0.0), (5, 6, 2, 7, 2.0),
                                                                       (6, 6, 8, 5, 0.6)]],
        "brute_force": [Case(random_table(6, seed), 6, torch.tensor([[3, 4, 5]]), 5, beam_size=4, alpha=alpha)
                        for seed in BRUTE_FORCE_SEEDS for alpha in (None, 0.6)],
        "early_end": [Case(early_end_table, 6, torch.tensor([[3]]), 8, beam_size=beam_size, alpha=0.6)
                      for beam_size in (2, 4, 6)],
        "eos_first": [Case(eos_first_table, 5, torch.tensor([[3]]), 8, beam_size=2, alpha=0.6)],
        "specials": [Case(random_table(8, 11, pad_idx=5, bos_idx=7, eos_idx=0), 8, torch.tensor([[3, 4, 6, 5, 5]]), 7,
                          7, 0, 5, beam_size=3, alpha=0.6)],
    }


def beam_penalty_cases():
    cases = [Case(n_trap_table, 5, torch.tensor([[3]]), 10, beam_size=2, alpha=0.6)]
    cases += [Case(short_or_long_table, 5, torch.tensor([[3]]), 10, beam_size=2, alpha=alpha) for alpha in (0.0, 0.3, 1.0, 2.0)]
    cases += [Case(random_table(6, seed, eos_bias=0.3), 6, torch.tensor([[3, 4]]), 7, beam_size=3, alpha=alpha)
              for seed, alpha in [(12, 0.0), (13, 1.5), (14, 3.0), (15, 0.6)]]
    return cases


def beam_probe(answer, cases):
    """The hidden beam tests' probe: the answer on every case, and on the stand-in searches."""
    return {"cases": runs(answer, cases), "stand_ins": runs(answer, stand_in_searches())}


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


def bleu_value_cases():
    """Random corpora, then hypotheses longer and shorter than their references."""
    cases = []
    for seed in range(12):
        generator = random.Random(seed)
        words = [f"w{i}" for i in range(generator.choice([3, 5, 8]))]
        n_sentences = generator.randint(1, 6)

        def sentence():
            return [generator.choice(words) for _ in range(generator.randint(4, 14))]
        hypotheses = [sentence() for _ in range(n_sentences)]
        references = [sentence() for _ in range(n_sentences)]
        cases.append(((hypotheses, references), f"corpus_bleu of random corpus {seed} ({n_sentences} sentences)"))
    references = [s.split() for s in ["a man in a blue shirt is standing on a ladder .",
                                      "two young girls are playing in the sand at the beach .",
                                      "a dog runs through the grass with a ball in its mouth ."]]
    longer = [s.split() for s in ["a man in a blue shirt is standing on a tall ladder cleaning a window .",
                                  "two young girls are playing together in the sand at the beach .",
                                  "a brown dog runs through the green grass with a ball in its mouth ."]]
    shorter = [s.split() for s in ["a man in a blue shirt is on a ladder .", "two girls playing in the sand .",
                                   "a dog runs with a ball ."]]
    return cases + [((longer, references), "corpus_bleu(hypotheses longer than their references, references)"),
                    ((shorter, references), "corpus_bleu(hypotheses shorter than their references, references)")]


def bleu_part_cases():
    """Clipping, brevity, a missing 4-gram match, the corpus lengths, unequal precisions, sentence boundaries."""
    return [
        (([["the", "the", "the", "cat", "the", "the", "cat", "sat"], ["a", "b", "c", "d", "e"]],
          [["the", "cat", "sat", "on", "the", "mat"], ["a", "b", "c", "d", "e"]]), "corpus_bleu with repeated n-grams"),
        (([["a", "a", "a", "a", "a", "a"]], [["a", "a", "a", "b", "a", "a", "a"]], 2),
         "corpus_bleu(['a a a a a a'], ['a a a b a a a'])"),
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
    ]


def bleu_edge_cases():
    """Empty hypotheses, short ones, no bigram match, a shuffle, max_n from 1 to 3, an empty reference."""
    reference = ["a", "man", "rides", "a", "horse", "."]
    return [(([[]], [reference]), "corpus_bleu([[]], [reference]) (an empty hypothesis)"),
            (([[], []], [reference, reference]), "corpus_bleu of two empty hypotheses"),
            (([[], reference], [reference, reference]), "corpus_bleu(one empty and one perfect hypothesis)"),
            (([["a", "man"]], [reference]), "corpus_bleu of a hypothesis shorter than 4 tokens"),
            (([["a", "x", "man", "y", "rides"]], [reference]), "corpus_bleu with no bigram match"),
            (([["horse", "a", "rides", "man", "a"]], [reference]), "corpus_bleu of a shuffled hypothesis"),
            (([["a", "man", "rides", "a", "horse"]], [reference], 2), "corpus_bleu(..., max_n=2)"),
            (([["a", "man", "x", "a", "horse", "."]], [reference], 1), "corpus_bleu(..., max_n=1)"),
            (([["a", "man", "rides", "a", "horse", ".", "."]], [reference], 3), "corpus_bleu(..., max_n=3)"),
            (([reference], [[]]), "corpus_bleu against an empty reference")]
