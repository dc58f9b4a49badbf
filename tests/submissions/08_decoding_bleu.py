"""Realistic answers to notebook 08. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

GREEDY = '''
def greedy_decode(model, src, max_len, bos_idx, eos_idx):
    with torch.no_grad():
        src_mask = {src_mask}
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), bos_idx, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range({steps}):
            {stop}
            out = model.decode(ys, memory, src_mask, {tgt_mask})
            next_tokens = model.generator(out[:, {position}]).argmax(dim={dim})
            {pad}
            ys = torch.cat([ys, next_tokens.unsqueeze(1)], dim=1)
            finished = finished | (next_tokens == eos_idx)
        return ys
'''
SRC_MASK = "padding_mask(src, model.pad_idx)"
CAUSAL = "causal_mask(ys.size(1))"
STOP = "if finished.all(): break"
PAD = "next_tokens = next_tokens.masked_fill(finished, model.pad_idx)"


def greedy(src_mask=SRC_MASK, steps="max_len - 1", stop=STOP, tgt_mask=CAUSAL, position="-1", dim="-1", pad=PAD):
    return GREEDY.format(src_mask=src_mask, steps=steps, stop=stop, tgt_mask=tgt_mask, position=position, dim=dim,
                         pad=pad)


BEAM = '''
def beam_search(model, src, beam_size, max_len, bos_idx, eos_idx, length_penalty=0.6):
    with torch.no_grad():
        src_mask = padding_mask(src, model.pad_idx)
        memory = model.encode(src, src_mask)
        live = [([bos_idx], 0.0)]
        finished = []
        while live and len(live[0][0]) < max_len:
            ys = torch.tensor([ids for ids, _ in live])
            out = model.decode(ys, memory.expand(len(live), -1, -1), src_mask, causal_mask(ys.size(1)))
            log_probs = {log_probs}
            candidates = []
            for row, (ids, score) in enumerate(live):
                for token in range(log_probs.size(-1)):
                    candidates.append((ids + [token], score + log_probs[row, token].item()))
            {extra_candidates}
            candidates.sort(key=lambda c: c[1], reverse=True)
            kept = candidates[:beam_size]
            {keep}
        pool = {pool}
        best = max(pool, key=lambda c: {score})
        return {result}
'''
LOG_PROBS = "F.log_softmax(model.generator(out[:, -1]), dim=-1)"
KEEP = ('finished += [c for c in kept if c[0][-1] == eos_idx]\n'
        '            live = [c for c in kept if c[0][-1] != eos_idx]')
PENALISED = "c[1] / ((5 + len(c[0]) - 1) / 6) ** length_penalty"


def beam(log_probs=LOG_PROBS, extra_candidates="", keep=KEEP, pool="finished + live", score=PENALISED,
         result="best[0]"):
    return BEAM.format(log_probs=log_probs, extra_candidates=extra_candidates, keep=keep, pool=pool, score=score,
                       result=result)


BLEU = '''
def corpus_bleu(hypotheses, references, max_n=4):
    from collections import Counter
    matches, totals = [0] * max_n, [0] * max_n
    c = r = 0
    for hyp, ref in {pairs}:
        c += len(hyp)
        r += len(ref)
        for n in range(1, max_n + 1):
            hyp_counts = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            ref_counts = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += {matched}
            totals[n - 1] += sum(hyp_counts.values())
    if c == 0 or min(matches) == 0:
        return 0.0
    {combine}
    {brevity}
    return {result}
'''
PAIRS = "zip(hypotheses, references)"
MATCHED = "sum(min(k, ref_counts[g]) for g, k in hyp_counts.items())"
GEOMETRIC = "precision = math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n)"
BREVITY = "bp = 1.0 if c >= r else math.exp(1 - r / c)"


def bleu(pairs=PAIRS, matched=MATCHED, combine=GEOMETRIC, brevity=BREVITY, result="100 * bp * precision"):
    return BLEU.format(pairs=pairs, matched=matched, combine=combine, brevity=brevity, result=result)


SENTENCE_AVERAGE = '''
def corpus_bleu(hypotheses, references, max_n=4):
    from collections import Counter
    def sentence(hyp, ref):
        if not hyp:
            return 0.0
        logs = []
        for n in range(1, max_n + 1):
            h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            g = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            m = sum((h & g).values())
            if m == 0:
                return 0.0
            logs.append(math.log(m / sum(h.values())))
        bp = 1.0 if len(hyp) >= len(ref) else math.exp(1 - len(ref) / len(hyp))
        return 100 * bp * math.exp(sum(logs) / max_n)
    return sum(sentence(h, r) for h, r in zip(hypotheses, references)) / len(hypotheses)
'''

WRONG = [
    # greedy_decode
    Answer("greedy_decode", "stops when the first row ends", greedy(stop="pass", pad="if (next_tokens == eos_idx).any(): return torch.cat([ys, next_tokens.unsqueeze(1)], dim=1)"),
           "did it stop when the first row ended"),
    Answer("greedy_decode", "never stops early: always max_len ids", greedy(stop="pass"),
           "stop as soon as every row has ended"),
    Answer("greedy_decode", "does not pad after <eos>", greedy(pad="pass"), "goes on after its <eos>"),
    Answer("greedy_decode", "takes the argmax over the batch dimension", greedy(dim="0"), "argmax over the last dimension"),
    Answer("greedy_decode", "decodes without the causal mask", greedy(tgt_mask="None"), "tgt_mask=None"),
    Answer("greedy_decode", "builds the causal mask with the wrong polarity",
           greedy(tgt_mask="~causal_mask(ys.size(1))"), "wrong polarity"),
    Answer("greedy_decode", "does not mask the source's padding", greedy(src_mask="None"),
           "the source's padding was not masked"),
    Answer("greedy_decode", "reads the scores of the first position", greedy(position="0"), "should begin"),
    Answer("greedy_decode", "makes max_len new tokens (max_len + 1 ids with <bos>)", greedy(steps="max_len"),
           "more than max_len"),
    Answer("greedy_decode", "the loop's condition is inverted: it returns the <bos> column alone",
           greedy(stop="if not finished.all(): break"), "returned <bos> alone"),
    # beam_search
    Answer("beam_search", "chooses the answer by the raw sum of log-probabilities",
           beam(score="c[1]"), "chosen by the raw sum"),
    Answer("beam_search", "counts <bos> in n", beam(score="c[1] / ((5 + len(c[0])) / 6) ** length_penalty"),
           "n counts <bos>: n is the number of ids after <bos> (<eos> included), 4 here"),
    Answer("beam_search", "ignores the length_penalty argument",
           beam(score="c[1] / ((5 + len(c[0]) - 1) / 6) ** 0.6"), "is the length_penalty argument used"),
    Answer("beam_search", "keeps finished hypotheses in the beam (they compete for its places)", '''
def beam_search(model, src, beam_size, max_len, bos_idx, eos_idx, length_penalty=0.6):
    src_mask = padding_mask(src, model.pad_idx)
    memory = model.encode(src, src_mask)
    beam = [([bos_idx], 0.0)]
    for _ in range(max_len - 1):
        candidates = []
        for ids, score in beam:
            if len(ids) > 1 and ids[-1] == eos_idx:
                candidates.append((ids, score))        # finished: stays as it is
                continue
            out = model.decode(torch.tensor([ids]), memory, src_mask, causal_mask(len(ids)))
            log_probs = F.log_softmax(model.generator(out[0, -1]), dim=-1)
            for token in range(log_probs.size(0)):
                candidates.append((ids + [token], score + log_probs[token].item()))
        beam = sorted(candidates, key=lambda c: c[1], reverse=True)[:beam_size]
        if all(ids[-1] == eos_idx for ids, _ in beam):
            break
    return max(beam, key=lambda c: c[1] / ((5 + len(c[0]) - 1) / 6) ** length_penalty)[0]
''', "finished hypotheses stay in the beam", misleading="length_penalty argument"),
    Answer("beam_search", "shrinks the beam for good: one place fewer per finished hypothesis (CS224N's variant)",
           beam().replace("kept = candidates[:beam_size]", "kept = candidates[:max(beam_size - len(finished), 0)]"),
           "as in CS224N's variant", misleading="stay in the beam"),
    Answer("beam_search", "multiplies by length_penalty instead of raising to it (divides by zero at 0)",
           beam(score="c[1] / (((5 + len(c[0]) - 1) / 6) * length_penalty)"), "length_penalty is the exponent",
           misleading="check the shapes"),
    Answer("beam_search", "length_penalty as a factor of the score", beam(score="c[1] * length_penalty / ((5 + len(c[0]) - 1) / 6)"),
           "used as a factor", misleading="argument is ignored"),
    Answer("beam_search", "multiplies probabilities instead of adding log-probabilities",
           beam(log_probs="F.softmax(model.generator(out[:, -1]), dim=-1)")
           .replace("score + log_probs[row, token].item()", "score * log_probs[row, token].item()")
           .replace("live = [([bos_idx], 0.0)]", "live = [([bos_idx], 1.0)]"),
           "probabilities are multiplied", misleading="raw sum"),
    Answer("beam_search", "drops finished hypotheses", beam(keep="live = [c for c in kept if c[0][-1] != eos_idx]"),
           "set aside as finished"),
    Answer("beam_search", "returns the hypothesis without <bos>", beam(result="best[0][1:]"), "starts with bos_idx"),
    Answer("beam_search", "stops as soon as the best extension ends in <eos>",
           beam(keep=KEEP + "\n            if kept[0][0][-1] == eos_idx: break"),
           "stops as soon as the best extension ends in <eos>"),
    Answer("beam_search", "adds raw scores instead of log-probabilities",
           beam(log_probs="model.generator(out[:, -1])"), "F.log_softmax"),
    Answer("beam_search", "reads the stand-in model's table instead of running the model", '''
def beam_search(model, src, beam_size, max_len, bos_idx, eos_idx, length_penalty=0.6):
    source = tuple(t for t in src[0].tolist() if t != model.pad_idx)
    live, finished = [([bos_idx], 0.0)], []
    while live and len(live[0][0]) < max_len:
        candidates = []
        for ids, score in live:
            log_probs = F.log_softmax(torch.tensor(model.table(source, tuple(ids)), dtype=torch.float64), dim=-1)
            candidates += [(ids + [token], score + log_probs[token].item()) for token in range(len(log_probs))]
        candidates.sort(key=lambda c: c[1], reverse=True)
        kept = candidates[:beam_size]
        finished += [c for c in kept if c[0][-1] == eos_idx]
        live = [c for c in kept if c[0][-1] != eos_idx]
    return max(finished + live, key=lambda c: c[1] / ((5 + len(c[0]) - 1) / 6) ** length_penalty)[0]
''', "use only model.encode, model.decode and model.generator"),
    # corpus_bleu
    Answer("corpus_bleu", "averages sentence-level BLEU", SENTENCE_AVERAGE, "average of sentence-level BLEU"),
    Answer("corpus_bleu", "does not clip", bleu(matched="sum(k for g, k in hyp_counts.items() if g in ref_counts)"),
           "not clipped"),
    Answer("corpus_bleu", "inverts the brevity penalty", bleu(brevity="bp = 1.0 if c >= r else math.exp(1 - c / r)"),
           "brevity penalty is inverted"),
    Answer("corpus_bleu", "applies the brevity penalty to long hypotheses too", bleu(brevity="bp = math.exp(1 - r / c)"),
           "applied to long hypotheses too"),
    Answer("corpus_bleu", "takes the arithmetic mean of the precisions",
           bleu(combine="precision = sum(m / t for m, t in zip(matches, totals)) / max_n"), "arithmetic mean"),
    Answer("corpus_bleu", "counts n-grams across sentence boundaries",
           bleu(pairs="[([t for h in hypotheses for t in h], [t for x in references for t in x])]"),
           "across sentence boundaries"),
    Answer("corpus_bleu", "returns BLEU in [0, 1]", bleu(result="bp * precision"), "in [0, 1]"),
    Answer("corpus_bleu", "divides by zero on empty hypotheses", bleu().replace(
        "    if c == 0 or min(matches) == 0:\n        return 0.0\n    {combine}".format(combine=GEOMETRIC),
        "    bp_first = 1.0 if c >= r else math.exp(1 - r / c)\n    if min(matches) == 0:\n        return 0.0\n    " + GEOMETRIC),
           "ZeroDivisionError"),
    Answer("corpus_bleu", "ignores max_n", bleu().replace("max_n=4):", "max_n=4):\n    max_n = 4"), "max_n is ignored"),
]

UNUSUAL = [
    Answer("greedy_decode", "lists of rows, target_mask, log_softmax, checks for <eos> before decoding", '''
def greedy_decode(model, src, max_len, bos_idx, eos_idx):
    model_pad = model.pad_idx
    with torch.no_grad():
        src_mask = (src != model_pad).unsqueeze(1).unsqueeze(2)
        memory = model.encode(src, src_mask)
        rows = [[bos_idx] for _ in range(src.size(0))]
        while len(rows[0]) < max_len and not all(eos_idx in row[1:] for row in rows):
            ys = torch.tensor(rows, device=src.device)
            scores = F.log_softmax(model.generator(model.decode(ys, memory, src_mask, target_mask(ys, model_pad))), dim=-1)
            best = scores[:, -1, :].max(dim=-1).indices.tolist()
            for row, token in zip(rows, best):
                row.append(model_pad if eos_idx in row[1:] else token)
        return torch.tensor(rows, dtype=torch.long, device=src.device)
'''),
    Answer("greedy_decode", "the model's forward() on the whole prefix each step", '''
def greedy_decode(model, src, max_len, bos_idx, eos_idx):
    ys = src.new_full((len(src), 1), bos_idx)
    done = src.new_zeros(len(src), dtype=torch.bool)
    for step in range(1, max_len):
        with torch.no_grad():
            logits = model(src, ys)[:, -1]
        token = torch.where(done, torch.full_like(done, model.pad_idx, dtype=torch.long), logits.argmax(-1))
        ys = torch.cat((ys, token[:, None]), 1)
        done = done | token.eq(eos_idx)
        if bool(done.all()):
            break
    return ys
'''),
    Answer("greedy_decode", "decodes only the unfinished rows into a preallocated tensor", '''
def greedy_decode(model, src, max_len, bos_idx, eos_idx):
    with torch.no_grad():
        src_mask = padding_mask(src, model.pad_idx)
        memory = model.encode(src, src_mask)
        out = torch.full((src.size(0), max_len), model.pad_idx, dtype=torch.long)
        out[:, 0] = bos_idx
        active = torch.arange(src.size(0))
        length = 1
        while length < max_len and len(active):
            hidden = model.decode(out[active, :length], memory[active], src_mask[active], causal_mask(length))
            token = model.generator(hidden)[:, -1].argmax(-1)
            out[active, length] = token
            active = active[token != eos_idx]
            length += 1
        return out[:, :length]
'''),
    Answer("beam_search", "applies the length penalty while pruning too (all candidates have the same length)", beam(
        extra_candidates="lp = ((5 + len(candidates[0][0]) - 1) / 6) ** length_penalty",
        keep=KEEP).replace("candidates.sort(key=lambda c: c[1], reverse=True)",
                           "candidates.sort(key=lambda c: c[1] / lp, reverse=True)")),
    Answer("beam_search", "topk on a [k, vocab] tensor, hypotheses decoded one by one, finished in a dict", '''
def beam_search(model, src, beam_size, max_len, bos_idx, eos_idx, length_penalty=0.6):
    src_mask = padding_mask(src, model.pad_idx)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        beams = [(0.0, (bos_idx,))]
        done = {}
        while beams and len(beams[0][1]) < max_len:
            rows = []
            for score, ids in beams:
                h = model.decode(torch.tensor([ids]), memory, src_mask, causal_mask(len(ids)))
                rows.append(score + torch.log_softmax(model.generator(h)[0, -1].double(), -1))
            table = torch.stack(rows)
            values, flat = table.flatten().topk(min(beam_size, table.numel()))
            new = []
            for value, index in zip(values.tolist(), flat.tolist()):
                row, token = divmod(index, table.size(1))
                ids = beams[row][1] + (token,)
                if token == eos_idx:
                    done[ids] = value
                else:
                    new.append((value, ids))
            beams = new
        done.update({ids: value for value, ids in beams})
        lp = lambda ids: ((4 + len(ids)) / 6) ** length_penalty
        return list(max(done, key=lambda ids: done[ids] / lp(ids)))
'''),
    Answer("beam_search", "leaves <pad> and <bos> out of the candidates", beam(
        log_probs="F.log_softmax(model.generator(out[:, -1]), dim=-1).index_fill(1, torch.tensor([model.pad_idx, bos_idx]), float('-inf'))")
        .replace("for token in range(log_probs.size(-1)):", "for token in range(log_probs.size(-1)):\n                    if token in (model.pad_idx, bos_idx): continue")),
    Answer("beam_search", "uses greedy_decode when beam_size is 1", beam().replace(
        "    with torch.no_grad():\n        src_mask",
        "    if beam_size == 1:\n        row = greedy_decode(model, src, max_len, bos_idx, eos_idx)[0].tolist()\n"
        "        return row[:row.index(eos_idx, 1) + 1] if eos_idx in row[1:] else row\n"
        "    with torch.no_grad():\n        src_mask", 1)),
    Answer("corpus_bleu", "Counter intersection, fractions and the product of the precisions", '''
def corpus_bleu(hypotheses, references, max_n=4):
    from collections import Counter
    from fractions import Fraction
    def grams(tokens, n):
        return Counter(zip(*[tokens[i:] for i in range(n)]))
    c = sum(map(len, hypotheses))
    r = sum(map(len, references))
    product = Fraction(1)
    for n in range(1, max_n + 1):
        hit = sum(sum((grams(h, n) & grams(x, n)).values()) for h, x in zip(hypotheses, references))
        total = sum(max(0, len(h) - n + 1) for h in hypotheses)
        if hit == 0:
            return 0.0
        product *= Fraction(hit, total)
    bp = min(1.0, math.exp(1 - r / c))
    return 100.0 * bp * float(product) ** (1.0 / max_n)
'''),
    Answer("corpus_bleu", "a tensor result and statistics gathered first", '''
def corpus_bleu(hypotheses, references, max_n=4):
    stats = torch.zeros(max_n, 2, dtype=torch.float64)
    for hyp, ref in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            ref_grams = [tuple(ref[i:i + n]) for i in range(len(ref) - n + 1)]
            remaining = {}
            for g in ref_grams:
                remaining[g] = remaining.get(g, 0) + 1
            for i in range(len(hyp) - n + 1):
                g = tuple(hyp[i:i + n])
                stats[n - 1, 1] += 1
                if remaining.get(g, 0) > 0:
                    remaining[g] -= 1
                    stats[n - 1, 0] += 1
    hyp_len = float(sum(len(h) for h in hypotheses))
    ref_len = float(sum(len(r) for r in references))
    if hyp_len == 0 or (stats[:, 0] == 0).any():
        return torch.tensor(0.0)
    log_mean = torch.log(stats[:, 0] / stats[:, 1]).mean()
    bp = torch.tensor(1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len), dtype=torch.float64)
    return 100 * bp * torch.exp(log_mean)
'''),
]
