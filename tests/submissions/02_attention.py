"""Realistic answers to notebook 02. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

# A correct answer in the style of the Annotated Transformer; each wrong answer changes a piece of it.
BASE = '''
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    if query.size(-1) != key.size(-1) or key.size(-2) != value.size(-2):
        raise ValueError(f"shapes do not fit: {query.shape}, {key.shape}, {value.shape}")
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == False, -1e9)
    p_attn = scores.softmax(dim=-1)
    if mask is not None:
        p_attn = p_attn.masked_fill(~mask, 0.0)
    p_drop = p_attn
    if dropout is not None:
        p_drop = dropout(p_attn)
    return torch.matmul(p_drop, value), p_attn
'''

FILL = "scores = scores.masked_fill(mask == False, -1e9)"
ZERO = "p_attn = p_attn.masked_fill(~mask, 0.0)"
ZERO_BLOCK = "    if mask is not None:\n        p_attn = p_attn.masked_fill(~mask, 0.0)\n"
CHECK_MASK = 'if mask is not None and mask.dtype != torch.bool:\n        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")'
RETURN = "return torch.matmul(p_drop, value), p_attn"


def changed(*replacements):
    """BASE with each (old, new) replaced; every old text must be there."""
    source = BASE
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    return source


WRONG = [
    # the softmax and the scale
    Answer("scaled_dot_product_attention", "softmax over the queries (dim=-2)",
           changed(("softmax(dim=-1)", "softmax(dim=-2)")), "softmax over the wrong dimension"),
    Answer("scaled_dot_product_attention", "softmax(dim=1): right for a matrix, wrong with batch dimensions",
           changed(("softmax(dim=-1)", "softmax(dim=1)")), "the keys are dim=-1"),
    Answer("scaled_dot_product_attention", "forgets the scale",
           changed((" / math.sqrt(d_k)", "")), "the scores are not scaled"),
    Answer("scaled_dot_product_attention", "scales by sqrt(d_v)",
           changed(("math.sqrt(d_k)", "math.sqrt(value.size(-1))")), "sqrt(d_v)"),
    Answer("scaled_dot_product_attention", "divides by d_k instead of sqrt(d_k)",
           changed(("/ math.sqrt(d_k)", "/ d_k")), "divided by d_k = 4 instead of sqrt(d_k)"),
    Answer("scaled_dot_product_attention", "scales by sqrt of the number of queries",
           changed(("math.sqrt(d_k)", "math.sqrt(query.size(-2))")), "sqrt(Tq)"),
    Answer("scaled_dot_product_attention", "multiplies by sqrt(d_k)",
           changed(("/ math.sqrt(d_k)", "* math.sqrt(d_k)")), "multiplied by sqrt(d_k)"),
    # the matrix products
    Answer("scaled_dot_product_attention", "key.T instead of key.transpose(-2, -1)",
           changed(("key.transpose(-2, -1)", "key.T")), "key.T reverses all of them"),
    Answer("scaled_dot_product_attention", "multiplies the weights by key instead of value",
           changed(("torch.matmul(p_drop, value)", "torch.matmul(p_drop, key)")), "multiply the weights by value, not key"),
    Answer("scaled_dot_product_attention", "forgets to return the weights",
           changed((RETURN, "return torch.matmul(p_drop, value)")), "did you forget to return the weights"),
    # masks
    Answer("scaled_dot_product_attention", "mask polarity inverted (fills where the mask is True)",
           changed((FILL, "scores = scores.masked_fill(mask, -1e9)"), (ZERO, "p_attn = p_attn.masked_fill(mask, 0.0)")),
           "the mask polarity is inverted"),
    Answer("scaled_dot_product_attention", "mask polarity inverted with -inf",
           changed((FILL, "scores = scores.masked_fill(mask, float('-inf'))"), (ZERO_BLOCK, "")),
           "the mask polarity is inverted"),
    Answer("scaled_dot_product_attention", "fills the masked scores with 0",
           changed((FILL, "scores = scores.masked_fill(~mask, 0)"), (ZERO_BLOCK, "")), "filling with 0 is not enough"),
    # filled with 0 and zeroed after the softmax: masked keys get weight 0, but the rows no longer sum to 1
    *[Answer("scaled_dot_product_attention", f"scores filled with 0, weights zeroed ({why})",
             changed((FILL, "scores = scores.masked_fill(~mask, 0)")), "filled with 0", misleading=wrong_hint)
      for why, wrong_hint in (("no after-softmax hint", "applied after the softmax"),
                              ("no softmax-dimension hint", "dim=-1"))],
    Answer("scaled_dot_product_attention", "masks the weights after the softmax without renormalising",
           changed(("        " + FILL + "\n", "        pass\n")), "the mask was applied after the softmax"),
    Answer("scaled_dot_product_attention", "ignores the mask",
           changed(("        " + FILL + "\n", "        pass\n"), (ZERO_BLOCK, "")), "the mask is ignored"),
    Answer("scaled_dot_product_attention", "-inf fill gives NaN for a fully masked row",
           changed((FILL, "scores = scores.masked_fill(~mask, float('-inf'))"), (ZERO_BLOCK, "")), "gives NaN"),
    Answer("scaled_dot_product_attention", "-1e9 fill without zeroing (the Annotated Transformer): uniform rows",
           changed((ZERO_BLOCK, "")), "got uniform weights"),
    Answer("scaled_dot_product_attention", "replaces NaN in place in the softmax output (backward fails)",
           changed((FILL, "scores = scores.masked_fill(~mask, float('-inf'))"),
                   (ZERO, "p_attn[torch.isnan(p_attn)] = 0.0")), "backward() through"),
    # scales the query in place: the caller's tensor changes (each misleading hint is one the tests used to give)
    *[Answer("scaled_dot_product_attention", f"query /= sqrt(d_k) in place ({wrong_hint[:24]})",
             changed(("    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)",
                      "    query /= math.sqrt(d_k)\n    scores = torch.matmul(query, key.transpose(-2, -1))")),
             "modified `query` in place", misleading=wrong_hint)
      for wrong_hint in ("the scores are not scaled", "differs from attention on that slice", "keep their proportions",
                         "eval mode", "multiplied by sqrt(d_k)")],
    # dropout
    Answer("scaled_dot_product_attention", "returns the weights after dropout",
           changed((RETURN, "return torch.matmul(p_drop, value), p_drop")), "the returned weights are the ones after dropout"),
    Answer("scaled_dot_product_attention", "applies dropout to the output instead of the weights",
           changed(("        p_drop = dropout(p_attn)\n    return torch.matmul(p_drop, value), p_attn",
                    "        return dropout(torch.matmul(p_attn, value)), p_attn\n    return torch.matmul(p_drop, value), p_attn")),
           "applied to the output"),
    Answer("scaled_dot_product_attention", "applies dropout to the scores, before the softmax",
           changed(("    p_attn = scores.softmax(dim=-1)", "    if dropout is not None:\n        scores = dropout(scores)\n"
                    "    p_attn = scores.softmax(dim=-1)"), ("        p_drop = dropout(p_attn)", "        pass")),
           "was dropout applied to the scores, before the softmax"),
    Answer("scaled_dot_product_attention", "uses its own dropout instead of the callable",
           changed(("p_drop = dropout(p_attn)", "p_drop = F.dropout(p_attn, p=0.1, training=True)")), "never called"),
    Answer("scaled_dot_product_attention", "calls dropout even when it is None",
           changed(("    if dropout is not None:\n        p_drop = dropout(p_attn)", "    p_drop = dropout(p_attn)")),
           "only when they are not None"),
    # arguments
    Answer("scaled_dot_product_attention", "converts a non-bool mask instead of raising ValueError",
           changed((CHECK_MASK, "if mask is not None:\n        mask = mask.bool()")), "should raise ValueError"),
    Answer("scaled_dot_product_attention", "checks no shapes (matmul raises RuntimeError)",
           changed(("    if query.size(-1) != key.size(-1) or key.size(-2) != value.size(-2):\n"
                    "        raise ValueError(f\"shapes do not fit: {query.shape}, {key.shape}, {value.shape}\")\n", "")),
           "but raised RuntimeError"),
    Answer("scaled_dot_product_attention", "insists on d_v == d_k",
           changed(("key.size(-2) != value.size(-2)", "key.shape != value.shape")), "these arguments are valid"),
]

UNUSUAL = [
    Answer("scaled_dot_product_attention", "einsum, -inf fill and nan_to_num", '''
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    if mask is not None and not mask.dtype == torch.bool:
        raise ValueError("the mask has to be boolean")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"d_k differs: query {tuple(query.shape)} vs key {tuple(key.shape)}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{key.shape[-2]} keys but {value.shape[-2]} values")
    scores = torch.einsum("...qd,...kd->...qk", query, key) * key.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    attn = torch.nan_to_num(F.softmax(scores, dim=-1), nan=0.0)
    dropped = dropout(attn) if dropout else attn
    return torch.einsum("...qk,...kv->...qv", dropped, value), attn
'''),
    Answer("scaled_dot_product_attention", "query divided first, torch.where with finfo.min, .mT", '''
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    if mask is not None:
        if mask.dtype is not torch.bool:
            raise ValueError("mask: expected torch.bool")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError("query/key/value shapes are inconsistent")
    q = query / torch.sqrt(torch.tensor(query.shape[-1], dtype=query.dtype))
    scores = q @ key.mT
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask, weights, torch.zeros((), dtype=weights.dtype))
    out = (weights if dropout is None else dropout(weights)) @ value
    return out, weights
'''),
    Answer("scaled_dot_product_attention", "float64 inside, additive -1e4 mask, weights cast back", '''
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    if mask is not None and mask.dtype is not torch.bool:
        raise ValueError(f"expected a torch.bool mask, got {mask.dtype}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key sizes differ: {query.shape[-1]} != {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{key.shape[-2]} keys for {value.shape[-2]} values")
    dtype = query.dtype
    q, k, v = query.double(), key.double(), value.double()
    scores = q.matmul(k.transpose(-1, -2)) / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores + (~mask).double() * -1e4
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    weights = weights.to(dtype)
    if dropout is not None:
        return dropout(weights).double().matmul(v).to(dtype), weights
    return weights.double().matmul(v).to(dtype), weights
'''),
    Answer("scaled_dot_product_attention", "softmax written out, mask multiplied in and renormalised", '''
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be torch.bool (True = attend), got {mask.dtype}")
    d_k = key.size(-1)
    if query.size(-1) != d_k:
        raise ValueError(f"query has size {query.size(-1)}, key {d_k}")
    if value.size(-2) != key.size(-2):
        raise ValueError("key and value lengths differ")
    scores = torch.matmul(query, torch.transpose(key, -1, -2)) / d_k ** 0.5
    kept = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    top = torch.nan_to_num(kept.amax(dim=-1, keepdim=True), neginf=0.0).detach()
    e = torch.exp(kept - top)
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    result = torch.matmul(dropout(weights) if dropout is not None else weights, value)
    return result, weights
'''),
]
