"""Turning a trained model into translations (notebook 08): greedy decoding, beam search and sampling.

Greedy decoding and beam search use only ``model.encode``, ``model.decode``, ``model.generator`` and
``model.pad_idx``, so any model with those four (the course's ``Transformer``, or a stub in a test) can be
decoded. Sampling (temperature, top-k, top-p) runs on the key/value cache of ``transformer_course.cache``,
which reads the layers of the course's ``Transformer``.

Beam search follows the paper (section 6.1: beam 4, length penalty alpha = 0.6), whose length penalty
is the one of Wu et al. (2016), "Google's Neural Machine Translation System":

    score(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6) ** alpha,

with |Y| the number of tokens after <bos> (the final <eos> included). `PAPER` holds those two settings;
`translate`, `transformer_course.evaluate` and `transformer_course.reproduce` take their defaults from it.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .cache import IncrementalDecoder, generate
from .masks import causal_mask, padding_mask

__all__ = ["DecodingSettings", "PAPER", "greedy_decode", "beam_search", "beam_search_batch", "beam_search_tree",
           "wu_length_penalty", "strip_specials", "translate", "top_k_filter", "top_p_filter", "sampling_distribution",
           "sample_decode"]


@dataclass(frozen=True)
class DecodingSettings:
    """How translations are searched: `beam_size` hypotheses kept at each step (1 = greedy decoding) and
    Wu et al.'s length penalty `alpha` (see the module's docstring)."""
    beam_size: int
    alpha: float


PAPER = DecodingSettings(beam_size=4, alpha=0.6)     # the paper's, section 6.1


def _next_log_probs(model, ys, memory, src_mask):
    """log P(next token | ys, source) for every row of ys [N, t]: [N, vocab]."""
    hidden = model.decode(ys, memory, src_mask, causal_mask(ys.size(1), device=ys.device))
    return F.log_softmax(model.generator(hidden[:, -1]).float(), dim=-1)


@torch.no_grad()
def greedy_decode(model, src, max_len, bos_idx, eos_idx):
    """src [B, S] -> LongTensor [B, L], L <= max_len: <bos>, then the most likely next token each step.

    After a row's <eos> it only gets padding; decoding stops as soon as every row has produced <eos>.
    """
    if src.dim() != 2:
        raise ValueError(f"src must be a [batch, seq] tensor of ids, got shape {list(src.shape)}")
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1 (room for <bos>), got {max_len}")
    src_mask = padding_mask(src, model.pad_idx)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_idx, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len and not finished.all():
        next_tokens = _next_log_probs(model, ys, memory, src_mask).argmax(dim=-1)
        next_tokens = next_tokens.masked_fill(finished, model.pad_idx)   # finished rows only get padding
        ys = torch.cat([ys, next_tokens[:, None]], dim=1)
        finished |= next_tokens == eos_idx
    return ys


def wu_length_penalty(n, alpha):
    """Wu et al.'s lp = ((5 + n) / 6) ** alpha for a hypothesis of n tokens after <bos>."""
    return ((5 + n) / 6) ** alpha


def _penalised(total, ids, alpha):
    """A hypothesis' score: its sum of log-probabilities / lp, `ids` with <bos> first (n = len(ids) - 1)."""
    return total / wu_length_penalty(len(ids) - 1, alpha)


@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_idx, eos_idx, length_penalty=PAPER.alpha):
    """The best translation of one sentence, src [1, S], as a list of ids (<bos> first, <eos> last if produced).

    Each step extends every live hypothesis by every token and keeps the `beam_size` extensions with the
    highest sum of log-probabilities; those ending in <eos> are set aside as finished, the others stay
    live. The search stops when no hypothesis is live or the live ones have `max_len` ids. The answer is
    the finished or remaining hypothesis with the best sum / ((5 + n) / 6) ** length_penalty, n = ids
    after <bos>: `length_penalty` is Wu et al.'s alpha. With beam_size=1 this is greedy decoding.
    """
    if src.dim() != 2 or src.size(0) != 1:
        raise ValueError(f"beam_search translates one sentence: src must have shape [1, S], got {list(src.shape)}")
    if beam_size < 1 or max_len < 1:
        raise ValueError(f"beam_size and max_len must be at least 1, got {beam_size} and {max_len}")
    return beam_search_batch(model, src, beam_size, max_len, bos_idx, eos_idx, alpha=length_penalty)[0]


class _Beam:
    """The search for one sentence: its live hypotheses, their sums of log-probabilities, the finished ones."""

    def __init__(self, bos_idx, max_len, device):
        self.live = torch.full((1, 1), bos_idx, dtype=torch.long, device=device)     # [k, t]
        self.totals = torch.zeros(1, dtype=torch.float64, device=device)            # [k], sums of log-probs
        self.finished = []                                                          # (sum, ids)
        self.max_len = max_len

    def searching(self):
        return self.live.size(0) > 0 and self.live.size(1) < self.max_len

    def extend(self, log_probs, beam_size, eos_idx, alpha):
        """One step, given log P(next token) for each live hypothesis, log_probs [k, V] (float64)."""
        vocab_size = log_probs.size(-1)
        candidates = (self.totals[:, None] + log_probs).flatten()                  # [k * V]
        totals, index = candidates.topk(min(beam_size, candidates.numel()))
        rows, tokens = index // vocab_size, index % vocab_size
        extended = torch.cat([self.live[rows], tokens[:, None]], dim=1)             # [beam_size, t + 1]
        ended = tokens == eos_idx
        self.finished += zip(totals[ended].tolist(), extended[ended].tolist())
        self.live, self.totals = extended[~ended], totals[~ended]
        if self._cannot_improve(alpha):
            self.live, self.totals = self.live[:0], self.totals[:0]

    def _cannot_improve(self, alpha):
        """Whether no live hypothesis can beat the best finished one any more: log-probabilities are <= 0, so
        a descendant's sum is at most its ancestor's, and the penalty is at most lp(max_len - 1). Stopping
        then gives the same answer as searching on to max_len (which the contract describes)."""
        if not (self.finished and self.live.size(0) and alpha >= 0):
            return False
        best_finished = max(_penalised(total, ids, alpha) for total, ids in self.finished)
        return self.totals.max().item() / wu_length_penalty(self.max_len - 1, alpha) <= best_finished

    def best(self, alpha):
        """The finished or remaining hypothesis with the best penalised score, as a list of ids."""
        hypotheses = self.finished + list(zip(self.totals.tolist(), self.live.tolist()))
        return max(hypotheses, key=lambda h: _penalised(*h, alpha))[1]


@torch.no_grad()
def beam_search_batch(model, src, beam_size, max_len, bos_idx, eos_idx, alpha=PAPER.alpha):
    """`beam_search` for every sentence of a padded batch src [B, S] at once: a list of B id lists.

    Each sentence is searched exactly as `beam_search` describes it, with `max_len` (an int, or one per
    sentence) and length penalty `alpha`; only the decoder runs on the live hypotheses of all sentences
    together (they all have the same length at a given step), which is much faster than one at a time.
    """
    if src.dim() != 2:
        raise ValueError(f"src must be a [batch, seq] tensor of ids, got shape {list(src.shape)}")
    max_lens = [max_len] * src.size(0) if isinstance(max_len, int) else [int(m) for m in max_len]
    if beam_size < 1 or len(max_lens) != src.size(0) or min(max_lens) < 1:
        raise ValueError(f"beam_size and max_len must be at least 1 (max_len: an int or one per sentence), "
                         f"got {beam_size} and {max_len}")
    src_mask = padding_mask(src, model.pad_idx)                                     # [B, 1, 1, S]
    memory = model.encode(src, src_mask)                                            # [B, S, d_model]
    beams = [_Beam(bos_idx, limit, src.device) for limit in max_lens]
    while active := [(b, beam) for b, beam in enumerate(beams) if beam.searching()]:
        owner = torch.tensor([b for b, beam in active for _ in range(beam.live.size(0))], device=src.device)
        ys = torch.cat([beam.live for _, beam in active])                           # [sum of k, t]
        log_probs = _next_log_probs(model, ys, memory[owner], src_mask[owner]).double()
        for (_, beam), rows in zip(active, log_probs.split([beam.live.size(0) for _, beam in active])):
            beam.extend(rows, beam_size, eos_idx, alpha)
    return [beam.best(alpha) for beam in beams]


@torch.no_grad()
def beam_search_tree(model, src, beam_size, max_len, bos_idx, eos_idx):
    """What `beam_search` looks at, step by step, for drawing its search tree: a list with one entry per
    step, each a list of every candidate extension as a dict with "ids" (a tuple, <bos> first), "total"
    (sum of log-probabilities) and "status": "live" (kept, goes on), "finished" (kept, ends in <eos>)
    or "pruned" (not among the beam_size best)."""
    src_mask = padding_mask(src, model.pad_idx)
    memory = model.encode(src, src_mask)
    live = [((bos_idx,), 0.0)]
    steps = []
    while live and len(live[0][0]) < max_len:
        ys = torch.tensor([ids for ids, _ in live], dtype=torch.long, device=src.device)
        log_probs = _next_log_probs(model, ys, memory.expand(len(live), *memory.shape[1:]), src_mask).double()
        candidates = [(ids + (token,), total + log_probs[row, token].item())
                      for row, (ids, total) in enumerate(live) for token in range(log_probs.size(-1))]
        candidates.sort(key=lambda c: -c[1])
        step = []
        for rank, (ids, total) in enumerate(candidates):
            status = "pruned" if rank >= beam_size else "finished" if ids[-1] == eos_idx else "live"
            step.append({"ids": ids, "total": total, "status": status})
        steps.append(step)
        live = [(c["ids"], c["total"]) for c in step if c["status"] == "live"]
    return steps


def top_k_filter(logits, k):
    """logits [..., V] with all but the k largest of each row set to -inf (ties at the k-th value: the
    first ones topk returns)."""
    if k < 1:
        raise ValueError(f"top_k must be at least 1, got {k}")
    k = min(k, logits.size(-1))
    kept = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, logits.topk(k, dim=-1).indices, True)
    return logits.masked_fill(~kept, float("-inf"))


def top_p_filter(logits, p):
    """Nucleus filtering: logits [..., V] with only the smallest set of most likely tokens whose probability
    adds up to at least p kept (the others -inf). The most likely token is always kept."""
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs      # the probability of the tokens more likely than each one
    keep_sorted = before < p                   # a token is needed while the better ones have less than p
    kept = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~kept, float("-inf"))


def sampling_distribution(logits, temperature=1.0, top_k=None, top_p=None):
    """The probabilities sample_decode draws from: softmax(logits / temperature), then top-k, then top-p
    (each on the renormalised result of the one before), [..., V]."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (use greedy_decode for the limit 0), got {temperature}")
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature    # half -> float32
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)


@torch.no_grad()
def sample_decode(model, src, max_len, bos_idx, eos_idx, temperature=1.0, top_k=None, top_p=None, generator=None):
    """src [B, S] -> [B, L] like greedy_decode, but each next token is drawn from `sampling_distribution`
    (a torch.Generator makes it reproducible). Uses the key/value cache, so it needs the course's Transformer."""
    if src.dim() != 2:
        raise ValueError(f"src must be a [batch, seq] tensor of ids, got shape {list(src.shape)}")
    sampling_distribution(torch.zeros(1), temperature, top_k, top_p)      # bad arguments fail before any work

    def choose(logits):
        probs = sampling_distribution(logits, temperature, top_k, top_p)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    decoder = IncrementalDecoder(model, src)
    return generate(decoder.step, src.size(0), max_len, bos_idx, eos_idx, model.pad_idx, choose, device=src.device)


def strip_specials(ids, bos_idx, eos_idx, pad_idx):
    """The ids of a decoded hypothesis without <bos>, and cut at the first <eos> (padding dropped)."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if i == eos_idx:
            break
        if i not in (bos_idx, pad_idx):
            out.append(i)
    return out


@torch.no_grad()
def translate(model, sentences, src_vocab, tgt_vocab, beam_size=1, alpha=PAPER.alpha, max_extra=50, batch_size=64,
              device=None, progress=False):
    """Token lists in the source language -> token lists in the target language.

    The source gets <eos> appended (as in training, `transformer_course.data.TranslationDataset`); each
    output may have up to len(source) + max_extra tokens (the paper's limit, section 6.1). beam_size=1
    decodes greedily; otherwise with beam search (`beam_search_batch`), `batch_size` sentences at a time.
    """
    from .data import BOS, EOS, PAD

    device = device or next(model.parameters()).device
    src_eos = src_vocab.stoi[EOS]
    bos, eos, pad = tgt_vocab.stoi[BOS], tgt_vocab.stoi[EOS], tgt_vocab.stoi[PAD]
    encoded = [src_vocab.encode(tokens) + [src_eos] for tokens in sentences]
    results = [None] * len(encoded)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))   # similar lengths batch well
    bar = None
    if progress:
        from .progress import tqdm
        bar = tqdm(total=len(encoded), unit="sent", desc="translating")
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        longest = max(len(encoded[i]) for i in chunk)
        src = torch.full((len(chunk), longest), src_vocab.stoi[PAD], dtype=torch.long)
        for row, i in enumerate(chunk):
            src[row, :len(encoded[i])] = torch.tensor(encoded[i])
        src = src.to(device)
        max_lens = [len(encoded[i]) + max_extra + 1 for i in chunk]    # each sentence's own limit; + 1 for <bos>
        if beam_size == 1:       # greedy rows are the same whatever the batch: cut each at its own limit
            cached = getattr(model, "cached_greedy_decode", None)    # a GPT translator's own, with its cache (gpt.py)
            rows = (cached(src, max(max_lens), bos, eos) if cached is not None else
                    greedy_decode(model, src, max(max_lens), bos, eos))
            outputs = [row[:limit] for row, limit in zip(rows.tolist(), max_lens)]
        else:
            outputs = beam_search_batch(model, src, beam_size, max_lens, bos, eos, alpha)
        for i, ids in zip(chunk, outputs):
            results[i] = tgt_vocab.decode(strip_specials(ids, bos, eos, pad))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return results
