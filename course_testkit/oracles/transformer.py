"""Oracles of notebook 06 (EncoderLayer, DecoderLayer, Encoder, Decoder, Transformer), shared by its hidden tests
and tests/test_components.py.

The checks are judges: they run in the grader's process on what the probes (course_testkit.probes.transformer)
found in the kernel. The probe loads weights drawn from the secret (probing.secret_generator) into the student's
module; the judge draws them again from its own copy of the secret, never from what the kernel sent back.

* The layers: the expected values come from PyTorch's own layers (nn.TransformerEncoderLayer,
  nn.TransformerDecoderLayer) in float64 holding the same weights and, in train mode, from the course's sublayers
  of notebooks 04 and 05 put together as the paper's sublayers with the same weights and random numbers.
* The stacks and the model are tested on test doubles (probes.EncoderLayerDouble, DecoderLayerDouble,
  EncoderDouble, DecoderDouble) in place of the parts they are built from: the expected values are what the
  doubles' function (probes.double_layer, probes.double_stack) gives, put together as the contract says, in
  float64 (and with PyTorch's F.layer_norm for the final LayerNorm).

Never from the course's solution (transformer_course.layers, transformer_course.model). The mistakes are computed
the same way with one thing changed, only to name a mistake in a message. The one check on the model that compares
the student's code with itself is check_transformer_dropout: forward against the student's own
generator(decode(encode)) drawing the same random numbers, as the contract asks (its eval-mode logits are
checked against the oracle too).
"""
import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import transformer_course as course

from .. import testing
from transformer_course.layers import LayerNorm
from ..probing import Raised, returned, secret_seed
from ..probes import transformer as probes
from .multi_head_attention import copy_weights


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


def check_layer_against_pytorch(kind, runs, norm_first, cases, tag):
    """The student's layer (in the probe: the case's weights loaded, eval mode) against PyTorch's with the same weights."""
    for number, (case, run) in enumerate(zip(cases, runs)):
        weights, args = probes.layer_case(kind, case, f"{tag} {number}")
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




def check_layer_structure(kind, found, tag):
    """The hidden tests of `test_EncoderLayer_structure` / `test_DecoderLayer_structure`: what layer_facts read, then
    the values of a Pre-LN layer (the layers' norm_first) with the weights of STRUCTURE_VALUE_CASES."""
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
    check_layer_against_pytorch(kind, found["values"], True, probes.STRUCTURE_VALUE_CASES[kind], tag)


def check_encoder_layer_structure(found, tag):
    """The hidden tests of `test_EncoderLayer_structure`."""
    check_layer_structure("encoder", found, tag)


def check_encoder_layer_post_ln(found, tag):
    """The hidden tests of `test_EncoderLayer_post_ln`: the runs of probes.layer_runs on ENCODER_CASES."""
    check_layer_against_pytorch("encoder", found, False, probes.ENCODER_CASES, tag)


def check_encoder_layer_pre_ln(found, tag):
    """The hidden tests of `test_EncoderLayer_pre_ln`."""
    check_layer_against_pytorch("encoder", found, True, probes.ENCODER_CASES, tag)


def check_encoder_layer_mask(found, tag):
    """The hidden tests of `test_EncoderLayer_mask`: per norm_first, the outputs for the masks of encoder_mask_case."""
    for number, (norm_first, outputs) in enumerate(zip((False, True), found)):
        weights, x, masks = probes.encoder_mask_case(f"{tag} {number}")
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


def check_layer_dropout(kind, found, tag):
    """The hidden tests of `test_EncoderLayer_dropout` / `test_DecoderLayer_dropout`, on the runs of probes.dropout_run."""
    configs = probes.ENCODER_DROPOUT_CASES if kind == "encoder" else [(n, True) for n in probes.DECODER_DROPOUT_CASES]
    with_dropout = encoder_layer_with_dropout if kind == "encoder" else decoder_layer_with_dropout
    for number, ((norm_first, mask), run) in enumerate(zip(configs, found)):
        weights, args = probes.dropout_case(kind, number, tag)
        seed = secret_seed(f"{tag} {number}")
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


def check_encoder_layer_dropout(found, tag):
    """The hidden tests of `test_EncoderLayer_dropout`."""
    check_layer_dropout("encoder", found, tag)


def check_decoder_layer_structure(found, tag):
    """The hidden tests of `test_DecoderLayer_structure`."""
    check_layer_structure("decoder", found, tag)


def check_decoder_layer_post_ln(found, tag):
    """The hidden tests of `test_DecoderLayer_post_ln`: the runs of probes.layer_runs on DECODER_CASES."""
    check_layer_against_pytorch("decoder", found, False, probes.DECODER_CASES, tag)


def check_decoder_layer_pre_ln(found, tag):
    """The hidden tests of `test_DecoderLayer_pre_ln`."""
    check_layer_against_pytorch("decoder", found, True, probes.DECODER_CASES, tag)


def check_decoder_layer_masks(found, tag):
    """The hidden tests of `test_DecoderLayer_masks`: per norm_first, the runs on DECODER_MASK_CASES and the gradients
    of probes.causality_grads."""
    for norm_first, (runs, causality) in zip((False, True), found):
        check_layer_against_pytorch("decoder", runs, norm_first, probes.DECODER_MASK_CASES, f"{tag} {norm_first}")
        grads = outcome(causality, "DecoderLayer(...)(x [2, 6, 16], memory [2, 3, 16], None, tgt_mask)",
                        "The self-attention takes tgt_mask.")
        for position, grad in enumerate(grads):
            assert grad[:, position + 1:].abs().max() == 0, (
                f"DecoderLayer(norm_first={norm_first}): output position {position} depends on later target positions: "
                "the self-attention must use tgt_mask")


def check_decoder_layer_dropout(found, tag):
    """The hidden tests of `test_DecoderLayer_dropout`."""
    check_layer_dropout("decoder", found, tag)




# ----------------------------------------------------------------------------- the stacks, on layer doubles

def double_count(d_model):
    """The parameters of one layer double (probes.EncoderLayerDouble / DecoderLayerDouble): one d x d linear map."""
    return d_model * d_model + d_model


def stack_of_doubles(kind, weights, args, norm_first, *, p=0.0, dtype=torch.float64, order=None, chain=True, flip=False,
                     finish=True, extra_norm=False, own_memory=False, **masks):
    """What an Encoder / Decoder whose layers are the layer doubles with ``weights`` returns on the case's
    arguments: the doubles (probes.double_layer) applied in turn, then the final LayerNorm for Pre-LN. Dropout ``p``
    draws from the global generator as the doubles' nn.Dropout does (compute in the kernel's float32 then). The
    keywords reproduce mistakes, only to name them: the ``order`` of the layers, ``chain=False`` (every layer reads
    the stack's input), ``flip`` (the layers get the other norm_first), ``finish=False`` (no final LayerNorm),
    ``extra_norm`` (a LayerNorm after a Post-LN stack), ``own_memory``, a mask given by name (src_mask=None)."""
    n_layers = 1 + max(int(name.split(".")[1]) for name in weights if name.startswith("layers."))
    x = args[0].to(dtype)
    if kind == "encoder":
        memory, src_mask, tgt_mask = None, args[1], None
    else:
        memory, src_mask, tgt_mask = args[1].to(dtype), args[2], args[3]
    src_mask, tgt_mask = masks.get("src_mask", src_mask), masks.get("tgt_mask", tgt_mask)
    drop = (lambda t: F.dropout(t, p)) if p else (lambda t: t)
    h = x
    for i in range(n_layers) if order is None else order:
        weight, bias = (weights[f"layers.{i}.linear.{name}"].to(dtype) for name in ("weight", "bias"))
        given = h if chain else x
        if kind == "encoder":
            h = probes.double_layer(given, weight, bias, norm_first ^ flip, drop, src_mask)
        else:
            h = probes.double_layer(given, weight, bias, norm_first ^ flip, drop, tgt_mask,
                                    given if own_memory else memory, src_mask)
    if norm_first and finish:
        h = F.layer_norm(h, (h.size(-1),), weights["norm.gamma"].to(dtype), weights["norm.beta"].to(dtype))
    return F.layer_norm(h, (h.size(-1),)) if extra_norm else h


def stack_mistakes(kind, weights, args, norm_first):
    """What common mistakes of an Encoder / Decoder would return on the case (stack_of_doubles with one change)."""
    run = lambda **change: stack_of_doubles(kind, weights, args, norm_first, **change)  # noqa: E731
    n_layers = 1 + max(int(name.split(".")[1]) for name in weights if name.startswith("layers."))
    call = "x = layer(x, src_mask)" if kind == "encoder" else "x = layer(x, memory, src_mask, tgt_mask)"
    found = {}
    if norm_first:
        found["the final LayerNorm `norm` is not applied: apply self.norm after the last layer"] = lambda: run(finish=False)
        found["norm_first is not passed on to the layers (they are Post-LN)"] = lambda: run(flip=True)
    else:
        found["a LayerNorm is applied after the last layer: in Post-LN every layer ends with its own, `norm` is None"] = (
            lambda: run(extra_norm=True))
    if n_layers > 1:
        found[f"the first layer is applied n_layers times: apply every layer in turn, {call}, and return the last x"] = (
            lambda: run(order=[0] * n_layers))
        found["the layers are applied in reverse order"] = lambda: run(order=list(range(n_layers))[::-1])
        found[f"every layer reads the stack's input x instead of the previous layer's output: {call}"] = (
            lambda: run(chain=False))
    src_mask, tgt_mask = (args[1], None) if kind == "encoder" else (args[2], args[3])
    if src_mask is not None:
        found["src_mask is not passed to the layers: pass src_mask to every layer"] = lambda: run(src_mask=None)
    if tgt_mask is not None:
        found["tgt_mask is not passed to the layers: pass tgt_mask to every layer"] = lambda: run(tgt_mask=None)
    if kind == "decoder" and args[0].size(1) == args[1].size(1):
        if src_mask is not None and tgt_mask is not None:
            found["the two masks are swapped: call each layer as layer(x, memory, src_mask, tgt_mask)"] = (
                lambda: run(src_mask=tgt_mask, tgt_mask=src_mask))
        if src_mask is None:
            found["each layer attends to its own input instead of the encoder's memory: every layer reads the same "
                  "memory"] = lambda: run(own_memory=True)
    return found


UNREGISTERED = ("the stack's .eval() does not reach its layers, so their dropout stays on: they are kept in a plain "
                "Python list, which hides them from .eval(), .parameters() and .to(). Put them in an nn.ModuleList")


def layers_registered(probed, what):
    """The stack holds its layers as submodules (probes.unregistered_layers): a plain list hides them from .eval()."""
    stray = probed.get("unregistered")
    if isinstance(stray, int) and stray:
        raise AssertionError(f"{what}: {UNREGISTERED}")


def received_hint(kind, received, args):
    """What the layer doubles were given that they should not have been (probes.received_names), as a sentence, or ""."""
    if not isinstance(received, list):
        return ""
    names = ("src_mask",) if kind == "encoder" else ("memory", "src_mask", "tgt_mask")
    given = dict(zip(names, args[1:]))
    wrong = [f"layer {i} was given {got[name]} as {name}" for i, got in enumerate(received) if isinstance(got, dict)
             for name in names if got.get(name) != (name if given[name] is not None else "None")]
    return "; ".join(wrong[:3]) + ". " if wrong else ""


def stack_outcome(kind, found, what, args):
    """What probes.stack_call found: the output; when the call failed, a message that names what the layers were
    given that they should not have been (a memory other than the encoder's, the masks in another order)."""
    result = found["result"]
    if isinstance(result, Raised) and result.type_name == "AttributeError":
        raise AssertionError(f"{what} raised AttributeError: {result.first_line}. The test gives its weights to each "
                             "layer of `layers` and, with norm_first=True, to the final LayerNorm `norm`: keep those "
                             "attributes of the exercise")
    if isinstance(result, Raised) and result.type_name in ("RuntimeError", "TypeError", "IndexError"):
        received = found.get("received") if isinstance(found.get("received"), list) else []
        memory = next(((i, got["memory"]) for i, got in enumerate(received)
                       if isinstance(got, dict) and got.get("memory", "memory") != "memory"), None)
        if kind == "decoder" and memory is not None:
            raise AssertionError(f"{what} failed: layer {memory[0]} was given {memory[1]} as memory instead of the "
                                 "encoder's output: every layer reads the same memory; update only x, "
                                 "x = layer(x, memory, src_mask, tgt_mask)")
        call = "layer(x, src_mask)" if kind == "encoder" else "layer(x, memory, src_mask, tgt_mask)"
        raise AssertionError(f"{what} failed with {result.type_name}: {result.message}. "
                             f"{received_hint(kind, received, args)}Call each layer as {call}, in this order.")
    return returned(result, what)


def check_stack_on_doubles(kind, found, weights, args, norm_first, what, **options):
    """The output of a stack built on layer doubles against stack_of_doubles, naming a mistake where one fits and
    otherwise what the layers were given that they should not have been."""
    out = stack_outcome(kind, found, what, args)
    layers_registered(found, what)
    expected = stack_of_doubles(kind, weights, args, norm_first, **options)
    mistakes = {} if options else stack_mistakes(kind, weights, args, norm_first)
    try:
        testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=mistakes)
    except AssertionError as error:
        hint = received_hint(kind, found.get("received"), args)
        raise AssertionError(f"{error}" + (f". {hint.strip()}" if hint else "")) from None


def stack_what(kind, case, args, n_heads=4, d_ff=24, extra=""):
    """The call of one case of ENCODER_STACK_CASES / DECODER_STACK_CASES, as the messages name it."""
    n_layers, norm_first = case[:2]
    name = "Encoder" if kind == "encoder" else "Decoder"
    shapes = [f"x {list(args[0].shape)}"] + ([] if kind == "encoder" else [f"memory {list(args[1].shape)}"])
    masks = dict(zip(("src_mask",) if kind == "encoder" else ("src_mask", "tgt_mask"), args[1:] if kind == "encoder" else args[2:]))
    shapes += [f"{mask} {list(value.shape)}" for mask, value in masks.items() if value is not None]
    return (f"{name}({n_layers}, 16, {n_heads}, {d_ff}{extra}, norm_first={norm_first}) on the test's layer doubles "
            f"({', '.join(shapes)})")


def check_stack_values(kind, found, cases, tag):
    """The hidden tests of `test_Encoder_values` / `test_Decoder_values`: the runs of probes.stack_runs."""
    for number, (case, probed) in enumerate(zip(cases, found)):
        weights, args = probes.stack_case(kind, case, f"{tag} {number}")
        what = stack_what(kind, case, args).replace(") on", ").eval() on")
        check_stack_on_doubles(kind, probed, weights, args, case[1], what)


def check_stack_structure(kind, found, tag):
    """The hidden tests of `test_Encoder_structure` / `test_Decoder_structure`: what probes.stack_facts read of
    stacks built on layer doubles, then the values of one with the weights of STACK_STRUCTURE_VALUE_CASES."""
    name = "Encoder" if kind == "encoder" else "Decoder"
    for (n_layers, d_model, n_heads, d_ff, p, norm_first), facts in zip(probes.STACK_STRUCTURE_CASES, found["stacks"]):
        what = f"{name}({n_layers}, {d_model}, {n_heads}, {d_ff}, dropout={p}, norm_first={norm_first})"
        facts = returned(facts, what)
        count_layers = returned(facts["n_layers"], f"len({what}.layers)")
        assert count_layers == n_layers, f"{what} has {count_layers} layers"
        count = facts["count"]
        expected = n_layers * double_count(d_model) + (2 * d_model if norm_first else 0)
        assert count == expected, (f"{what} on the test's layer doubles has {count} parameters, expected {expected}: "
                                   f"{n_layers} distinct layers" + (" and one final LayerNorm" if norm_first else ", no final norm"))
        arguments = {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff, "dropout": p, "norm_first": norm_first}
        for layer in facts["layers"]:
            for argument, value in arguments.items():
                given = returned(layer[argument], f"{what}: the {argument} of a layer")
                assert given == value, (f"{what}: a layer was built with {argument}={given!r}, expected {value!r}: pass "
                                        f"d_model, n_heads, d_ff, dropout and norm_first on to every {name}Layer")
    check_stack_values(kind, found["values"], probes.STACK_STRUCTURE_VALUE_CASES[kind], tag)


def check_stack_dropout(kind, found, tag):
    """The hidden tests of `test_Encoder_dropout` / `test_Decoder_dropout`: in train mode the stack gives what its layers
    give applied in turn with the same random numbers, its dropout is active, and its eval-mode output is right."""
    name = kind.capitalize()
    for number, (norm_first, run) in enumerate(zip((False, True), found)):
        weights, args = probes.stack_dropout_case(kind, number, tag)
        rates = [returned(rate, f"the dropout of a {name}Layer") for rate in run["rates"]]
        assert all(rate == 0.3 for rate in rates), f"pass the dropout argument on to every {name}Layer"
        what = stack_what(kind, (3, norm_first), args, extra=", dropout=0.3")
        with testing.same_random_numbers(secret_seed(f"{tag} {number}")):
            check_stack_on_doubles(kind, run["train"], weights, args, norm_first, what.replace(") on", ").train() on")
                                   + " (the same random numbers as its layers applied in turn)", p=0.3, dtype=torch.float32)
        evaluated = returned(run["eval"], what.replace(") on", ").eval() on"))
        assert not torch.allclose(returned(run["train"]["result"], what), evaluated), (
            "train mode gives the eval-mode output: dropout is not active")
        check_stack_on_doubles(kind, {"result": evaluated}, weights, args, norm_first, what.replace(") on", ").eval() on"))


def check_encoder_structure(found, tag):
    """The hidden tests of `test_Encoder_structure`."""
    check_stack_structure("encoder", found, tag)


def check_encoder_values(found, tag):
    """The hidden tests of `test_Encoder_values`: the runs of probes.stack_runs on ENCODER_STACK_CASES."""
    check_stack_values("encoder", found, probes.ENCODER_STACK_CASES, tag)


def check_encoder_dropout(found, tag):
    """The hidden tests of `test_Encoder_dropout`."""
    check_stack_dropout("encoder", found, tag)


def check_decoder_structure(found, tag):
    """The hidden tests of `test_Decoder_structure`."""
    check_stack_structure("decoder", found, tag)


def check_decoder_values(found, tag):
    """The hidden tests of `test_Decoder_values`: the runs of probes.stack_runs on DECODER_STACK_CASES."""
    check_stack_values("decoder", found, probes.DECODER_STACK_CASES, tag)


def check_decoder_dropout(found, tag):
    """The hidden tests of `test_Decoder_dropout`."""
    check_stack_dropout("decoder", found, tag)


# ----------------------------------------------------------------------------- the model, on stack doubles

def sinusoids(length, d_model):
    """The positional encoding, written with exp and log in float64."""
    angle = torch.arange(length, dtype=torch.float64)[:, None] * torch.exp(
        -math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


class DoubledModel:
    """The Transformer the tests build, on the stack doubles (probes.EncoderDouble, DecoderDouble), with the case's
    weights: its parts in float64, to put together as the contract says (transformer_logits)."""

    def __init__(self, weights, n_enc, n_dec, norm_first):
        self.weights, self.n_enc, self.n_dec, self.norm_first = weights, n_enc, n_dec, norm_first
        self.d_model = weights["generator.weight"].shape[1]

    def part(self, name):
        return self.weights[name].double()

    def stack(self, name, n_layers, x, self_mask, memory=None, cross_mask=None):
        return probes.double_stack(x, self.part(f"{name}.linear.weight"), self.part(f"{name}.linear.bias"),
                                   self.part(f"{name}.gamma"), self.part(f"{name}.beta"), n_layers, self.norm_first,
                                   lambda t: t, self_mask, memory, cross_mask)

    def encode(self, x, src_mask):
        return self.stack("encoder", self.n_enc, x, src_mask)

    def decode(self, x, memory, src_mask, tgt_mask):
        return self.stack("decoder", self.n_dec, x, tgt_mask, memory.double(), src_mask)

    def generate(self, hidden):
        return F.linear(hidden, self.part("generator.weight"), self.part("generator.bias"))


def transformer_logits(model, src, tgt, pad, *, scale=None, positions=True, causal=True, tgt_padding=True,
                       src_padding_encoder=True, src_padding_cross=True, output="logits", parts=False, memory=None):
    """The logits of ``model`` (a DoubledModel) for src and tgt, put together as the contract says; the keywords
    reproduce common mistakes. With ``parts``: (memory, decoder states), the decoder reading ``memory`` if given."""
    d_model = model.d_model
    scale = math.sqrt(d_model) if scale is None else scale

    def embed(name, tokens, add):
        x = F.embedding(tokens, model.part(f"{name}.embedding.weight")) * scale
        return x + sinusoids(tokens.size(1), d_model) if add else x
    length = tgt.size(1)
    src_keep = (src != pad)[:, None, None, :]
    tgt_mask = (tgt != pad)[:, None, None, :] if tgt_padding else torch.ones(1, 1, 1, length, dtype=torch.bool)
    if causal:
        tgt_mask = tgt_mask & probes.causal(length)
    with torch.no_grad():
        src_x, tgt_x = embed("src_embed", src, positions in (True, "src")), embed("tgt_embed", tgt, positions in (True, "tgt"))
        if memory is None:
            memory = model.encode(src_x, src_keep if src_padding_encoder else None)
        hidden = model.decode(tgt_x, memory, src_keep if src_padding_cross else None, tgt_mask)
        if parts:
            return memory, hidden
        logits = model.generate(hidden)
    return {"logits": logits, "softmax": logits.softmax(-1), "log_softmax": logits.log_softmax(-1)}[output]


def named_mistakes(model, src, tgt, pad):
    """What common mistakes would return, from the same oracle with one thing changed."""
    d_model = model.d_model
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
    found = {k: (lambda options=options: transformer_logits(model, src, tgt, pad, **options)) for k, options in found.items()}
    if pad != 0:
        found["pad_idx is ignored (the masks use 0 instead of self.pad_idx)"] = lambda: transformer_logits(model, src, tgt, 0)
    found["norm_first is not passed on to Encoder and Decoder"] = lambda: transformer_logits(
        DoubledModel(model.weights, model.n_enc, model.n_dec, not model.norm_first), src, tgt, pad)
    if model.n_enc != model.n_dec:
        found["the encoder has num_decoder_layers layers and the decoder num_encoder_layers"] = lambda: transformer_logits(
            DoubledModel(model.weights, model.n_dec, model.n_enc, model.norm_first), src, tgt, pad)
    return found


def transformer_what(case):
    src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, _, _ = case
    return (f"Transformer({src_vocab}, {tgt_vocab}, d_model=16, n_heads=4, num_encoder_layers={n_enc}, "
            f"num_decoder_layers={n_dec}, d_ff=24, pad_idx={pad}, norm_first={norm_first}) on the test's stack doubles")


def check_transformer_run(run, case, tag):
    """One run of probes.transformer_values_run (the case's pad index drawn from the secret, as the probe drew it):
    forward, encode and decode against the oracle."""
    case, weights, src, tgt, memory = probes.transformer_case(case, tag)
    n_enc, n_dec, norm_first, pad = case[2:6]
    model = DoubledModel(weights, n_enc, n_dec, norm_first)
    what = f"{transformer_what(case)}, .eval()(src {list(src.shape)}, tgt {list(tgt.shape)})"
    run = returned(run, what)
    out = outcome(run["logits"], what, "The encoder and the cross-attention take src_mask = padding_mask(src, "
                  "self.pad_idx), the decoder's self-attention tgt_mask = target_mask(tgt, self.pad_idx).")
    testing.assert_close(out, transformer_logits(model, src, tgt, pad), what, atol=1e-4, dtype=torch.float32,
                         mistakes=named_mistakes(model, src, tgt, pad))
    # encode and decode on their own (decode with a memory of the test's)
    encoded, _ = transformer_logits(model, src, tgt, pad, parts=True)
    _, hidden = transformer_logits(model, src, tgt, pad, parts=True, memory=memory)
    testing.assert_close(returned(run["encode"], f"{what}: encode(src, src_mask)"), encoded,
                         f"{what}: encode(src, src_mask)", atol=1e-4, mistakes={
        "encode ignores src_mask": lambda: transformer_logits(model, src, tgt, pad, parts=True, src_padding_encoder=False)[0]})
    testing.assert_close(returned(run["decode"], f"{what}: decode(tgt, memory, src_mask, tgt_mask)"), hidden,
                         f"{what}: decode(tgt, memory, src_mask, tgt_mask)", atol=1e-4, mistakes={
        "decode applies the generator; it should return the decoder's states [B, T, d_model]": lambda: model.generate(hidden)})


def check_transformer_values(found, tag):
    """The hidden tests of `test_Transformer_values`: the runs of probes.transformer_values_run."""
    for number, (case, run) in enumerate(zip(probes.TRANSFORMER_VALUE_CASES, found)):
        check_transformer_run(run, case, f"{tag} {number}")


def check_transformer_structure(found, tag):
    """The hidden tests of `test_Transformer_structure`, on what the probe read of the model, then its values."""
    what = ("Transformer(17, 9, d_model=24, n_heads=3, num_encoder_layers=1, num_decoder_layers=2, d_ff=20, "
            "dropout=0.3, max_len=33, pad_idx=2, norm_first=True)")
    facts = {name: returned(value, f"{what}: {name}") for name, value in returned(found["facts"], what).items()}
    assert facts["pad_idx"] == 2, f"{what}.pad_idx is {facts['pad_idx']}, expected 2"
    assert facts["tables"] == [17, 9], f"{what}: the source table needs 17 rows and the target table 9"
    assert facts["generator"] == [24, 9], f"{what}: the generator should map 24 -> 9"
    assert facts["pe"] == [33, 24], f"{what}: pos_encoding should be PositionalEncoding(24, 33, 0.3)"
    assert facts["pe_dropout"] == 0.3, f"{what}: pass dropout on to PositionalEncoding"
    encoder, decoder = facts["stacks"]
    assert [encoder[0], decoder[0]] == [1, 2], (
        f"{what}: the encoder should have num_encoder_layers = 1 layer and the decoder num_decoder_layers = 2")
    assert all(stack[1:4] == [24, 3, 20] for stack in (encoder, decoder)), (
        f"{what}: pass d_model, n_heads and d_ff on to Encoder and Decoder")
    assert all(stack[4] == 0.3 for stack in (encoder, decoder)), f"{what}: pass dropout on to Encoder and Decoder"
    assert all(stack[5] is True for stack in (encoder, decoder)), f"{what}: pass norm_first on to Encoder and Decoder"
    assert facts["positional"] == 1, f"{what}: one PositionalEncoding serves both sides"
    for number, (case, run) in enumerate(zip(probes.TRANSFORMER_STRUCTURE_CASES, found["values"])):
        check_transformer_run(run, case, f"{tag} {number}")


def check_xavier(matrices, gammas):
    """The matrices (name -> initial values) look Xavier-uniform, and the gammas (name -> values) are 1."""
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


def check_transformer_init(found, tag):
    """The hidden tests of `test_Transformer_init`: per norm_first, the model's initial parameters; then the values
    of a model with the weights of TRANSFORMER_INIT_CASES."""
    for params in found["params"]:
        params = returned(params, "Transformer(90, 50, d_model=32, n_heads=4, num_encoder_layers=2, "
                                  "num_decoder_layers=2, d_ff=48)")
        check_xavier({name: p for name, p in params.items() if p.dim() > 1},
                     {name: p for name, p in params.items() if p.dim() == 1 and name.endswith("gamma")})
    for number, (case, run) in enumerate(zip(probes.TRANSFORMER_INIT_CASES, found["values"])):
        check_transformer_run(run, case, f"{tag} {number}")


def check_transformer_masks(found, tag):
    """The hidden tests of `test_Transformer_masks`: the runs of probes.transformer_mask_run."""
    for number, run in enumerate(found):
        norm_first, pad, weights, src, tgt = probes.mask_case(number, tag)
        what = f"Transformer(25, 35, ..., pad_idx={pad}, norm_first={norm_first}) on the test's stack doubles, .eval()"
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
        model = DoubledModel(weights, 2, 2, norm_first)
        testing.assert_close(logits, transformer_logits(model, src, tgt, pad), what + "(src, tgt)", atol=1e-4,
                             mistakes=named_mistakes(model, src, tgt, pad))


def check_transformer_dropout(found, tag):
    """The hidden tests of `test_Transformer_dropout`: per norm_first, the dropout rates, the logits in train mode
    against generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) drawing the same random numbers, and
    the logits in eval mode against the oracle."""
    for number, (norm_first, run) in enumerate(zip((False, True), found)):
        run = returned(run, "Transformer(25, 35, ..., dropout=0.3)")
        drops = run["rates"]
        assert drops and all(p == 0.3 for p in drops), (
            f"the dropout modules have probabilities {sorted(set(drops))}, expected 0.3 everywhere: pass dropout on")
        out = outcome(run["train"], "model(src, tgt)", "Check the masks forward builds.")
        testing.assert_close(out, returned(run["reference"], "generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask))"),
                             f"Transformer(..., dropout=0.3, norm_first={norm_first}).train()(src, tgt), against "
                             "generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) drawing the same random numbers "
                             "(forward should build the masks, encode, then decode),", atol=1e-5)
        evaluated = returned(run["eval"], "model.eval()(src, tgt)")
        assert not torch.allclose(out, evaluated, atol=1e-4), "train mode gives the eval-mode logits"
        weights, src, tgt = probes.dropout_model_case(number, tag)
        model = DoubledModel(weights, 2, 2, norm_first)
        testing.assert_close(evaluated, transformer_logits(model, src, tgt, 0),
                             f"Transformer(25, 35, ..., norm_first={norm_first}) on the test's stack doubles, .eval()(src, tgt)",
                             atol=1e-4, mistakes=named_mistakes(model, src, tgt, 0))
