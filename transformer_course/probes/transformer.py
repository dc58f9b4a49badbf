"""Notebook 06: what the probes of its tests do in the kernel, shared with the judges where they rebuild inputs.

Nothing here knows an expected value. The seeded weights (``layer_weights``) are inputs: the probe loads them
into the student's layer, the judge builds PyTorch's layer from the same seed. The rest describes the student's
modules as plain data (kinds of parts, counts, dropout rates) or runs them on the test's inputs.
"""
import math

import torch

from ..probing import Raised, attempt

ATTENTIONS = {"encoder": ("self_attn",), "decoder": ("self_attn", "cross_attn")}
NORMS = {"encoder": ("norm1", "norm2"), "decoder": ("norm1", "norm2", "norm3")}


def kind_of(value):
    """The course's class a part is an instance of (by name), else its own type's name."""
    from .. import LayerNorm, MultiHeadAttention, PositionalEncoding, PositionwiseFeedForward, TokenEmbedding
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


# ----------------------------------------------------------------------------- seeded weights, by name

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


# ----------------------------------------------------------------------------- the hidden tests' cases

# EncoderLayer: (d_model, n_heads, d_ff, batch, length, lengths of the padded rows or None)
ENCODER_CASES = [(16, 4, 32, 3, 5, None), (24, 3, 40, 2, 7, [7, 4]), (8, 1, 12, 1, 4, [3]), (16, 8, 24, 4, 1, None)]
# DecoderLayer: (d_model, n_heads, d_ff, batch, tgt_len, src_len, tgt_lengths, src_lengths)
DECODER_CASES = [(16, 4, 32, 3, 4, 6, None, None), (24, 3, 40, 2, 5, 3, [5, 3], [3, 2]), (8, 2, 12, 2, 5, 5, [5, 4], [2, 5]),
                 (16, 8, 24, 1, 1, 7, [1], [4])]
# the masks alone, then together, with T != S and with T == S (where swapped masks still run)
DECODER_MASK_CASES = [(16, 4, 24, 3, 5, 4, [5, 2, 4], None), (16, 4, 24, 3, 5, 4, None, [4, 1, 3]),
                      (16, 2, 24, 2, 6, 6, [6, 3], [2, 6]), (8, 4, 16, 2, 3, 7, [3, 3], [7, 2])]
STRUCTURE_CASES = [(24, 3, 40, 0.3), (8, 8, 8, 0.0)]   # (d_model, n_heads, d_ff, dropout)


def lengths_mask(lengths, size):
    """[B, 1, 1, size], True at the first lengths[b] positions of row b."""
    return (torch.arange(size)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def causal(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]


def layer_case(kind, case, seed):
    """The seeded weights and the call's arguments of one case of ENCODER_CASES / DECODER_CASES."""
    generator = torch.Generator().manual_seed(seed)
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


def layer_runs(make, kind, cases):
    """For each case: the student's layer, ``make(d_model, n_heads, d_ff)`` with the case's weights, called twice in eval mode."""
    runs = []
    for seed, case in enumerate(cases):
        weights, args = layer_case(kind, case, seed)
        layer = attempt(loaded, lambda: make(*case[:3]), weights)
        if isinstance(layer, Raised):
            runs.append({"out": layer, "again": layer})
        else:
            runs.append({"out": attempt(layer, *args), "again": attempt(layer, *args)})
    return runs


def layer_facts(layer, kind, d_model):
    """What the structure tests read of a layer: its parameter count, d_ff, dropout rates, heads after a call."""
    from ..testing import same_random_numbers

    generator = torch.Generator().manual_seed(7)
    inputs = [torch.randn(2, 3, d_model, generator=generator)]
    if kind == "decoder":
        inputs.append(torch.randn(2, 5, d_model, generator=generator))
    found = facts(count=lambda: parameter_count(layer), d_ff=lambda: layer.feed_forward.linear1.out_features,
                  dropout=lambda: layer.dropout.p, feed_forward=lambda: layer.feed_forward.dropout.p)
    found.update(facts(**{name: (lambda name=name: getattr(layer, name).dropout.p) for name in ATTENTIONS[kind]}))
    with same_random_numbers(7):
        found["call"] = attempt(lambda: layer.eval()(*inputs) is None)
    found["shapes"] = facts(**{name: (lambda name=name: list(getattr(layer, name).attn.shape)) for name in ATTENTIONS[kind]})
    return found


def dropout_rates(layer, kind):
    """The dropout rates of a layer's own sublayers (the reference in train mode is built with the same)."""
    return {name: getattr(layer, name).dropout.p for name in ATTENTIONS[kind] + ("feed_forward",)}


def encoder_mask_case(seed):
    """EncoderLayer(16, 4, 24)'s weights, x [3, 6, 16], a padding mask and a mask [3, 1, 6, 6] with a pattern per query."""
    generator = torch.Generator().manual_seed(10 + seed)
    weights = layer_weights("encoder", 16, 24, generator)
    x = torch.randn(3, 6, 16, generator=generator)
    general = (torch.rand(3, 1, 6, 6, generator=generator) < 0.5) | torch.eye(6, dtype=torch.bool)
    return weights, x, [lengths_mask([6, 3, 1], 6), general]


# (norm_first, the lengths of src_mask or None) per seed; the decoder's masks are src [3, 2] of 3, tgt [5, 4] of 5
ENCODER_DROPOUT_CASES = [(False, None), (True, [5, 2]), (False, [3, 5])]
DECODER_DROPOUT_CASES = [False, True]


def dropout_case(kind, seed):
    """A layer's weights (16, 4, 24) and its call's arguments, for the train-mode tests."""
    generator = torch.Generator().manual_seed(20 + seed)
    weights = layer_weights(kind, 16, 24, generator)
    x = torch.randn(2, 5, 16, generator=generator)
    if kind == "encoder":
        lengths = ENCODER_DROPOUT_CASES[seed][1]
        return weights, (x, None if lengths is None else lengths_mask(lengths, 5))
    memory = torch.randn(2, 3, 16, generator=generator)
    return weights, (x, memory, lengths_mask([3, 2], 3), lengths_mask([5, 4], 5) & causal(5))


def dropout_run(make, kind, seed):
    """The student's layer with the case's weights in train mode, drawing its random numbers from ``seed``."""
    weights, args = dropout_case(kind, seed)
    layer = loaded(make, weights, train=True)
    return {"out": seeded(seed, layer, *args), "rates": attempt(dropout_rates, layer, kind)}


def causality_grads(layer):
    """For output positions 0 to 4 of layer(x [2, 6, 16], memory [2, 3, 16], None, tgt_mask), the gradient for x
    of the output at that position in a random direction."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 16, generator=generator, requires_grad=True)
    memory = torch.randn(2, 3, 16, generator=generator)
    out = layer(x, memory, None, lengths_mask([6, 4], 6) & causal(6))
    return [torch.autograd.grad((out[:, position] * torch.randn(16, generator=generator)).sum(), x, retain_graph=True)[0]
            for position in range(5)]


# ----------------------------------------------------------------------------- the stacks

# Encoder: (n_layers, norm_first, lengths of src_mask or None); x [3, 6, 16]
ENCODER_STACK_CASES = [(3, False, [6, 2, 4]), (3, True, [6, 2, 4]), (1, False, None), (1, True, [5, 6, 1]), (2, True, None)]
# Decoder: (n_layers, norm_first, src_len, tgt_lengths, src_lengths); x [3, 5, 16]
DECODER_STACK_CASES = [(3, False, 4, [5, 3, 4], [4, 2, 1]), (3, True, 4, [5, 3, 4], [4, 2, 1]), (1, False, 7, None, None),
                       (1, True, 5, [5, 5, 2], None), (2, False, 5, None, [5, 1, 3])]
STACK_STRUCTURE_CASES = [(1, 8, 2, 12, 0.3, False), (4, 12, 3, 20, 0.0, True)]   # n_layers, d_model, n_heads, d_ff, p, norm_first


def stack_weights(kind, n_layers, d_model, d_ff, norm_first, generator, prefix=""):
    """Weights for an Encoder / Decoder of n_layers layers (and its final norm for Pre-LN), by attribute path."""
    weights = {}
    for i in range(n_layers):
        weights.update({f"{prefix}layers.{i}.{k}": v for k, v in layer_weights(kind, d_model, d_ff, generator).items()})
    if norm_first:
        weights.update(norm_weights(f"{prefix}norm", d_model, generator))
    return weights


def stack_case(kind, case, seed):
    """The seeded weights and the call's arguments of one case of ENCODER_STACK_CASES / DECODER_STACK_CASES."""
    generator = torch.Generator().manual_seed(30 + seed)
    weights = stack_weights(kind, case[0], 16, 24, case[1], generator)
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


def stack_runs(make, kind, cases):
    """For each case: the student's stack, ``make(n_layers, norm_first)`` with the case's weights, in eval mode;
    and how many of its layers it does not hold as submodules (their dropout stays on)."""
    runs = []
    for seed, case in enumerate(cases):
        weights, args = stack_case(kind, case, seed)
        stack = attempt(loaded, lambda: make(case[0], case[1]), weights)
        if isinstance(stack, Raised):
            runs.append({"result": stack, "wrong_memory": None})
        else:
            runs.append(decoder_call(stack, *args) if kind == "decoder" else {"result": attempt(stack, *args)})
            runs[-1]["unregistered"] = attempt(unregistered_layers, stack)
    return runs


def stack_facts(stack, kind, d_model):
    """What the hidden structure tests read of a stack: its layers' count, parameters, d_ff, dropout, heads after a call."""
    generator = torch.Generator().manual_seed(8)
    inputs = [torch.randn(1, 2, d_model, generator=generator)] + (
        [torch.randn(1, 3, d_model, generator=generator)] if kind == "decoder" else [])

    def layer(one):
        found = facts(d_ff=lambda: one.feed_forward.linear1.out_features, dropout=lambda: one.dropout.p)
        found["call"] = attempt(lambda: one.eval()(*inputs) is None)
        found["heads"] = attempt(lambda: one.self_attn.attn.shape[1])
        return found
    return {"n_layers": attempt(len, stack.layers), "count": parameter_count(stack),
            "layers": [layer(one) for one in stack.layers]}


def decoder_call(decoder, x, memory, src_mask, tgt_mask):
    """decoder(x, memory, src_mask, tgt_mask), and the first layer given another memory than the encoder's
    (by identity: with as many target as source positions, x has memory's shape)."""
    given = []

    def record(module, args, kwargs):
        given.append(args[1] if len(args) > 1 else kwargs.get("memory"))

    hooks = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in getattr(decoder, "layers", [])
             if isinstance(layer, torch.nn.Module)]
    try:
        result = attempt(decoder, x, memory, src_mask, tgt_mask)
    finally:
        for hook in hooks:
            hook.remove()
    return {"result": result, "wrong_memory": next((i for i, m in enumerate(given) if m is not memory), None)}


def stack_dropout_case(kind, seed):
    """A stack's weights (3 layers of 16, 4, 24) and its call's arguments, for the train-mode tests (seed 0: Post-LN)."""
    generator = torch.Generator().manual_seed(40 + seed)
    weights = stack_weights(kind, 3, 16, 24, bool(seed), generator)
    x = torch.randn(2, 5, 16, generator=generator)
    if kind == "encoder":
        return weights, (x, lengths_mask([5, 3], 5))
    memory = torch.randn(2, 3, 16, generator=generator)
    return weights, (x, memory, lengths_mask([3, 2], 3), lengths_mask([5, 4], 5) & causal(5))


def stack_dropout_run(make, kind, seed):
    """The student's stack with the case's weights in train mode (random numbers from ``seed``), then in eval mode."""
    weights, args = stack_dropout_case(kind, seed)
    stack = loaded(make, weights, train=True)
    found = {"rates": [attempt(lambda one=one: one.dropout.p) for one in stack.layers]}
    from ..testing import same_random_numbers
    with same_random_numbers(seed):
        found["train"] = decoder_call(stack, *args) if kind == "decoder" else {"result": attempt(stack, *args)}
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


# ----------------------------------------------------------------------------- the model

# (src_vocab, tgt_vocab, num_encoder_layers, num_decoder_layers, norm_first, pad_idx, src_lengths, tgt_lengths)
TRANSFORMER_VALUE_CASES = [(23, 31, 2, 1, False, 0, [7, 4, 1], [5, 5, 2]), (31, 23, 1, 2, True, 3, [7, 7, 5], [5, 3, 4]),
                           (12, 40, 2, 2, False, 1, [6], [5]), (40, 12, 2, 2, True, 0, [2, 7], [1, 5])]
TRANSFORMER_MASK_CASES = [(False, 2), (True, 0), (True, 5)]   # (norm_first, pad_idx); 25 and 35 tokens, 2 heads


def tokens(lengths, size, vocab, pad, generator):
    """Random ids, never pad nor 0, with padding after lengths[b] positions."""
    ids = torch.randint(1, vocab - 1, (len(lengths), size), generator=generator)
    ids = ids + (ids >= pad).long() * (pad > 0)            # skip the padding id
    return ids.masked_fill(~lengths_mask(lengths, size)[:, 0, 0], pad)


def model_weights(src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, generator, d_model=16, d_ff=24):
    """Weights for a Transformer, by attribute path: embedding tables (zero padding rows), stacks, generator."""
    weights = {}
    for name, vocab in (("src_embed", src_vocab), ("tgt_embed", tgt_vocab)):
        table = _uniform(generator, vocab, d_model, bound=math.sqrt(6 / (vocab + d_model)))
        table[pad] = 0.0
        weights[f"{name}.embedding.weight"] = table
    weights.update(stack_weights("encoder", n_enc, d_model, d_ff, norm_first, generator, prefix="encoder."))
    weights.update(stack_weights("decoder", n_dec, d_model, d_ff, norm_first, generator, prefix="decoder."))
    weights["generator.weight"] = _uniform(generator, tgt_vocab, d_model, bound=math.sqrt(6 / (tgt_vocab + d_model)))
    weights["generator.bias"] = _uniform(generator, tgt_vocab, bound=0.5)
    return weights


def transformer_case(case, seed):
    """The weights, src, tgt and a memory [B, S, 16] for decode, of one case of TRANSFORMER_VALUE_CASES."""
    generator = torch.Generator().manual_seed(50 + seed)
    src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, src_lengths, tgt_lengths = case
    weights = model_weights(src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, generator)
    src = tokens(src_lengths, max(src_lengths), src_vocab, pad, generator)
    tgt = tokens(tgt_lengths, max(tgt_lengths), tgt_vocab, pad, generator)
    return weights, src, tgt, torch.randn(src.size(0), src.size(1), 16, generator=generator)


def transformer_values_run(make, case, seed):
    """The student's model (``make(case)``, the case's weights, eval mode): forward, encode and decode on their own."""
    from ..masks import padding_mask, target_mask

    weights, src, tgt, memory = transformer_case(case, seed)
    model = loaded(lambda: make(case), weights)
    pad = case[5]
    src_mask, tgt_mask = padding_mask(src, pad), target_mask(tgt, pad)
    return {"logits": attempt(model, src, tgt), "encode": attempt(model.encode, src, src_mask),
            "decode": attempt(model.decode, tgt, memory, src_mask, tgt_mask)}


def mask_case(seed):
    """The weights, src [3, 6] and tgt [3, 5] of one case of TRANSFORMER_MASK_CASES."""
    norm_first, pad = TRANSFORMER_MASK_CASES[seed]
    generator = torch.Generator().manual_seed(60 + seed)
    weights = model_weights(25, 35, 2, 2, norm_first, pad, generator)
    return weights, tokens([6, 3, 1], 6, 25, pad, generator), tokens([5, 5, 2], 5, 35, pad, generator)


def changed_targets(tgt, pad):
    """For positions 0 to 3: tgt with every token after that position changed (never to pad)."""
    found = []
    for position in range(4):
        changed, tail = tgt.clone(), (tgt[:, position + 1:] + 1) % 35
        tail[tail == pad] = (pad + 1) % 35
        changed[:, position + 1:] = tail
        found.append(changed)
    return found


def transformer_mask_run(model, seed):
    """The student's model (eval, the case's weights loaded) on src, tgt, longer padding, changed later targets."""
    weights, src, tgt = mask_case(seed)
    load_weights(model, weights)
    model.eval()
    pad = TRANSFORMER_MASK_CASES[seed][1]
    return {"logits": attempt(model, src, tgt),
            "longer": attempt(model, torch.cat([src, torch.full((3, 4), pad)], dim=1), tgt),
            "changed": [attempt(model, src, changed) for changed in changed_targets(tgt, pad)],
            "more": attempt(model, src, torch.cat([tgt, torch.full((3, 2), pad)], dim=1))}


def transformer_dropout_run(model, seed):
    """The student's model in train mode drawing the random numbers of ``seed``: forward, and the contract's data path
    generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) through its own methods; then eval mode."""
    from ..masks import padding_mask, target_mask
    from ..testing import same_random_numbers

    generator = torch.Generator().manual_seed(seed)
    src, tgt = tokens([6, 4], 6, 25, 0, generator), tokens([5, 3], 5, 35, 0, generator)
    found = {"rates": [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]}
    model.train()
    found["train"] = seeded(seed, model, src, tgt)
    with same_random_numbers(seed):
        src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt, 0)
        found["reference"] = attempt(lambda: model.generator(model.decode(tgt, model.encode(src, src_mask), src_mask, tgt_mask)))
    with torch.no_grad():
        found["eval"] = attempt(model.eval(), src, tgt)
    return found
