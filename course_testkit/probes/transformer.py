"""Notebook 06: what the probes of its tests do in the kernel, shared with the judges where they rebuild inputs.

Nothing here knows an expected value. The hidden tests' inputs (weights, vectors, token ids, some pad indices)
are drawn from ``secret_generator(tag)``: the probe loads the weights into the student's module and calls it, the
judge draws the same inputs again from its own copy of the secret. The rest describes the student's modules as
plain data (kinds of parts, counts, dropout rates) or runs them on the test's inputs.

The tests of Encoder, Decoder and Transformer put *test doubles* in place of the parts those build on
(EncoderLayerDouble, DecoderLayerDouble, EncoderDouble, DecoderDouble): small modules that are not Transformer
layers, whose output the judge computes with the same function (``double_layer``), and that keep what they were
given. A mistake in the student's layers then costs points in the layers' tests only.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from ..probing import Raised, attempt, secret_generator, secret_seed

ATTENTIONS = {"encoder": ("self_attn",), "decoder": ("self_attn", "cross_attn")}
NORMS = {"encoder": ("norm1", "norm2"), "decoder": ("norm1", "norm2", "norm3")}


def kind_of(value):
    """The course's class a part is an instance of (by name), else its own type's name."""
    from transformer_course import LayerNorm, MultiHeadAttention, PositionalEncoding, PositionwiseFeedForward, TokenEmbedding
    kinds = (MultiHeadAttention, PositionwiseFeedForward, LayerNorm, TokenEmbedding, PositionalEncoding,
             torch.nn.Dropout, torch.nn.Linear, torch.nn.ModuleList)
    return next((kind.__name__ for kind in kinds if isinstance(value, kind)), type(value).__name__)


def facts(**getters):
    """Each getter's value, or a ``Raised``: a missing attribute fails only the check that reads it."""
    return {name: attempt(getter) for name, getter in getters.items()}


def identities(module, names):
    """For each name, the index of the first of ``names`` that is the same object (all distinct: 0, 1, 2, ...)."""
    parts = [getattr(module, name, None) for name in names]
    return [next(j for j in range(len(parts)) if parts[j] is part) for part in parts]


def parameter_count(module):
    return sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------- weights, by name

def _uniform(generator, *shape, bound):
    return (2 * torch.rand(*shape, generator=generator) - 1) * bound


def layer_weights(kind, d_model, d_ff, generator):
    """Weights for an EncoderLayer ("encoder") or DecoderLayer ("decoder"), by attribute path."""
    weights = {}
    for attention in ATTENTIONS[kind]:
        for projection in ("w_q", "w_k", "w_v", "w_o"):
            weights[f"{attention}.{projection}.weight"] = _uniform(generator, d_model, d_model,
                                                                  bound=math.sqrt(3 / d_model))
            weights[f"{attention}.{projection}.bias"] = _uniform(generator, d_model, bound=0.2)
    for name, (rows, columns) in (("linear1", (d_ff, d_model)), ("linear2", (d_model, d_ff))):
        weights[f"feed_forward.{name}.weight"] = _uniform(generator, rows, columns, bound=math.sqrt(3 / columns))
        weights[f"feed_forward.{name}.bias"] = _uniform(generator, rows, bound=0.2)
    for norm in NORMS[kind]:
        weights.update(norm_weights(norm, d_model, generator))
    return weights


def norm_weights(name, d_model, generator):
    """gamma in [0.5, 1.5), beta in [-0.5, 0.5): every LayerNorm can be told apart."""
    return {f"{name}.gamma": 0.5 + torch.rand(d_model, generator=generator),
            f"{name}.beta": torch.rand(d_model, generator=generator) - 0.5}


def load_weights(module, weights):
    """Copy each tensor into the student's parameter at its attribute path (an AttributeError names a missing part)."""
    with torch.no_grad():
        for name, value in weights.items():
            target = module
            for part in name.split("."):
                target = target[int(part)] if part.isdigit() else getattr(target, part)
            target.copy_(value)
    return module


def loaded(make, weights, train=False):
    """``make()``, with the weights loaded, in train or eval mode."""
    module = make()
    load_weights(module, weights)
    return module.train(train)


def seeded(seed, function, *args):
    """``function(*args)`` drawing its random numbers from ``seed`` (a Raised if it raised)."""
    from ..testing import same_random_numbers

    with same_random_numbers(seed):
        return attempt(function, *args)


# ----------------------------------------------------------------------------- the layers' hidden cases

# EncoderLayer: (d_model, n_heads, d_ff, batch, length, lengths of the padded rows or None)
ENCODER_CASES = [(16, 4, 32, 3, 5, None), (24, 3, 40, 2, 7, [7, 4]), (8, 1, 12, 1, 4, [3]), (16, 8, 24, 4, 1, None)]
# DecoderLayer: (d_model, n_heads, d_ff, batch, tgt_len, src_len, tgt_lengths, src_lengths)
DECODER_CASES = [(16, 4, 32, 3, 4, 6, None, None), (24, 3, 40, 2, 5, 3, [5, 3], [3, 2]), (8, 2, 12, 2, 5, 5, [5, 4], [2, 5]),
                 (16, 8, 24, 1, 1, 7, [1], [4])]
# the masks alone, then together, with T != S and with T == S (where swapped masks still run)
DECODER_MASK_CASES = [(16, 4, 24, 3, 5, 4, [5, 2, 4], None), (16, 4, 24, 3, 5, 4, None, [4, 1, 3]),
                      (16, 2, 24, 2, 6, 6, [6, 3], [2, 6]), (8, 4, 16, 2, 3, 7, [3, 3], [7, 2])]
STRUCTURE_CASES = [(24, 3, 40, 0.3), (8, 8, 8, 0.0)]   # (d_model, n_heads, d_ff, dropout)
# the structure tests' value check, Pre-LN (norm_first=True, as their layers)
STRUCTURE_VALUE_CASES = {"encoder": [(12, 3, 20, 2, 5, [5, 3])], "decoder": [(12, 3, 20, 2, 4, 5, [4, 3], [5, 2])]}


def lengths_mask(lengths, size):
    """[B, 1, 1, size], True at the first lengths[b] positions of row b."""
    return (torch.arange(size)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def causal(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]


def layer_case(kind, case, tag):
    """The secret weights and the call's arguments of one case of ENCODER_CASES / DECODER_CASES."""
    generator = secret_generator(tag)
    d_model, d_ff = case[0], case[2]
    weights = layer_weights(kind, d_model, d_ff, generator)
    if kind == "encoder":
        _, _, _, batch, length, lengths = case
        x = torch.randn(batch, length, d_model, generator=generator)
        return weights, (x, None if lengths is None else lengths_mask(lengths, length))
    _, _, _, batch, tgt_len, src_len, tgt_lengths, src_lengths = case
    x = torch.randn(batch, tgt_len, d_model, generator=generator)
    memory = torch.randn(batch, src_len, d_model, generator=generator)
    tgt_mask = None if tgt_lengths is None else lengths_mask(tgt_lengths, tgt_len) & causal(tgt_len)
    src_mask = None if src_lengths is None else lengths_mask(src_lengths, src_len)
    return weights, (x, memory, src_mask, tgt_mask)


def layer_runs(make, kind, cases, tag):
    """For each case: the student's layer, ``make(d_model, n_heads, d_ff)`` with the case's weights, called twice in
    eval mode. Case ``number`` draws its inputs from ``secret_generator(f"{tag} {number}")``."""
    runs = []
    for number, case in enumerate(cases):
        weights, args = layer_case(kind, case, f"{tag} {number}")
        layer = attempt(loaded, lambda: make(*case[:3]), weights)
        if isinstance(layer, Raised):
            runs.append({"out": layer, "again": layer})
        else:
            runs.append({"out": attempt(layer, *args), "again": attempt(layer, *args)})
    return runs


def layer_facts(layer, kind, d_model, tag):
    """What the structure tests read of a layer: its parameter count, d_ff, dropout rates, heads after a call."""
    from ..testing import same_random_numbers

    generator = secret_generator(tag)
    inputs = [torch.randn(2, 3, d_model, generator=generator)]
    if kind == "decoder":
        inputs.append(torch.randn(2, 5, d_model, generator=generator))
    found = facts(count=lambda: parameter_count(layer), d_ff=lambda: layer.feed_forward.linear1.out_features,
                  dropout=lambda: layer.dropout.p, feed_forward=lambda: layer.feed_forward.dropout.p)
    found.update(facts(**{name: (lambda name=name: getattr(layer, name).dropout.p) for name in ATTENTIONS[kind]}))
    with same_random_numbers(secret_seed(tag)):
        found["call"] = attempt(lambda: layer.eval()(*inputs) is None)
    found["shapes"] = facts(**{name: (lambda name=name: list(getattr(layer, name).attn.shape)) for name in ATTENTIONS[kind]})
    return found


def dropout_rates(layer, kind):
    """The dropout rates of a layer's own sublayers (the reference in train mode is built with the same)."""
    return {name: getattr(layer, name).dropout.p for name in ATTENTIONS[kind] + ("feed_forward",)}


def encoder_mask_case(tag):
    """EncoderLayer(16, 4, 24)'s weights, x [3, 6, 16], a padding mask and a mask [3, 1, 6, 6] with a pattern per query."""
    generator = secret_generator(tag)
    weights = layer_weights("encoder", 16, 24, generator)
    x = torch.randn(3, 6, 16, generator=generator)
    general = (torch.rand(3, 1, 6, 6, generator=generator) < 0.5) | torch.eye(6, dtype=torch.bool)
    return weights, x, [lengths_mask([6, 3, 1], 6), general]


# (norm_first, the lengths of src_mask or None) per case; the decoder's masks are src [3, 2] of 3, tgt [5, 4] of 5
ENCODER_DROPOUT_CASES = [(False, None), (True, [5, 2]), (False, [3, 5])]
DECODER_DROPOUT_CASES = [False, True]


def dropout_case(kind, number, tag):
    """A layer's weights (16, 4, 24) and its call's arguments, for the train-mode tests."""
    generator = secret_generator(f"{tag} {number}")
    weights = layer_weights(kind, 16, 24, generator)
    x = torch.randn(2, 5, 16, generator=generator)
    if kind == "encoder":
        lengths = ENCODER_DROPOUT_CASES[number][1]
        return weights, (x, None if lengths is None else lengths_mask(lengths, 5))
    memory = torch.randn(2, 3, 16, generator=generator)
    return weights, (x, memory, lengths_mask([3, 2], 3), lengths_mask([5, 4], 5) & causal(5))


def dropout_run(make, kind, number, tag):
    """The student's layer with the case's weights in train mode, drawing the random numbers of
    ``secret_seed(f"{tag} {number}")``."""
    weights, args = dropout_case(kind, number, tag)
    layer = loaded(make, weights, train=True)
    return {"out": seeded(secret_seed(f"{tag} {number}"), layer, *args), "rates": attempt(dropout_rates, layer, kind)}


def causality_grads(layer, tag):
    """For output positions 0 to 4 of layer(x [2, 6, 16], memory [2, 3, 16], None, tgt_mask), the gradient for x
    of the output at that position in a random direction."""
    generator = secret_generator(tag)
    x = torch.randn(2, 6, 16, generator=generator, requires_grad=True)
    memory = torch.randn(2, 3, 16, generator=generator)
    out = layer(x, memory, None, lengths_mask([6, 4], 6) & causal(6))
    return [torch.autograd.grad((out[:, position] * torch.randn(16, generator=generator)).sum(), x, retain_graph=True)[0]
            for position in range(5)]


# ----------------------------------------------------------------------------- test doubles

def masked_mean(values, mask, queries):
    """For each of ``queries`` positions, the mean of ``values`` [B, K, d] over the K positions that ``mask``
    (broadcast to [B, 1, queries, K]; None: all of them) lets it see; 0 where it sees none. A mask of another
    length than K raises RuntimeError, as an attention given the wrong mask would."""
    batch, keys = values.shape[:2]
    if mask is None:
        seen = torch.ones(batch, queries, keys, dtype=values.dtype)
    else:
        seen = mask.expand(batch, 1, queries, keys)[:, 0].to(values.dtype)
    return seen @ values / seen.sum(-1, keepdim=True).clamp(min=1)


def double_layer(x, weight, bias, norm_first, dropout, self_mask, memory=None, cross_mask=None):
    """What a layer double returns for x [B, T, d]: tanh(x W^T + b), plus the mean of x over the positions
    ``self_mask`` lets each position see, plus (for a decoder) the mean of ``memory`` over the positions
    ``cross_mask`` lets it see, through ``dropout``; with ``norm_first`` that is added to x."""
    h = torch.tanh(F.linear(x, weight, bias)) + masked_mean(x, self_mask, x.size(1))
    if memory is not None:
        h = h + masked_mean(memory, cross_mask, x.size(1))
    h = dropout(h)
    return x + h if norm_first else h


def double_stack(x, weight, bias, gamma, beta, n_layers, norm_first, dropout, self_mask, memory=None, cross_mask=None):
    """What a stack double returns: ``double_layer`` ``n_layers`` times with the same weights, then a LayerNorm."""
    for _ in range(n_layers):
        x = double_layer(x, weight, bias, norm_first, dropout, self_mask, memory, cross_mask)
    return F.layer_norm(x, (x.size(-1),), gamma, beta)


class EncoderLayerDouble(nn.Module):
    """A stand-in for EncoderLayer in the tests of Encoder; not a Transformer layer, but a map whose output the test
    computes (``double_layer``): tanh of one linear map, plus at each position the mean of x over the positions
    src_mask lets it see, through dropout; with norm_first, added to x. It keeps its arguments and, in
    ``received``, what each call was given."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.d_model, self.n_heads, self.d_ff, self.norm_first = d_model, n_heads, d_ff, norm_first
        self.linear = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.received = []

    def forward(self, x, src_mask=None):
        self.received.append({"x": x, "src_mask": src_mask})
        return double_layer(x, self.linear.weight, self.linear.bias, self.norm_first, self.dropout, src_mask)


class DecoderLayerDouble(EncoderLayerDouble):
    """A stand-in for DecoderLayer in the tests of Decoder: as EncoderLayerDouble, with tgt_mask for the mean over
    x, plus the mean of memory over the positions src_mask lets each position see."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        self.received.append({"x": x, "memory": memory, "src_mask": src_mask, "tgt_mask": tgt_mask})
        return double_layer(x, self.linear.weight, self.linear.bias, self.norm_first, self.dropout, tgt_mask,
                            memory, src_mask)


class EncoderDouble(nn.Module):
    """A stand-in for Encoder in the tests of Transformer; not a stack of layers, but ``double_stack``: n_layers
    times the encoder layer double with one shared linear map, then a LayerNorm (gamma, beta). It keeps its
    arguments and what each call was given."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.n_layers, self.d_model, self.n_heads, self.d_ff, self.norm_first = n_layers, d_model, n_heads, d_ff, norm_first
        self.linear = nn.Linear(d_model, d_model)
        self.gamma, self.beta = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))
        self.dropout = nn.Dropout(dropout)
        self.received = []

    def forward(self, x, src_mask=None):
        self.received.append({"x": x, "src_mask": src_mask})
        return double_stack(x, self.linear.weight, self.linear.bias, self.gamma, self.beta, self.n_layers,
                            self.norm_first, self.dropout, src_mask)


class DecoderDouble(EncoderDouble):
    """A stand-in for Decoder in the tests of Transformer: as EncoderDouble, with the decoder layer double."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        self.received.append({"x": x, "memory": memory, "src_mask": src_mask, "tgt_mask": tgt_mask})
        return double_stack(x, self.linear.weight, self.linear.bias, self.gamma, self.beta, self.n_layers,
                            self.norm_first, self.dropout, tgt_mask, memory, src_mask)


def received_names(stack, given):
    """For each layer of ``stack`` (by position), what its first call was given, each argument named after the
    object of ``given`` (name -> object) it was, else "None" or "another tensor"; None for a layer never called."""
    names = []
    for layer in getattr(stack, "layers", []):
        calls = getattr(layer, "received", None)
        if not calls:
            names.append(None)
            continue
        names.append({argument: next((name for name, known in given.items() if value is known),
                                     "None" if value is None else "another tensor")
                      for argument, value in calls[0].items() if argument != "x"})
    return names


# ----------------------------------------------------------------------------- the stacks (on layer doubles)

# Encoder: (n_layers, norm_first, lengths of src_mask or None); x [3, 6, 16]
ENCODER_STACK_CASES = [(3, False, [6, 2, 4]), (3, True, [6, 2, 4]), (1, False, None), (1, True, [5, 6, 1]), (2, True, None)]
# Decoder: (n_layers, norm_first, src_len, tgt_lengths, src_lengths); x [3, 5, 16]
DECODER_STACK_CASES = [(3, False, 4, [5, 3, 4], [4, 2, 1]), (3, True, 4, [5, 3, 4], [4, 2, 1]), (1, False, 7, None, None),
                       (1, True, 5, [5, 5, 2], None), (2, False, 5, None, [5, 1, 3])]
STACK_STRUCTURE_CASES = [(1, 8, 2, 12, 0.3, False), (4, 12, 3, 20, 0.0, True)]   # n_layers, d_model, n_heads, d_ff, p, norm_first
# the structure tests' value check: one case of ENCODER_STACK_CASES / DECODER_STACK_CASES' form
STACK_STRUCTURE_VALUE_CASES = {"encoder": [(2, True, [6, 3, 5])], "decoder": [(2, True, 4, [5, 2, 4], [4, 3, 1])]}


def double_weights(n_layers, d_model, norm_first, generator, prefix=""):
    """Weights for a stack of ``n_layers`` layer doubles (and its final norm for Pre-LN), by attribute path."""
    weights = {}
    for i in range(n_layers):
        weights[f"{prefix}layers.{i}.linear.weight"] = _uniform(generator, d_model, d_model, bound=math.sqrt(3 / d_model))
        weights[f"{prefix}layers.{i}.linear.bias"] = _uniform(generator, d_model, bound=0.5)
    if norm_first:
        weights.update(norm_weights(f"{prefix}norm", d_model, generator))
    return weights


def stack_case(kind, case, tag):
    """The secret weights and the call's arguments of one case of ENCODER_STACK_CASES / DECODER_STACK_CASES."""
    generator = secret_generator(tag)
    weights = double_weights(case[0], 16, case[1], generator)
    if kind == "encoder":
        lengths = case[2]
        x = torch.randn(3, 6, 16, generator=generator)
        return weights, (x, None if lengths is None else lengths_mask(lengths, 6))
    _, _, src_len, tgt_lengths, src_lengths = case
    x, memory = torch.randn(3, 5, 16, generator=generator), torch.randn(3, src_len, 16, generator=generator)
    tgt_mask = None if tgt_lengths is None else lengths_mask(tgt_lengths, 5) & causal(5)
    src_mask = None if src_lengths is None else lengths_mask(src_lengths, src_len)
    return weights, (x, memory, src_mask, tgt_mask)


def unregistered_layers(stack):
    """How many of ``stack.layers`` are modules the stack does not hold as submodules: kept in a plain Python
    list, they are hidden from the stack's .eval(), .parameters() and .to()."""
    held = {id(module) for module in stack.modules()}
    return sum(isinstance(layer, torch.nn.Module) and id(layer) not in held for layer in stack.layers)


def stack_call(stack, kind, args):
    """stack(*args), and what each of its layer doubles was given (received_names)."""
    names = ("x", "src_mask") if kind == "encoder" else ("x", "memory", "src_mask", "tgt_mask")
    given = {name: value for name, value in zip(names, args) if value is not None}
    for layer in getattr(stack, "layers", []):
        getattr(layer, "received", []).clear()
    result = attempt(stack, *args)
    return {"result": result, "received": attempt(received_names, stack, given)}


def stack_run(make, kind, weights, *calls):
    """The student's stack ``make()`` with ``weights`` loaded, in eval mode, called on each of ``calls`` (argument
    tuples): for each, what stack_call found, and how many of its layers the stack does not hold as submodules
    (their dropout stays on)."""
    stack = attempt(loaded, make, weights)
    if isinstance(stack, Raised):
        return [{"result": stack, "received": []} for _ in calls]
    return [dict(stack_call(stack, kind, args), unregistered=attempt(unregistered_layers, stack)) for args in calls]


def stack_runs(make, kind, cases, tag):
    """For each case: stack_run of the student's stack ``make(n_layers, norm_first)`` with the case's weights."""
    runs = []
    for number, case in enumerate(cases):
        weights, args = stack_case(kind, case, f"{tag} {number}")
        runs += stack_run(lambda: make(case[0], case[1]), kind, weights, args)
    return runs


def stack_facts(stack):
    """What the hidden structure tests read of a stack built on layer doubles: its layers' count, its parameter count,
    and the arguments each layer double was built with."""
    def layer(one):
        return facts(d_model=lambda: one.d_model, n_heads=lambda: one.n_heads, d_ff=lambda: one.d_ff,
                     dropout=lambda: one.dropout.p, norm_first=lambda: one.norm_first)
    return {"n_layers": attempt(len, stack.layers), "count": parameter_count(stack),
            "layers": [layer(one) for one in stack.layers]}


def stack_dropout_case(kind, number, tag):
    """A stack's weights (3 layer doubles of 16) and its call's arguments, for the train-mode tests (number 0: Post-LN)."""
    generator = secret_generator(f"{tag} {number}")
    weights = double_weights(3, 16, bool(number), generator)
    x = torch.randn(2, 5, 16, generator=generator)
    if kind == "encoder":
        return weights, (x, lengths_mask([5, 3], 5))
    memory = torch.randn(2, 3, 16, generator=generator)
    return weights, (x, memory, lengths_mask([3, 2], 3), lengths_mask([5, 4], 5) & causal(5))


def stack_dropout_run(make, kind, number, tag):
    """The student's stack with the case's weights in train mode (random numbers from the secret), then in eval mode."""
    from ..testing import same_random_numbers

    weights, args = stack_dropout_case(kind, number, tag)
    stack = loaded(make, weights, train=True)
    found = {"rates": [attempt(lambda one=one: one.dropout.p) for one in stack.layers]}
    with same_random_numbers(secret_seed(f"{tag} {number}")):
        found["train"] = stack_call(stack, kind, args)
    with torch.no_grad():
        found["eval"] = attempt(stack.eval(), *args)
    return found


def stack_parts(stack_class, layer_class):
    """What the visible structure tests read of stack_class(3, 16, 4, 32, dropout=0.2) and its Pre-LN version."""
    stack = stack_class(3, 16, 4, 32, dropout=0.2)
    layers = getattr(stack, "layers", [])
    return {"layers": kind_of(getattr(stack, "layers", None)), "n_layers": len(layers),
            "all_layers": all(isinstance(layer, layer_class) for layer in layers),
            "distinct": len({id(layer) for layer in layers}),
            "norm": kind_of(stack.norm) if hasattr(stack, "norm") else "missing", "count": parameter_count(stack),
            "pre_norm": kind_of(getattr(stack_class(3, 16, 4, 32, norm_first=True), "norm", None))}


# ----------------------------------------------------------------------------- the model (on stack doubles)

# (src_vocab, tgt_vocab, num_encoder_layers, num_decoder_layers, norm_first, pad_idx, src_lengths, tgt_lengths);
# a pad_idx of None is drawn from the secret, in 1 .. min(src_vocab, tgt_vocab) - 1
TRANSFORMER_VALUE_CASES = [(23, 31, 2, 1, False, 0, [7, 4, 1], [5, 5, 2]), (31, 23, 1, 2, True, None, [7, 7, 5], [5, 3, 4]),
                           (12, 40, 2, 2, False, None, [6], [5]), (40, 12, 2, 2, True, 0, [2, 7], [1, 5])]
# the structure and initialisation tests' value checks
TRANSFORMER_STRUCTURE_CASES = [(17, 9, 1, 2, True, None, [4, 2], [3, 3])]
TRANSFORMER_INIT_CASES = [(19, 27, 2, 1, False, None, [5, 3], [4, 2])]
TRANSFORMER_MASK_CASES = [(False, None), (True, 0), (True, None)]   # (norm_first, pad_idx); 25 and 35 tokens, 2 heads


def secret_pad(pad, vocab, generator):
    """``pad``, or where it is None, a pad index drawn in 1 .. vocab - 1."""
    return int(torch.randint(1, vocab, (1,), generator=generator)) if pad is None else pad


def tokens(lengths, size, vocab, pad, generator):
    """Random ids, never pad nor 0, with padding after lengths[b] positions."""
    ids = torch.randint(1, vocab - 1, (len(lengths), size), generator=generator)
    ids = ids + (ids >= pad).long() * (pad > 0)            # skip the padding id
    return ids.masked_fill(~lengths_mask(lengths, size)[:, 0, 0], pad)


def stack_double_weights(name, d_model, generator):
    """Weights for a stack double (EncoderDouble, DecoderDouble) at attribute ``name``."""
    return {f"{name}.linear.weight": _uniform(generator, d_model, d_model, bound=math.sqrt(3 / d_model)),
            f"{name}.linear.bias": _uniform(generator, d_model, bound=0.5),
            f"{name}.gamma": 0.5 + torch.rand(d_model, generator=generator),
            f"{name}.beta": torch.rand(d_model, generator=generator) - 0.5}


def model_weights(src_vocab, tgt_vocab, pad, generator, d_model=16):
    """Weights for a Transformer on stack doubles, by attribute path: embedding tables (zero padding rows), the
    doubles, the generator."""
    weights = {}
    for name, vocab in (("src_embed", src_vocab), ("tgt_embed", tgt_vocab)):
        table = _uniform(generator, vocab, d_model, bound=math.sqrt(6 / (vocab + d_model)))
        table[pad] = 0.0
        weights[f"{name}.embedding.weight"] = table
    weights.update(stack_double_weights("encoder", d_model, generator))
    weights.update(stack_double_weights("decoder", d_model, generator))
    weights["generator.weight"] = _uniform(generator, tgt_vocab, d_model, bound=math.sqrt(6 / (tgt_vocab + d_model)))
    weights["generator.bias"] = _uniform(generator, tgt_vocab, bound=0.5)
    return weights


def transformer_case(case, tag):
    """One case of TRANSFORMER_VALUE_CASES' form with its pad index drawn where it is None; its weights, src, tgt
    and a memory [B, S, 16] for decode."""
    generator = secret_generator(tag)
    src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, src_lengths, tgt_lengths = case
    pad = secret_pad(pad, min(src_vocab, tgt_vocab), generator)
    weights = model_weights(src_vocab, tgt_vocab, pad, generator)
    src = tokens(src_lengths, max(src_lengths), src_vocab, pad, generator)
    tgt = tokens(tgt_lengths, max(tgt_lengths), tgt_vocab, pad, generator)
    case = (src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, src_lengths, tgt_lengths)
    return case, weights, src, tgt, torch.randn(src.size(0), src.size(1), 16, generator=generator)


def transformer_values_run(make, case, tag):
    """The student's model (``make(case)`` with the pad index drawn, the case's weights, eval mode): forward, and
    encode and decode on their own."""
    from transformer_course.masks import padding_mask, target_mask

    case, weights, src, tgt, memory = transformer_case(case, tag)
    model = loaded(lambda: make(case), weights)
    pad = case[5]
    src_mask, tgt_mask = padding_mask(src, pad), target_mask(tgt, pad)
    return {"logits": attempt(model, src, tgt), "encode": attempt(model.encode, src, src_mask),
            "decode": attempt(model.decode, tgt, memory, src_mask, tgt_mask)}


def mask_case(number, tag):
    """norm_first, pad index, the weights, src [3, 6] and tgt [3, 5] of one case of TRANSFORMER_MASK_CASES."""
    generator = secret_generator(f"{tag} {number}")
    norm_first, pad = TRANSFORMER_MASK_CASES[number]
    pad = secret_pad(pad, 25, generator)
    weights = model_weights(25, 35, pad, generator)
    return norm_first, pad, weights, tokens([6, 3, 1], 6, 25, pad, generator), tokens([5, 5, 2], 5, 35, pad, generator)


def changed_targets(tgt, pad):
    """For positions 0 to 3: tgt with every token after that position changed (never to pad)."""
    found = []
    for position in range(4):
        changed, tail = tgt.clone(), (tgt[:, position + 1:] + 1) % 35
        tail[tail == pad] = (pad + 1) % 35
        changed[:, position + 1:] = tail
        found.append(changed)
    return found


def transformer_mask_run(make, number, tag):
    """The student's model (``make(norm_first, pad_idx)``, eval, the case's weights loaded) on src, tgt, longer
    padding, changed later targets."""
    norm_first, pad, weights, src, tgt = mask_case(number, tag)
    model = loaded(lambda: make(norm_first, pad), weights)
    return {"logits": attempt(model, src, tgt),
            "longer": attempt(model, torch.cat([src, torch.full((3, 4), pad)], dim=1), tgt),
            "changed": [attempt(model, src, changed) for changed in changed_targets(tgt, pad)],
            "more": attempt(model, src, torch.cat([tgt, torch.full((3, 2), pad)], dim=1))}


def dropout_model_case(number, tag):
    """The weights, src [2, 6] and tgt [2, 5] of the model's train-mode tests (25 and 35 tokens, pad 0)."""
    generator = secret_generator(f"{tag} {number}")
    weights = model_weights(25, 35, 0, generator)
    return weights, tokens([6, 4], 6, 25, 0, generator), tokens([5, 3], 5, 35, 0, generator)


def transformer_dropout_run(model, number, tag):
    """The student's model with the case's weights, in train mode drawing the secret's random numbers: forward, and
    the contract's data path generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) through its own
    methods; then eval mode."""
    from transformer_course.masks import padding_mask, target_mask
    from ..testing import same_random_numbers

    weights, src, tgt = dropout_model_case(number, tag)
    load_weights(model, weights)
    seed = secret_seed(f"{tag} {number}")
    found = {"rates": [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]}
    model.train()
    found["train"] = seeded(seed, model, src, tgt)
    with same_random_numbers(seed):
        src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt, 0)
        found["reference"] = attempt(lambda: model.generator(model.decode(tgt, model.encode(src, src_mask), src_mask, tgt_mask)))
    with torch.no_grad():
        found["eval"] = attempt(model.eval(), src, tgt)
    return found
