"""Notebook 09: what the probes of its tests run in the kernel, shared with the judges where they rebuild inputs.

Nothing here knows an expected value. Seeded weights and inputs (``attention_case``, ``gpt_case``, ...) are built
the same way in the kernel, where the probe loads them into the student's module, and in the grader, where the
judge computes what the module should give (transformer_course.oracles.gpt). ``PrefixLM`` is the stand-in model of
``generate``'s tests: a language model whose every logit is a known function of the prefix, with a cache of its own.
"""
import torch
from torch import nn

from ..probing import Raised, attempt
from .transformer import _uniform, load_weights, norm_weights

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")


def _generator(seed):
    return torch.Generator().manual_seed(seed)


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
ROPE_HIDDEN = [((1, 2, 4, 16), [0, 1000, 5000, 12], 10000.0, "float64"), ((3, 1, 6, 2), None, 10000.0, "float32"),
               ((2, 2, 3, 6), [5, 5, 9], 100.0, "float64"), ((1, 4, 7, 32), None, 500.0, "float32")]
# (d, base, pairs of positions (p, r)): the score of a query at p with a key at r
ROPE_RELATIVE = [(8, 10000.0, [(0, 0), (5, 5), (3, 1), (10, 8), (102, 100), (1, 3), (50, 52)]),
                 (16, 10000.0, [(7, 0), (1007, 1000), (0, 9), (4000, 4009), (2, 2), (3000, 3000)]),
                 (6, 100.0, [(4, 1), (64, 61), (0, 0), (9, 9)])]


def rope_case(case, seed):
    """(x, positions, base) of one case of ROPE_VISIBLE / ROPE_HIDDEN."""
    shape, positions, base, dtype = case
    x = torch.randn(*shape, generator=_generator(seed), dtype=torch.float64).to(getattr(torch, dtype))
    positions = torch.arange(shape[-2]) if positions is None else torch.tensor(positions)
    return x, positions, base


def rope_runs(apply_rope, cases):
    """For each case: what apply_rope returned, and whether it changed its input."""
    runs = []
    for seed, case in enumerate(cases):
        x, positions, base = rope_case(case, seed)
        before = x.clone()
        runs.append({"out": attempt(apply_rope, x, positions, base), "input_changed": not torch.equal(x, before)})
    return runs


def relative_case(case, seed):
    """A query and a key [1, 1, 1, d] in float64."""
    generator = _generator(100 + seed)
    return (torch.randn(1, 1, 1, case[0], generator=generator, dtype=torch.float64),
            torch.randn(1, 1, 1, case[0], generator=generator, dtype=torch.float64))


def rope_scores(apply_rope, cases):
    """For each case, the score of the rotated query at p with the rotated key at r, for each pair (p, r)."""
    runs = []
    for seed, (_, base, pairs) in enumerate(cases):
        q, k = relative_case(cases[seed], seed)

        def score(p, r):
            rotated_q, rotated_k = apply_rope(q, torch.tensor([p]), base), apply_rope(k, torch.tensor([r]), base)
            return float((rotated_q * rotated_k).sum())
        runs.append([attempt(score, p, r) for p, r in pairs])
    return runs


# ----------------------------------------------------------------------------- CausalSelfAttention

# (d_model, n_heads, batch, length, chunks fed one after the other with one cache)
ATTENTION_VISIBLE = [(16, 4, 2, 6, [3, 1, 2])]
ATTENTION_HIDDEN = [(12, 3, 1, 7, [1, 1, 1, 4]), (8, 1, 2, 5, [2, 3]), (16, 8, 3, 4, [4]), (20, 2, 2, 9, [5, 1, 1, 2])]


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


def attention_runs(make, cases):
    return [attention_run(make, case, seed) for seed, case in enumerate(cases)]


def attention_facts(make):
    """The parts of CausalSelfAttention(16, 4, dropout=0.25): plain data for the judge."""
    layer = attempt(make, 16, 4, dropout=0.25)
    if isinstance(layer, Raised):
        return {"made": layer}
    return {"made": True, "n_heads": getattr(layer, "n_heads", None), "parameters": names_and_shapes(layer),
            "dropout": [m.p for m in layer.modules() if isinstance(m, nn.Dropout)]}


# ----------------------------------------------------------------------------- GPT

# (vocab_size, d_model, n_heads, n_layers, d_ff, batch, length, chunks)
GPT_VISIBLE = [(23, 16, 4, 2, 32, 2, 6, [4, 1, 1])]
GPT_HIDDEN = [(17, 8, 2, 1, 16, 1, 5, [1, 1, 1, 1, 1]), (31, 12, 3, 3, 20, 3, 7, [3, 4]), (9, 16, 8, 2, 8, 2, 4, [2, 2])]


def gpt_case(case, seed):
    """(weights by attribute path, tokens [B, T]) of one case."""
    vocab_size, d_model, _, n_layers, d_ff, batch, length, _ = case
    generator = _generator(seed)
    weights = gpt_weights(vocab_size, d_model, n_layers, d_ff, generator)
    return weights, torch.randint(0, vocab_size, (batch, length), generator=generator)


def gpt_run(make, case, seed):
    """The student's GPT with the case's weights, in eval mode: its logits over the tokens at once, and chunk
    by chunk with one cache dict."""
    vocab_size, d_model, n_heads, n_layers, d_ff, _, _, chunks = case
    weights, tokens = gpt_case(case, seed)
    model = attempt(lambda: load_weights(make(vocab_size, d_model, n_heads, n_layers, d_ff, dropout=0.0),
                                         weights).eval())
    if isinstance(model, Raised):
        return {"full": model, "cached": [model] * len(chunks)}
    cache = {}
    with torch.no_grad():
        return {"full": attempt(model, tokens),
                "cached": [attempt(model, part, cache=cache) for part in _chunks(chunks, tokens)]}


def gpt_runs(make, cases):
    return [gpt_run(make, case, seed) for seed, case in enumerate(cases)]


def gpt_facts(make, sizes=(29, 16, 4, 2, 24)):
    """What GPT(*sizes, dropout=0.25) is made of: its parameters (a shared one once), the class names of its
    blocks' parts, its dropout rates, and the output's shape for a [2, 3] batch."""
    model = attempt(make, *sizes, dropout=0.25)
    if isinstance(model, Raised):
        return {"made": model}
    blocks = getattr(model, "blocks", None)
    parts = [[type(getattr(block, name, None)).__name__ for name in ("norm1", "attn", "norm2", "feed_forward")]
             for block in (blocks if isinstance(blocks, nn.ModuleList) else [])]
    tokens = torch.randint(0, sizes[0], (2, 3), generator=_generator(7))
    out = attempt(lambda: model.eval()(tokens))
    return {"made": True, "parameters": names_and_shapes(model), "blocks": type(blocks).__name__, "parts": parts,
            "dropout": sorted(m.p for m in model.modules() if isinstance(m, nn.Dropout)),
            "shape": list(out.shape) if isinstance(out, torch.Tensor) else out}


# ----------------------------------------------------------------------------- lm_loss

# (batch, length, vocab, mask: None, "lengths" of the prompt (not counted), or "padding": counted lengths)
LM_LOSS_VISIBLE = [(3, 6, 11, None, None), (3, 6, 11, "prompt", [2, 4, 1]), (2, 7, 5, "padding", [7, 3])]
LM_LOSS_HIDDEN = [(4, 5, 13, "prompt", [3, 3, 1, 4]), (1, 2, 3, None, None), (2, 9, 17, "both", [[2, 7], [4, 9]]),
                  (5, 4, 7, "padding", [4, 2, 3, 4, 2])]


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


def lm_loss_runs(lm_loss, cases):
    """For each case: the loss, and whether it carries a gradient back to the logits."""
    runs = []
    for seed, case in enumerate(cases):
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
        from ..layers import LayerNorm

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


def param_groups_run(adamw_param_groups, weight_decay, seed=0):
    """The groups the answer makes for TinyLM (names and weight decay), and the model's parameters after one
    step of torch.optim.AdamW(groups, lr=0.1) with seeded gradients."""
    model = TinyLM(seed)
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
SCHEDULE_HIDDEN = [(2e-4, 0, 50, None, [0, 1, 25, 49, 50, 51, 1000]), (0.1, 100, 101, 0.01, [0, 50, 99, 100, 101, 102]),
                   (6e-4, 2000, 60000, 6e-5, [1, 1999, 2000, 2001, 31000, 59999, 60000, 70000])]
SCHEDULE_ERRORS = [(1e-3, 10, 10, None), (1e-3, 20, 10, None), (1e-3, -1, 10, None)]


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
# The rows whose next token is drawn, as probabilities (the logits are their logs, plus a constant)
SAMPLE_ROWS = {"a": [0.05, 0.30, 0.10, 0.40, 0.15], "b": [0.02, 0.08, 0.45, 0.05, 0.25, 0.15]}
SAMPLE_VISIBLE = [("a", {}), ("a", {"temperature": 0.5}), ("a", {"temperature": 2.0}), ("a", {"top_k": 2}),
                  ("a", {"top_p": 0.6}), ("a", {"temperature": 0.5, "top_p": 0.8})]
SAMPLE_HIDDEN = [("b", {"temperature": 0.7}), ("a", {"top_k": 3, "top_p": 0.75}), ("b", {"top_k": 10}),
                 ("b", {"top_p": 1.0}), ("a", {"top_p": 1e-6}), ("b", {"top_p": 0.46}), ("b", {"top_p": 0.7, "top_k": 3}),
                 ("ab", {"temperature": 1.5}), ("ab", {"top_p": 0.65})]
GREEDY_VISIBLE = [[1.0, 3.0, 3.0, 0.0], [5.0, 1.0, 5.0, 2.0], [-1.0, -2.0, -3.0, -4.0]]
GREEDY_HIDDEN = [[0.5, 0.5, 0.5], [-3.0, 7.0, 7.0], [2.0, -1.0, 9.0]]


def sample_logits(row_names):
    """Logits [N_DRAWS, V] of the named rows (a row per draw: "ab" alternates the two rows)."""
    rows = [torch.tensor(SAMPLE_ROWS[name], dtype=torch.float64).log() + 1.5 for name in row_names]
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


def greedy_runs(sample_next, rows):
    logits = torch.tensor(rows)
    return {"out": attempt(sample_next, logits, temperature=0), "input_changed": not torch.equal(logits, torch.tensor(rows))}


# ----------------------------------------------------------------------------- generate

class PrefixLM(nn.Module):
    """A stand-in language model whose logits are a known function of the prefix: at position t, after tokens
    x_0 ... x_t,    logits = sum over j <= t of 0.5 ** (t - j) * table[x_j]  +  offsets[t].

    forward(tokens [B, T], cache=None) -> logits [B, T, V], like a GPT: with a cache (a dict) the tokens are
    those after the ones the cache holds, and it keeps them. `calls` records every call: how many tokens, which
    cache (None, or the number of the dict in the order first seen), what it held, and the tokens fed."""

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
        self.calls.append({"length": int(tokens.size(1)), "cache": number,
                           "held": 0 if held is None else int(held.size(1)), "tokens": tokens.detach().cpu().clone()})
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


# (vocab_size, batch, prompt length, max_new_tokens, cache, choose: None or "second_best")
GENERATE_VISIBLE = [(7, 2, 3, 5, True, None), (7, 2, 3, 5, False, None)]
GENERATE_HIDDEN = [(11, 3, 1, 6, True, "second_best"), (5, 1, 4, 1, True, None), (9, 2, 2, 8, False, "second_best"),
                   (13, 4, 6, 4, True, None)]


def generate_prompt(case, seed):
    vocab_size, batch, length = case[:3]
    return torch.randint(0, vocab_size, (batch, length), generator=_generator(2000 + seed))


def generate_runs(generate, cases):
    """For each case: what generate returned (tokens, logits) and the stand-in's call log."""
    runs = []
    for seed, case in enumerate(cases):
        vocab_size, _, _, max_new, cache, choose = case
        model = PrefixLM(vocab_size, seed).eval()
        kwargs = {} if choose is None else {"choose": second_best}
        result = attempt(generate, model, generate_prompt(case, seed), max_new, cache=cache, **kwargs)
        if not isinstance(result, Raised):
            result = attempt(lambda: tuple(result)) if isinstance(result, (tuple, list)) else {"type": type(result).__name__}
        runs.append({"result": result, "calls": model.calls})
    return runs
