"""Oracles of notebook 02 (scaled_dot_product_attention), shared by its hidden tests and tests/test_components.py.

The expected values come from PyTorch's own attention, F.scaled_dot_product_attention (its bool masks, like
ours, are True where a query may attend), and a float64 formula written out here, which also computes what
the known mistakes compute so that a message can name the mistake. Neither is the course's solution
(transformer_course.attention). Every check takes the student's function as ``answer``.
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import testing
from ..probes.attention import random_keep  # noqa: F401  (the hidden tests' masks, made in the kernel too)
from ..probing import Raised, returned


FILLED_WITH_ZERO = ("the masked scores were filled with 0 before the softmax, so the masked keys still took a share exp(0) of "
                    "each row's weight, and zeroing their weights afterwards leaves rows that no longer sum to 1: fill "
                    "the masked scores with float('-inf') or a very large negative number")
AFTER_SOFTMAX = ("the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores "
                 "before the softmax, so that the remaining weights are renormalised")
IN_PLACE = ("your function modified `{}` in place (an in-place operation such as `x /= c`, `x.div_(c)` or "
            "`x.masked_fill_(...)` on an argument): the caller's tensor changed, and its next call with it gets other "
            "inputs. Compute new tensors instead, e.g. scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)")


def in_place_check(changed):
    """For a judge: the names of the arguments the function changed in place (probes.attention.on_copies) must be
    none."""
    assert not changed, IN_PLACE.format(changed[0])


def masked_row_hint(weights, query, key, mask):
    """Why masked weights whose rows do not sum to 1 are wrong, when they are what a known mistake gives ("" when
    none fits: a guess would mislead)."""
    for hint, mistake in ((FILLED_WITH_ZERO, {"fill": 0.0, "after": True}), (AFTER_SOFTMAX, {"after": True})):
        if _close(weights, _formula(query, key, key, mask, **mistake)[1], 1e-5):
            return hint
    return ""


def call(answer, what, *args, **kwargs):
    """The student's function, checked to return the pair (output, weights)."""
    try:
        result = answer(*args, **kwargs)
    except RuntimeError as error:
        hint = (": with leading batch and head dimensions, transpose only the last two dimensions of key, "
                "key.transpose(-2, -1) (key.T reverses all of them)" if args[0].dim() > 2 else "")
        raise AssertionError(f"{what} raised RuntimeError ({error}){hint}") from None
    assert isinstance(result, tuple) and len(result) == 2, (
        f"{what} should return the pair (output, weights), got {type(result).__name__}"
        + (": did you forget to return the weights?" if isinstance(result, torch.Tensor) else ""))
    return result


def _formula(q, k, v, keep=None, *, scale=None, dim=-1, fill=None, after=False):
    """float64 attention written out: exp of the scaled scores over the keys kept, normalised; a
    query with no key to attend to gets zero weights. The keyword arguments compute what known
    mistakes compute: another scale, the softmax over another dimension, masked scores filled with
    a finite number, the mask applied after the softmax."""
    q, k, v = q.double(), k.double(), v.double()
    scores = torch.einsum("...qd,...kd->...qk", q, k) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    keep = torch.ones(scores.shape, dtype=torch.bool) if keep is None else keep.broadcast_to(scores.shape)
    if fill is not None:
        scores = torch.where(keep, scores, torch.tensor(fill, dtype=torch.float64))
    kept = torch.ones_like(keep) if fill is not None or after else keep
    top = torch.where(kept, scores, -math.inf).amax(dim, keepdim=True)
    e = torch.where(kept, torch.exp(scores - torch.where(torch.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(dim, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp_min(1e-300), 0.0)
    if after:
        weights = weights * keep
    return weights @ v, weights


def _fused(q, k, v, keep=None, dropout_p=0.0):
    """PyTorch's own attention (its bool masks, like ours, are True where a query may attend); by our
    contract a query with no key to attend to gets a zero output."""
    if keep is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    has_key = keep.any(-1, keepdim=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep | ~has_key, dropout_p=dropout_p)
    return out.masked_fill(~has_key, 0.0)


def _fused_weights(q, k, keep=None):
    """The weights from PyTorch's attention: attending over identity values returns them."""
    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-1], k.shape[-2])
    return _fused(q, k, eye, keep)


def _weight_mistakes(q, k, v, keep=None):
    """What the common mistakes make of the weights, to name them in the message."""
    d_k, d_v, n_q, n_k = q.shape[-1], v.shape[-1], q.shape[-2], k.shape[-2]
    mistakes = {
        "the mask polarity is inverted: True means 'may attend', so fill the scores where the mask is "
        "False (~mask)": lambda: _formula(q, k, v, None if keep is None else ~keep)[1],
        "masked keys still get weight: the masked scores were filled with 0; use float('-inf') or a very "
        "large negative number, since exp(0) is not small": lambda: _formula(q, k, v, keep, fill=0.0)[1],
        "the mask is ignored": lambda: _formula(q, k, v)[1],
        "the rows whose every key is masked got uniform weights; all their keys are masked, so all their "
        "weights must be 0: set the weights of masked keys to 0 after the softmax":
            lambda: _formula(q, k, v, keep, fill=-1e9)[1],
        FILLED_WITH_ZERO: lambda: _formula(q, k, v, keep, fill=0.0, after=True)[1],
        AFTER_SOFTMAX: lambda: _formula(q, k, v, keep, after=True)[1],
        "the scores are not scaled: divide q·k by sqrt(d_k)": lambda: _formula(q, k, v, keep, scale=1.0)[1],
        "the scores are divided by d_k instead of sqrt(d_k)": lambda: _formula(q, k, v, keep, scale=d_k)[1],
        "the scores are divided by sqrt(d_v), the size of value, instead of sqrt(d_k), the size of "
        "query and key": lambda: _formula(q, k, v, keep, scale=math.sqrt(d_v))[1],
        "the scores are divided by sqrt(Tq), the number of queries, instead of sqrt(d_k)":
            lambda: _formula(q, k, v, keep, scale=math.sqrt(n_q))[1],
        "the scores are divided by sqrt(Tk), the number of keys, instead of sqrt(d_k)":
            lambda: _formula(q, k, v, keep, scale=math.sqrt(n_k))[1],
        "the scores are multiplied by sqrt(d_k) instead of divided":
            lambda: _formula(q, k, v, keep, scale=1 / math.sqrt(d_k))[1],
        "the softmax is taken over the queries (dim=-2); each query's weights must sum to 1 over the "
        "keys: softmax(..., dim=-1)": lambda: _formula(q, k, v, keep, dim=-2)[1],
    }
    if q.dim() >= 4:
        mistakes["the softmax is taken over dim=1, which is the keys only for a plain matrix: with leading batch "
                 "and head dimensions use softmax(..., dim=-1)"] = lambda: _formula(q, k, v, keep, dim=1)[1]
    if keep is None:
        for text in [t for t in mistakes if "mask" in t]:
            del mistakes[text]
    return mistakes


def _output_mistakes(q, k, v, keep=None):
    mistakes = {}
    if k.shape == v.shape:
        mistakes["the weights multiply key instead of value: the output is weights @ value"] = \
            lambda: _formula(q, k, k, keep)[0]
    return mistakes


def _close(actual, expected, atol):
    return torch.allclose(actual.detach().double(), expected.detach().double(), atol=atol, rtol=1e-4)


def _own_slices(answer, what, q, k, v):
    """The student's own attention computed one matrix at a time (graded in the values cells): a call
    with leading dimensions must give the same. Its weights must be attention's, right or wrong in a way the
    values cells name (_attention_like)."""
    pairs = [call(answer, what + " on one [T, d] slice", a, b, c) for a, b, c in
             zip(q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]), v.reshape(-1, *v.shape[-2:]))]
    lead = q.shape[:-2]
    weights = torch.stack([w for _, w in pairs]).reshape(*lead, q.shape[-2], k.shape[-2])
    _attention_like(weights, what + " computed one [T, d] slice at a time", q, k, v)
    return torch.stack([o for o, _ in pairs]).reshape(*lead, q.shape[-2], v.shape[-1]), weights


def _own_masked(answer, what, q, k, v, keep):
    """Masking applied, in float64, to the student's own attention without a mask (graded in its own
    cells, and there right or wrong in a way they name): masked keys get 0, the others keep their proportions, a row
    with no key gets zeros."""
    _, w = call(answer, what + " without the mask", q, k, v)
    _attention_like(w, what + " without the mask", q, k, v)   # right, or wrong in a way the values cells name
    w = w.detach().double() * keep
    total = w.sum(-1, keepdim=True)
    w = torch.where(total > 0, w / total.clamp_min(1e-300), 0.0)
    return w @ v.double(), w


def check_attention(answer, what, q, k, v, keep=None, *, atol=1e-5, own=None):
    """Output and weights against PyTorch's attention, in the input's dtype. `own`, if given, computes
    what the answer must be when the student's simpler case (graded in another cell) is taken as right;
    matching it passes too, so that one mistake costs points in its own cell only."""
    args = (q, k, v) if keep is None else (q, k, v, keep)
    output, weights = call(answer, what, *args)
    lead = list(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    if list(output.shape) == lead + [q.shape[-2], k.shape[-1]] and k.shape[-1] != v.shape[-1]:
        raise AssertionError(f"{what}: the output has shape {list(output.shape)}, whose last size is key's "
                             f"d_k = {k.shape[-1]}: multiply the weights by value (d_v = {v.shape[-1]}), not key")
    testing.check_tensor(weights, f"the weights of {what}", shape=lead + [q.shape[-2], k.shape[-2]], dtype=q.dtype)
    testing.check_tensor(output, f"the output of {what}", shape=lead + [q.shape[-2], v.shape[-1]], dtype=q.dtype)
    expected_weights, expected_output = _fused_weights(q, k, keep), _fused(q, k, v, keep)
    if own is not None and not (_close(weights, expected_weights, atol) and _close(output, expected_output, atol)):
        own_output, own_weights = own()
        if _close(weights, own_weights, atol) and _close(output, own_output, atol):
            return output, weights
    testing.assert_close(weights, expected_weights, f"the weights of {what}", atol=atol, rtol=1e-4,
                         mistakes=_weight_mistakes(q, k, v, keep))
    testing.assert_close(output, expected_output, f"the output of {what}", atol=atol, rtol=1e-4,
                         mistakes=_output_mistakes(q, k, v, keep))
    return output, weights


def shapes(q, k, v, keep=None):
    text = f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}"
    return "scaled_dot_product_attention(" + text + ("" if keep is None else f", mask {list(keep.shape)}") + ")"


def check_batched(answer, what, q, k, v, **kwargs):
    """check_attention with leading dimensions; an answer that gives, on each slice, what it gives for that
    slice alone passes too (a single matrix is graded in the values cells)."""
    return check_attention(answer, what, q, k, v, own=lambda: _own_slices(answer, what, q, k, v), **kwargs)


def check_masked(answer, what, q, k, v, keep, **kwargs):
    """check_attention with a mask; an answer that masks its own unmasked attention right passes too
    (the unmasked attention is graded in the values and batch cells)."""
    own = lambda: _own_masked(answer, what, q, k, v, keep)
    return check_attention(answer, what, q, k, v, keep, own=own, **kwargs)


def result_pair(value, what):
    """What a probe recorded of one call of the student's function, checked to be the pair (output, weights)."""
    if isinstance(value, Raised) and value.type_name == "RuntimeError":
        raise AssertionError(f"{what} raised RuntimeError ({value.first_line})")
    value = returned(value, what)
    assert isinstance(value, tuple) and len(value) == 2, (
        f"{what} should return the pair (output, weights), got {type(value).__name__}"
        + (": did you forget to return the weights?" if isinstance(value, torch.Tensor) else ""))
    return value


def check_dropout(found, what, q, k, v, keep, p, seed):
    """Train mode with nn.Dropout(p), from what probes.dropout_calls recorded. Dropout must get the weights (as
    the same call without dropout returns them), the output must be what it returned times value, the weights
    must come back from before it; and with the same random numbers PyTorch's attention must give the same output
    (weights wrong in a way the other cells name pass here: they cost points there)."""
    output, weights = result_pair(found["result"], what)
    seen = found["seen"]
    assert seen, (f"{what}: the dropout callable was never called; apply dropout(weights) before multiplying "
                  "by value (use the `dropout` argument, not a dropout of your own)")
    assert len(seen) == 1, f"{what}: dropout was called {len(seen)} times; call it once, on the weights"
    received, dropped = seen[0]
    _, plain = result_pair(found["plain"], what.replace(f"with nn.Dropout({p}) in train mode", "without dropout"))
    if not _close(received, plain, 1e-6):
        sums = received.double().sum(-1)
        raise AssertionError(
            f"{what}: the tensor passed to dropout should be the attention weights, as the call without dropout "
            "returns them" + ("; its rows do not sum to 1: was dropout applied to the scores, before the softmax?"
                              if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4) else ""))
    testing.assert_close(weights, received, f"the weights returned by {what}", atol=1e-6, mistakes={
        "the returned weights are the ones after dropout: return the weights from before dropout": dropped})
    testing.assert_close(output, dropped.double() @ v.double(), f"the output of {what}", mistakes={
        "the output ignores dropout: multiply what dropout returned by value":
            lambda: received.double() @ v.double()})
    # The oracle: PyTorch's attention with the same dropout probability and the same random numbers
    # (when the weights are right; weights wrong in a way the other cells name are graded there).
    if not _close(received, _fused_weights(q, k, keep), 1e-5):
        _attention_like(received, what, q, k, v, keep)
        return
    if found["contiguous"]:
        with testing.same_random_numbers(seed), sdpa_kernel(SDPBackend.MATH):
            expected = _fused(q, k, v, keep, dropout_p=p)
    else:  # the same draws for a tensor laid out like the student's
        with testing.same_random_numbers(seed):
            expected = F.dropout(torch.empty_like(received).copy_(_fused_weights(q, k, keep)), p, True) @ v
    testing.assert_close(output, expected, f"the output of {what}, compared with PyTorch's attention with the "
                         "same random numbers (does the function draw random numbers of its own?)")


def _attention_like(weights, what, q, k, v, keep=None):
    """The weights are attention's, or wrong in one of the ways the values, batch and mask cells name (so that such a
    mistake costs points there only): AssertionError otherwise."""
    known = [_fused_weights(q, k, keep)] + list(_weight_mistakes(q, k, v, keep).values())
    testing.check_tensor(weights, f"the weights of {what}", shape=list(known[0].shape))
    if not any(_close(weights, w() if callable(w) else w, 1e-5) for w in known):
        raise AssertionError(f"the weights of {what} are not the attention weights softmax(query keyᵀ / sqrt(d_k)) "
                             "over the keys (with the masked keys at 0)")


def check_attention_like(pair, what, q, k, v, keep=None):
    """For a cell that grades something else (the errors cell's valid call): ``pair`` (what result_pair read) is
    attention, right or wrong in a way the other cells name: its weights (see _attention_like), and its output the
    weights times value (or times key, a mistake the values cell names)."""
    output, weights = pair
    _attention_like(weights, what, q, k, v, keep)
    products = [weights.double() @ t.double() for t in (v, k)]
    assert any(list(output.shape) == list(p.shape) and _close(output, p, 1e-5) for p in products), \
        f"the output of {what} should be the weights times value (weights @ value)"
