"""Notebook 04: what the probes of MultiHeadAttention's tests do in the kernel, and the weights and stand-ins they share
with the judges.

Nothing here knows an expected value. The probes build the student's module with test doubles of split_heads and
merge_heads in the notebook's namespace (``split_double``, ``merge_double``: not answers, see ``head_signs``) and the
course's finished scaled_dot_product_attention (notebook 02's), so that a mistake in those costs points in their own
tests only. They give it weights drawn from a seed (``seeded_weights``: the judge draws the same ones for its own copy,
``stand_in``), run it and hand back plain data: outputs, ``attn``, what its attributes are.
"""
import contextlib
import math

import torch
from torch import nn

from .. import testing
from transformer_course.attention import scaled_dot_product_attention
from ..probing import Raised, attempt, secret_generator

LAYERS = ("w_q", "w_k", "w_v", "w_o")


def seeded_weights(d_model, seed):
    """name -> (weight [d_model, d_model], bias [d_model]) of the four projections, drawn as nn.Linear draws its own
    (uniform in ±1/sqrt(d_model)) from ``seed``: the same numbers in the kernel and in the grader."""
    g = torch.Generator().manual_seed(seed)
    bound = 1 / math.sqrt(d_model)

    def draw(*shape):
        return (2 * torch.rand(*shape, generator=g) - 1) * bound
    return {name: (draw(d_model, d_model), draw(d_model)) for name in LAYERS}


def stand_in(d_model, seed, layout=None, what="MultiHeadAttention"):
    """For a judge: an nn.Module with the seeded weights, laid out as ``layout`` (``give_weights``'s account of the
    student's module: name -> [the layer whose seeded weights it holds, whether it has a bias]); all four by
    default. A Raised in place of the layout (the student's module could not be built or take the weights) fails."""
    if isinstance(layout, Raised):
        raise AssertionError(f"the test could not build {what} and give it its weights: {layout.type_name}: "
                             f"{layout.first_line}")
    weights = seeded_weights(d_model, seed)
    layout = layout or {name: [name, True] for name in LAYERS}
    module = nn.Module()
    for name in LAYERS:
        source, has_bias = layout[name]
        assert source in LAYERS and isinstance(has_bias, bool), f"no such layout of the weights: {layout}"
        layer = nn.Linear(d_model, d_model, bias=has_bias)
        with torch.no_grad():
            layer.weight.copy_(weights[source][0])
            if has_bias:
                layer.bias.copy_(weights[source][1])
        setattr(module, name, layer)
    return module


@torch.no_grad()
def give_weights(mha, d_model, seed):
    """Copy the seeded weights into the student's w_q, w_k, w_v, w_o; return the layout ``stand_in`` rebuilds (a layer
    with two names holds the weights given last, a layer without a bias keeps none)."""
    layers = [getattr(mha, name) for name in LAYERS]
    for name, layer, (weight, bias) in zip(LAYERS, layers, seeded_weights(d_model, seed).values()):
        if list(layer.weight.shape) != [d_model, d_model]:
            raise ValueError(f"{name}.weight has shape {list(layer.weight.shape)}, expected {[d_model, d_model]}")
        layer.weight.copy_(weight)
        if layer.bias is not None:
            layer.bias.copy_(bias)

    def last(layer):   # the last of the names a layer has
        return LAYERS[max(j for j, other in enumerate(layers) if other is layer)]
    return {name: [last(layer), layer.bias is not None] for name, layer in zip(LAYERS, layers)}


EXTRA_DIMENSION = "more dimensions than [B, H, Tq, d_k]"


def head_signs(n_heads, d_k):
    """[n_heads, 1, d_k] of +1 and -1 (at least one -1), drawn from the secret for heads of this size: the features the
    stand-ins below negate. Attention is blind to them when split and merge are both the stand-ins: the signs cancel
    in every query-key product, and merge_double takes them off the heads' outputs again."""
    g = secret_generator(f"04 split and merge stand-ins {n_heads}x{d_k}")
    signs = 1 - 2 * torch.randint(0, 2, (n_heads * d_k,), generator=g)
    if n_heads * d_k and (signs > 0).all():
        signs[torch.randint(0, n_heads * d_k, (1,), generator=g)] = -1
    return signs.reshape(n_heads, 1, d_k)


def feature_signs(d_model, n_heads):
    """``head_signs`` as a [d_model] vector of the merged features (head h's at h*d_k:(h+1)*d_k)."""
    return head_signs(n_heads, d_model // n_heads).reshape(d_model)


def split_double(x, n_heads):
    """A stand-in for split_heads in the tests of MultiHeadAttention (not an answer): [B, T, D] -> [B, n_heads, T, d_k],
    head h holding features h*d_k:(h+1)*d_k with the signs of ``head_signs`` (laid out in memory as split_heads's
    view and transpose lay them)."""
    d_model = x.shape[-1]
    if d_model % n_heads:
        raise ValueError(f"the test's split_heads cannot cut {d_model} features into {n_heads} heads")
    d_k = d_model // n_heads
    heads = x.unflatten(-1, (n_heads, d_k)).transpose(1, 2)
    return heads * head_signs(n_heads, d_k).to(dtype=x.dtype, device=x.device)


def merge_double(x):
    """The stand-in for merge_heads that undoes ``split_double`` (not an answer): [B, H, T, d_k] -> [B, T, H * d_k],
    the signs of ``head_signs`` taken off. Heads of another rank are named as what the student's code gave it."""
    if x.dim() != 4:
        raise ValueError(f"the heads given to merge_heads have shape {list(x.shape)}, "
                         + (EXTRA_DIMENSION if x.dim() > 4 else "not [B, H, Tq, d_k]"))
    batch, n_heads, length, d_k = x.shape
    unsigned = x * head_signs(n_heads, d_k).to(dtype=x.dtype, device=x.device)
    return unsigned.transpose(1, 2).reshape(batch, length, n_heads * d_k)


@contextlib.contextmanager
def stand_ins(namespace):
    """The stand-ins of split_heads and merge_heads, and the course's finished scaled_dot_product_attention (notebook
    02's), in the notebook."""
    with testing.substituted(namespace, split_heads=split_double, merge_heads=merge_double,
                             scaled_dot_product_attention=scaled_dot_product_attention):
        yield


def built(namespace, answer, d_model, n_heads, seed, dropout=0.0):
    """(module, layout): the student's class built with the stand-ins in place, holding the seeded weights;
    a Raised in place of both when it cannot be built, in place of the layout when it cannot take the weights."""
    with stand_ins(namespace):
        mha = attempt(answer, d_model, n_heads, dropout=dropout)
    if isinstance(mha, Raised):
        return mha, mha
    return mha, attempt(give_weights, mha, d_model, seed)


def forward(namespace, mha, *args, training=None):
    """The student's forward with the stand-ins in place, in train mode or eval mode if ``training`` is given
    (or the Raised that stood for the module)."""
    if isinstance(mha, Raised):
        return mha
    if training is not None:
        mha.train(training)
    with stand_ins(namespace):
        return attempt(mha, *args)


def attn_of(mha):
    """What `attn` holds, as data: a tensor, None, "missing" (no such attribute) or {"type": its type's name}."""
    missing = object()
    value = attempt(getattr, mha, "attn", missing)
    if value is missing:
        return "missing"
    if value is None or isinstance(value, (torch.Tensor, Raised)):
        return value
    return {"type": type(value).__name__}


def attn_calls(namespace, mha, query, key, value, mask, train_query, seed=7):
    """For oracles.multi_head_attention.check_attn: a forward in eval mode and `attn` after it, then one in train mode on
    ``train_query`` (with the random numbers of ``seed``) and `attn` after that."""
    found = {"eval": forward(namespace, mha, query, key, value, mask)}
    if isinstance(mha, Raised):
        return found
    found["attn"] = attn_of(mha)
    with testing.same_random_numbers(seed):
        found["train"] = forward(namespace, mha, train_query, key, value, mask, training=True)
    found["train_attn"] = attn_of(mha)
    return found


def described(mha):
    """The module's parts as data: its four projections, dropout, `attn`, parameters."""
    if isinstance(mha, Raised):
        return mha
    layers = {}
    for name in LAYERS:
        layer = getattr(mha, name, None)
        layers[name] = ({"linear": True, "in": int(layer.in_features), "out": int(layer.out_features),
                         "bias": layer.bias is not None, "weight": list(layer.weight.shape)}
                        if isinstance(layer, nn.Linear) else {"linear": False, "type": type(layer).__name__})
    dropout = getattr(mha, "dropout", None)
    parameters = {id(p) for p in mha.parameters()}
    return {"layers": layers, "distinct": len({id(getattr(mha, name, None)) for name in LAYERS}),
            "dropout": {"is_dropout": isinstance(dropout, nn.Dropout), "type": type(dropout).__name__,
                        "p": float(dropout.p) if isinstance(dropout, nn.Dropout) else None},
            "attn": attn_of(mha), "n_params": sum(p.numel() for p in mha.parameters()),
            "registered": {name: isinstance(getattr(mha, name, None), nn.Linear)
                           and id(getattr(mha, name).weight) in parameters for name in LAYERS},
            "parameters": [[name, list(p.shape)] for name, p in mha.named_parameters()]}


def layer_outputs(mha, d_model, seed, x, ones):
    """For the structure test: what the student's w_q, w_k, w_v and w_o give ``x`` once they hold the seeded weights of
    ``seed``, and what its `dropout` keeps of ``ones`` in train mode with the random numbers of ``seed``."""
    if isinstance(mha, Raised):
        return mha
    found = {"layout": attempt(give_weights, mha, d_model, seed)}
    found["layers"] = {name: attempt(lambda: getattr(mha, name)(x)) for name in LAYERS}
    with testing.same_random_numbers(seed):
        found["dropout"] = attempt(lambda: mha.dropout.train()(ones))
    return found
