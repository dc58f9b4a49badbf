"""Oracles of notebook 09 (apply_rope, CausalSelfAttention, GPT, lm_loss, adamw_param_groups, warmup_cosine_lr,
sample_next, generate), shared by its tests.

The expected values come from computations that share no code with the course's solution (transformer_course.gpt):
RoPE as a multiplication of complex numbers e^(i p w) in float64; attention through PyTorch's
F.scaled_dot_product_attention(is_causal=True) in float64 on the full sequence, which the cached runs must match;
a GPT written out as formulas (LayerNorm's mean and variance, the feed-forward's ReLU) in float64; the
next-token loss from log_softmax and gather in float64; the decayed parameters listed by hand and
torch.optim.AdamW run on them; the learning rate's two branches with math.cos; sampling distributions computed
in float64 from the probabilities the test chose (and, in the visible tests, written out by hand); generation
recomputed from the stand-in model's formula at every step, without a cache.

The checks run in the grader's process on what the probes (transformer_course/probes/gpt.py) sent from the
kernel, and rebuild every input from the same seeds. Where the answer is wrong, the message names the mistake
when one of the known ones explains the numbers.
"""
import math

import torch
import torch.nn.functional as F

from ..probes import gpt as probes
from ..probing import outcome, paired
from ..testing import assert_close, check_tensor


def _d(t):
    return t.detach().to(torch.float64)


# ----------------------------------------------------------------------------- apply_rope

def rotated(x, positions, base=10000.0, exponent=2.0, layout="interleaved", sign=1.0):
    """RoPE in float64 as complex numbers: pair i of the vector at position p, read as x_a + i x_b, times
    e^(i p w_i), w_i = base^(-exponent * i / d). layout "interleaved": pairs (x[2i], x[2i+1]); "half": (x[i], x[i + d/2]).
    exponent 1.0 and sign -1.0 are the known mistakes (frequencies base^(-i/d), rotation the wrong way)."""
    x, d = _d(x), x.size(-1)
    omega = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = sign * positions.to(torch.float64)[:, None] * omega                            # [T, d/2]
    if layout == "interleaved":
        pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    else:
        pairs = torch.stack([x[..., :d // 2], x[..., d // 2:]], dim=-1)
    turned = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * torch.polar(torch.ones_like(angle), angle))
    return turned.flatten(-2) if layout == "interleaved" else torch.cat([turned[..., 0], turned[..., 1]], dim=-1)


def rope_mistakes(x, positions, base):
    mistakes = {
        "the half-split layout, pairs (x[i], x[i + d/2]); this exercise pairs neighbours (x[2i], x[2i + 1])":
            lambda: rotated(x, positions, base, layout="half"),
        "frequencies base^(-i/d) instead of base^(-2i/d): pair i turns at w_i = base^(-2i/d), i = 0 .. d/2 - 1":
            lambda: rotated(x, positions, base, exponent=1.0),
        "a rotation the wrong way (the sines with the opposite sign): (a, b) -> (a cos - b sin, a sin + b cos)":
            lambda: rotated(x, positions, base, sign=-1.0),
        "no rotation at all": lambda: _d(x),
    }
    if not torch.equal(positions, torch.arange(positions.numel())):
        mistakes["positions 0, 1, ..., T - 1 whatever `positions` says: rotate by the positions given"] = \
            lambda: rotated(x, torch.arange(positions.numel()), base)
    return mistakes


def check_rope_values(found, cases):
    for seed, (case, run) in enumerate(paired(cases, found)):
        x, positions, base = probes.rope_case(case, seed)
        what = f"apply_rope(x {list(x.shape)} {x.dtype}, positions={positions.tolist()}, base={base})"
        out = outcome(run["out"], what)
        check_tensor(out, what, shape=x.shape, dtype=x.dtype)
        assert not run["input_changed"], f"{what} changed x in place: return a new tensor and leave x as it was"
        assert_close(out, rotated(x, positions, base), what, atol=1e-5, rtol=1e-5,
                     mistakes=rope_mistakes(x, positions, base))


def check_rope_relative(found, cases):
    """The score of a rotated query at p and a rotated key at r depends on p - r only, and is what RoPE gives."""
    for seed, (case, scores) in enumerate(paired(cases, found)):
        d, base, pairs = case
        q, k = probes.relative_case(case, seed)
        by_offset = {}
        for (p, r), score in zip(pairs, scores, strict=True):
            what = f"the score of apply_rope(q, [{p}]) and apply_rope(k, [{r}]) (d={d}, float64)"
            score = outcome(score, what)
            expected = float((rotated(q, torch.tensor([p]), base) * rotated(k, torch.tensor([r]), base)).sum())
            by_offset.setdefault(p - r, []).append((p, r, score))
            assert abs(score - expected) < 1e-9, f"{what} is {score:.10f}, expected {expected:.10f}"
        for offset, seen in by_offset.items():
            first = seen[0]
            for p, r, score in seen[1:]:
                assert abs(score - first[2]) < 1e-9, (
                    f"the score at positions ({first[0]}, {first[1]}) is {first[2]:.10f} but at ({p}, {r}), the same "
                    f"offset {offset}, it is {score:.10f}: with RoPE it depends on the offset only")


# ----------------------------------------------------------------------------- CausalSelfAttention

def _layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * _d(gamma) + _d(beta)


def _project(weights, prefix, name, x):
    return x @ _d(weights[f"{prefix}{name}.weight"]).T + _d(weights[f"{prefix}{name}.bias"])


def attention_expected(weights, x, n_heads, prefix="", chunks=None, variant=None):
    """The layer's output in float64, [B, T, D]. chunks: the lengths fed one after the other with one cache
    (the mistakes of a cache are variants: "context" ignores the cache, "restart" rotates each chunk from 0,
    "top_left" aligns the causal mask to the first key, "no_self" hides the new keys from the new queries);
    variant "no_rope", "values", "d_model" or "no_mask" are the known mistakes of the whole layer."""
    x = _d(x)
    batch, length, d_model = x.shape
    d_k = d_model // n_heads
    q, k, v = (_project(weights, prefix, name, x) for name in ("w_q", "w_k", "w_v"))
    if variant == "d_model":                 # rotated over d_model before the heads were split
        q, k = rotated(q, torch.arange(length)), rotated(k, torch.arange(length))
    q, k, v = (t.reshape(batch, length, n_heads, d_k).transpose(1, 2) for t in (q, k, v))
    outputs, start = [], 0
    for size in chunks or [length]:
        outputs.append(_attend_chunk(q, k, v, start, size, variant))
        start += size
    out = torch.cat(outputs, dim=2).transpose(1, 2).reshape(batch, length, d_model)
    return out @ _d(weights[f"{prefix}w_o.weight"]).T + _d(weights[f"{prefix}w_o.bias"])


def _attend_chunk(q, k, v, start, size, variant):
    """The new queries start..start+size-1 over the keys a layer with a cache (or one of its mistakes) uses."""
    stop = start + size
    first = start if variant == "context" else 0        # "context": the cached keys are not used
    positions = torch.arange(first, stop)
    query, keys, values = q[:, :, start:stop], k[:, :, first:stop], v[:, :, first:stop]
    if variant not in ("no_rope", "d_model"):
        query, keys = rotated(query, positions[start - first:]), rotated(keys, positions)
        if variant == "values":
            values = rotated(values, positions)
    mask = torch.ones(size, stop - first, dtype=torch.bool).tril(diagonal=start - first)
    if variant == "top_left":
        mask = torch.ones(size, stop - first, dtype=torch.bool).tril()
    elif variant == "no_self" and start > 0:
        mask = torch.zeros(size, stop, dtype=torch.bool)
        mask[:, :start] = True
    elif variant == "no_mask":
        mask = torch.ones(size, stop - first, dtype=torch.bool)
    return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)


def _restart_keys(weights, x, n_heads, chunks, prefix=""):
    """The cached run of a layer that rotates every call's tokens from position 0 (keys cached as rotated)."""
    x = _d(x)
    batch, length, d_model = x.shape
    d_k = d_model // n_heads
    q, k, v = (_project(weights, prefix, name, x).reshape(batch, length, n_heads, d_k).transpose(1, 2)
               for name in ("w_q", "w_k", "w_v"))
    outputs, start = [], 0
    for size in chunks:
        local = torch.arange(size)
        q[:, :, start:start + size] = rotated(q[:, :, start:start + size], local)
        k[:, :, start:start + size] = rotated(k[:, :, start:start + size], local)
        mask = torch.ones(size, start + size, dtype=torch.bool).tril(diagonal=start)
        outputs.append(F.scaled_dot_product_attention(q[:, :, start:start + size], k[:, :, :start + size],
                                                      v[:, :, :start + size], attn_mask=mask))
        start += size
    out = torch.cat(outputs, dim=2).transpose(1, 2).reshape(batch, length, d_model)
    return out @ _d(weights[f"{prefix}w_o.weight"]).T + _d(weights[f"{prefix}w_o.bias"])


WHOLE_LAYER_MISTAKES = {
    "no_rope": "no rotation of the queries and keys: apply_rope to q and k after splitting the heads",
    "values": "the values rotated too: RoPE turns the queries and keys only (their dot products carry the positions)",
    "d_model": "RoPE applied before the heads are split, with frequencies over d_model: rotate each head's "
               "[B, H, T, d_k] queries and keys, frequencies over d_k",
    "no_mask": "no causal mask: position t must not see the positions after it",
}
CACHE_MISTAKES = {
    "context": "the cache is not used: a call's tokens attend only to each other, not to the cached keys and values",
    "top_left": "the causal mask aligned top-left when there are fewer queries than keys (is_causal=True of "
                "F.scaled_dot_product_attention does that): new query i may see every cached key and the new keys "
                "up to its own, t + i",
    "no_self": "the new tokens do not attend to their own keys and values: add them to the cache's before attending",
}


def check_attention_values(found, cases):
    for seed, (case, run) in enumerate(paired(cases, found)):
        d_model, n_heads, batch, length, _ = case
        weights, x = probes.attention_case(case, seed)
        what = f"CausalSelfAttention({d_model}, {n_heads})(x [{batch}, {length}, {d_model}])"
        out = outcome(run["full"], what)
        mistakes = {text: (lambda v=v: attention_expected(weights, x, n_heads, variant=v))
                    for v, text in WHOLE_LAYER_MISTAKES.items()}
        assert_close(out, attention_expected(weights, x, n_heads), what, atol=1e-5, rtol=1e-4, mistakes=mistakes)


def check_attention_cache(found, cases):
    for seed, (case, run) in enumerate(paired(cases, found)):
        d_model, n_heads, batch, length, chunks = case
        weights, x = probes.attention_case(case, seed)
        what = (f"CausalSelfAttention({d_model}, {n_heads}) fed x [{batch}, {length}, {d_model}] in chunks of "
                f"{chunks} with one cache dict")
        parts = [outcome(part, what) for part in run["cached"]]
        for part, size in zip(parts, chunks, strict=True):
            check_tensor(part, f"{what}: the output of a chunk of {size}", shape=(batch, size, d_model))
        mistakes = {text: (lambda v=v: attention_expected(weights, x, n_heads, chunks=chunks, variant=v))
                    for v, text in CACHE_MISTAKES.items()}
        mistakes["positions that restart at 0 with every call: the tokens after t cached ones sit at positions t, "
                 "t + 1, ..."] = lambda: _restart_keys(weights, x, n_heads, chunks)
        assert_close(torch.cat(parts, dim=1), attention_expected(weights, x, n_heads), what + ", joined", atol=1e-5,
                     rtol=1e-4, mistakes=mistakes)


def check_attention_parts(facts):
    what = "CausalSelfAttention(16, 4, dropout=0.25)"
    assert outcome(facts["made"], what) is True
    assert facts["n_heads"] == 4, f"{what}.n_heads is {facts['n_heads']!r}, expected 4"
    expected = [(f"{p}.{kind}", [16, 16] if kind == "weight" else [16]) for p in probes.PROJECTIONS
                for kind in ("weight", "bias")]
    got = facts["parameters"]
    assert sorted((n, list(s)) for n, s in got) == sorted(expected), (
        f"{what} has the parameters {[n for n, _ in got]}: expected the four projections w_q, w_k, w_v, w_o, "
        "each nn.Linear(d_model, d_model) with a bias, and nothing else (RoPE has no parameters)")
    assert 0.25 in facts["dropout"], f"{what} has no nn.Dropout(0.25) (dropout rates found: {facts['dropout']})"


# ----------------------------------------------------------------------------- GPT

def _sinusoid(length, d_model):
    position = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = position / 10000 ** (2 * i / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)


def gpt_expected(weights, tokens, n_heads, n_layers, variant=None):
    """A GPT's logits in float64, written out: E[tokens] -> blocks (Pre-LN) -> LayerNorm -> @ Eᵀ. The variants
    are the known mistakes: "post_ln", "no_final_norm", "scaled" (by sqrt(d_model)), "sinusoid" (added)."""
    embedding = _d(weights["embed.weight"])
    x = embedding[tokens]
    if variant == "scaled":
        x = x * math.sqrt(embedding.size(1))
    if variant == "sinusoid":
        x = x + _sinusoid(tokens.size(1), embedding.size(1))
    for i in range(n_layers):
        block = f"blocks.{i}."

        def norm(name, y):
            return _layer_norm(y, weights[f"{block}{name}.gamma"], weights[f"{block}{name}.beta"])

        def feed_forward(y):
            return _project(weights, block, "feed_forward.linear2",
                            F.relu(_project(weights, block, "feed_forward.linear1", y)))

        def attend(y):
            return attention_expected(weights, y, n_heads, prefix=f"{block}attn.")
        if variant == "post_ln":
            x = norm("norm1", x + attend(x))
            x = norm("norm2", x + feed_forward(x))
        else:
            x = x + attend(norm("norm1", x))
            x = x + feed_forward(norm("norm2", x))
    if variant != "no_final_norm":
        x = _layer_norm(x, weights["norm.gamma"], weights["norm.beta"])
    return x @ embedding.T


GPT_MISTAKES = {
    "post_ln": "Post-LN blocks, x = norm(x + sublayer(x)): a GPT block normalises first, x + sublayer(norm(x))",
    "no_final_norm": "no final LayerNorm before the output layer: Pre-LN never normalises the residual stream itself",
    "scaled": "token vectors multiplied by sqrt(d_model): a GPT uses the embedding as it is",
    "sinusoid": "a sinusoidal positional encoding added to the tokens: the positions enter through RoPE only",
}


def expected_gpt_parameters(vocab_size, d_model, n_layers, d_ff):
    return {name: list(t.shape) for name, t in probes.gpt_weights(vocab_size, d_model, n_layers, d_ff,
                                                                  torch.Generator().manual_seed(0)).items()}


def check_gpt_structure(facts, sizes=(29, 16, 4, 2, 24)):
    vocab_size, d_model, _, n_layers, d_ff = sizes
    what = f"GPT{sizes}"
    assert outcome(facts["made"], what) is True
    got = {name: shape for name, shape in facts["parameters"]}
    expected = expected_gpt_parameters(vocab_size, d_model, n_layers, d_ff)
    extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
    heads = [n for n in extra if got[n] in ([vocab_size, d_model], [vocab_size])]
    assert not heads, (f"{what} has its own output layer ({', '.join(heads)}): the output is tied to the embedding, "
                       "logits = norm(x) @ embed.weight.T, with no new parameters")
    assert "norm.gamma" not in missing, f"{what} has no final LayerNorm `norm`: Pre-LN needs one before the output"
    assert not extra and not missing, (f"{what}: parameters missing {missing}, unexpected {extra}. The contract: embed "
                                       "(nn.Embedding), blocks (nn.ModuleList of blocks with norm1, attn, norm2, "
                                       "feed_forward), norm; no positional table")
    wrong = {n: (got[n], expected[n]) for n in expected if got[n] != expected[n]}
    assert not wrong, f"{what}: parameters of the wrong shape (found, expected): {wrong}"
    assert facts["blocks"] == "ModuleList", f"{what}.blocks is a {facts['blocks']}: use nn.ModuleList"
    assert all(parts[1] != "MultiHeadAttention" for parts in facts["parts"]), \
        f"{what}'s blocks use MultiHeadAttention: their attention is your CausalSelfAttention"
    assert facts["dropout"] and set(facts["dropout"]) == {0.25}, \
        f"{what} with dropout=0.25 has the dropout rates {facts['dropout']}: pass dropout to every part"
    shape = outcome(facts["shape"], f"{what}(tokens [2, 3])")
    assert shape == [2, 3, vocab_size], f"{what}(tokens [2, 3]) has shape {shape}, expected [2, 3, {vocab_size}]"


def check_gpt_values(found, cases):
    for seed, (case, run) in enumerate(paired(cases, found)):
        vocab_size, d_model, n_heads, n_layers, d_ff, batch, length, chunks = case
        weights, tokens = probes.gpt_case(case, seed)
        what = f"GPT({vocab_size}, {d_model}, {n_heads}, {n_layers}, {d_ff})(tokens [{batch}, {length}])"
        expected = gpt_expected(weights, tokens, n_heads, n_layers)
        mistakes = {text: (lambda v=v: gpt_expected(weights, tokens, n_heads, n_layers, variant=v))
                    for v, text in GPT_MISTAKES.items()}
        assert_close(outcome(run["full"], what), expected, what, atol=1e-4, rtol=1e-4, mistakes=mistakes)
        parts = [outcome(part, what + " with a cache") for part in run["cached"]]
        for part, size in zip(parts, chunks, strict=True):
            check_tensor(part, f"{what}: the logits of a chunk of {size} tokens fed with a cache",
                         shape=(batch, size, vocab_size))
        assert_close(torch.cat(parts, dim=1), expected, f"{what} fed in chunks of {chunks} with one cache dict",
                     atol=1e-4, rtol=1e-4, mistakes={
                         "the cache is not handed on: give block i its own dict, cache[i] (cache.setdefault(i, {}))":
                             lambda: torch.cat([gpt_expected(weights, t, n_heads, n_layers)
                                                for t in tokens.split(chunks, dim=1)], dim=1)})


# ----------------------------------------------------------------------------- lm_loss

def expected_loss(logits, tokens, mask, variant=None):
    """The mean over the counted tokens of -log softmax(logits[:, t])[tokens[:, t + 1]], float64. Variants: the
    known mistakes ("no_shift", "mask_unshifted", "all_tokens", "row_means")."""
    log_probs = _d(logits).log_softmax(dim=-1)
    if variant == "no_shift":
        nll = -log_probs.gather(-1, tokens[..., None])[..., 0]
        counted = torch.ones_like(tokens, dtype=torch.bool) if mask is None else mask
    else:
        nll = -log_probs[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]                 # [B, T - 1]
        counted = torch.ones_like(nll, dtype=torch.bool) if mask is None or variant == "all_tokens" else (
            mask[:, :-1] if variant == "mask_unshifted" else mask[:, 1:])
    if variant == "row_means":
        rows = [nll[b][counted[b]].mean() for b in range(nll.size(0)) if counted[b].any()]
        return torch.stack(rows).mean()
    return nll[counted].mean()


LOSS_MISTAKES = {
    "no_shift": "no shift: the logits at position t predict the NEXT token, tokens[:, t + 1]",
    "mask_unshifted": "the mask read one position early (loss_mask[:, :-1]): the prediction of token t + 1 counts "
                      "when loss_mask[:, t + 1] is True",
    "all_tokens": "the loss over every token, the prompt's included: only the tokens loss_mask marks count",
    "row_means": "the mean of each sequence's mean: average over all the counted tokens of the batch at once",
}


def check_lm_loss(found, cases):
    for seed, (case, run) in enumerate(paired(cases, found)):
        logits, tokens, mask = probes.lm_loss_case(case, seed)
        what = f"lm_loss(logits {list(logits.shape)}, tokens, loss_mask={'None' if mask is None else mask.int().tolist()})"
        loss = outcome(run["loss"], what)
        check_tensor(loss, what)
        assert loss.numel() == 1, f"{what} has shape {list(loss.shape)}: the loss is one number (a 0-d tensor)"
        mistakes = {text: (lambda v=v: expected_loss(logits, tokens, mask, v)) for v, text in LOSS_MISTAKES.items()}
        assert_close(loss.reshape(()), expected_loss(logits, tokens, mask), what, atol=1e-5, rtol=1e-5,
                     mistakes=mistakes)
        assert run["differentiable"], (f"{what} carries no gradient: compute it from the logits with torch "
                                       "operations (no .item(), no .detach(), no numpy)")


# ----------------------------------------------------------------------------- adamw_param_groups

# TinyLM's parameters (probes.TinyLM), by their first names; the Linear layers' matrices are decayed, listed by hand
DECAYED = ("attn.weight", "feed_forward.0.weight", "feed_forward.2.weight")
WHY_NOT = {"head.weight": "the embedding (embed, tied to the output layer head: it is both)",
           "attn.bias": "a bias", "feed_forward.2.bias": "a bias", "norm.gamma": "a LayerNorm's gain",
           "norm.beta": "a LayerNorm's shift", "torch_norm.weight": "nn.LayerNorm's weight (a gain, not a matrix)",
           "torch_norm.bias": "nn.LayerNorm's bias", "gate": "a bare scalar parameter"}


def check_param_groups(found, weight_decay, seed=0):
    what = f"adamw_param_groups(model, weight_decay={weight_decay})"
    groups = outcome(found["groups"], what)
    model = probes.TinyLM(seed)
    names = [name for name, _ in model.named_parameters()]
    assert isinstance(groups, list) and all(g.get("type") == "dict" for g in groups), \
        f"{what} should return a list of dicts (AdamW's parameter groups), got {groups}"
    seen = {}
    for g in groups:
        assert "params" in g["keys"], f"{what}: a group without 'params' (keys {g['keys']})"
        assert "weight_decay" in g["keys"], (f"{what}: a group without 'weight_decay' (keys {g['keys']}): AdamW would "
                                            "give it its default, 0.01; say 0.0 or weight_decay")
        assert isinstance(g["names"], list), f"{what}: a group's 'params' is a {g['names']}, not a list"
        for name in g["names"]:
            assert name in names, f"{what}: a group holds {name}"
            assert name not in seen, (f"{what} lists {name} twice: every parameter in exactly one group (a tied weight "
                                      "is one parameter: model.parameters() gives it once)")
            seen[name] = g["weight_decay"]
    missing = [n for n in names if n not in seen]
    assert not missing, f"{what} leaves {missing} out of every group: AdamW would not train them"
    for name, decay in seen.items():
        if name in DECAYED:
            assert decay == weight_decay, f"{what}: {name} (a Linear layer's weight matrix) gets decay {decay}, expected {weight_decay}"
        else:
            assert decay == 0.0, (f"{what} decays {name}, {WHY_NOT[name]}: only the weight matrices of nn.Linear "
                                  "layers take weight decay")
    check_adamw_step(found, weight_decay, seed, what)


def check_adamw_step(found, weight_decay, seed, what):
    """The model after one step of torch.optim.AdamW with the answer's groups, against the same step with the groups
    listed by hand."""
    after = outcome(found["after"], f"torch.optim.AdamW({what}, lr=0.1).step()")
    model = probes.TinyLM(seed)
    params = dict(model.named_parameters())
    groups = [{"params": [params[n] for n in DECAYED], "weight_decay": weight_decay},
              {"params": [p for n, p in params.items() if n not in DECAYED], "weight_decay": 0.0}]
    probes.seeded_grads(model, seed)
    torch.optim.AdamW(groups, lr=0.1).step()
    for name, p in params.items():
        assert_close(after[name], p.detach(), f"{name} after one AdamW step with {what}", atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- warmup_cosine_lr

def expected_lr(step, peak, warmup, total, min_lr=0.0, variant=None):
    """The two branches written out; the variants are the known mistakes."""
    if step < warmup:
        return peak * (step + 1) / warmup if variant == "warmup_plus_one" else peak * step / warmup
    progress = (step / total) if variant == "from_zero" else (step - warmup) / (total - warmup)
    if variant != "no_clamp":
        progress = min(progress, 1.0)
    if variant == "no_min":
        min_lr = 0.0
    if variant == "no_half":
        return min_lr + (peak - min_lr) * math.cos(math.pi * progress)
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * progress))


SCHEDULE_MISTAKES = {
    "no_half": "cos(pi * progress) without (1 + cos) / 2: the rate must fall from the peak to min_lr, never below",
    "from_zero": "the cosine's progress counted from step 0: it starts after the warm-up, "
                 "progress = (step - warmup_steps) / (total_steps - warmup_steps)",
    "no_min": "a decay to 0: it ends at min_lr",
    "no_clamp": "no floor after total_steps: the cosine comes back up; stay at min_lr",
    "warmup_plus_one": "the warm-up one step ahead: peak_lr * step / warmup_steps (0 at step 0, the peak at warmup_steps)",
}


def check_schedule(found, cases):
    for (peak, warmup, total, min_lr, steps), values in paired(cases, found):
        floor = 0.0 if min_lr is None else min_lr
        call = f"warmup_cosine_lr(step, {peak}, {warmup}, {total}{'' if min_lr is None else f', {min_lr}'})"
        got = [outcome(v, call) for v in values]
        assert all(isinstance(v, (int, float)) for v in got), f"{call} should return a number, got {got}"
        expected = [expected_lr(s, peak, warmup, total, floor) for s in steps]
        if all(math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-12) for g, e in zip(got, expected, strict=True)):
            continue
        for variant, text in SCHEDULE_MISTAKES.items():
            guess = [expected_lr(s, peak, warmup, total, floor, variant) for s in steps]
            if guess != expected and all(math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-12) for g, e in zip(got, guess)):
                raise AssertionError(f"{call} is wrong: it looks like {text}")
        step, g, e = next((s, g, e) for s, g, e in zip(steps, got, expected)
                          if not math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-12))
        raise AssertionError(f"{call} at step {step} is {g:.6g}, expected {e:.6g}")


def check_schedule_errors(found, cases):
    from ..probing import assert_raised_value_error

    for (peak, warmup, total, _), result in paired(cases, found):
        assert_raised_value_error(result, f"warmup_cosine_lr(5, {peak}, warmup_steps={warmup}, total_steps={total})",
                                  "it needs 0 <= warmup_steps < total_steps")


# ----------------------------------------------------------------------------- sample_next

def distribution(probs, temperature=1.0, top_k=None, top_p=None, variant=None):
    """The sampling distribution, float64, from the probabilities the test chose: p^(1/T) renormalised, then the k
    most likely (renormalised), then the fewest most likely whose mass reaches top_p (renormalised). Variants:
    the known mistakes ("after_softmax", "drop_crossing", "top_p_first", "not_renormalised")."""
    p = torch.tensor(probs, dtype=torch.float64)
    if variant == "top_p_first" and top_p is not None:
        p = _nucleus(p / p.sum(), top_p, variant)
        top_p = None
    if variant != "after_softmax":
        p = p ** (1.0 / temperature)
    p = p / p.sum()
    if top_k is not None:
        p = torch.where(p >= p.sort(descending=True).values[min(top_k, len(p)) - 1], p, torch.zeros_like(p))
        if variant != "not_renormalised":
            p = p / p.sum()
    if top_p is not None:
        p = _nucleus(p, top_p, variant)
    return p / p.sum()


def _nucleus(p, top_p, variant):
    order = p.argsort(descending=True)
    before = torch.cumsum(p[order], 0) - p[order]
    keep = (before + p[order] <= top_p + 1e-12) if variant == "drop_crossing" else (before < top_p)
    keep[0] = True
    kept = torch.zeros_like(p)
    kept[order[keep]] = p[order[keep]]
    return kept


SAMPLE_MISTAKES = {
    "after_softmax": "the temperature applied to the probabilities after the softmax, where renormalising cancels "
                     "it: divide the logits by the temperature, then softmax",
    "drop_crossing": "top-p that drops the token whose probability crosses p: keep the most likely tokens until their "
                     "mass reaches p, that token included",
    "top_p_first": "top-p applied before the temperature: the nucleus is taken from the distribution after temperature",
    "not_renormalised": "top-p taken on the distribution before top-k: renormalise what top-k keeps, then take the nucleus",
}


def _frequencies(draws, n_tokens, what):
    check_tensor(draws, what)
    assert not draws.is_floating_point(), f"{what} has dtype {draws.dtype}: token ids are integers (torch.long)"
    assert draws.shape == (probes.N_DRAWS,), (f"{what} has shape {list(draws.shape)}: one token per row of the "
                                              f"logits, [{probes.N_DRAWS}]")
    assert int(draws.min()) >= 0 and int(draws.max()) < n_tokens, f"{what} drew ids outside 0..{n_tokens - 1}"
    return torch.bincount(draws.long(), minlength=n_tokens).double() / draws.numel()


def check_draws(draws, row, settings, width, what, parity=None):
    """The frequencies of the draws (those of one row: every other draw, from `parity`) against the distribution."""
    probs = probes.SAMPLE_ROWS[row]
    if parity is not None:
        draws = draws[parity::2]

    def padded(p):
        return torch.cat([p, torch.zeros(width - len(probs), dtype=torch.float64)])
    expected = padded(distribution(probs, **settings))
    seen = torch.bincount(draws.long(), minlength=width).double() / draws.numel()
    if (seen[expected == 0] == 0).all() and (seen - expected).abs().max() < 0.02:
        return
    for variant, text in SAMPLE_MISTAKES.items():
        guess = padded(distribution(probs, **settings, variant=variant))
        if not torch.allclose(guess, expected, atol=0.03) and (seen - guess).abs().max() < 0.02:
            raise AssertionError(f"{what} is wrong: it looks like {text}")
    never = [i for i in range(width) if expected[i] == 0 and seen[i] > 0]
    detail = (f"it drew token{'s' if len(never) > 1 else ''} {never}, which the filters remove" if never else
              f"frequencies {[round(f, 3) for f in seen.tolist()]}, expected {[round(f, 3) for f in expected.tolist()]}")
    raise AssertionError(f"{what} draws from the wrong distribution: {detail}")


def check_samples(found, cases):
    for (rows, settings), run in paired(cases, found):
        width = max(len(probes.SAMPLE_ROWS[r]) for r in rows)
        call = ", ".join(["logits"] + [f"{k}={v}" for k, v in settings.items()] + ["generator=g"])
        what = f"sample_next({call})"
        draws = outcome(run["draws"], what)
        _frequencies(draws, width, what)
        assert run["same_again"], (f"{what} drew other tokens with a generator seeded alike: draw with the generator "
                                   "(torch.multinomial(probs, 1, generator=generator))")
        for parity, row in enumerate(rows):
            check_draws(draws, row, settings, width, what + (f", rows of '{row}'" if len(rows) > 1 else ""),
                        parity if len(rows) > 1 else None)


def check_greedy_sampling(found, rows):
    what = f"sample_next(logits={rows}, temperature=0)"
    out = outcome(found["out"], what, "temperature 0 means the argmax: no division by 0")
    check_tensor(out, what, shape=(len(rows),))
    assert not out.is_floating_point(), f"{what} has dtype {out.dtype}: token ids are integers (torch.long)"
    expected = [max(range(len(r)), key=lambda i: (r[i], -i)) for r in rows]     # the first of tied maxima
    assert out.tolist() == expected, (f"{what} = {out.tolist()}, expected {expected}: temperature 0 is the argmax, "
                                      "the first of tied maxima (torch.argmax)")
    assert not found["input_changed"], f"{what} changed the logits in place"


# ----------------------------------------------------------------------------- generate

def prefix_logits(model_seed, vocab_size, tokens):
    """What probes.PrefixLM gives at every position of `tokens` [B, L], recomputed from its formula in float64."""
    stand_in = probes.PrefixLM(vocab_size, model_seed)
    table, offsets = stand_in.table, stand_in.offsets
    batch, length = tokens.shape
    out = torch.zeros(batch, length, vocab_size, dtype=torch.float64)
    for b in range(batch):
        for t in range(length):
            for j in range(t + 1):
                out[b, t] += 0.5 ** (t - j) * table[tokens[b, j]]
            out[b, t] += offsets[t]
    return out


def _chosen(logits, choose):
    order = logits.argsort(dim=-1, descending=True)
    return order[..., 0] if choose is None else order[..., 1]


def check_generate(found, cases):
    for seed, (case, run) in enumerate(paired(cases, found)):
        vocab_size, batch, length, max_new, cache, choose = case
        prompt = probes.generate_prompt(case, seed)
        what = (f"generate(model, prompt [{batch}, {length}], max_new_tokens={max_new}, cache={cache}"
                f"{', choose=second_best' if choose else ''})")
        result = outcome(run["result"], what)
        assert isinstance(result, tuple) and len(result) == 2, f"{what} should return (tokens, logits), got {result}"
        tokens, logits = result
        check_tensor(tokens, what + "'s tokens", shape=(batch, length + max_new))
        check_tensor(logits, what + "'s logits", shape=(batch, max_new, vocab_size))
        assert torch.equal(tokens[:, :length].long(), prompt), f"{what}: the tokens must start with the prompt"
        _check_calls(run["calls"], case, tokens, what)
        expected = prefix_logits(seed, vocab_size, tokens.long())[:, length - 1:-1]
        assert_close(logits, expected, f"{what}'s logits (step i: the last position after the prompt and i new "
                                        "tokens)", atol=1e-5, rtol=1e-5)
        chosen = _chosen(_d(logits), choose)
        for step in range(max_new):
            assert torch.equal(tokens[:, length + step].long(), chosen[:, step]), (
                f"{what}: new token {step} is {tokens[:, length + step].tolist()}, but choose(logits of that step) "
                f"gives {chosen[:, step].tolist()}" + ("" if choose else ": without `choose`, the argmax"))


def _check_calls(calls, case, tokens, what):
    """The model's calls, as the stand-in logged them: with a cache, the prompt once into a new empty dict, then
    the token just chosen, one at a time, into the same dict; without, the whole sequence each time."""
    _, _, length, max_new, cache, _ = case
    assert calls, f"{what} never called the model"
    assert len(calls) <= max_new + 1, f"{what} called the model {len(calls)} times for {max_new} new tokens"
    if not cache:
        for i, call in enumerate(calls):
            assert call["cache"] is None, f"{what}: with cache=False the model is called without a cache"
            assert call["length"] == length + i, (f"{what}: call {i} fed {call['length']} tokens; without a cache "
                                                  f"each call runs the whole sequence so far, {length + i}")
        return
    first = calls[0]
    assert first["cache"] == 0 and first["held"] == 0 and first["length"] == length, (
        f"{what}: the first call should feed the whole prompt ({length} tokens) with a new, empty cache dict; it fed "
        f"{first['length']} tokens" + (" without a cache" if first["cache"] is None else ""))
    for i, call in enumerate(calls[1:], start=1):
        assert call["cache"] is not None, f"{what}: call {i} has no cache: pass the same dict at every step"
        assert call["cache"] == 0, f"{what}: call {i} got a new cache dict: pass the same dict at every step"
        assert call["length"] == 1, (f"{what}: call {i} fed {call['length']} tokens with the cache, which already holds "
                                     f"{call['held']}: feed only the token just chosen")
        fed, new = call["tokens"][:, 0], tokens[:, length + i - 1].long()
        assert torch.equal(fed.long(), new), (f"{what}: call {i} fed {fed.tolist()}, but the token just chosen is "
                                              f"{new.tolist()}: feed the newest token, tokens[:, -1:]")


ANSWER_HELPERS = {"apply_rope": (rotated,), "CausalSelfAttention": (attention_expected, _attend_chunk),
                  "GPT": (gpt_expected,), "lm_loss": (expected_loss,), "warmup_cosine_lr": (expected_lr,),
                  "sample_next": (distribution, _nucleus), "generate": (prefix_logits,)}
