"""Oracles of notebook 04 (MultiHeadAttention), shared by its hidden tests and tests/test_components.py.

The expected values come from PyTorch's nn.MultiheadAttention holding the student's weights, and a float64
formula written out here with einsum, which also computes what the known mistakes compute (only for a wrong
answer) so that a message can name the mistake. Neither is the course's solution (transformer_course.attention). The student's module
runs in the kernel (probes.multi_head_attention), with stand-ins of split_heads and merge_heads and the course's finished
scaled_dot_product_attention in the notebook's namespace and weights drawn from a seed; the checks here take
what it returned, and ``mha``, a module that holds the same weights (probes.multi_head_attention.stand_in, or the
student's module itself in tests/test_components.py).

The stand-ins negate some features of the heads (probes.multi_head_attention.head_signs) and cancel out when an answer uses
both, as the notebook asks. The contract lets an answer cut or merge the heads inline instead, and one that calls one
stand-in and reshapes inline elsewhere is right too: its queries and keys, or its values and its merged heads, then
carry different signs. Every check accepts those results as well (``_mixed``).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import testing
from ..probes.multi_head_attention import EXTRA_DIMENSION, feature_signs, seeded_weights
from ..probing import Raised, returned


@torch.no_grad()
def copy_weights(ours, theirs):
    """Our w_q, w_k, w_v (stacked as in_proj) and w_o into an nn.MultiheadAttention; a missing bias is 0."""
    d_model = ours.w_q.weight.shape[1]
    bias = lambda layer: layer.bias if layer.bias is not None else torch.zeros(d_model)
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([bias(ours.w_q), bias(ours.w_k), bias(ours.w_v)]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(bias(ours.w_o))


def _torch_mha(m, n_heads, dropout=0.0, dtype=torch.float64):
    """PyTorch's nn.MultiheadAttention holding the student's weights (in_proj = w_q, w_k, w_v stacked)."""
    ref = nn.MultiheadAttention(m.w_q.weight.shape[1], n_heads, dropout=dropout, batch_first=True, dtype=dtype)
    copy_weights(m, ref)
    return ref.train(dropout > 0)


def _expected(m, n_heads, query, key, value, mask=None, dropout=0.0, dtype=torch.float64, ref=None):
    """(output, per-head weights) from nn.MultiheadAttention. Its bool attn_mask has the opposite
    polarity (True = NOT allowed), so it gets ~mask, expanded to [B * H, Tq, Tk]. Pass `ref`
    (made by _torch_mha before a seeded block) to draw dropout from the seeded random numbers."""
    ref = ref if ref is not None else _torch_mha(m, n_heads, dropout, dtype)
    dtype = ref.in_proj_weight.dtype
    batch, q_len, k_len = query.shape[0], query.shape[1], key.shape[1]
    blocked = None
    if mask is not None:
        blocked = (~mask).expand(batch, n_heads, q_len, k_len).reshape(batch * n_heads, q_len, k_len)
    out, weights = ref(query.to(dtype), key.to(dtype), value.to(dtype), attn_mask=blocked,
                       need_weights=True, average_attn_weights=False)
    return out.detach(), weights.detach()


def _explicit(m, n_heads, query, key, value, mask=None, *, scale=None, value_from_key=False,
              skip_wo=False, one_head=False, inverted=False, interleave=False,
              zero_fill=False, mask_after=False, softmax_dim=-1, keep_scores=None, keep_heads=None,
              keep_out=None, keep_weights=None, q_signs=None, v_signs=None):
    """The formula in float64 with einsum; the keyword arguments reproduce known mistakes, dropout of the weights
    (``keep_weights``: what it keeps, scaled) and the stand-ins' signs on the queries (``q_signs``, [d_model]) or on
    the values (``v_signs``) alone."""
    def project(layer, x):
        out = x.double() @ layer.weight.detach().double().T
        return out if layer.bias is None else out + layer.bias.detach().double()
    heads = 1 if one_head else n_heads
    q, k = project(m.w_q, query), project(m.w_k, key)
    v = project(m.w_v, key if value_from_key else value)
    q = q if q_signs is None else q * q_signs.double()
    v = v if v_signs is None else v * v_signs.double()
    d_k = q.shape[-1] // heads
    if interleave:
        cut = lambda t: t.unflatten(-1, (d_k, heads)).transpose(-1, -2)
    else:
        cut = lambda t: t.unflatten(-1, (heads, d_k))
    scores = torch.einsum("bqhd,bkhd->bhqk", cut(q), cut(k)) / math.sqrt(scale or d_k)
    allowed = None if mask is None else (~mask if inverted else mask)
    if allowed is not None and not mask_after:
        scores = scores.masked_fill(~allowed, 0.0 if zero_fill else float("-inf"))
    if keep_scores is not None:
        scores = scores * keep_scores
    weights = torch.softmax(scores, dim=softmax_dim).nan_to_num(0.0)
    if allowed is not None and mask_after:
        weights = weights.masked_fill(~allowed, 0.0)
    dropped = weights if keep_weights is None else weights * keep_weights
    per_head = torch.einsum("bhqk,bkhd->bqhd", dropped, cut(v))
    merged = per_head.transpose(-1, -2).flatten(2) if interleave else per_head.flatten(2)
    if keep_heads is not None:
        merged = merged * keep_heads
    out = merged if skip_wo else project(m.w_o, merged)
    if keep_out is not None:
        out = out * keep_out
    return out, weights


def compare(actual, expected, what, valid=None, mistakes=None, atol=2e-5, accepted=()):
    """assert_close where `valid` (broadcastable bool) is True; elsewhere (query rows with no key to
    attend to) any finite value is accepted. So are the values of ``accepted`` (tensors, or functions computing them,
    called only if needed): what a right answer gives with the stand-ins (``_mixed``)."""
    testing.check_tensor(actual, what, shape=expected.shape)
    actual = actual.detach().double()
    mistakes = dict(mistakes or {})
    accepted = list(accepted)
    if valid is not None:
        valid = valid.expand(actual.shape)
        assert torch.isfinite(actual[~valid]).all(), (
            f"{what} has NaN in a query row whose every key is masked: with -inf scores the softmax "
            "divides 0 by 0. Use a large negative finite number (torch.finfo(scores.dtype).min), or "
            "call scaled_dot_product_attention, which handles such rows")
        expected = torch.where(valid, expected.double(), actual)
        mistakes = {description: _restricted(produced, valid, actual) for description, produced in mistakes.items()}
        accepted = [_restricted(produced, valid, actual) for produced in accepted]
    if torch.isfinite(actual).all() and not torch.allclose(actual, expected.double(), atol=atol, rtol=1e-4):
        if any(_close(actual, produced, atol) for produced in accepted):
            return
    testing.assert_close(actual, expected, what, atol=atol, rtol=1e-4, mistakes=mistakes)


def _close(actual, produced, atol):
    value = produced() if callable(produced) else produced
    return value.shape == actual.shape and torch.allclose(actual, value.double(), atol=atol, rtol=1e-4)


def _mixed(m, n_heads, query, key, value, mask=None, part=0, **keywords):
    """Functions computing (output, weights) part ``part`` of what a right answer gives when it calls the test's
    stand-in of split_heads or merge_heads for some steps and reshapes inline for others: the stand-ins' signs left
    on the queries (queries and keys cut differently), on the values (the values cut one way, the heads merged the
    other), or on both. The keyword arguments go to ``_explicit`` (dropout of the weights)."""
    signs = feature_signs(query.shape[-1], n_heads)
    return [lambda q_signs=q_signs, v_signs=v_signs: _explicit(m, n_heads, query, key, value, mask, q_signs=q_signs,
                                                              v_signs=v_signs, **keywords)[part]
            for q_signs, v_signs in ((signs, None), (None, signs), (signs, signs))]


def _restricted(produced, valid, actual):
    """A known mistake's output (or a function computing it, called only if needed) taken where `valid` holds."""
    def where_valid():
        value = produced() if callable(produced) else produced
        return torch.where(valid, value.double(), actual) if value.shape == actual.shape else value
    return where_valid


def output(found, what, query, key, mask=None):
    """What the probe recorded of the student's forward; an exception becomes a message that names the call and
    the likely cause, first, then what was raised."""
    if isinstance(found, Raised) and found.type_name != "NotImplementedError":
        hint = _shape_hint(found, query, key, mask)
        raise AssertionError(f"{what} failed:{hint} (It raised {found.type_name}: {found.message}.)" if hint
                             else f"{what} raised {found.type_name}: {found.message}")
    return returned(found, what)


KEY_VALUE_LENGTHS = "key and value need the same length"   # the course's scaled_dot_product_attention says so


def shape_error(error):
    """Whether a Raised is a shape error, the only kind whose cause the hints below can guess."""
    return (error.type_name in ("RuntimeError", "ValueError")
            and any(w in error.message for w in ("size", "shape", "dimension", KEY_VALUE_LENGTHS)))


def _shape_hint(error, query, key, mask):
    """The likely causes of a shape error in this call ("" for other errors: a hint would mislead). Keys and values
    of different lengths have nothing to do with the mask; heads that reach merge_heads with more than four
    dimensions come from a mask with one too many (it broadcast the scores to five), and from nothing else."""
    if not shape_error(error):
        return ""
    cross = (" The query and the key have different lengths here (cross-attention): the keys come from w_k(key), "
             "the values from w_v(value), and the output has the query's length." if query.shape[1] != key.shape[1]
             else "")
    if mask is None or KEY_VALUE_LENGTHS in error.message:
        return cross
    unsqueezed = (f" A mask of shape {list(mask.shape)} already broadcasts to [B, H, Tq, Tk]: pass it on as it is "
                  "(no unsqueeze).")
    return unsqueezed if EXTRA_DIMENSION in error.message else unsqueezed + cross


def check_output(out, mha, n_heads, what, *args, mask=None, atol=2e-5):
    """The output of ``mha(*args, mask)`` against nn.MultiheadAttention with the same weights."""
    compare(out, _expected(mha, n_heads, *args, mask)[0], what, atol=atol, accepted=_mixed(mha, n_heads, *args, mask))


def check_values(out, mha, n_heads, what, query, key, value):
    """Eval mode, no mask: the output against nn.MultiheadAttention, with the mistakes of the formula named."""
    args = (query, key, value)
    d_model = query.shape[-1]
    expected, _ = _expected(mha, n_heads, *args)
    testing.check_tensor(out, what, dtype=torch.float32)
    compare(out, expected, what, accepted=_mixed(mha, n_heads, *args), mistakes={
        "the scores are divided by sqrt(d_model); each head divides by sqrt(d_k)":
            lambda: _explicit(mha, n_heads, *args, scale=d_model)[0],
        "the scores are not scaled: divide them by sqrt(d_k)": lambda: _explicit(mha, n_heads, *args, scale=1)[0],
        "the scores are divided by d_k; divide them by sqrt(d_k)":
            lambda: _explicit(mha, n_heads, *args, scale=(d_model // n_heads) ** 2)[0],
        "the softmax runs over the queries (dim=-2); the weights of each query sum to 1 over the keys (dim=-1)":
            lambda: _explicit(mha, n_heads, *args, softmax_dim=-2)[0],
        "the values are projected from `key`: use w_v(value)": lambda: _explicit(mha, n_heads, *args, value_from_key=True)[0],
        "w_o is not applied: the merged heads still go through the output projection":
            lambda: _explicit(mha, n_heads, *args, skip_wo=True)[0],
        "all d_model features form one head: split them into n_heads heads":
            lambda: _explicit(mha, n_heads, *args, one_head=True)[0],
        "the heads are interleaved; head h owns features h*d_k:(h+1)*d_k": lambda: _explicit(mha, n_heads, *args, interleave=True)[0],
    })


def check_mask(out, mha, n_heads, what, args, mask):
    """Eval mode with ``mask``: rows with a key to attend to against nn.MultiheadAttention, the others finite."""
    batch, q_rows = args[0].shape[0], args[0].shape[1]
    full = mask.expand(batch, n_heads, q_rows, args[1].shape[1])
    valid = full.any(-1).all(1)[..., None]               # [B, Tq, 1]: rows with a key in every head
    expected, _ = _expected(mha, n_heads, *args, mask)
    compare(out, expected, what, valid=valid, accepted=_mixed(mha, n_heads, *args, mask), mistakes={
        "the mask's polarity is inverted: True means 'may attend', False 'masked out'":
            lambda: _explicit(mha, n_heads, *args, mask, inverted=True)[0],
        "the mask is ignored: pass it to scaled_dot_product_attention": lambda: _explicit(mha, n_heads, *args)[0],
        "masked scores are set to 0, which still gets weight after the softmax; fill them with a large "
        "negative number": lambda: _explicit(mha, n_heads, *args, mask, zero_fill=True)[0],
        "masked weights are zeroed after the softmax without renormalising, so the rows no longer sum "
        "to 1; mask the scores before the softmax": lambda: _explicit(mha, n_heads, *args, mask, mask_after=True)[0],
    })


def check_attn(found, mha, n_heads, p, what, query, key, value, mask, train_query, seed=7):
    """`attn` after a forward in eval mode, then after one in train mode (dropout ``p``, the random numbers of ``seed``)
    on ``train_query``, from what probes.multi_head_attention.attn_calls recorded: the per-head weights before dropout
    (nn.MultiheadAttention returns them after dropout, which names that mistake)."""
    batch, q_len, k_len = query.shape[0], query.shape[1], key.shape[1]
    output(found["eval"], what.replace("attn after ", ""), query, key, mask)
    attn = found["attn"]
    assert isinstance(attn, torch.Tensor), "`attn` should hold the attention weights of the last forward"
    if list(attn.shape) == [batch, q_len, k_len] and n_heads > 1:
        raise AssertionError(f"{what} has shape {[batch, q_len, k_len]}: the weights are averaged over the heads; "
                             f"keep one map per head [B, H, Tq, Tk]")
    _, weights = _expected(mha, n_heads, query, key, value, mask)
    compare(attn, weights, what, accepted=_mixed(mha, n_heads, query, key, value, mask, part=1), mistakes={
        "the weights of the scores divided by sqrt(d_model); each head divides by sqrt(d_k)":
            lambda: _explicit(mha, n_heads, query, key, value, mask, scale=query.shape[-1])[1],
        "the weights ignore the mask": lambda: _explicit(mha, n_heads, query, key, value)[1],
    })
    _, weights = _expected(mha, n_heads, train_query, key, value, mask)
    output(found["train"], what.replace("attn after ", "") + " in train mode", train_query, key, mask)
    ref = _torch_mha(mha, n_heads, dropout=p, dtype=torch.float32)
    with testing.same_random_numbers(seed):
        _, dropped = _expected(mha, n_heads, train_query, key, value, mask, ref=ref)
    compare(found["train_attn"], weights, what + " in train mode",
            accepted=_mixed(mha, n_heads, train_query, key, value, mask, part=1), mistakes={
        "attn was stored after dropout; keep the weights before dropout": dropped})


def _dropout_masks(shape, p, seed):
    """What F.dropout keeps of a tensor of ones of ``shape`` with the random numbers of ``seed``."""
    with testing.same_random_numbers(seed):
        return F.dropout(torch.ones(shape), p)


def check_dropout(out, mha, n_heads, p, what, query, key, value, mask, seed):
    """Train mode: ``out`` (drawn with the random numbers of ``seed``) against nn.MultiheadAttention in train
    mode, which draws its dropout of the weights from the same random numbers (one F.dropout over the
    [B * H, Tq, Tk] weights)."""
    batch, q_len, k_len, d_model = query.shape[0], query.shape[1], key.shape[1], query.shape[-1]
    ref = _torch_mha(mha, n_heads, dropout=p, dtype=torch.float32)
    with testing.same_random_numbers(seed):
        expected, _ = _expected(mha, n_heads, query, key, value, mask, ref=ref)
    keep_scores = _dropout_masks((batch, n_heads, q_len, k_len), p, seed)
    keep_features = _dropout_masks((batch, q_len, d_model), p, seed)   # the heads' outputs or the output
    compare(out, expected, what, accepted=_mixed(mha, n_heads, query, key, value, mask, keep_weights=keep_scores),
            mistakes={
        "dropout is never applied in train mode: pass self.dropout to scaled_dot_product_attention":
            lambda: _explicit(mha, n_heads, query, key, value, mask)[0],
        "dropout is applied to the scores before the softmax; it belongs on the weights after the softmax":
            lambda: _explicit(mha, n_heads, query, key, value, mask, keep_scores=keep_scores)[0],
        "dropout is applied to the heads' outputs; it belongs on the attention weights":
            lambda: _explicit(mha, n_heads, query, key, value, mask, keep_heads=keep_features)[0],
        "dropout is applied to the output; it belongs on the attention weights":
            lambda: _explicit(mha, n_heads, query, key, value, mask, keep_out=keep_features)[0],
    })


def check_layers(found, d_model, seed, x, ones, p, what):
    """The structure test's values, from what probes.multi_head_attention.layer_outputs recorded: each projection of ``what``,
    holding the seeded weights of ``seed``, maps ``x`` to x @ weightᵀ + bias with its own weights; its dropout keeps
    of ``ones`` what F.dropout with ``p`` keeps with the same random numbers."""
    found = returned(found, what)
    returned(found["layout"], f"giving {what} the test's weights")
    weights = seeded_weights(d_model, seed)
    with torch.no_grad():
        expected = {name: x @ weight.T + bias for name, (weight, bias) in weights.items()}
    for name, out in found["layers"].items():
        out = returned(out, f"{what}.{name}(x)")
        testing.check_tensor(out, f"{what}.{name}(x)", shape=expected[name].shape)
        if torch.allclose(out, expected[name], atol=1e-5):
            continue
        other = next((o for o in expected if o != name and torch.allclose(out, expected[o], atol=1e-5)), None)
        raise AssertionError(
            f"{what}.{name}, given its weights, does not map x to x @ weight.T + bias" +
            (f": it gives what {other}'s weights give, so {name} and {other} are one layer; each projection "
             "needs its own nn.Linear" if other else
             ": it should be an nn.Linear(d_model, d_model) with its bias, applied as it is"))
    with testing.same_random_numbers(seed):
        kept = F.dropout(ones, p)
    testing.assert_close(returned(found["dropout"], f"{what}.dropout in train mode"), kept,
                         f"{what}.dropout in train mode", atol=1e-6,
                         mistakes={"dropout that does nothing: use nn.Dropout(dropout)": ones})


def mixed_outputs(mha, n_heads, query, key, value, mask=None):
    """The outputs, besides the true one, that a right answer gives when it mixes the test's stand-ins of split_heads
    and merge_heads with heads cut or merged inline (see the module's docstring), in float64."""
    return [produced() for produced in _mixed(mha, n_heads, query, key, value, mask)]
