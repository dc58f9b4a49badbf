"""Oracles of notebook 06 (EncoderLayer, DecoderLayer, Encoder, Decoder, Transformer), shared by its hidden tests
and tests/test_components.py.

The checks are judges: they run in the grader's process on what the probes (transformer_course.probes.transformer)
found in the kernel. The probe loads seeded weights into the student's module; the expected values come from
PyTorch's own layers (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
nn.TransformerDecoder, nn.Transformer) in float64 holding the same weights, regenerated here from the same seeds,
and, in train mode, from the course's sublayers of notebooks 04 and 05 put together as the paper's sublayers with
the same weights and random numbers; never from the course's solution (transformer_course.layers,
transformer_course.model), and never from weights or inputs the kernel sent back. The mistakes are built from
PyTorch's sublayers too, only to name a mistake in a message. The one check on the model that compares the
student's code with itself is check_transformer_dropout: forward against the student's own
generator(decode(encode)) drawing the same random numbers, as the contract asks.

The functions that compute a layer, a stack or the model for the student are helpers of those exercises in
own_work's table: during their tests an answer that calls them is refused.
"""
import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import transformer_course as course

from .. import testing
from ..layers import LayerNorm
from ..probing import Raised, returned
from ..probes import transformer as probes
from .multi_head import copy_weights


def copy_norm(theirs, ours):
    with torch.no_grad():
        theirs.weight.copy_(ours.gamma)
        theirs.bias.copy_(ours.beta)


def copy_layer(theirs, ours):
    """The weights of our EncoderLayer / DecoderLayer into PyTorch's nn.TransformerEncoderLayer / DecoderLayer."""
    copy_weights(ours.self_attn, theirs.self_attn)
    if hasattr(theirs, "multihead_attn"):
        copy_weights(ours.cross_attn, theirs.multihead_attn)
        copy_norm(theirs.norm3, ours.norm3)
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(theirs, name).weight.copy_(getattr(ours.feed_forward, name).weight)
            getattr(theirs, name).bias.copy_(getattr(ours.feed_forward, name).bias)
    copy_norm(theirs.norm1, ours.norm1)
    copy_norm(theirs.norm2, ours.norm2)
    return theirs.eval()


def torch_layer(kind, d_model, n_heads, d_ff, norm_first):
    """A fresh PyTorch layer in float64, without dropout."""
    make = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    return make(d_model, n_heads, d_ff, dropout=0.0, activation="relu", batch_first=True,
                norm_first=norm_first, dtype=torch.float64)


def torch_stack(ours, kind, d_model, n_heads, d_ff, norm_first):
    """nn.TransformerEncoder / nn.TransformerDecoder with our layers' weights (norm=None for Post-LN)."""
    final = nn.LayerNorm(d_model, dtype=torch.float64) if norm_first else None
    layer = torch_layer(kind, d_model, n_heads, d_ff, norm_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "encoder":
            stack = nn.TransformerEncoder(layer, len(ours.layers), norm=final, enable_nested_tensor=False)
        else:
            stack = nn.TransformerDecoder(layer, len(ours.layers), norm=final)
    for theirs, mine in zip(stack.layers, ours.layers):
        copy_layer(theirs, mine)
    if norm_first:
        copy_norm(stack.norm, ours.norm)
    return stack.eval()


def torch_mask(mask, batch, n_heads, q_len, k_len):
    """Our mask (True = may attend) as PyTorch's attn_mask [batch * heads, q_len, k_len] (True = NOT allowed)."""
    if mask is None:
        return None
    return (~mask).expand(batch, n_heads, q_len, k_len).reshape(batch * n_heads, q_len, k_len)


def compose(x, sublayers, norms, pre, residual=True, norm_inside=False, add_normed=False):
    """A layer put together from PyTorch's sublayers, with knobs that reproduce common mistakes
    (only used to name a mistake; the oracle is PyTorch's layer itself)."""
    for sublayer, norm in zip(sublayers, norms):
        if pre:
            y = norm(x)
            x = (y if add_normed else x if residual else 0) + sublayer(y)
        elif norm_inside:
            x = x + norm(sublayer(x))
        else:
            x = norm((x if residual else 0) + sublayer(x))
    return x


def encoder_layer_mistakes(theirs, x, mask, pre):
    """What common mistakes would return, built from PyTorch's sublayers (mask in PyTorch's form)."""
    sa = lambda y, m=mask: theirs.self_attn(y, y, y, attn_mask=m, need_weights=False)[0]
    ff = lambda y: theirs.linear2(F.relu(theirs.linear1(y)))
    n1, n2 = theirs.norm1, theirs.norm2
    found = {
        ("the LayerNorm comes after the residual sum (Post-LN), but norm_first=True asks for Pre-LN, "
         "x + dropout(sublayer(norm(x)))" if pre else
         "the LayerNorm comes before the sublayer (Pre-LN), but norm_first=False asks for the paper's Post-LN, "
         "norm(x + dropout(sublayer(x)))"): lambda: compose(x, (sa, ff), (n1, n2), not pre),
        "there is no residual connection: add each sublayer's input to its output":
            lambda: compose(x, (sa, ff), (n1, n2), pre, residual=False),
        "norm1 is used for both sublayers; the feed-forward sublayer has its own LayerNorm, norm2":
            lambda: compose(x, (sa, ff), (n1, n1), pre),
        "the feed-forward sublayer is skipped": lambda: compose(x, (sa,), (n1,), pre),
    }
    if pre:
        found["the normalised x is added back instead of x; the residual is x + dropout(sublayer(norm(x)))"] = (
            lambda: compose(x, (sa, ff), (n1, n2), True, add_normed=True))
    else:
        found["the LayerNorm is applied to the sublayer's output before the residual sum, x + norm(sublayer(x)); "
              "Post-LN normalises the sum, norm(x + sublayer(x))"] = (
            lambda: compose(x, (sa, ff), (n1, n2), False, norm_inside=True))
    if mask is not None:
        found["src_mask is not passed to the self-attention"] = (
            lambda: compose(x, (lambda y: sa(y, None), ff), (n1, n2), pre))
    return found


def outcome(result, what, hint):
    """What the student's call returned; a shape error deep inside becomes a message that says where to look."""
    if isinstance(result, Raised) and result.type_name in ("RuntimeError", "TypeError", "IndexError"):
        raise AssertionError(f"{what} failed with {result.type_name}: {result.message}. {hint}")
    return returned(result, what)


def weight_tree(weights):
    """Weights by attribute path as nested objects (lists for numbered parts), for copy_layer and torch_stack."""
    from types import SimpleNamespace

    root = {}
    for name, value in weights.items():
        *path, last = name.split(".")
        node = root
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value

    def build(node):
        if not isinstance(node, dict):
            return node
        if all(key.isdigit() for key in node):
            return [build(node[key]) for key in sorted(node, key=int)]
        return SimpleNamespace(**{key: build(value) for key, value in node.items()})
    return build(root)


def layer_what(kind, case, norm_first, args):
    """The call of one case, as the messages name it."""
    d_model, n_heads, d_ff = case[:3]
    if kind == "encoder":
        x, mask = args
        batch, length = x.shape[:2]
        return (f"EncoderLayer({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}).eval()"
                f"(x [{batch}, {length}, {d_model}]{'' if mask is None else ', src_mask [' + str(batch) + ', 1, 1, ' + str(length) + ']'})")
    x, memory, src_mask, tgt_mask = args
    batch, tgt_len, src_len = x.size(0), x.size(1), memory.size(1)
    return (f"DecoderLayer({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}).eval()(x [{batch}, {tgt_len}, {d_model}], "
            f"memory [{batch}, {src_len}, {d_model}]" + ("" if src_mask is None else f", src_mask [{batch}, 1, 1, {src_len}]")
            + ("" if tgt_mask is None else f", tgt_mask [{batch}, 1, {tgt_len}, {tgt_len}]") + ")")


LAYER_HINTS = {"encoder": "Is src_mask passed to the self-attention as its mask?",
               "decoder": "The self-attention uses tgt_mask, the cross-attention takes queries from x, keys and values "
                          "from memory, with src_mask."}


def expected_layer(kind, weights, case, norm_first, args):
    """PyTorch's layer with the case's weights in float64 on the case's arguments, and the named mistakes."""
    d_model, n_heads, d_ff = case[:3]
    theirs = copy_layer(torch_layer(kind, d_model, n_heads, d_ff, norm_first), weight_tree(weights))
    x = args[0].double()
    batch, length = x.shape[:2]
    if kind == "encoder":
        mask = None if args[1] is None else torch_mask(args[1], batch, n_heads, length, length)
        with torch.no_grad():
            expected = theirs(x, src_mask=mask)
        found = encoder_layer_mistakes(theirs, x, mask, norm_first)
    else:
        memory, src_mask, tgt_mask = args[1].double(), args[2], args[3]
        tgt_m = None if tgt_mask is None else torch_mask(tgt_mask, batch, n_heads, length, length)
        src_m = None if src_mask is None else torch_mask(src_mask, batch, n_heads, length, memory.size(1))
        with torch.no_grad():
            expected = theirs(x, memory, tgt_mask=tgt_m, memory_mask=src_m)
        found = decoder_layer_mistakes(theirs, x, memory, tgt_m, src_m, norm_first)
    return expected, {k: torch.no_grad()(v) for k, v in found.items()}


def check_layer_against_pytorch(kind, runs, norm_first, cases):
    """The student's layer (in the probe: the case's weights loaded, eval mode) against PyTorch's with the same weights."""
    for seed, (case, run) in enumerate(zip(cases, runs)):
        weights, args = probes.layer_case(kind, case, seed)
        what = layer_what(kind, case, norm_first, args)
        out = outcome(run["out"], what, LAYER_HINTS[kind])
        again = returned(run["again"], what)
        assert torch.equal(out, again), (f"{what}: two calls in eval mode differ; dropout must be off in eval mode "
                                         "(use nn.Dropout modules, or F.dropout(..., training=self.training))")
        expected, found = expected_layer(kind, weights, case, norm_first, args)
        testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=found)


def encoder_layer_with_dropout(layer, x, mask, p, pre, output_dropout=True, after_sum=False, first_only=False):
    """The layer computed from the student's own submodules in train mode, with dropout p on each sublayer's
    output; the keywords reproduce common mistakes."""
    sublayers = (lambda y: layer.self_attn(y, y, y, mask), layer.feed_forward)
    for number, (sublayer, norm) in enumerate(zip(sublayers, (layer.norm1, layer.norm2))):
        drop = (lambda t: F.dropout(t, p)) if output_dropout and not (first_only and number) else (lambda t: t)
        if pre:
            x = drop(x + sublayer(norm(x))) if after_sum else x + drop(sublayer(norm(x)))
        else:
            x = norm(drop(x + sublayer(x))) if after_sum else norm(x + drop(sublayer(x)))
    return x


def decoder_layer_mistakes(theirs, x, memory, tgt_m, src_m, pre):
    """What common mistakes would return, built from PyTorch's sublayers (masks in PyTorch's form)."""
    sa = lambda y, m=tgt_m: theirs.self_attn(y, y, y, attn_mask=m, need_weights=False)[0]
    ca = lambda y, kv=memory, m=src_m: theirs.multihead_attn(y, kv, kv, attn_mask=m, need_weights=False)[0]
    ff = lambda y: theirs.linear2(F.relu(theirs.linear1(y)))
    subs, norms = (sa, ca, ff), (theirs.norm1, theirs.norm2, theirs.norm3)
    found = {
        ("the LayerNorm comes after the residual sum (Post-LN), but norm_first=True asks for Pre-LN, "
         "x + dropout(sublayer(norm(x)))" if pre else
         "the LayerNorm comes before the sublayer (Pre-LN), but norm_first=False asks for the paper's Post-LN, "
         "norm(x + dropout(sublayer(x)))"): lambda: compose(x, subs, norms, not pre),
        "there is no residual connection: add each sublayer's input to its output":
            lambda: compose(x, subs, norms, pre, residual=False),
        "norm1 is used for every sublayer; each of the three sublayers has its own LayerNorm (norm1, norm2, norm3)":
            lambda: compose(x, subs, norms[:1] * 3, pre),
        "the feed-forward sublayer is skipped": lambda: compose(x, subs[:2], norms[:2], pre),
        "the cross-attention comes before the self-attention": lambda: compose(x, (ca, sa, ff), norms, pre),
    }
    if pre:
        found["the normalised x is added back instead of x; the residual is x + dropout(sublayer(norm(x)))"] = (
            lambda: compose(x, subs, norms, True, add_normed=True))
        found["the memory is normalised by norm2 as well; in Pre-LN only the query side goes through norm2"] = (
            lambda: compose(x, (sa, lambda y: ca(y, kv=theirs.norm2(memory)), ff), norms, True))
    else:
        found["the LayerNorm is applied to the sublayer's output before the residual sum, x + norm(sublayer(x)); "
              "Post-LN normalises the sum, norm(x + sublayer(x))"] = (
            lambda: compose(x, subs, norms, False, norm_inside=True))
    if tgt_m is not None:
        found["the self-attention ignores tgt_mask"] = lambda: compose(x, (lambda y: sa(y, None), ca, ff), norms, pre)
    if src_m is not None:
        found["the cross-attention ignores src_mask"] = lambda: compose(x, (sa, lambda y: ca(y, m=None), ff), norms, pre)
    else:
        found["the cross-attention attends to x instead of memory: its keys and values come from memory"] = (
            lambda: compose(x, (sa, lambda y: ca(y, kv=y), ff), norms, pre))
    if x.size(1) == memory.size(1) and tgt_m is not None and src_m is not None:
        found["the two masks are swapped: the self-attention takes tgt_mask, the cross-attention src_mask"] = (
            lambda: compose(x, (lambda y: sa(y, src_m), lambda y: ca(y, m=tgt_m), ff), norms, pre))
        found["the cross-attention uses tgt_mask; it needs src_mask, which hides the source padding"] = (
            lambda: compose(x, (sa, lambda y: ca(y, m=tgt_m), ff), norms, pre))
    return found


def decoder_layer_with_dropout(layer, x, memory, src_mask, tgt_mask, p, pre, output_dropout=True, after_sum=False, first_only=False):
    """The layer computed from the student's own submodules in train mode, with dropout p on each sublayer's
    output; the keywords reproduce common mistakes."""
    sublayers = (lambda y: layer.self_attn(y, y, y, tgt_mask), lambda y: layer.cross_attn(y, memory, memory, src_mask),
                 layer.feed_forward)
    for number, (sublayer, norm) in enumerate(zip(sublayers, (layer.norm1, layer.norm2, layer.norm3))):
        drop = (lambda t: F.dropout(t, p)) if output_dropout and not (first_only and number) else (lambda t: t)
        if pre:
            x = drop(x + sublayer(norm(x))) if after_sum else x + drop(sublayer(norm(x)))
        else:
            x = norm(drop(x + sublayer(x))) if after_sum else norm(x + drop(sublayer(x)))
    return x


def torch_transformer(model, d_model, n_heads, d_ff, norm_first):
    """PyTorch's nn.Transformer in float64 with the student's weights (no final norms for Post-LN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = nn.Transformer(d_model, n_heads, len(model.encoder.layers), len(model.decoder.layers), d_ff,
                                dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first,
                                dtype=torch.float64)
    theirs.encoder.enable_nested_tensor = theirs.encoder.use_nested_tensor = False
    for mine, its in [(model.encoder, theirs.encoder), (model.decoder, theirs.decoder)]:
        for layer, their_layer in zip(mine.layers, its.layers):
            copy_layer(their_layer, layer)
        if norm_first:
            copy_norm(its.norm, mine.norm)
        else:
            its.norm = None
    return theirs.eval()


def sinusoids(length, d_model):
    """The positional encoding, written with exp and log in float64."""
    angle = torch.arange(length, dtype=torch.float64)[:, None] * torch.exp(
        -math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


def transformer_logits(model, theirs, src, tgt, pad, *, scale=None, positions=True, causal=True, tgt_padding=True,
           src_padding_encoder=True, src_padding_cross=True, output="logits", parts=False, memory=None):
    """Logits from PyTorch's nn.Transformer fed with the student's embedding tables and generator; the
    keywords reproduce common mistakes."""
    d_model = model.generator.in_features
    scale = math.sqrt(d_model) if scale is None else scale
    def embed(table, tokens, add):
        x = F.embedding(tokens, table.detach().double()) * scale
        return x + sinusoids(tokens.size(1), d_model) if add else x
    length = tgt.size(1)
    options = dict(
        src_key_padding_mask=(src == pad) if src_padding_encoder else None,
        memory_key_padding_mask=(src == pad) if src_padding_cross else None,
        tgt_key_padding_mask=(tgt == pad) if tgt_padding else None,
        tgt_mask=torch.ones(length, length, dtype=torch.bool).triu(1) if causal else None)
    with torch.no_grad():
        src_x = embed(model.src_embed.embedding.weight, src, positions in (True, "src"))
        tgt_x = embed(model.tgt_embed.embedding.weight, tgt, positions in (True, "tgt"))
        if parts:
            if memory is None:
                memory = theirs.encoder(src_x, src_key_padding_mask=options["src_key_padding_mask"])
            memory = memory.double()
            hidden = theirs.decoder(tgt_x, memory, tgt_mask=options["tgt_mask"],
                                    tgt_key_padding_mask=options["tgt_key_padding_mask"],
                                    memory_key_padding_mask=options["memory_key_padding_mask"])
            return memory, hidden
        logits = F.linear(theirs(src_x, tgt_x, **options), model.generator.weight.double(), model.generator.bias.double())
    return {"logits": logits, "softmax": logits.softmax(-1), "log_softmax": logits.log_softmax(-1)}[output]


def named_mistakes(model, theirs, src, tgt, pad):
    """What common mistakes would return, from the same oracle with one thing changed."""
    d_model = model.generator.in_features
    found = {
        "the embeddings are multiplied by sqrt(d_model) a second time: TokenEmbedding already scales them":
            dict(scale=d_model),
        "the embeddings are divided by sqrt(d_model), undoing TokenEmbedding's scale": dict(scale=1.0),
        "the positional encoding is not added": dict(positions=False),
        "the positional encoding is not added to the target embeddings (decode)": dict(positions="src"),
        "the positional encoding is not added to the source embeddings (encode)": dict(positions="tgt"),
        "forward returns softmax probabilities; it should return the logits (the loss applies log-softmax itself)":
            dict(output="softmax"),
        "forward returns log-probabilities; it should return the logits, without log_softmax": dict(output="log_softmax"),
        "the decoder's self-attention is not causal: build tgt_mask with target_mask(tgt, self.pad_idx)": dict(causal=False),
        "tgt_mask has no padding part: build it with target_mask(tgt, self.pad_idx), not causal_mask alone":
            dict(tgt_padding=False),
        "the cross-attention ignores the source padding: pass src_mask to decode as well": dict(src_padding_cross=False),
        "the encoder ignores the source padding: pass src_mask to encode": dict(src_padding_encoder=False),
    }
    found = {k: (lambda options=options: transformer_logits(model, theirs, src, tgt, pad, **options)) for k, options in found.items()}
    if pad != 0:
        found["pad_idx is ignored (the masks use 0 instead of self.pad_idx)"] = lambda: transformer_logits(model, theirs, src, tgt, 0)
    return found


def check_layer_structure(kind, found):
    """The hidden tests of `test_EncoderLayer_structure` / `test_DecoderLayer_structure`, on what layer_facts read."""
    name, parts = ("EncoderLayer", "MultiHeadAttention and PositionwiseFeedForward") if kind == "encoder" else (
        "DecoderLayer", "both MultiHeadAttentions and PositionwiseFeedForward")
    attentions = probes.ATTENTIONS[kind]
    for (d_model, n_heads, d_ff, p), facts in zip(probes.STRUCTURE_CASES, found["layers"]):
        what = f"{name}({d_model}, {n_heads}, {d_ff}, dropout={p})"
        facts = returned(facts, what)
        count = returned(facts["count"], f"the parameters of {what}")
        expected = (4 * len(attentions) * (d_model * d_model + d_model) + 2 * d_model * d_ff + d_ff + d_model
                    + 2 * len(probes.NORMS[kind]) * d_model)
        assert count == expected, f"{what} has {count} parameters, expected {expected}"
        if kind == "encoder":
            assert returned(facts["d_ff"], what) == d_ff, f"{what}.feed_forward should have d_ff = {d_ff} hidden units"
        for part in ("dropout",) + attentions + ("feed_forward",):
            rate = returned(facts[part], f"{what}.{part}")
            label = part if part == "dropout" else f"{part}.dropout"
            assert rate == p, (f"{what}.{label}.p is {rate}, expected {p}: pass the dropout argument on "
                               f"(to nn.Dropout, {parts})")
        if kind == "encoder":
            returned(facts["call"], f"{what}.eval()(x [2, 3, {d_model}])")
        else:
            outcome(facts["call"], f"{what}(x [2, 3, {d_model}], memory [2, 5, {d_model}])",
                    "The cross-attention takes its queries from x, its keys and values from memory.")
        for part in attentions:
            heads = returned(facts["shapes"][part], f"{what}.{part}.attn")[1]
            assert heads == n_heads, (f"{what}.{part} has {heads} heads, expected {n_heads}: pass n_heads on"
                                      + (" to MultiHeadAttention" if kind == "encoder" else ""))
        shape = returned(facts["shapes"][attentions[-1]], what)
        assert kind == "encoder" or shape == [2, n_heads, 3, 5], (
            f"{what}: the cross-attention weights have shape {shape}, expected [2, {n_heads}, 3, 5] (target positions x "
            "source positions): queries from x, keys and values from memory")
    if kind == "encoder":
        default = returned(found["default"], "EncoderLayer(8, 2, 16).dropout.p")
        assert default == 0.1, f"dropout should default to 0.1, got {default}"


def check_encoder_layer_structure(found):
    """The hidden tests of `test_EncoderLayer_structure`."""
    check_layer_structure("encoder", found)


def check_encoder_layer_post_ln(found):
    """The hidden tests of `test_EncoderLayer_post_ln`: the runs of probes.layer_runs on ENCODER_CASES."""
    check_layer_against_pytorch("encoder", found, False, probes.ENCODER_CASES)


def check_encoder_layer_pre_ln(found):
    """The hidden tests of `test_EncoderLayer_pre_ln`."""
    check_layer_against_pytorch("encoder", found, True, probes.ENCODER_CASES)


def check_encoder_layer_mask(found):
    """The hidden tests of `test_EncoderLayer_mask`: per norm_first, the outputs for the masks of encoder_mask_case."""
    for seed, (norm_first, outputs) in enumerate(zip((False, True), found)):
        weights, x, masks = probes.encoder_mask_case(seed)
        for mask, kind, out in zip(masks, ["a padding mask [3, 1, 1, 6]", "a mask [3, 1, 6, 6] with a different pattern per query"], outputs):
            what = f"EncoderLayer(16, 4, 24, norm_first={norm_first}).eval()(x, {kind})"
            out = outcome(out, what, "Pass src_mask to the self-attention.")
            expected, mistakes = expected_layer("encoder", weights, (16, 4, 24), norm_first, (x, mask))
            testing.assert_close(out, expected, what, atol=1e-5, mistakes=mistakes)


def sublayers_of(kind, weights, rates, n_heads=4, d_ff=24):
    """The course's attention, feed-forward and LayerNorms (notebooks 04 and 05) with the case's weights, in train
    mode, each with the dropout rate the student's own sublayer has: the train-mode reference is put together from them."""
    from types import SimpleNamespace

    from ..probes.transformer import load_weights
    d_model = weights["feed_forward.linear1.weight"].shape[1]
    parts = {name: course.MultiHeadAttention(d_model, n_heads, rates[name]) for name in probes.ATTENTIONS[kind]}
    parts["feed_forward"] = course.PositionwiseFeedForward(d_model, d_ff, rates["feed_forward"])
    parts.update({name: LayerNorm(d_model) for name in probes.NORMS[kind]})
    for module in parts.values():
        module.train()
    return load_weights(SimpleNamespace(**parts), weights)


def dropout_mistakes(kind):
    return [("no dropout is applied to the sublayers' outputs (self.dropout(sublayer(...)) before the residual sum)",
             dict(output_dropout=False)),
            ("the dropout is applied after the residual sum; it belongs on the sublayer's output, before the sum",
             dict(after_sum=True)),
            ("the dropout is applied to the first sublayer's output only; the feed-forward's output needs it too"
             if kind == "encoder" else
             "the dropout is applied to the first sublayer's output only; every sublayer's output needs it",
             dict(first_only=True))]


def check_layer_dropout(kind, found):
    """The hidden tests of `test_EncoderLayer_dropout` / `test_DecoderLayer_dropout`, on the runs of probes.dropout_run."""
    configs = probes.ENCODER_DROPOUT_CASES if kind == "encoder" else [(n, True) for n in probes.DECODER_DROPOUT_CASES]
    with_dropout = encoder_layer_with_dropout if kind == "encoder" else decoder_layer_with_dropout
    for seed, ((norm_first, mask), run) in enumerate(zip(configs, found)):
        weights, args = probes.dropout_case(kind, seed)
        if kind == "encoder":
            what = f"EncoderLayer(16, 4, 24, dropout=0.3, norm_first={norm_first}).train()(x{'' if mask is None else ', src_mask'})"
            out = returned(run["out"], what)
        else:
            what = f"DecoderLayer(16, 4, 24, dropout=0.3, norm_first={norm_first}).train()(x, memory, src_mask, tgt_mask)"
            out = outcome(run["out"], what, "Check the masks.")
        reference = sublayers_of(kind, weights, returned(run["rates"], f"the dropout rates of {what}'s sublayers"))
        found_mistakes = {}
        for description, options in dropout_mistakes(kind):
            with testing.same_random_numbers(seed):
                found_mistakes[description] = with_dropout(reference, *args, 0.3, norm_first, **options).detach()
        with testing.same_random_numbers(seed):
            expected = with_dropout(reference, *args, 0.3, norm_first).detach()
        testing.assert_close(out, expected, what + ", compared with the layer computed from its own submodules drawing the same "
                             "random numbers", atol=1e-5, mistakes=found_mistakes)


def check_encoder_layer_dropout(found):
    """The hidden tests of `test_EncoderLayer_dropout`."""
    check_layer_dropout("encoder", found)


def check_decoder_layer_structure(found):
    """The hidden tests of `test_DecoderLayer_structure`."""
    check_layer_structure("decoder", found)


def check_decoder_layer_post_ln(found):
    """The hidden tests of `test_DecoderLayer_post_ln`: the runs of probes.layer_runs on DECODER_CASES."""
    check_layer_against_pytorch("decoder", found, False, probes.DECODER_CASES)


def check_decoder_layer_pre_ln(found):
    """The hidden tests of `test_DecoderLayer_pre_ln`."""
    check_layer_against_pytorch("decoder", found, True, probes.DECODER_CASES)


def check_decoder_layer_masks(found):
    """The hidden tests of `test_DecoderLayer_masks`: per norm_first, the runs on DECODER_MASK_CASES and the gradients
    of probes.causality_grads."""
    for norm_first, (runs, causality) in zip((False, True), found):
        check_layer_against_pytorch("decoder", runs, norm_first, probes.DECODER_MASK_CASES)
        grads = outcome(causality, "DecoderLayer(...)(x [2, 6, 16], memory [2, 3, 16], None, tgt_mask)",
                        "The self-attention takes tgt_mask.")
        for position, grad in enumerate(grads):
            assert grad[:, position + 1:].abs().max() == 0, (
                f"DecoderLayer(norm_first={norm_first}): output position {position} depends on later target positions: "
                "the self-attention must use tgt_mask")


def check_decoder_layer_dropout(found):
    """The hidden tests of `test_DecoderLayer_dropout`."""
    check_layer_dropout("decoder", found)


def layer_parameter_count(kind, d_model, d_ff):
    """The parameters of one EncoderLayer / DecoderLayer: attention projections, feed-forward, LayerNorms."""
    attentions, norms = len(probes.ATTENTIONS[kind]), len(probes.NORMS[kind])
    return 4 * attentions * (d_model * d_model + d_model) + 2 * d_model * d_ff + d_ff + d_model + 2 * norms * d_model


def check_stack_structure(kind, found):
    """The hidden tests of `test_Encoder_structure` (kind "encoder") and `test_Decoder_structure` ("decoder"), on
    what probes.stack_facts read."""
    name = "Encoder" if kind == "encoder" else "Decoder"
    for (n_layers, d_model, n_heads, d_ff, p, norm_first), facts in zip(probes.STACK_STRUCTURE_CASES, found):
        what = f"{name}({n_layers}, {d_model}, {n_heads}, {d_ff}, dropout={p}, norm_first={norm_first})"
        facts = returned(facts, what)
        count_layers = returned(facts["n_layers"], f"len({what}.layers)")
        assert count_layers == n_layers, f"{what} has {count_layers} layers"
        count = facts["count"]
        expected = n_layers * layer_parameter_count(kind, d_model, d_ff) + (2 * d_model if norm_first else 0)
        assert count == expected, (f"{what} has {count} parameters, expected {expected}: distinct layers"
                                   + (" and one final LayerNorm" if norm_first else ", no final norm"))
        for layer in facts["layers"]:
            assert returned(layer["d_ff"], what) == d_ff and returned(layer["dropout"], what) == p, (
                f"{what}: pass d_model, n_heads, d_ff and dropout on to every {name}Layer")
            returned(layer["call"], f"a layer of {what}")
            assert returned(layer["heads"], what) == n_heads, f"{what}: pass n_heads on to every {name}Layer"


def stack_mistakes(run, layers, norm_first):
    """The mistakes an Encoder and a Decoder share, each computed by `run` (PyTorch's layers applied with a change)."""
    found = {}
    if norm_first:
        found["the final LayerNorm `norm` is not applied after the last layer"] = lambda: run(layers, finish=False)
        found["norm_first is not passed on to the layers (they are Post-LN)"] = lambda: run(layers, flip=True)
    if len(layers) > 1:
        found["the first layer is applied n_layers times; apply each layer of self.layers once"] = (
            lambda: run([layers[0]] * len(layers)))
    return found


def check_encoder_structure(found):
    """The hidden tests of `test_Encoder_structure`."""
    check_stack_structure("encoder", found)


UNREGISTERED = ("the stack's .eval() does not reach its layers, so their dropout stays on: they are kept in a plain "
                "Python list, which hides them from .eval(), .parameters() and .to(). Put them in an nn.ModuleList")


def layers_registered(probed, what):
    """The stack holds its layers as submodules (probes.unregistered_layers): a plain list hides them from .eval()."""
    stray = probed.get("unregistered")
    if isinstance(stray, int) and stray:
        raise AssertionError(f"{what}: {UNREGISTERED}")


def check_encoder_values(found):
    """The hidden tests of `test_Encoder_values`: the runs of probes.stack_runs on ENCODER_STACK_CASES."""
    for seed, ((n_layers, norm_first, lengths), probed) in enumerate(zip(probes.ENCODER_STACK_CASES, found)):
        weights, (x, mask) = probes.stack_case("encoder", (n_layers, norm_first, lengths), seed)
        what = (f"Encoder({n_layers}, 16, 4, 24, norm_first={norm_first}).eval()(x [3, 6, 16]"
                + ("" if mask is None else ", src_mask [3, 1, 1, 6]") + ")")
        out = outcome(probed["result"], what, "Each layer is called as layer(x, src_mask).")
        layers_registered(probed, what)
        theirs = torch_stack(weight_tree(weights), "encoder", 16, 4, 24, norm_first)
        kpm = None if mask is None else ~mask[:, 0, 0]
        xd = x.double()
        with torch.no_grad():
            expected = theirs(xd, src_key_padding_mask=kpm)

        @torch.no_grad()
        def run(layers, finish=True, padding=kpm, chain=True, flip=False):
            """PyTorch's layers applied in the given order, with or without the final norm (mistakes only)."""
            h = xd
            for layer in layers:
                layer.norm_first ^= flip
                h = layer(h if chain else xd, src_key_padding_mask=padding)
                layer.norm_first ^= flip
            return theirs.norm(h) if finish and theirs.norm is not None else h

        mistakes = stack_mistakes(run, theirs.layers, norm_first)
        if mask is not None:
            mistakes["src_mask is not passed to the layers"] = lambda: run(theirs.layers, padding=None)
        if n_layers > 1:
            mistakes["the layers are applied in reverse order"] = lambda: run(list(theirs.layers)[::-1])
            mistakes["every layer reads the stack's input x instead of the previous layer's output"] = (
                lambda: run(theirs.layers, chain=False))
        testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=mistakes)


def decoder_outcome(found, what, memory):
    """What decoder_call found: the output; when the call failed, the message names a layer that was given
    another memory than the encoder's (a loop that overwrites memory) before the general hint."""
    result = found["result"]
    if isinstance(result, Raised) and result.type_name in ("RuntimeError", "TypeError", "IndexError"):
        if found["wrong_memory"] is not None:
            raise AssertionError(f"{what} failed: layer {found['wrong_memory']} was given another memory than the encoder's "
                                 f"(shape {list(memory.shape)}): every layer reads the same memory; update only x, "
                                 "x = layer(x, memory, src_mask, tgt_mask)")
        raise AssertionError(f"{what} failed with {result.type_name}: {result.message}. "
                             "Call each layer as layer(x, memory, src_mask, tgt_mask), in this order.")
    return returned(result, what)


def stack_reference(kind, weights, args, norm_first, seed):
    """The stack in train mode as the course's sublayers put together layer by layer, with dropout 0.3 everywhere,
    drawing the random numbers of ``seed``: what the student's layers applied in turn give."""
    n_layers = 1 + max(int(name.split(".")[1]) for name in weights if name.startswith("layers."))
    rates = dict.fromkeys(probes.ATTENTIONS[kind] + ("feed_forward",), 0.3)
    layers = []   # built first: building draws random numbers
    for i in range(n_layers):
        prefix = f"layers.{i}."
        layers.append(sublayers_of(kind, {name[len(prefix):]: value for name, value in weights.items()
                                          if name.startswith(prefix)}, rates))
    final = LayerNorm(16)
    with testing.same_random_numbers(seed):
        h = args[0]
        for layer in layers:
            h = (encoder_layer_with_dropout(layer, h, args[1], 0.3, norm_first) if kind == "encoder" else
                 decoder_layer_with_dropout(layer, h, *args[1:], 0.3, norm_first))
        if norm_first:
            with torch.no_grad():
                final.gamma.copy_(weights["norm.gamma"])
                final.beta.copy_(weights["norm.beta"])
            h = final(h)
    return h.detach()


def check_stack_dropout(kind, found):
    """The hidden tests of `test_Encoder_dropout` / `test_Decoder_dropout`: in train mode the stack gives what its own
    layers give applied in turn with the same random numbers, and its dropout is active."""
    name = kind.capitalize()
    for seed, (norm_first, run) in enumerate(zip((False, True), found)):
        weights, args = probes.stack_dropout_case(kind, seed)
        rates = [returned(rate, f"the dropout of a {name}Layer") for rate in run["rates"]]
        assert all(rate == 0.3 for rate in rates), f"pass the dropout argument on to every {name}Layer"
        if kind == "encoder":
            inputs = "x, src_mask"
            out = returned(run["train"]["result"], f"{name}(3, 16, 4, 24).train()({inputs})")
        else:
            inputs = "x, memory, masks"
            out = decoder_outcome(run["train"], "Decoder(3, 16, 4, 24).train()(x, memory, src_mask, tgt_mask)", args[1])
        expected = stack_reference(kind, weights, args, norm_first, seed)
        testing.assert_close(out, expected, f"{name}(3, 16, 4, 24, dropout=0.3, norm_first={norm_first}).train()({inputs}) "
                             "(same random numbers as the layers applied in turn)", atol=1e-5)
        evaluated = returned(run["eval"], f"{name}(3, 16, 4, 24).eval()({inputs})")
        assert not torch.allclose(out, evaluated), "train mode gives the eval-mode output: dropout is not active"


def check_encoder_dropout(found):
    """The hidden tests of `test_Encoder_dropout`."""
    check_stack_dropout("encoder", found)


def check_decoder_structure(found):
    """The hidden tests of `test_Decoder_structure`."""
    check_stack_structure("decoder", found)


def check_decoder_values(found):
    """The hidden tests of `test_Decoder_values`: the runs of probes.stack_runs on DECODER_STACK_CASES."""
    for seed, (case, probed) in enumerate(zip(probes.DECODER_STACK_CASES, found)):
        n_layers, norm_first, src_len = case[:3]
        weights, (x, memory, src_mask, tgt_mask) = probes.stack_case("decoder", case, seed)
        what = (f"Decoder({n_layers}, 16, 4, 24, norm_first={norm_first}).eval()(x [3, 5, 16], memory [3, {src_len}, 16]"
                + ("" if src_mask is None else f", src_mask [3, 1, 1, {src_len}]")
                + ("" if tgt_mask is None else ", tgt_mask [3, 1, 5, 5]") + ")")
        out = decoder_outcome(probed, what, memory)
        layers_registered(probed, what)
        theirs = torch_stack(weight_tree(weights), "decoder", 16, 4, 24, norm_first)
        options = dict(tgt_mask=None if tgt_mask is None else torch_mask(tgt_mask, 3, 4, 5, 5),
                       memory_key_padding_mask=None if src_mask is None else ~src_mask[:, 0, 0])
        xd, md = x.double(), memory.double()
        with torch.no_grad():
            expected = theirs(xd, md, **options)

        @torch.no_grad()
        def run(layers, finish=True, own_memory=False, flip=False, **changes):
            """PyTorch's layers applied in the given order, with or without the final norm (mistakes only)."""
            h = xd
            for layer in layers:
                layer.norm_first ^= flip
                h = layer(h, h if own_memory else md, **dict(options, **changes))
                layer.norm_first ^= flip
            return theirs.norm(h) if finish and theirs.norm is not None else h

        mistakes = stack_mistakes(run, theirs.layers, norm_first)
        if tgt_mask is not None:
            mistakes["tgt_mask is not passed to the layers"] = lambda: run(theirs.layers, tgt_mask=None)
        if src_mask is not None:
            mistakes["src_mask is not passed to the layers"] = lambda: run(theirs.layers, memory_key_padding_mask=None)
        if n_layers > 1 and src_mask is None and src_len == 5:
            mistakes["each layer attends to its own input instead of the encoder's memory"] = (
                lambda: run(theirs.layers, own_memory=True))
        testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=mistakes)


def check_decoder_dropout(found):
    """The hidden tests of `test_Decoder_dropout`."""
    check_stack_dropout("decoder", found)


def check_transformer_structure(found):
    """The hidden tests of `test_Transformer_structure`, on what the probe read of the model."""
    what = ("Transformer(17, 9, d_model=24, n_heads=3, num_encoder_layers=1, num_decoder_layers=2, d_ff=20, "
            "dropout=0.3, max_len=33, pad_idx=2, norm_first=True)")
    facts = {name: returned(value, f"{what}: {name}") for name, value in returned(found, what).items() if name != "call"}
    assert facts["pad_idx"] == 2, f"{what}.pad_idx is {facts['pad_idx']}, expected 2"
    assert facts["tables"] == [17, 9], f"{what}: the source table needs 17 rows and the target table 9"
    assert facts["generator"] == [24, 9], f"{what}: the generator should map 24 -> 9"
    assert facts["pe"] == [33, 24], f"{what}: pos_encoding should be PositionalEncoding(24, 33, 0.3)"
    assert facts["pe_dropout"] == 0.3, f"{what}: pass dropout on to PositionalEncoding"
    assert facts["norms"], f"{what}: pass norm_first on to Encoder and Decoder"
    assert all(p == 0.3 and d_ff == 20 for p, d_ff in facts["layers"]), f"{what}: pass d_ff and dropout on to Encoder and Decoder"
    outcome(found["call"], f"{what}(src [1, 4], tgt [1, 3])", "Check the masks forward builds.")
    assert facts["heads"] == 3, f"{what}: pass n_heads on to Encoder and Decoder"
    assert facts["positional"] == 1, f"{what}: one PositionalEncoding serves both sides"


def check_xavier(matrices, gammas):
    """The matrices (name -> initial values) look Xavier-uniform, and the LayerNorms' gammas (name -> values) are 1."""
    for name, weight in matrices.items():
        fan_out, fan_in = weight.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        largest, std = weight.abs().max().item(), weight.std().item()
        if largest <= bound * 1.0001 and abs(std / (bound / math.sqrt(3)) - 1) < 0.15:
            continue
        if abs(std - 1) < 0.1:
            guess = "it still has nn.Embedding's default initialisation N(0, 1): the embeddings need Xavier too"
        elif abs(std * math.sqrt(3 * fan_in) - 1) < 0.15:
            guess = ("it still has nn.Linear's default initialisation: Xavier is not applied to it (is the loop run "
                     "before every submodule exists?)")
        elif abs(std / (bound / math.sqrt(3)) - 1) < 0.15:
            guess = "its values go beyond the bound: xavier_normal_ instead of xavier_uniform_?"
        else:
            guess = "apply nn.init.xavier_uniform_ to every parameter with more than one dimension"
        raise AssertionError(f"{name} ({fan_out} x {fan_in}) is not Xavier-uniform: values reach {largest:.3f} with std "
                             f"{std:.3f}, expected within +-{bound:.3f} with std {bound / math.sqrt(3):.3f}: {guess}")
    for name, p in gammas.items():
        assert torch.all(p == 1), f"{name} changed: only parameters with more than one dimension get Xavier"


def check_transformer_init(found):
    """The hidden tests of `test_Transformer_init`: per norm_first, the model's initial parameters."""
    for params in found:
        params = returned(params, "Transformer(90, 50, d_model=32, n_heads=4, num_encoder_layers=2, "
                                  "num_decoder_layers=2, d_ff=48)")
        check_xavier({name: p for name, p in params.items() if p.dim() > 1},
                     {name: p for name, p in params.items() if p.dim() == 1 and name.endswith("gamma")})


def model_tree(weights):
    tree = weight_tree(weights)
    tree.generator.in_features = weights["generator.weight"].shape[1]
    return tree


def check_transformer_values(found):
    """The hidden tests of `test_Transformer_values`: the runs of probes.transformer_values_run."""
    for seed, (case, run) in enumerate(zip(probes.TRANSFORMER_VALUE_CASES, found)):
        src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, _, _ = case
        weights, src, tgt, memory = probes.transformer_case(case, seed)
        model = model_tree(weights)
        theirs = torch_transformer(model, 16, 4, 24, norm_first)
        what = (f"Transformer({src_vocab}, {tgt_vocab}, d_model=16, n_heads=4, num_encoder_layers={n_enc}, "
                f"num_decoder_layers={n_dec}, d_ff=24, pad_idx={pad}, norm_first={norm_first}).eval()"
                f"(src {list(src.shape)}, tgt {list(tgt.shape)})")
        out = outcome(run["logits"], what, "The encoder and the cross-attention take src_mask = padding_mask(src, "
                      "self.pad_idx), the decoder's self-attention tgt_mask = target_mask(tgt, self.pad_idx).")
        d = 16
        testing.assert_close(out, transformer_logits(model, theirs, src, tgt, pad), what, atol=1e-4, dtype=torch.float32,
                             mistakes=named_mistakes(model, theirs, src, tgt, pad))
        # encode and decode on their own (decode with a memory of the test's)
        encoded, _ = transformer_logits(model, theirs, src, tgt, pad, parts=True)
        _, hidden = transformer_logits(model, theirs, src, tgt, pad, parts=True, memory=memory)
        testing.assert_close(returned(run["encode"], f"{what}: encode(src, src_mask)"), encoded,
                             f"{what}: encode(src, src_mask)", atol=1e-4, mistakes={
            "encode ignores src_mask": lambda: theirs.encoder(
                F.embedding(src, weights["src_embed.embedding.weight"].double()) * math.sqrt(d) + sinusoids(src.size(1), d))})
        testing.assert_close(returned(run["decode"], f"{what}: decode(tgt, memory, src_mask, tgt_mask)"), hidden,
                             f"{what}: decode(tgt, memory, src_mask, tgt_mask)", atol=1e-4, mistakes={
            "decode applies the generator; it should return the decoder's states [B, T, d_model]":
                lambda: F.linear(hidden, weights["generator.weight"].double(), weights["generator.bias"].double())})


def check_transformer_masks(found):
    """The hidden tests of `test_Transformer_masks`: the runs of probes.transformer_mask_run."""
    for seed, ((norm_first, pad), run) in enumerate(zip(probes.TRANSFORMER_MASK_CASES, found)):
        weights, src, tgt = probes.mask_case(seed)
        what = f"Transformer(25, 35, ..., pad_idx={pad}, norm_first={norm_first}).eval()"
        run = returned(run, what)
        logits = outcome(run["logits"], what + "(src [3, 6], tgt [3, 5])", "Check the masks.")
        # padding of the source never changes the logits of the real target tokens
        assert torch.allclose(returned(run["longer"], what + "(src with 4 more padding tokens, tgt)"), logits, atol=1e-5), (
            f"{what}: four more padding tokens at the end of the source changed the logits: build src_mask with "
            "padding_mask(src, self.pad_idx) and pass it to the encoder and the cross-attention")
        # causality, position by position
        for position, changed in enumerate(run["changed"]):
            changed = returned(changed, what + "(src, tgt with later tokens changed)")
            assert torch.allclose(changed[:, :position + 1], logits[:, :position + 1], atol=1e-5), (
                f"{what}: changing the target tokens after position {position} changed the logits up to position "
                f"{position}: build tgt_mask with target_mask(tgt, self.pad_idx)")
        # padding appended to the target leaves the earlier logits alone
        assert torch.allclose(returned(run["more"], what + "(src, tgt with 2 more padding tokens)")[:, :5], logits, atol=1e-5), (
            f"{what}: appending padding to the target changed the earlier logits")
        model = model_tree(weights)
        theirs = torch_transformer(model, 16, 2, 24, norm_first)
        testing.assert_close(logits, transformer_logits(model, theirs, src, tgt, pad), what + "(src, tgt)", atol=1e-4,
                             mistakes=named_mistakes(model, theirs, src, tgt, pad))


def check_transformer_dropout(found):
    """The hidden tests of `test_Transformer_dropout`: per norm_first, the dropout rates, the logits in train mode,
    generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) drawing the same random numbers, and the
    logits in eval mode."""
    for norm_first, run in zip((False, True), found):
        run = returned(run, "Transformer(25, 35, ..., dropout=0.3)")
        drops = run["rates"]
        assert drops and all(p == 0.3 for p in drops), (
            f"the dropout modules have probabilities {sorted(set(drops))}, expected 0.3 everywhere: pass dropout on")
        out = outcome(run["train"], "model(src, tgt)", "Check the masks forward builds.")
        testing.assert_close(out, returned(run["reference"], "generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask))"),
                             f"Transformer(..., dropout=0.3, norm_first={norm_first}).train()(src, tgt), against "
                             "generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) drawing the same random numbers "
                             "(forward should build the masks, encode, then decode),", atol=1e-5)
        assert not torch.allclose(out, returned(run["eval"], "model.eval()(src, tgt)"), atol=1e-4), (
            "train mode gives the eval-mode logits")


_LAYER = (copy_norm, copy_layer, torch_layer, compose, encoder_layer_mistakes, encoder_layer_with_dropout,
          decoder_layer_mistakes, decoder_layer_with_dropout, expected_layer, sublayers_of)
_STACK = (torch_stack, stack_reference)
_MODEL = (torch_transformer, sinusoids, transformer_logits, named_mistakes)
ANSWER_HELPERS = {"EncoderLayer": _LAYER, "DecoderLayer": _LAYER, "Encoder": _LAYER + _STACK,
                  "Decoder": _LAYER + _STACK, "Transformer": _LAYER + _STACK + _MODEL}
