"""Oracles of notebook 09 (apply_rope, CausalSelfAttention, GPT, lm_loss, adamw_param_groups, warmup_cosine_lr,
sample_next, generate), shared by its tests.

The expected values come from computations that share no code with the course's solution (transformer_course.gpt):
RoPE as a multiplication of complex numbers e^(i p w) in float64; attention through PyTorch's
F.scaled_dot_product_attention in float64 on the full sequence, which the cached runs must match, with the tests'
stand-in for apply_rope (probes.RopeDouble) or RoPE itself; a GPT written out as formulas (LayerNorm's mean and
variance, the feed-forward's ReLU, the mixing of the stand-in for its attention, probes.attention_double) in float64;
the next-token loss from log_softmax and gather in float64; the decayed parameters listed by hand and
torch.optim.AdamW run on them; the learning rate's two branches with math.cos; sampling distributions computed
in float64 from the probabilities the test chose (and, in the visible tests, written out by hand); generation
recomputed from the stand-in model's formula at every step, without a cache.

The checks run in the grader's process on what the probes (course_testkit/probes/gpt.py) sent from the
kernel, and rebuild every input from the same seeds, or from the same secret for the hidden tests. Where the answer
is wrong, the message names the mistake when one of the known ones explains the numbers.
"""
import math

import torch
import torch.nn.functional as F

from ..probes import gpt as probes
from ..probing import outcome, paired
from ..testing import assert_close, check_tensor


def _d(t):
    return t.detach().to(torch.float64)


def _matches(actual, expected, atol, rtol):
    """Whether ``actual`` is a tensor with the shape and (within the tolerances) the values of ``expected``."""
    return (isinstance(actual, torch.Tensor) and list(actual.shape) == list(expected.shape)
            and bool(torch.allclose(_d(actual), _d(expected), atol=atol, rtol=rtol)))


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


def check_precision(out, expected, positions, what, atol=1e-5, rtol=1e-5):
    """An AssertionError that names lost precision when the answer is right at every position below 32 and off, by
    little, at positions of 1,000 and more: the mark of angles computed in float32. Nothing otherwise."""
    error = (_d(out) - expected).abs()
    wrong = (error > atol + rtol * expected.abs()).movedim(-2, 0).reshape(positions.numel(), -1).any(dim=1)
    small, large = positions < 32, positions >= 1000
    if not (small.any() and wrong[large].any()) or wrong[small].any() or error.max() > 0.05 * (1 + expected.abs().max()):
        return
    raise AssertionError(
        f"{what} is right at the positions below 32 but off by up to {error.max().item():.1g} at positions "
        f"{positions[large & wrong].tolist()}: the angles lost precision. Compute positions × frequencies in float64 "
        "(float32 keeps about 7 digits: an angle near 40,000 radians to about 0.002), then cast cos and sin to x.dtype")


def check_rope_values(found, cases, seeds=None):
    for (case, seed), run in paired(probes.with_seeds(cases, seeds), found):
        x, positions, base = probes.rope_case(case, seed)
        what = f"apply_rope(x {list(x.shape)} {x.dtype}, positions={positions.tolist()}, base={base})"
        hint = None if x.dim() == 4 else "x is [..., T, d]: any number of leading dimensions, not only [B, H, T, d]"
        out = outcome(run["out"], what, hint)
        check_tensor(out, what, shape=x.shape, dtype=x.dtype)
        assert not run["input_changed"], f"{what} changed x in place: return a new tensor and leave x as it was"
        expected = rotated(x, positions, base)
        check_precision(out, expected, positions, what)
        assert_close(out, expected, what, atol=1e-5, rtol=1e-5, mistakes=rope_mistakes(x, positions, base))


def check_rope_relative(found, cases, seeds=None):
    """The score of a rotated query at p and a rotated key at r depends on p - r only, and is what RoPE gives."""
    for (case, seed), scores in paired(probes.with_seeds(cases, seeds), found):
        d, base, pairs = case
        q, k = probes.relative_case(case, seed)
        by_offset = {}
        for (p, r), score in zip(pairs, scores, strict=True):
            what = f"the score of apply_rope(q, [{p}]) and apply_rope(k, [{r}]) (d={d}, base={base}, float64)"
            score = outcome(score, what)
            expected = float((rotated(q, torch.tensor([p]), base) * rotated(k, torch.tensor([r]), base)).sum())
            by_offset.setdefault(p - r, []).append((p, r, score))
            error = abs(score - expected)
            assert error < 1e-9, f"{what} is {score:.10f}, expected {expected:.10f}" + (
                f": off by {error:.1g}, float32's rounding rather than a wrong formula; compute the angles in float64 (and, "
                "for float64 x, the cosines and sines too)" if error < 1e-4 else "")
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


def _split(t, n_heads):
    batch, length, d_model = t.shape
    return t.reshape(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def _merged(weights, heads, prefix=""):
    """w_o of the heads [B, H, T, d_k], merged back into [B, T, D]."""
    batch, n_heads, length, d_k = heads.shape
    return _project(weights, prefix, "w_o", heads.transpose(1, 2).reshape(batch, length, n_heads * d_k))


def attention_expected(weights, x, n_heads, rope, prefix="", chunks=None, variant=None):
    """The layer's output in float64, [B, T, D], its queries and keys turned by ``rope(x, positions)`` (the tests'
    stand-in for apply_rope, or RoPE). chunks: the lengths fed one after the other with one cache (the mistakes of a
    cache are variants: "context" ignores the cache, "top_left" aligns the causal mask to the first key, "no_self"
    hides the new keys from the new queries); variant "no_rope", "values", "d_model" or "no_mask" are the known
    mistakes of the whole layer."""
    x = _d(x)
    length = x.size(1)
    q, k, v = (_project(weights, prefix, name, x) for name in ("w_q", "w_k", "w_v"))
    if variant == "d_model":                 # rotated over d_model before the heads were split
        q, k = rope(q, torch.arange(length)), rope(k, torch.arange(length))
    q, k, v = (_split(t, n_heads) for t in (q, k, v))
    outputs, start = [], 0
    for size in chunks or [length]:
        outputs.append(_attend_chunk(q, k, v, start, size, variant, rope))
        start += size
    return _merged(weights, torch.cat(outputs, dim=2), prefix)


def _attend_chunk(q, k, v, start, size, variant, rope):
    """The new queries start..start+size-1 over the keys a layer with a cache (or one of its mistakes) uses."""
    stop = start + size
    first = start if variant == "context" else 0        # "context": the cached keys are not used
    positions = torch.arange(first, stop)
    query, keys, values = q[:, :, start:stop], k[:, :, first:stop], v[:, :, first:stop]
    if variant not in ("no_rope", "d_model"):
        query, keys = rope(query, positions[start - first:]), rope(keys, positions)
        if variant == "values":
            values = rope(values, positions)
    mask = torch.ones(size, stop - first, dtype=torch.bool).tril(diagonal=start - first)
    if variant == "top_left":
        mask = torch.ones(size, stop - first, dtype=torch.bool).tril()
    elif variant == "no_self" and start > 0:
        mask = torch.zeros(size, stop, dtype=torch.bool)
        mask[:, :start] = True
    elif variant == "no_mask":
        mask = torch.ones(size, stop - first, dtype=torch.bool)
    return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)


def _restart_keys(weights, x, n_heads, chunks, rope):
    """The cached run of a layer that rotates every call's tokens from position 0 (keys cached as rotated)."""
    q, k, v = (_split(_project(weights, "", name, _d(x)), n_heads) for name in ("w_q", "w_k", "w_v"))
    outputs, start = [], 0
    for size in chunks:
        local = torch.arange(size)
        q[:, :, start:start + size] = rope(q[:, :, start:start + size], local)
        k[:, :, start:start + size] = rope(k[:, :, start:start + size], local)
        mask = torch.ones(size, start + size, dtype=torch.bool).tril(diagonal=start)
        outputs.append(F.scaled_dot_product_attention(q[:, :, start:start + size], k[:, :, :start + size],
                                                      v[:, :, :start + size], attn_mask=mask))
        start += size
    return _merged(weights, torch.cat(outputs, dim=2))


def _overwritten(weights, x, n_heads, chunks, rope):
    """The cached run of a layer that keeps only its last call's keys and values (cache["k"] = the new keys): each
    call sees the previous call's tokens and its own, and counts its positions from the previous call's length."""
    q, k, v = (_split(_project(weights, "", name, _d(x)), n_heads) for name in ("w_q", "w_k", "w_v"))
    outputs, start, held = [], 0, None
    for size in chunks:
        past, new = (0 if held is None else held[0].size(2)), slice(start, start + size)
        positions = torch.arange(past, past + size)
        query, keys, values = rope(q[:, :, new], positions), rope(k[:, :, new], positions), v[:, :, new]
        if held is not None:
            keys, values = torch.cat([held[0], keys], dim=2), torch.cat([held[1], values], dim=2)
        mask = torch.ones(size, past + size, dtype=torch.bool).tril(diagonal=past)
        outputs.append(F.scaled_dot_product_attention(query, keys, values, attn_mask=mask))
        held, start = (keys[:, :, past:], values[:, :, past:]), start + size
    return _merged(weights, torch.cat(outputs, dim=2))


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


def _nearest_rope(actual, double, expected_of):
    """(rope, expected) for the rotation whose expected output is nearest the answer's: the tests' stand-in for
    apply_rope (called by its name) or RoPE itself (written inline, which the contract allows)."""
    candidates = [(rope, expected_of(rope)) for rope in (double, rotated)]

    def distance(candidate):
        expected = candidate[1]
        if not isinstance(actual, torch.Tensor) or list(actual.shape) != list(expected.shape):
            return math.inf
        return torch.nan_to_num((_d(actual) - expected).abs(), nan=math.inf).max().item()
    return min(candidates, key=distance)


def check_attention_values(found, double, cases, seeds=None):
    """``double``: the probes.RopeDouble the probe put in place of apply_rope."""
    for (case, seed), run in paired(probes.with_seeds(cases, seeds), found):
        d_model, n_heads, batch, length, _ = case
        weights, x = probes.attention_case(case, seed)
        what = f"CausalSelfAttention({d_model}, {n_heads})(x [{batch}, {length}, {d_model}])"
        out = outcome(run["full"], what)
        rope, expected = _nearest_rope(out, double, lambda r: attention_expected(weights, x, n_heads, r))
        mistakes = {text: (lambda v=v: attention_expected(weights, x, n_heads, rope, variant=v))
                    for v, text in WHOLE_LAYER_MISTAKES.items()}
        assert_close(out, expected, what, atol=1e-5, rtol=1e-4, mistakes=mistakes)


def check_attention_cache(found, double, cases, seeds=None):
    for (case, seed), run in paired(probes.with_seeds(cases, seeds), found):
        d_model, n_heads, batch, length, chunks = case
        weights, x = probes.attention_case(case, seed)
        what = (f"CausalSelfAttention({d_model}, {n_heads}) fed x [{batch}, {length}, {d_model}] in chunks of "
                f"{chunks} with one cache dict")
        parts = [outcome(part, what) for part in run["cached"]]
        for part, size in zip(parts, chunks, strict=True):
            check_tensor(part, f"{what}: the output of a chunk of {size}", shape=(batch, size, d_model))
        joined = torch.cat(parts, dim=1)
        rope, expected = _nearest_rope(joined, double, lambda r: attention_expected(weights, x, n_heads, r))
        mistakes = {text: (lambda v=v: attention_expected(weights, x, n_heads, rope, chunks=chunks, variant=v))
                    for v, text in CACHE_MISTAKES.items()}
        mistakes["positions that restart at 0 with every call: the tokens after t cached ones sit at positions t, "
                 "t + 1, ..."] = lambda: _restart_keys(weights, x, n_heads, chunks, rope)
        mistakes["the cache overwritten with each call's keys and values: extend it, torch.cat([cache['k'], k], "
                 "dim=2), so that it holds every token so far"] = lambda: _overwritten(weights, x, n_heads, chunks, rope)
        assert_close(joined, expected, what + ", joined", atol=1e-5, rtol=1e-4, mistakes=mistakes)


def check_attention_parts(facts, sizes=probes.ATTENTION_PARTS):
    d_model, n_heads, dropout = sizes
    what = f"CausalSelfAttention({d_model}, {n_heads}, dropout={dropout})"
    assert outcome(facts["made"], what) is True
    assert facts["n_heads"] == n_heads, f"{what}.n_heads is {facts['n_heads']!r}, expected {n_heads}"
    expected = [(f"{p}.{kind}", [d_model, d_model] if kind == "weight" else [d_model]) for p in probes.PROJECTIONS
                for kind in ("weight", "bias")]
    got = facts["parameters"]
    assert sorted((n, list(s)) for n, s in got) == sorted(expected), (
        f"{what} has the parameters {[n for n, _ in got]}: expected the four projections w_q, w_k, w_v, w_o, "
        "each nn.Linear(d_model, d_model) with a bias, and nothing else (RoPE has no parameters)")
    assert dropout in facts["dropout"], f"{what} has no nn.Dropout({dropout}) (dropout rates found: {facts['dropout']})"


def _attention_weights(weights, x, n_heads, rope):
    """The causal attention weights [B, H, T, T] of the layer over x, float64, without dropout."""
    q, k = (_split(_project(weights, "", name, _d(x)), n_heads) for name in ("w_q", "w_k"))
    positions = torch.arange(x.size(1))
    q, k = rope(q, positions), rope(k, positions)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def check_attention_dropout(found, double):
    """The layer of probes.attention_dropout_case in training mode: the heads' outputs, recovered through w_o, are its
    attention weights, each either dropped (0) or divided by 1 - p, as dropout on the weights leaves them."""
    (d_model, n_heads, rate), weights, x = probes.attention_dropout_case()
    what = f"CausalSelfAttention({d_model}, {n_heads}, dropout={rate}) in training mode (on one-hot tokens)"
    out = outcome(found, what)
    check_tensor(out, what, shape=x.shape)
    batch, length, _ = x.shape
    heads = (_d(out) - _d(weights["w_o.bias"])) @ torch.linalg.inv(_d(weights["w_o.weight"])).T
    held = _split(heads, n_heads)[..., :length]                      # [B, H, T, T]: the weights, as dropout left them
    for rope in (double, rotated):
        attention = _attention_weights(weights, x, n_heads, rope)
        assert not torch.allclose(held, attention, atol=1e-4), (
            f"{what} drops no attention weight: apply dropout to the weights when self.training (self.dropout on the "
            "weights, or dropout_p=self.dropout.p if self.training else 0.0 in F.scaled_dot_product_attention)")
        dropped, kept = held.abs() < 1e-4, (held - attention / (1 - rate)).abs() < 1e-4
        if (dropped | kept).all() and (dropped & (attention > 1e-3)).any():
            return
    raise AssertionError(
        f"{what} is not attention with dropout on its weights: each weight must be either dropped (0) or kept and "
        f"divided by 1 - {rate}, as nn.Dropout({rate}) does (self.dropout on the weights, or dropout_p=self.dropout.p "
        "in F.scaled_dot_product_attention), and nothing else is dropped")


# ----------------------------------------------------------------------------- GPT

def _sinusoid(length, d_model):
    position = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = position / 10000 ** (2 * i / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)


def _block_parts(weights, i, mixing):
    """Block i's norm1, attention (the tests' stand-in: a causal mixing of its values), norm2 and feed-forward,
    as float64 functions."""
    block = f"blocks.{i}."

    def norm(name):
        return lambda y: _layer_norm(y, weights[f"{block}{name}.gamma"], weights[f"{block}{name}.beta"])

    def attend(y):
        length = y.size(1)
        return _project(weights, f"{block}attn.", "w_o", mixing[:length, :length] @ _project(weights, f"{block}attn.", "w_v", y))

    def feed_forward(y):
        return _project(weights, block, "feed_forward.linear2", F.relu(_project(weights, block, "feed_forward.linear1", y)))
    return norm("norm1"), attend, norm("norm2"), feed_forward


def gpt_expected(weights, tokens, n_layers, mixing, variant=None):
    """A GPT's logits in float64, written out: E[tokens] -> blocks (Pre-LN) -> LayerNorm -> @ Eᵀ, each block's attention
    the tests' stand-in (``mixing``: its table). The variants are the known mistakes: "post_ln", "no_final_norm",
    "scaled" (by sqrt(d_model)), "sinusoid" (added)."""
    embedding = _d(weights["embed.weight"])
    x = embedding[tokens]
    if variant == "scaled":
        x = x * math.sqrt(embedding.size(1))
    if variant == "sinusoid":
        x = x + _sinusoid(tokens.size(1), embedding.size(1))
    for i in range(n_layers):
        norm1, attend, norm2, feed_forward = _block_parts(weights, i, mixing)
        if variant == "post_ln":
            x = norm1(x + attend(x))
            x = norm2(x + feed_forward(x))
        else:
            x = x + attend(norm1(x))
            x = x + feed_forward(norm2(x))
    if variant != "no_final_norm":
        x = _layer_norm(x, weights["norm.gamma"], weights["norm.beta"])
    return x @ embedding.T


GPT_MISTAKES = {
    "post_ln": "Post-LN blocks, x = norm(x + sublayer(x)): a GPT block normalises first, x + sublayer(norm(x))",
    "no_final_norm": "no final LayerNorm before the output layer: Pre-LN never normalises the residual stream itself",
    "scaled": "token vectors multiplied by sqrt(d_model): a GPT uses the embedding as it is",
    "sinusoid": "a sinusoidal positional encoding added to the tokens: the positions enter through RoPE only",
}


def _gpt_mistakes(weights, tokens, n_layers, mixing):
    return {text: (lambda v=v: gpt_expected(weights, tokens, n_layers, mixing, variant=v)) for v, text in GPT_MISTAKES.items()}


def expected_gpt_parameters(vocab_size, d_model, n_layers, d_ff):
    return {name: list(t.shape) for name, t in probes.gpt_weights(vocab_size, d_model, n_layers, d_ff,
                                                                  torch.Generator().manual_seed(0)).items()}


def check_gpt_structure(facts, mixing, sizes=probes.GPT_SIZES, seed=7):
    """``mixing``: that of the probes.attention_double the probe put in place of CausalSelfAttention."""
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
    classes = sorted(set(facts["block_classes"]) - {"GPTBlock"})
    assert not classes, (f"{what}'s blocks are {', '.join(classes)}: write the block as a class of its own, GPTBlock, "
                         "in the GPT's cell")
    kinds = sorted({parts[1] for parts in facts["parts"]} - {"AttentionDouble"})
    assert not kinds, (f"{what}'s blocks' attention is a {', '.join(kinds)}: make it with the name CausalSelfAttention "
                       "(your class; the tests put a stand-in in its place)")
    assert facts["dropout"] and set(facts["dropout"]) == {0.25}, \
        f"{what} with dropout=0.25 has the dropout rates {facts['dropout']}: pass dropout to every part"
    std = facts["embed_std"]
    assert std is not None, f"{what}.embed is not an nn.Embedding"
    assert 0.014 < std < 0.026, (
        f"{what}'s embedding starts with standard deviation {std:.3g}: initialise it with "
        "nn.init.normal_(self.embed.weight, std=0.02), as GPT-2 does, so that the first logits are small")
    weights, tokens = probes.wiring_case(sizes, seed)
    call = f"{what} with blocks that add nothing (w_o and linear2 set to 0), on tokens [2, 5]"
    assert_close(outcome(facts["wiring"], call), gpt_expected(weights, tokens, n_layers, mixing), call, atol=1e-4,
                 rtol=1e-4, mistakes=_gpt_mistakes(weights, tokens, n_layers, mixing))


def check_block_caches(blocks, what):
    """The cache dicts the blocks' attention got (probes.block_caches): each block its own, cache[i], at every call."""
    numbers = []
    for i, calls in enumerate(blocks):
        got = {call["cache"] for call in calls}
        assert None not in got, (f"{what}: block {i}'s attention got no cache dict: give block i its own dict, "
                                 "cache.setdefault(i, {}), and pass it on")
        assert len(got) <= 1, (f"{what}: block {i}'s attention got another dict at a later call: "
                               "cache.setdefault(i, {}) makes block i's dict once, then returns the same one")
        numbers += list(got)
    shared = sorted({i for i, n in enumerate(numbers) if numbers.count(n) > 1})
    assert not shared, (f"{what}: blocks {shared} got the same cache dict: each block keeps its own keys and values, so "
                        "give block i its own dict, cache.setdefault(i, {})")
    strays = [i for i, calls in enumerate(blocks) if not all(call["own"] for call in calls)]
    assert not strays, (f"{what}: the cache dict of block {strays[0]} is not cache[{strays[0]}]: keep block i's dict "
                        "in the model's cache under the key i, cache.setdefault(i, {})")


def check_gpt_values(found, mixing, cases, seeds=None):
    for (case, seed), run in paired(probes.with_seeds(cases, seeds), found):
        vocab_size, d_model, n_heads, n_layers, d_ff, batch, length, chunks = case
        weights, tokens = probes.gpt_case(case, seed)
        what = f"GPT({vocab_size}, {d_model}, {n_heads}, {n_layers}, {d_ff})(tokens [{batch}, {length}])"
        expected = gpt_expected(weights, tokens, n_layers, mixing)
        mistakes = _gpt_mistakes(weights, tokens, n_layers, mixing)
        assert_close(outcome(run["full"], what), expected, what, atol=1e-4, rtol=1e-4, mistakes=mistakes)
        parts = [outcome(part, what + " with a cache") for part in run["cached"]]
        for part, size in zip(parts, chunks, strict=True):
            check_tensor(part, f"{what}: the logits of a chunk of {size} tokens fed with a cache",
                         shape=(batch, size, vocab_size))
        cached = f"{what} fed in chunks of {chunks} with one cache dict"
        check_block_caches(run["blocks"], cached)
        assert_close(torch.cat(parts, dim=1), expected, cached, atol=1e-4, rtol=1e-4)


def check_gpt_dropout(found, mixing, case, rate, seed):
    """The GPT of probes.gpt_dropout_run in training mode: its dropout layers, in the order called, got the embedded
    tokens, then each block's attention output and feed-forward output (given what the earlier ones gave), and the
    logits are those their outputs make."""
    vocab_size, d_model, n_heads, n_layers, d_ff = case[:5]
    weights, tokens = probes.gpt_case(case, seed)
    what = f"GPT({vocab_size}, {d_model}, {n_heads}, {n_layers}, {d_ff}, dropout={rate}) in training mode"
    logits = outcome(found["logits"], what)
    calls = iter(found["dropouts"])

    def dropout(where, expected):
        call = next(calls, None)
        assert call is not None and _matches(call["input"], expected, 1e-4, 1e-4), (
            f"{what} applies no nn.Dropout {where}: the text puts `dropout` after the embedding, and a block's "
            "`dropout` on each sub-layer's output before the residual sum")
        return _d(call["output"])
    h = dropout("to the token vectors, after the embedding", _d(weights["embed.weight"])[tokens])
    for i in range(n_layers):
        norm1, attend, norm2, feed_forward = _block_parts(weights, i, mixing)
        h = h + dropout(f"to block {i}'s attention output, before the residual sum", attend(norm1(h)))
        h = h + dropout(f"to block {i}'s feed-forward output, before the residual sum", feed_forward(norm2(h)))
    extra = len(list(calls))
    assert not extra, (f"{what} applies nn.Dropout {extra} more time(s) than the text says: after the embedding, and on "
                       "each sub-layer's output")
    expected = _layer_norm(h, weights["norm.gamma"], weights["norm.beta"]) @ _d(weights["embed.weight"]).T
    assert _matches(logits, expected, 1e-4, 1e-4), (
        f"{what}: the logits are not what its dropout layers' outputs make: each sub-layer's output goes through "
        "dropout once, and that is what the residual sum adds, x + dropout(sublayer(norm(x)))")


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


def check_lm_loss(found, cases, seeds=None):
    for (case, seed), run in paired(probes.with_seeds(cases, seeds), found):
        logits, tokens, mask = probes.lm_loss_case(case, seed)
        what = f"lm_loss(logits {list(logits.shape)}, tokens, loss_mask={'None' if mask is None else mask.int().tolist()})"
        loss = outcome(run["loss"], what)
        check_tensor(loss, what)
        assert loss.dim() == 0, f"{what} has shape {list(loss.shape)}: the loss is a 0-d tensor (what .mean() gives)"
        mistakes = {text: (lambda v=v: expected_loss(logits, tokens, mask, v)) for v, text in LOSS_MISTAKES.items()}
        assert_close(loss, expected_loss(logits, tokens, mask), what, atol=1e-5, rtol=1e-5, mistakes=mistakes)
        assert run["differentiable"], (f"{what} carries no gradient: compute it from the logits with torch "
                                       "operations (no .item(), no .detach(), no numpy)")


# ----------------------------------------------------------------------------- adamw_param_groups

# The stand-ins' parameters (probes.TinyLM, probes.WiderLM), by their first names; the nn.Linear layers' matrices are
# decayed, listed by hand
DECAYED = ("attn.weight", "feed_forward.0.weight", "feed_forward.2.weight")
WIDER_DECAYED = DECAYED + ("projection.weight",)
WHY_NOT = {"head.weight": "the embedding (embed, tied to the output layer head: it is both)",
           "attn.bias": "a bias", "feed_forward.2.bias": "a bias", "norm.gamma": "a LayerNorm's gain",
           "norm.beta": "a LayerNorm's shift", "torch_norm.weight": "nn.LayerNorm's weight (a gain, not a matrix)",
           "torch_norm.bias": "nn.LayerNorm's bias", "gate": "a bare scalar parameter",
           "conv.weight": "nn.Conv1d's weight (a tensor of no nn.Linear)", "conv.bias": "a bias",
           "mixer.weight": "a matrix called weight in a module that is no nn.Linear",
           "positions": "a bare matrix parameter (a table of positions), no nn.Linear's", "projection.bias": "a bias"}
WHY_DECAYED = {"projection.weight": "the matrix of an nn.Linear of a class of its own: isinstance(module, nn.Linear)"}


def check_param_groups(found, weight_decay, seed=0, wider=False):
    what = f"adamw_param_groups(model, weight_decay={weight_decay})"
    groups = outcome(found["groups"], what)
    names = [name for name, _ in probes.stand_in(seed, wider).named_parameters()]
    decayed = WIDER_DECAYED if wider else DECAYED
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
        if name in decayed:
            why = WHY_DECAYED.get(name, "a Linear layer's weight matrix")
            assert decay == weight_decay, f"{what}: {name} ({why}) gets decay {decay}, expected {weight_decay}"
        else:
            assert decay == 0.0, (f"{what} decays {name}, {WHY_NOT[name]}: only the weight matrices of nn.Linear "
                                  "layers take weight decay")
    assert len(groups) == 2, f"{what} returns {len(groups)} groups: two, the decayed matrices and the rest"
    check_adamw_step(found, weight_decay, seed, what, wider)


def check_adamw_step(found, weight_decay, seed, what, wider=False):
    """The model after one step of torch.optim.AdamW with the answer's groups, against the same step with the groups
    listed by hand."""
    after = outcome(found["after"], f"torch.optim.AdamW({what}, lr=0.1).step()")
    model = probes.stand_in(seed, wider)
    params = dict(model.named_parameters())
    decayed = WIDER_DECAYED if wider else DECAYED
    groups = [{"params": [params[n] for n in decayed], "weight_decay": weight_decay},
              {"params": [p for n, p in params.items() if n not in decayed], "weight_decay": 0.0}]
    probes.seeded_grads(model, seed)
    torch.optim.AdamW(groups, lr=0.1).step()
    for name, p in params.items():
        assert_close(after[name], p.detach(), f"{name} after one AdamW step with {what}", atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- warmup_cosine_lr

ONE_STEP_OFF = {"progress_ahead": (1, 0), "progress_behind": (-1, 0), "short_span": (0, -1), "long_span": (0, 1)}


def expected_lr(step, peak, warmup, total, min_lr=0.0, variant=None):
    """The two branches written out; the variants are the known mistakes (NaN where a variant divides by 0)."""
    if step < warmup:
        return peak * (step + 1) / warmup if variant == "warmup_plus_one" else peak * step / warmup
    ahead, longer = ONE_STEP_OFF.get(variant, (0, 0))
    if total - warmup + longer <= 0:
        return math.nan
    progress = (step / total) if variant == "from_zero" else (step - warmup + ahead) / (total - warmup + longer)
    if variant != "no_clamp":
        progress = min(progress, 1.0)
    if variant == "no_min":
        min_lr = 0.0
    if variant == "no_half":
        return min_lr + (peak - min_lr) * math.cos(math.pi * progress)
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * progress))


OFF_BY_ONE = ("the cosine's progress off by one step: progress = (step - warmup_steps) / (total_steps - warmup_steps), "
              "0 at step warmup_steps and 1 at total_steps")
SCHEDULE_MISTAKES = {
    "no_half": "cos(pi * progress) without (1 + cos) / 2: the rate must fall from the peak to min_lr, never below",
    "from_zero": "the cosine's progress counted from step 0: it starts after the warm-up, "
                 "progress = (step - warmup_steps) / (total_steps - warmup_steps)",
    "no_min": "a decay to 0: it ends at min_lr",
    "no_clamp": "no floor after total_steps: the cosine comes back up; stay at min_lr",
    "warmup_plus_one": "the warm-up one step ahead: peak_lr * step / warmup_steps (0 at step 0, the peak at warmup_steps)",
    **{variant: OFF_BY_ONE for variant in ONE_STEP_OFF},
}


def _close(got, expected):
    return all(math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-12) for g, e in zip(got, expected, strict=True))


def check_schedule(found, cases):
    for (peak, warmup, total, min_lr, steps), values in paired(cases, found):
        floor = 0.0 if min_lr is None else min_lr
        call = f"warmup_cosine_lr(step, {peak:.6g}, {warmup}, {total}{'' if min_lr is None else f', {min_lr:.6g}'})"
        got = [outcome(v, call) for v in values]
        assert all(isinstance(v, (int, float)) for v in got), f"{call} should return a plain Python number, got {got}"
        expected = [expected_lr(s, peak, warmup, total, floor) for s in steps]
        if _close(got, expected):
            continue
        for variant, text in SCHEDULE_MISTAKES.items():
            guess = [expected_lr(s, peak, warmup, total, floor, variant) for s in steps]
            if not _close(guess, expected) and _close(got, guess):
                raise AssertionError(f"{call} is wrong: it looks like {text}")
        step, g, e = next((s, g, e) for s, g, e in zip(steps, got, expected)
                          if not math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-12))
        raise AssertionError(f"{call} at step {step} is {g:.6g}, expected {e:.6g}")


def check_schedule_errors(found, cases):
    from ..probing import assert_raised_value_error

    for (peak, warmup, total, _), result in paired(cases, found):
        assert_raised_value_error(result, f"warmup_cosine_lr(5, {peak:.6g}, warmup_steps={warmup}, total_steps={total})",
                                  "it needs 0 <= warmup_steps < total_steps")


# ----------------------------------------------------------------------------- sample_next

def _normalised(p):
    return p / p.sum()


def _top_k(p, top_k):
    if top_k is None:
        return p
    return torch.where(p >= p.sort(descending=True).values[min(top_k, len(p)) - 1], p, torch.zeros_like(p))


def _nucleus(p, top_p, variant=None):
    """The fewest most likely tokens of p (not renormalised) whose mass reaches top_p; "drop_crossing": without the
    token that crosses top_p."""
    if top_p is None:
        return p
    order = p.argsort(descending=True)
    before = torch.cumsum(p[order], 0) - p[order]
    keep = (before + p[order] <= top_p + 1e-12) if variant == "drop_crossing" else (before < top_p)
    keep[0] = True
    kept = torch.zeros_like(p)
    kept[order[keep]] = p[order[keep]]
    return kept


def distribution(probs, temperature=1.0, top_k=None, top_p=None, variant=None):
    """The sampling distribution, float64, from the probabilities the test chose: p^(1/T) renormalised, then the k
    most likely (renormalised), then the fewest most likely whose mass reaches top_p (renormalised). Variants: the
    known mistakes (SAMPLE_MISTAKES)."""
    p = _normalised(torch.tensor(probs, dtype=torch.float64))
    tempered = p if variant == "after_softmax" else _normalised(p ** (1.0 / temperature))
    if variant == "top_p_first":
        kept = tempered * (_nucleus(p, top_p) > 0)
        return _normalised(tempered * (_top_k(kept, top_k) > 0))
    measured = _top_k(p if variant == "untempered_nucleus" else tempered, top_k)   # what the filters measure
    if variant != "nucleus_before_top_k":
        measured = _normalised(measured)
    return _normalised(tempered * (_nucleus(measured, top_p, variant) > 0))


def _tempered(settings):
    return settings.get("temperature", 1.0) != 1.0


# variant: (whether the settings let the test see it, what it is)
SAMPLE_MISTAKES = {
    "after_softmax": (_tempered, "the temperature applied to the probabilities after the softmax, where renormalising "
                                 "cancels it: divide the logits by the temperature, then softmax"),
    "drop_crossing": (lambda s: s.get("top_p") is not None,
                      "top-p that drops the token whose probability crosses p: keep the most likely tokens until their "
                      "mass reaches p, that token included"),
    "untempered_nucleus": (lambda s: _tempered(s) and s.get("top_p") is not None,
                           "top-p measured on the probabilities before the temperature: apply the temperature first, "
                           "then take the nucleus"),
    "nucleus_before_top_k": (lambda s: s.get("top_k") is not None and s.get("top_p") is not None,
                             "top-p measured on the distribution before top-k (taken before top-k, or on what top-k "
                             "kept without renormalising it): take the nucleus of what top-k kept, renormalised"),
    "top_p_first": (lambda s: _tempered(s) and s.get("top_k") is not None and s.get("top_p") is not None,
                    "top-p applied first, before the temperature and top-k: the order is temperature, top-k, top-p"),
}


def _frequencies(draws, n_tokens, what):
    check_tensor(draws, what)
    assert not draws.is_floating_point(), f"{what} has dtype {draws.dtype}: token ids are integers (torch.long)"
    assert draws.shape == (probes.N_DRAWS,), (f"{what} has shape {list(draws.shape)}: one token per row of the "
                                              f"logits, [{probes.N_DRAWS}]")
    assert int(draws.min()) >= 0 and int(draws.max()) < n_tokens, f"{what} drew ids outside 0..{n_tokens - 1}"
    return torch.bincount(draws.long(), minlength=n_tokens).double() / draws.numel()


def check_draws(draws, probs, settings, width, what):
    """The frequencies of the draws (those of one row) against the distribution; a mistake is named when exactly
    one of those the settings can show explains them."""
    def padded(p):
        return torch.cat([p, torch.zeros(width - len(probs), dtype=torch.float64)])
    expected = padded(distribution(probs, **settings))
    seen = torch.bincount(draws.long(), minlength=width).double() / draws.numel()
    if (seen[expected == 0] == 0).all() and (seen - expected).abs().max() < 0.02:
        return
    named = set()
    for variant, (shows, text) in SAMPLE_MISTAKES.items():
        guess = padded(distribution(probs, **settings, variant=variant))
        if shows(settings) and not torch.allclose(guess, expected, atol=0.03) and (seen - guess).abs().max() < 0.02:
            named.add(text)
    if len(named) == 1:
        raise AssertionError(f"{what} is wrong: it looks like {named.pop()}")
    never = [i for i in range(width) if expected[i] == 0 and seen[i] > 0]
    detail = (f"it drew token{'s' if len(never) > 1 else ''} {never}, which the filters remove" if never else
              f"frequencies {[round(f, 3) for f in seen.tolist()]}, expected {[round(f, 3) for f in expected.tolist()]}")
    raise AssertionError(f"{what} draws from the wrong distribution: {detail}")


def check_samples(found, cases):
    for (rows, settings), run in paired(cases, found):
        probs = probes.sample_rows(rows)
        width = max(len(p) for p in probs)
        call = ", ".join(["logits"] + [f"{k}={v}" for k, v in settings.items()] + ["generator=g"])
        what = f"sample_next({call})"
        hint = ("a top_k larger than the number of tokens keeps them all: clamp it, min(top_k, logits.size(-1))"
                if settings.get("top_k", 0) > width else None)
        draws = outcome(run["draws"], what, hint)
        _frequencies(draws, width, what)
        assert run["same_again"], (f"{what} drew other tokens with a generator seeded alike: draw with the generator "
                                   "(torch.multinomial(probs, 1, generator=generator))")
        for parity, row in enumerate(probs):
            label = "" if len(probs) == 1 else f", the rows like row {parity} (two rows alternate)"
            check_draws(draws[parity::len(probs)], row, settings, width, what + label)


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
    """What probes.KnownLogitsLM gives at every position of `tokens` [B, L], recomputed from its formula in float64."""
    stand_in = probes.KnownLogitsLM(vocab_size, model_seed)
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


def generate_mistakes(every, length, cache):
    """Known mistakes of generate's logits, from every position's logits [B, T0 + N, V] of the tokens it returned."""
    def from_position_0():
        steps = every[:, length - 1:-1].clone()
        if cache:           # only the prompt's call has more than one position
            steps[:, 0] = every[:, 0]
        else:
            steps[:] = every[:, :1]
        return steps
    return {"each step's logits taken at position 0 of the model's output: take the last position's, logits[:, -1]":
            from_position_0,
            "each step's logits taken after its token was appended (the next step's): step i's logits are those its "
            "token is chosen from, at position T0 + i - 1": lambda: every[:, length:]}


def check_mode(run, training, what):
    """generate ran the model without gradients, in the mode the caller left it in, and left it so."""
    graded = [i for i, call in enumerate(run["calls"]) if call["grad"]]
    assert not graded, f"{what} ran the model with gradients on (call {graded[0]}): generate under torch.no_grad()"
    modes = {call["training"] for call in run["calls"]} | {run["training_after"]}
    assert modes == {training}, (f"{what} changed the model's mode: leave it as the caller set it (the caller calls "
                                 "model.eval() before generating; generate calls neither model.eval() nor model.train())")


def check_given(given, expected, what):
    """What a logged `choose` got: once per step, that step's logits [B, V]."""
    assert isinstance(given, list) and len(given) == expected.size(1), (
        f"{what} called choose {len(given) if isinstance(given, list) else given} times for {expected.size(1)} new "
        "tokens: once per step")
    for step, logits in enumerate(given):
        assert isinstance(logits, torch.Tensor), f"{what} called choose with a {logits}: give it the logits [B, V]"
        assert_close(logits, expected[:, step], f"{what}: what choose got at step {step} (the logits [B, V] of the "
                     "last position)", atol=1e-5, rtol=1e-5, mistakes={
                         "the probabilities (a softmax of the logits): choose gets the logits themselves":
                             lambda step=step: expected[:, step].softmax(dim=-1)})


def check_generate(found, cases, seeds=None):
    for (case, seed), run in paired(probes.with_seeds(cases, seeds), found):
        vocab_size, batch, length, max_new, cache, choose, training = case
        prompt = probes.generate_prompt(case, seed)
        what = (f"generate(model, prompt [{batch}, {length}], max_new_tokens={max_new}, cache={cache}"
                f"{', choose=second_best' if choose else ''})" + (", the model in training mode" if training else ""))
        result = outcome(run["result"], what)
        assert isinstance(result, tuple) and len(result) == 2, f"{what} should return (tokens, logits), got {result}"
        tokens, logits = result
        check_tensor(tokens, what + "'s tokens", shape=(batch, length + max_new))
        check_tensor(logits, what + "'s logits", shape=(batch, max_new, vocab_size))
        assert torch.equal(tokens[:, :length].long(), prompt), f"{what}: the tokens must start with the prompt"
        _check_calls(run["calls"], case, tokens, what)
        check_mode(run, training, what)
        every = prefix_logits(seed, vocab_size, tokens.long())
        expected = every[:, length - 1:-1]
        assert_close(logits, expected, f"{what}'s logits (step i: the last position after the prompt and i new "
                                       "tokens)", atol=1e-5, rtol=1e-5, mistakes=generate_mistakes(every, length, cache))
        if choose:
            check_given(run["given"], expected, what)
        chosen = _chosen(_d(logits), choose)
        for step in range(max_new):
            assert torch.equal(tokens[:, length + step].long(), chosen[:, step]), (
                f"{what}: new token {step} is {tokens[:, length + step].tolist()}, but choose(logits of that step) "
                f"gives {chosen[:, step].tolist()}" + ("" if choose else ": without `choose`, the argmax"))


def _check_calls(calls, case, tokens, what):
    """The model's calls, as the stand-in logged them: with a cache, the prompt once into a new empty dict, then
    the token just chosen, one at a time, into the same dict; without, the whole sequence each time."""
    length, max_new, cache = case[2:5]
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
