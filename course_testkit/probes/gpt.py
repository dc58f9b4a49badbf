"""Notebook 09: what the probes of its tests run in the kernel, shared with the judges where they rebuild inputs.

Nothing here knows an expected value. Seeded weights and inputs (``attention_case``, ``gpt_case``, ...) are built
the same way in the kernel, where the probe loads them into the student's module, and in the grader, where the
judge computes what the module should give (course_testkit.oracles.gpt). The visible tests' inputs come from
fixed seeds; the hidden tests' (``hidden_*``) from the grading run's secret (probing.secret_generator), sizes
included. The stand-ins: ``RopeDouble`` replaces apply_rope in CausalSelfAttention's tests, ``attention_double``
CausalSelfAttention in GPT's, so that a mistake in either costs points in its own tests only; ``KnownLogitsLM`` is the
model of ``generate``'s tests, a language model whose every logit is a known function of the prefix.
"""
import math

import torch
from torch import nn

from ..probing import Raised, attempt, secret_generator, secret_seed
from .transformer import _uniform, load_weights, norm_weights

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def _draw_int(generator, low, high):
    """An integer in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _draw_float(generator, low, high):
    return low + (high - low) * float(torch.rand(1, generator=generator, dtype=torch.float64))


def _seeds(tag, count):
    """The seeds of a hidden test's cases: drawn from the secret."""
    return [secret_seed(f"{tag}:{i}") for i in range(count)]


def with_seeds(cases, seeds):
    """(case, seed) pairs: seeds 0, 1, 2, ... unless given (the hidden tests')."""
    return list(zip(cases, range(len(cases)) if seeds is None else seeds, strict=True))


def attention_weights(d_model, generator, prefix=""):
    """Weights and biases of the four projections of a CausalSelfAttention, by attribute path."""
    weights = {}
    for projection in PROJECTIONS:
        weights[f"{prefix}{projection}.weight"] = _uniform(generator, d_model, d_model, bound=(3 / d_model) ** 0.5)
        weights[f"{prefix}{projection}.bias"] = _uniform(generator, d_model, bound=0.2)
    return weights


def gpt_weights(vocab_size, d_model, n_layers, d_ff, generator):
    """Every parameter of a GPT of the contract, by attribute path (the output layer is embed.weight)."""
    weights = {"embed.weight": torch.randn(vocab_size, d_model, generator=generator) * 0.5}
    for i in range(n_layers):
        block = f"blocks.{i}."
        weights.update(norm_weights(f"{block}norm1", d_model, generator))
        weights.update(attention_weights(d_model, generator, f"{block}attn."))
        weights.update(norm_weights(f"{block}norm2", d_model, generator))
        for name, (rows, columns) in (("linear1", (d_ff, d_model)), ("linear2", (d_model, d_ff))):
            weights[f"{block}feed_forward.{name}.weight"] = _uniform(generator, rows, columns, bound=(3 / columns) ** 0.5)
            weights[f"{block}feed_forward.{name}.bias"] = _uniform(generator, rows, bound=0.2)
    weights.update(norm_weights("norm", d_model, generator))
    return weights


def names_and_shapes(module):
    """[(name, shape)] of a module's parameters, each shared parameter once (under its first name)."""
    return [(name, list(p.shape)) for name, p in module.named_parameters()]


# ----------------------------------------------------------------------------- apply_rope

# (shape [..., T, d], positions or None for 0..T-1, base, dtype)
ROPE_VISIBLE = [((2, 3, 5, 8), None, 10000.0, "float32"), ((2, 3, 5, 8), [3, 7, 8, 20, 100], 10000.0, "float32")]
# (d, base, pairs of positions (p, r)): the score of a query at p with a key at r
ROPE_RELATIVE = [(8, 10000.0, [(0, 0), (5, 5), (3, 1), (10, 8), (102, 100), (1, 3), (50, 52)])]
BASES = (10000.0, 500.0, 100.0)


def _head_size(generator, low=2, high=8):
    """An even size of at least 4: with two pairs or more, the frequency mistakes show."""
    return 2 * _draw_int(generator, low, high)


def _positions(generator, count, high):
    """`count` distinct positions below `high`, in no order."""
    return torch.randperm(high, generator=generator)[:count].tolist()


def hidden_rope_cases():
    """(cases, seeds) of apply_rope's hidden value tests, drawn from the secret: x with 4, 2, 3 and 5 dimensions.
    The first mixes positions below 32 with positions in the tens of thousands, where an angle computed in float32
    is off by thousandths of a radian (d of 12 or more: several pairs turn by thousands of radians); the positions of
    the last two are not 0, 1, ..., T - 1."""
    generator = secret_generator("09 apply_rope values")
    length = _draw_int(generator, 6, 8)
    small, large = torch.randperm(32, generator=generator)[:3], 20000 + torch.randperm(40000, generator=generator)[:length - 3]
    mixed = torch.cat([small, large])[torch.randperm(length, generator=generator)].tolist()
    lengths = [_draw_int(generator, 3, 6) for _ in range(3)]
    cases = [((_draw_int(generator, 1, 2), _draw_int(generator, 1, 3), length, _head_size(generator, 6, 8)), mixed,
              10000.0, "float64"),
             ((lengths[0], _head_size(generator)), None, BASES[_draw_int(generator, 0, 2)], "float32"),
             ((_draw_int(generator, 1, 3), lengths[1], _head_size(generator)), _positions(generator, lengths[1], 300),
              BASES[_draw_int(generator, 0, 2)], "float64"),
             ((2, 1, _draw_int(generator, 1, 2), lengths[2], _head_size(generator)), _positions(generator, lengths[2], 2000),
              BASES[_draw_int(generator, 0, 2)], "float32")]
    return cases, _seeds("09 apply_rope values", len(cases))


def rope_case(case, seed):
    """(x, positions, base) of one case of ROPE_VISIBLE / hidden_rope_cases."""
    shape, positions, base, dtype = case
    x = torch.randn(*shape, generator=_generator(seed), dtype=torch.float64).to(getattr(torch, dtype))
    positions = torch.arange(shape[-2]) if positions is None else torch.tensor(positions)
    return x, positions, base


def rope_runs(apply_rope, cases, seeds=None):
    """For each case: what apply_rope returned, and whether it changed its input."""
    runs = []
    for case, seed in with_seeds(cases, seeds):
        x, positions, base = rope_case(case, seed)
        before = x.clone()
        runs.append({"out": attempt(apply_rope, x, positions, base), "input_changed": not torch.equal(x, before)})
    return runs


def hidden_relative_cases():
    """(cases, seeds) of the hidden relative-position tests: for two offsets each, pairs of positions up to 5000."""
    generator = secret_generator("09 apply_rope relative")
    cases = []
    for base, pairs_per_offset in ((10000.0, 3), (100.0, 2)):
        pairs = []
        for _ in range(2):
            offset = _draw_int(generator, -12, 12)
            for _ in range(pairs_per_offset):
                p = _draw_int(generator, max(0, offset), 5000)
                pairs.append((p, p - offset))
        cases.append((_head_size(generator), base, pairs))
    return cases, _seeds("09 apply_rope relative", len(cases))


def relative_case(case, seed):
    """A query and a key [1, 1, 1, d] in float64."""
    generator = _generator(seed)
    return (torch.randn(1, 1, 1, case[0], generator=generator, dtype=torch.float64),
            torch.randn(1, 1, 1, case[0], generator=generator, dtype=torch.float64))


def rope_scores(apply_rope, cases, seeds=None):
    """For each case, the score of the rotated query at p with the rotated key at r, for each pair (p, r)."""
    runs = []
    for case, seed in with_seeds(cases, seeds):
        q, k = relative_case(case, seed)
        base = case[1]

        def score(p, r):
            rotated_q, rotated_k = apply_rope(q, torch.tensor([p]), base), apply_rope(k, torch.tensor([r]), base)
            return float((rotated_q * rotated_k).sum())
        runs.append([attempt(score, p, r) for p, r in case[2]])
    return runs


# ----------------------------------------------------------------------------- CausalSelfAttention

MAX_PAIRS = 64


class RopeDouble:
    """The stand-in for apply_rope in CausalSelfAttention's tests (a mistake in apply_rope costs points in its own
    tests only). Like RoPE it turns each pair (x[2i], x[2i + 1]) of the row at position p, but by the angle
    p * speeds[i] + phases[i], with speeds and phases drawn from a fixed seed (visible tests) or from the secret
    (``hidden``): it is not RoPE, and an apply_rope copied from it fails apply_rope's tests."""

    def __init__(self, hidden=False):
        generator = secret_generator("09 RopeDouble") if hidden else _generator(9)
        self.speeds = 0.2 + 1.3 * torch.rand(MAX_PAIRS, generator=generator, dtype=torch.float64)
        self.phases = 2 * math.pi * torch.rand(MAX_PAIRS, generator=generator, dtype=torch.float64)

    def __call__(self, x, positions, base=10000.0):
        pairs = x.size(-1) // 2
        angle = torch.as_tensor(positions).detach().cpu().to(torch.float64)[:, None] * self.speeds[:pairs] + \
            self.phases[:pairs]
        cos, sin = angle.cos().to(x), angle.sin().to(x)
        first, second = x[..., 0::2], x[..., 1::2]
        return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)


# (d_model, n_heads, batch, length, chunks fed one after the other with one cache)
ATTENTION_VISIBLE = [(16, 4, 2, 6, [3, 1, 2])]
ATTENTION_PARTS = (16, 4, 0.25)     # d_model, n_heads, dropout of the visible test of the layer's parts


def hidden_attention_cases():
    """(cases, seeds) of the hidden tests of CausalSelfAttention, drawn from the secret, head sizes even: fed one
    token at a time (at least 2 heads), in three chunks (the cache extended twice), and in one chunk."""
    generator = secret_generator("09 CausalSelfAttention")
    cases = []
    for chunks, fewest_heads in (([1] * _draw_int(generator, 4, 6), 2), ([_draw_int(generator, 1, 3) for _ in range(3)], 1),
                                 ([_draw_int(generator, 3, 7)], 1)):
        n_heads = _draw_int(generator, fewest_heads, 4)
        cases.append((n_heads * _head_size(generator, 2, 4), n_heads, _draw_int(generator, 1, 3), sum(chunks), chunks))
    return cases, _seeds("09 CausalSelfAttention", len(cases))


def hidden_attention_parts():
    """(d_model, n_heads, dropout) of the hidden test of the layer's parts."""
    generator = secret_generator("09 CausalSelfAttention parts")
    n_heads = _draw_int(generator, 1, 4)
    return n_heads * _head_size(generator, 2, 4), n_heads, round(_draw_float(generator, 0.05, 0.5), 2)


def attention_case(case, seed):
    """(weights by attribute path, x [B, T, d_model]) of one case."""
    d_model, _, batch, length, _ = case
    generator = _generator(seed)
    weights = attention_weights(d_model, generator)
    return weights, torch.randn(batch, length, d_model, generator=generator)


def _chunks(length_list, x):
    return x.split(length_list, dim=1)


def attention_run(make, case, seed):
    """The student's layer with the case's weights, in eval mode: its output over x at once, and chunk by chunk
    with one cache dict."""
    d_model, n_heads, _, _, chunks = case
    weights, x = attention_case(case, seed)
    layer = attempt(lambda: load_weights(make(d_model, n_heads, dropout=0.0), weights).eval())
    if isinstance(layer, Raised):
        return {"full": layer, "cached": [layer] * len(chunks)}
    cache = {}
    with torch.no_grad():
        return {"full": attempt(layer, x), "cached": [attempt(layer, part, cache=cache) for part in _chunks(chunks, x)]}


def attention_runs(make, cases, seeds=None):
    return [attention_run(make, case, seed) for case, seed in with_seeds(cases, seeds)]


def attention_facts(make, sizes=ATTENTION_PARTS):
    """The parts of CausalSelfAttention(d_model, n_heads, dropout=...): plain data for the judge."""
    d_model, n_heads, dropout = sizes
    layer = attempt(make, d_model, n_heads, dropout=dropout)
    if isinstance(layer, Raised):
        return {"made": layer}
    return {"made": True, "n_heads": getattr(layer, "n_heads", None), "parameters": names_and_shapes(layer),
            "dropout": [m.p for m in layer.modules() if isinstance(m, nn.Dropout)]}


def attention_dropout_case():
    """The hidden dropout test's layer and input, drawn from the secret: ((d_model, n_heads, dropout), weights, x).
    Token t is the one-hot vector e_t and w_v copies feature t into place t of every head (no bias), so each head's
    output before w_o holds that head's attention weights themselves, as dropout left them; w_o is invertible."""
    generator = secret_generator("09 CausalSelfAttention dropout")
    n_heads, d_k = _draw_int(generator, 1, 3), _head_size(generator, 3, 4)
    d_model, length = n_heads * d_k, _draw_int(generator, 5, d_k)
    rate = round(_draw_float(generator, 0.3, 0.6), 2)
    weights = attention_weights(d_model, generator)
    copy = torch.zeros(d_model, d_model)
    for head in range(n_heads):
        copy[head * d_k + torch.arange(length), torch.arange(length)] = 1.0
    weights.update({"w_v.weight": copy, "w_v.bias": torch.zeros(d_model),
                    "w_o.weight": weights["w_o.weight"] + 2 * torch.eye(d_model)})
    return (d_model, n_heads, rate), weights, torch.eye(d_model)[:length].repeat(3, 1, 1)


def attention_dropout_run(make):
    """The student's layer of attention_dropout_case in training mode: its output."""
    (d_model, n_heads, rate), weights, x = attention_dropout_case()
    layer = attempt(lambda: load_weights(make(d_model, n_heads, dropout=rate), weights).train())
    if isinstance(layer, Raised):
        return layer
    with torch.no_grad():
        return attempt(layer, x)


# ----------------------------------------------------------------------------- GPT

MAX_LEN = 64


class AttentionDouble(nn.Module):
    """The stand-in for CausalSelfAttention in GPT's tests (a mistake in CausalSelfAttention costs points in its
    own tests only): the parameters of the real layer (w_q, w_k, w_v, w_o, and `dropout`, unused), but its output
    is a fixed causal mixing of the values, position t getting w_o(sum over j <= t of mixing[t, j] * w_v(x_j)).
    With a cache dict it keeps the values it has seen there ("v"); `calls` records each call's number of tokens and
    the dict it got. ``attention_double`` makes the class, with its mixing drawn from a seed or the secret."""

    mixing = None     # [MAX_LEN, MAX_LEN], lower triangular, rows summing to 1

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in PROJECTIONS)
        self.dropout = nn.Dropout(dropout)
        self.calls = []

    def forward(self, x, cache=None):
        values = self.w_v(x)
        if cache is not None:
            values = torch.cat([cache["v"], values], dim=1) if "v" in cache else values
            cache["v"] = values
        self.calls.append((x.size(1), cache))
        start = values.size(1) - x.size(1)
        return self.w_o(self.mixing[start:values.size(1), :values.size(1)].to(values) @ values)


def attention_double(hidden=False):
    """An AttentionDouble class whose mixing is drawn from a fixed seed (visible tests) or from the secret (``hidden``)."""
    generator = secret_generator("09 AttentionDouble") if hidden else _generator(11)
    mixing = (0.1 + torch.rand(MAX_LEN, MAX_LEN, generator=generator, dtype=torch.float64)).tril()
    return type("AttentionDouble", (AttentionDouble,), {"mixing": mixing / mixing.sum(-1, keepdim=True)})


# (vocab_size, d_model, n_heads, n_layers, d_ff, batch, length, chunks)
GPT_VISIBLE = [(23, 16, 4, 2, 32, 2, 6, [4, 1, 1])]
GPT_SIZES = (29, 16, 4, 2, 24)     # vocab_size, d_model, n_heads, n_layers, d_ff of the visible structure test


def hidden_gpt_cases():
    """(cases, seeds) of GPT's hidden value tests, drawn from the secret: 2 or 3 blocks fed in three chunks, and one
    block fed a token at a time."""
    generator = secret_generator("09 GPT values")
    cases = []
    for n_layers, chunks in ((_draw_int(generator, 2, 3), [_draw_int(generator, 1, 3) for _ in range(3)]),
                             (1, [1] * _draw_int(generator, 3, 5))):
        n_heads = _draw_int(generator, 1, 4)
        cases.append((_draw_int(generator, 9, 31), n_heads * _head_size(generator, 2, 3), n_heads, n_layers,
                      2 * _draw_int(generator, 4, 12), _draw_int(generator, 1, 3), sum(chunks), chunks))
    return cases, _seeds("09 GPT values", len(cases))


def hidden_gpt_sizes():
    """(sizes, seed) of GPT's hidden structure test: the sizes drawn from the secret, an embedding of 96 values or
    more (its standard deviation is measured)."""
    generator = secret_generator("09 GPT structure")
    n_heads = _draw_int(generator, 1, 3)
    sizes = (_draw_int(generator, 16, 40), n_heads * _head_size(generator, 3, 4), n_heads, _draw_int(generator, 1, 3),
             2 * _draw_int(generator, 4, 16))
    return sizes, secret_seed("09 GPT structure weights")


def gpt_case(case, seed):
    """(weights by attribute path, tokens [B, T]) of one case."""
    vocab_size, d_model, _, n_layers, d_ff, batch, length = case[:7]
    generator = _generator(seed)
    weights = gpt_weights(vocab_size, d_model, n_layers, d_ff, generator)
    return weights, torch.randint(0, vocab_size, (batch, length), generator=generator)


def block_caches(doubles, cache):
    """For each attention stand-in of a model (in the order of model.modules()), each call's number of tokens, the
    cache dict it got (None, or the dict's number among those the stand-ins got, in order of first use), and whether
    that dict is cache[i] of the model's cache dict, i the stand-in's place."""
    seen = []

    def number(given):
        if given is None:
            return None
        if not any(given is d for d in seen):
            seen.append(given)
        return next(n for n, d in enumerate(seen) if d is given)
    return [[{"length": length, "cache": number(given), "own": given is not None and cache.get(i) is given}
             for length, given in double.calls] for i, double in enumerate(doubles)]


def gpt_run(make, case, seed):
    """The student's GPT with the case's weights, in eval mode: its logits over the tokens at once, and chunk by chunk
    with one cache dict, with what its attention stand-ins got then."""
    vocab_size, d_model, n_heads, n_layers, d_ff, _, _, chunks = case
    weights, tokens = gpt_case(case, seed)
    model = attempt(lambda: load_weights(make(vocab_size, d_model, n_heads, n_layers, d_ff, dropout=0.0),
                                         weights).eval())
    if isinstance(model, Raised):
        return {"full": model, "cached": [model] * len(chunks), "blocks": []}
    cache = {}
    with torch.no_grad():
        full = attempt(model, tokens)
        doubles = [m for m in model.modules() if isinstance(m, AttentionDouble)]
        for double in doubles:
            double.calls.clear()
        cached = [attempt(model, part, cache=cache) for part in _chunks(chunks, tokens)]
    return {"full": full, "cached": cached, "blocks": block_caches(doubles, cache)}


def gpt_runs(make, cases, seeds=None):
    return [gpt_run(make, case, seed) for case, seed in with_seeds(cases, seeds)]


def wiring_case(sizes, seed):
    """Weights with which every block adds nothing (its attention's w_o and its feed-forward's linear2 are zero), and
    tokens [2, 5]: the logits are then those of the embedding, the final LayerNorm and the tied output alone."""
    vocab_size, d_model, _, n_layers, d_ff = sizes
    generator = _generator(seed)
    weights = gpt_weights(vocab_size, d_model, n_layers, d_ff, generator)
    for name, value in weights.items():
        if ".attn.w_o." in name or ".linear2." in name:
            weights[name] = torch.zeros_like(value)
    return weights, torch.randint(0, vocab_size, (2, 5), generator=generator)


def gpt_facts(make, sizes=GPT_SIZES, seed=7):
    """What GPT(*sizes, dropout=0.25) is made of: its parameters (a shared one once), the class names of its blocks
    and of their parts, its dropout rates, the standard deviation of its embedding as made, and its logits with
    wiring_case's weights (in eval mode)."""
    model = attempt(make, *sizes, dropout=0.25)
    if isinstance(model, Raised):
        return {"made": model}
    blocks = getattr(model, "blocks", None)
    parts = [[type(getattr(block, name, None)).__name__ for name in ("norm1", "attn", "norm2", "feed_forward")]
             for block in (blocks if isinstance(blocks, nn.ModuleList) else [])]
    embed = getattr(model, "embed", None)
    facts = {"made": True, "parameters": names_and_shapes(model), "blocks": type(blocks).__name__, "parts": parts,
             "block_classes": [type(block).__name__ for block in (blocks if isinstance(blocks, nn.ModuleList) else [])],
             "dropout": sorted(m.p for m in model.modules() if isinstance(m, nn.Dropout)),
             "embed_std": float(embed.weight.detach().double().std()) if isinstance(embed, nn.Embedding) else None}
    weights, tokens = wiring_case(sizes, seed)
    with torch.no_grad():
        facts["wiring"] = attempt(lambda: load_weights(model, weights).eval()(tokens))
    return facts


def hidden_gpt_dropout_case():
    """(case, dropout, seed) of GPT's hidden dropout test, drawn from the secret: case as in hidden_gpt_cases, without
    chunks."""
    generator = secret_generator("09 GPT dropout")
    n_heads = _draw_int(generator, 1, 3)
    case = (_draw_int(generator, 9, 25), n_heads * _head_size(generator, 2, 3), n_heads, _draw_int(generator, 1, 3),
            2 * _draw_int(generator, 4, 10), 2, _draw_int(generator, 3, 6))
    return case, round(_draw_float(generator, 0.2, 0.5), 2), secret_seed("09 GPT dropout weights")


def gpt_dropout_run(make, case, rate, seed):
    """GPT(..., dropout=rate) with the case's weights in training mode, its blocks' attention and feed-forward layers
    in eval mode: its logits, and what each nn.Dropout still in training mode got and gave, in the order of the calls."""
    vocab_size, d_model, n_heads, n_layers, d_ff = case[:5]
    weights, tokens = gpt_case(case, seed)
    model = attempt(lambda: load_weights(make(vocab_size, d_model, n_heads, n_layers, d_ff, dropout=rate),
                                         weights).train())
    if isinstance(model, Raised):
        return {"logits": model, "dropouts": []}
    for name, module in model.named_modules():      # only the GPT's own dropout stays random
        if name.endswith((".attn", ".feed_forward")):
            module.eval()
    calls = []
    handles = [module.register_forward_hook(lambda module, inputs, output, name=name: calls.append(
        {"name": name, "input": inputs[0].detach().clone(), "output": output.detach().clone()}))
        for name, module in model.named_modules() if isinstance(module, nn.Dropout) and module.training]
    try:
        with torch.no_grad():
            logits = attempt(model, tokens)
    finally:
        for handle in handles:
            handle.remove()
    return {"logits": logits, "dropouts": calls}


# ----------------------------------------------------------------------------- lm_loss

# (batch, length, vocab, mask: None, "lengths" of the prompt (not counted), or "padding": counted lengths)
LM_LOSS_VISIBLE = [(3, 6, 11, None, None), (3, 6, 11, "prompt", [2, 4, 1]), (2, 7, 5, "padding", [7, 3])]


def hidden_lm_loss_cases():
    """(cases, seeds) of lm_loss's hidden tests, drawn from the secret: prompts of distinct lengths, the shortest
    sequence (no mask), prompts with padding after, padding; the rows of a case count distinct numbers of tokens."""
    generator = secret_generator("09 lm_loss")

    def distinct(count, low, high):
        return (low + torch.randperm(high - low + 1, generator=generator)[:count]).tolist()
    prompted, both, padded = ((_draw_int(generator, 3, 4), _draw_int(generator, 6, 8)), (2, _draw_int(generator, 7, 10)),
                              (_draw_int(generator, 3, 4), _draw_int(generator, 5, 7)))
    starts, stops = distinct(2, 1, 3), distinct(2, both[1] - 3, both[1])
    cases = [(*prompted, _draw_int(generator, 5, 20), "prompt", distinct(prompted[0], 1, prompted[1] - 2)),
             (1, 2, _draw_int(generator, 3, 9), None, None),
             (*both, _draw_int(generator, 5, 20), "both", [[start, stop] for start, stop in zip(starts, stops)]),
             (*padded, _draw_int(generator, 5, 20), "padding", distinct(padded[0], 2, padded[1]))]
    return cases, _seeds("09 lm_loss", len(cases))


def lm_loss_case(case, seed):
    """(logits [B, T, V], tokens [B, T], loss_mask [B, T] or None) of one case."""
    batch, length, vocab, kind, spans = case
    generator = _generator(seed)
    logits = torch.randn(batch, length, vocab, generator=generator) * 2
    tokens = torch.randint(0, vocab, (batch, length), generator=generator)
    position = torch.arange(length)[None, :]
    if kind is None:
        return logits, tokens, None
    if kind == "prompt":        # the first spans[b] tokens are the prompt
        return logits, tokens, position >= torch.tensor(spans)[:, None]
    if kind == "padding":       # the first spans[b] tokens are real, the rest padding
        return logits, tokens, position < torch.tensor(spans)[:, None]
    start, stop = (torch.tensor([s[i] for s in spans])[:, None] for i in (0, 1))     # "both": a prompt and padding
    return logits, tokens, (position >= start) & (position < stop)


def lm_loss_runs(lm_loss, cases, seeds=None):
    """For each case: the loss, and whether it carries a gradient back to the logits."""
    runs = []
    for case, seed in with_seeds(cases, seeds):
        logits, tokens, mask = lm_loss_case(case, seed)
        logits.requires_grad_(True)
        loss = attempt(lm_loss, logits, tokens, mask)
        differentiable = isinstance(loss, torch.Tensor) and loss.requires_grad
        runs.append({"loss": loss.detach() if isinstance(loss, torch.Tensor) else loss, "differentiable": differentiable})
    return runs


# ----------------------------------------------------------------------------- adamw_param_groups

class TinyLM(nn.Module):
    """The stand-in of adamw_param_groups' tests: every kind of parameter a GPT has, and a few more. The output
    layer `head` is registered first and shares its weight with the embedding (tied)."""

    def __init__(self, seed=0):
        super().__init__()
        from transformer_course.layers import LayerNorm

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = nn.Linear(8, 12, bias=False)
            self.embed = nn.Embedding(12, 8)
            self.head.weight = self.embed.weight
            self.attn = nn.Linear(8, 24)
            self.norm = LayerNorm(8)                                   # gamma, beta
            self.torch_norm = nn.LayerNorm(8)                          # weight, bias: a norm's "weight" is no matrix
            self.feed_forward = nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 8))
            self.gate = nn.Parameter(torch.ones(1))                    # a bare scalar
            for p in self.parameters():
                nn.init.normal_(p, std=0.5)


class Projection(nn.Linear):
    """An nn.Linear of a class of its own: its weight is an nn.Linear layer's matrix all the same."""


class Mixer(nn.Module):
    """A module whose matrix is called `weight` but which is no nn.Linear."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(4, 8))


class WiderLM(TinyLM):
    """TinyLM with more matrices, of which only the nn.Linear's take weight decay (the hidden tests' stand-in)."""

    def __init__(self, seed=0):
        super().__init__(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            self.conv = nn.Conv1d(8, 8, 3)                             # a 3-d weight, no nn.Linear's
            self.mixer = Mixer()
            self.positions = nn.Parameter(torch.empty(6, 8))           # a bare matrix: a table of positions
            self.projection = Projection(8, 8)                         # an nn.Linear: decayed
            for module in (self.conv, self.mixer, self.projection):
                for p in module.parameters():
                    nn.init.normal_(p, std=0.5)
            nn.init.normal_(self.positions, std=0.5)


def stand_in(seed, wider=False):
    """The model of adamw_param_groups' tests: TinyLM (visible) or WiderLM (hidden)."""
    return (WiderLM if wider else TinyLM)(seed)


def hidden_param_groups_case():
    """(weight_decay, seed) of adamw_param_groups' hidden test, drawn from the secret."""
    generator = secret_generator("09 adamw_param_groups")
    return round(_draw_float(generator, 0.05, 0.5), 3), secret_seed("09 adamw_param_groups model")


def seeded_grads(model, seed):
    """Gradients for every parameter of the model, drawn from a seed (the same in kernel and judge)."""
    generator = _generator(seed)
    for _, p in sorted(((name, p) for name, p in model.named_parameters()), key=lambda item: item[0]):
        p.grad = torch.randn(p.shape, generator=generator)


def _group_facts(group, names):
    if not isinstance(group, dict):
        return {"type": type(group).__name__}
    params = group.get("params")
    params = list(params) if isinstance(params, (list, tuple)) else params
    listed = ([names.get(id(p), "<not a parameter of the model>") for p in params]
              if isinstance(params, list) else type(params).__name__)
    decay = group.get("weight_decay")
    return {"type": "dict", "keys": sorted(str(k) for k in group), "names": listed,
            "weight_decay": float(decay) if isinstance(decay, (int, float)) else repr(decay)}


def param_groups_run(adamw_param_groups, weight_decay, seed=0, wider=False):
    """The groups the answer makes for the stand-in (names and weight decay), and the model's parameters after one
    step of torch.optim.AdamW(groups, lr=0.1) with seeded gradients."""
    model = stand_in(seed, wider)
    names = {id(p): name for name, p in model.named_parameters()}
    groups = attempt(adamw_param_groups, model, weight_decay)
    if isinstance(groups, Raised):
        return {"groups": groups}
    groups = attempt(list, groups)
    if isinstance(groups, Raised):
        return {"groups": groups}
    facts = {"groups": [_group_facts(g, names) for g in groups]}
    seeded_grads(model, seed)
    step = attempt(lambda: torch.optim.AdamW(groups, lr=0.1).step())
    facts["after"] = step if isinstance(step, Raised) else {n: p.detach().clone() for n, p in model.named_parameters()}
    return facts


# ----------------------------------------------------------------------------- warmup_cosine_lr

# (peak_lr, warmup_steps, total_steps, min_lr or None for the default, steps)
SCHEDULE_VISIBLE = [(1e-3, 10, 100, None, [0, 1, 5, 9, 10, 11, 30, 55, 99, 100, 150]),
                    (3.0, 4, 20, 0.5, [0, 2, 4, 8, 12, 16, 20, 40])]
SCHEDULE_ERRORS = [(1e-3, 10, 10, None), (1e-3, 20, 10, None), (1e-3, -1, 10, None)]


def hidden_schedule_cases():
    """(cases, error cases) of warmup_cosine_lr's hidden tests, drawn from the secret: a warm-up and a floor, with the
    steps around both ends of each phase; no warm-up and the default floor; a decay of one step."""
    generator = secret_generator("09 warmup_cosine_lr")

    def peak():
        return 10 ** _draw_float(generator, -4.5, -2.0)

    def floor(peak_lr):
        return peak_lr * _draw_float(generator, 0.05, 0.3)
    warmup, span, later = _draw_int(generator, 3, 40), _draw_int(generator, 20, 200), _draw_int(generator, 1, 500)
    total, peak_lr = warmup + span, peak()
    steps = sorted({0, 1, warmup - 1, warmup, warmup + 1, warmup + _draw_int(generator, 2, span - 2), total - 1, total,
                    total + later})
    no_warmup, short = _draw_int(generator, 20, 200), _draw_int(generator, 2, 30)
    short_peak = peak()
    cases = [(peak_lr, warmup, total, floor(peak_lr), steps),
             (peak(), 0, no_warmup, None, [0, 1, _draw_int(generator, 2, no_warmup - 2), no_warmup - 1, no_warmup,
                                           no_warmup + later]),
             (short_peak, short, short + 1, floor(short_peak), [0, short - 1, short, short + 1, short + 2])]
    errors = [(peak_lr, warmup, warmup, None), (peak_lr, warmup + later, warmup, None), (peak_lr, -later, total, None)]
    return cases, errors


def schedule_values(warmup_cosine_lr, cases):
    """For each case, the answer's learning rate at each of its steps."""
    runs = []
    for peak, warmup, total, min_lr, steps in cases:
        extra = () if min_lr is None else (min_lr,)
        runs.append([attempt(warmup_cosine_lr, step, peak, warmup, total, *extra) for step in steps])
    return runs


def schedule_errors(warmup_cosine_lr, cases):
    return [attempt(warmup_cosine_lr, 5, peak, warmup, total) for peak, warmup, total, _ in cases]


# ----------------------------------------------------------------------------- sample_next

N_DRAWS = 20000
# The visible tests' rows of probabilities (the logits are their logs, plus a constant)
SAMPLE_ROWS = {"a": [0.05, 0.30, 0.10, 0.40, 0.15], "b": [0.02, 0.08, 0.45, 0.05, 0.25, 0.15]}
SAMPLE_VISIBLE = [("a", {}), ("a", {"temperature": 0.5}), ("a", {"temperature": 2.0}), ("a", {"top_k": 2}),
                  ("a", {"top_p": 0.6}), ("a", {"temperature": 0.5, "top_p": 0.8}), ("a", {"top_k": 10})]
# The hidden tests' rows: these probabilities, each moved by 3 % at most, in an order drawn from the secret. The
# cumulative masses of the likeliest tokens (0.42, 0.66, 0.80, 0.90, 0.96) stay clear of every p the tests ask.
SHAPE = (0.42, 0.24, 0.14, 0.10, 0.06, 0.04)
GREEDY_VISIBLE = [[1.0, 3.0, 3.0, 0.0], [5.0, 1.0, 5.0, 2.0], [-1.0, -2.0, -3.0, -4.0]]


def _secret_row(generator):
    jitter = torch.exp((2 * torch.rand(len(SHAPE), generator=generator, dtype=torch.float64) - 1) * 0.03)
    probs = torch.tensor(SHAPE, dtype=torch.float64) * jitter
    return (probs / probs.sum())[torch.randperm(len(SHAPE), generator=generator)].tolist()


def hidden_sample_cases():
    """sample_next's hidden cases, (rows of probabilities, settings), drawn from the secret (see SHAPE): each known
    mistake changes the distribution of at least one case by 0.03 or more, and where one explains it the tests can
    name it (tests/test_gpt.py checks that for many secrets)."""
    generator = secret_generator("09 sample_next")

    def row():
        return [_secret_row(generator)]
    return [(row(), {"temperature": round(_draw_float(generator, 0.55, 0.75), 3)}),
            (row(), {"top_p": 0.73}),
            (row(), {"top_k": 3, "top_p": 0.72}),
            (row(), {"top_k": len(SHAPE) + _draw_int(generator, 1, 20)}),
            (row(), {"temperature": round(_draw_float(generator, 0.55, 0.7), 3), "top_p": 0.7}),
            (row(), {"temperature": round(_draw_float(generator, 0.6, 0.8), 3), "top_k": 4, "top_p": 0.7}),
            ([_secret_row(generator), _secret_row(generator)], {"top_p": 0.73}),
            (row(), {"top_p": 1.0}),
            (row(), {"top_p": 1e-6})]


def sample_rows(rows):
    """The rows of probabilities of a case: the visible tests name them ("ab": rows a and b), the hidden ones list them."""
    return [SAMPLE_ROWS[name] for name in rows] if isinstance(rows, str) else rows


def sample_logits(rows):
    """Logits [N_DRAWS, V] of the case's rows (a row per draw: two rows alternate)."""
    rows = [torch.tensor(row, dtype=torch.float64).log() + 1.5 for row in sample_rows(rows)]
    width = max(len(r) for r in rows)
    rows = [torch.cat([r, torch.full((width - len(r),), float("-inf"), dtype=torch.float64)]) for r in rows]
    return torch.stack(rows).repeat(N_DRAWS // len(rows), 1).float()


def sample_runs(sample_next, cases):
    """For each case: N_DRAWS draws of the next token, and a second call with a generator seeded alike."""
    runs = []
    for seed, (rows, settings) in enumerate(cases):
        logits = sample_logits(rows)
        draws = attempt(sample_next, logits, generator=_generator(seed), **settings)
        again = attempt(sample_next, logits, generator=_generator(seed), **settings)
        runs.append({"draws": draws, "same_again": isinstance(draws, torch.Tensor) and isinstance(again, torch.Tensor)
                     and draws.shape == again.shape and torch.equal(draws, again)})
    return runs


def hidden_greedy_rows():
    """Logits [5, V] drawn from the secret, halves of integers: rows 0, 2 and 4 have their maximum twice."""
    generator = secret_generator("09 sample_next greedy")
    width = _draw_int(generator, 3, 7)
    rows = torch.randint(-5, 6, (5, width), generator=generator).double()
    for row in rows[::2]:
        first, second = torch.randperm(width, generator=generator)[:2].tolist()
        row[first] = row[second] = row.max() + 1
    return (rows / 2).tolist()


def greedy_runs(sample_next, rows):
    logits = torch.tensor(rows)
    return {"out": attempt(sample_next, logits, temperature=0), "input_changed": not torch.equal(logits, torch.tensor(rows))}


# ----------------------------------------------------------------------------- generate

class KnownLogitsLM(nn.Module):
    """A stand-in causal language model whose logits are a known function of the tokens so far: at position t, after
    x_0 ... x_t,    logits = sum over j <= t of 0.5 ** (t - j) * table[x_j]  +  offsets[t].

    forward(tokens [B, T], cache=None) -> logits [B, T, V], like a GPT: with a cache (a dict) the tokens are
    those after the ones the cache holds, and it keeps them. `calls` records every call: how many tokens, which
    cache (None, or the number of the dict in the order first seen), what it held, the tokens fed, whether
    gradients were on and the model in training mode."""

    def __init__(self, vocab_size, seed, max_len=64):
        super().__init__()
        generator = _generator(1000 + seed)
        self.table = torch.randn(vocab_size, vocab_size, generator=generator, dtype=torch.float64)
        self.offsets = torch.randn(max_len, vocab_size, generator=generator, dtype=torch.float64) * 0.5
        self.anchor = nn.Parameter(torch.zeros(1))      # so that next(model.parameters()) works
        self.calls, self._caches = [], []

    def _cache_number(self, cache):
        if cache is None:
            return None
        if not isinstance(cache, dict):
            raise TypeError(f"the cache must be a dict (empty at first), got {type(cache).__name__}")
        if not any(cache is c for c in self._caches):
            self._caches.append(cache)
        return next(i for i, c in enumerate(self._caches) if c is cache)

    def forward(self, tokens, cache=None):
        number = self._cache_number(cache)
        held = cache.get("tokens") if cache is not None else None
        self.calls.append({"length": int(tokens.size(1)), "cache": number, "grad": torch.is_grad_enabled(),
                           "training": self.training, "held": 0 if held is None else int(held.size(1)),
                           "tokens": tokens.detach().cpu().clone()})
        prefix = tokens if held is None else torch.cat([held, tokens.cpu()], dim=1)
        if cache is not None:
            cache["tokens"] = prefix
        start, x = prefix.size(1) - tokens.size(1), self.table[prefix]                      # [B, L, V]
        logits = []
        for t in range(start, prefix.size(1)):
            weights = 0.5 ** torch.arange(t, -1, -1, dtype=torch.float64)                   # 0.5 ** (t - j)
            logits.append((weights[None, :, None] * x[:, :t + 1]).sum(1) + self.offsets[t])
        return torch.stack(logits, dim=1).float().to(tokens.device)


def second_best(logits):
    """A `choose` for generate's tests: the token with the second highest logit."""
    return logits.topk(2, dim=-1).indices[:, 1]


class ChoiceLog:
    """second_best as a `choose` that keeps what it was given (`given`: the logits of each call)."""

    def __init__(self):
        self.given = []

    def __call__(self, logits):
        self.given.append(logits.detach().clone() if isinstance(logits, torch.Tensor) else type(logits).__name__)
        return second_best(logits)


# (vocab_size, batch, prompt length, max_new_tokens, cache, choose: None or "second_best", model in training mode)
GENERATE_VISIBLE = [(7, 2, 3, 5, True, None, False), (7, 2, 3, 5, False, None, False)]


def hidden_generate_cases():
    """(cases, seeds) of generate's hidden tests, drawn from the secret: with and without the cache, the argmax or a
    logged `choose`, one new token, models in training mode."""
    generator = secret_generator("09 generate")

    def sizes(batch_high=4):
        return _draw_int(generator, 5, 13), _draw_int(generator, 1, batch_high), _draw_int(generator, 1, 6)
    cases = [(*sizes(), _draw_int(generator, 3, 8), True, "second_best", True),
             (*sizes(1), 1, True, None, False),
             (*sizes(), _draw_int(generator, 3, 8), False, "second_best", False),
             (*sizes(), _draw_int(generator, 2, 6), True, None, True)]
    return cases, _seeds("09 generate", len(cases))


def generate_prompt(case, seed):
    vocab_size, batch, length = case[:3]
    return torch.randint(0, vocab_size, (batch, length), generator=_generator(2000 + seed))


def generate_runs(generate, cases, seeds=None):
    """For each case: what generate returned (tokens, logits), the stand-in's call log and mode after, and what a
    logged `choose` was given."""
    runs = []
    for case, seed in with_seeds(cases, seeds):
        vocab_size, _, _, max_new, cache, choose, training = case
        model = KnownLogitsLM(vocab_size, seed).train(training)
        log = ChoiceLog() if choose else None
        kwargs = {} if log is None else {"choose": log}
        result = attempt(generate, model, generate_prompt(case, seed), max_new, cache=cache, **kwargs)
        if not isinstance(result, Raised):
            result = attempt(lambda: tuple(result)) if isinstance(result, (tuple, list)) else {"type": type(result).__name__}
        runs.append({"result": result, "calls": model.calls, "training_after": model.training,
                     "given": None if log is None else log.given})
    return runs
