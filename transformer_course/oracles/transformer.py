"""Oracles of notebook 06 (EncoderLayer, DecoderLayer, Encoder, Decoder, Transformer), shared by its hidden tests
and tests/test_components.py.

The expected values come from PyTorch's own layers (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer,
nn.TransformerEncoder, nn.TransformerDecoder) in float64 with the student's weights copied in, and, in train
mode, from the student's own submodules put together as the paper's sublayers with the same random numbers;
never from the course's solution (transformer_course.layers, transformer_course.model). The mistakes are built
from PyTorch's sublayers too, only to name a mistake in a message. Every check takes the student's class, and
the notebook's namespace where the test puts the course's finished earlier parts in place of the student's.

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
from ..embeddings import PositionalEncoding
from ..layers import LayerNorm
from ..masks import causal_mask, padding_mask, target_mask
from .multi_head import copy_weights


def call(function, what, hint):
    """Run the student's code; a shape error deep inside becomes a message that says where to look."""
    try:
        return function()
    except NotImplementedError:
        raise
    except (RuntimeError, TypeError, IndexError) as error:
        raise AssertionError(f"{what} failed with {type(error).__name__}: {error}. {hint}") from None


def call_decoder(decoder, what, x, memory, src_mask, tgt_mask):
    """decoder(x, memory, src_mask, tgt_mask); when it fails, the message names a layer that was given another
    memory than the encoder's (a loop that overwrites memory) before the general hint."""
    given = []   # the memory each layer is called with

    def record(module, args, kwargs):
        given.append(args[1] if len(args) > 1 else kwargs.get("memory"))

    hooks = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in getattr(decoder, "layers", [])
             if isinstance(layer, nn.Module)]
    try:
        return call(lambda: decoder(x, memory, src_mask, tgt_mask), what,
                    "Call each layer as layer(x, memory, src_mask, tgt_mask), in this order.")
    except AssertionError:
        # By identity, not shape: when the target and the source have the same length, x has memory's shape.
        wrong = next((i for i, given_memory in enumerate(given) if given_memory is not memory), None)
        if wrong is None:
            raise
        raise AssertionError(f"{what} failed: layer {wrong} was given another memory than the encoder's "
                             f"(shape {list(memory.shape)}): every layer reads the same memory; update only x, "
                             "x = layer(x, memory, src_mask, tgt_mask)") from None
    finally:
        for hook in hooks:
            hook.remove()


def randomise_norms(module, seed=0):
    """Give every LayerNorm its own gamma and beta, so that the tests can tell the norms apart."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, LayerNorm):
                m.gamma.copy_(0.5 + torch.rand(m.gamma.shape, generator=generator))
                m.beta.copy_(torch.rand(m.beta.shape, generator=generator) - 0.5)


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


def lengths_mask(lengths, size):
    """[B, 1, 1, size], True at the first lengths[b] positions of row b."""
    return (torch.arange(size)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


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


def check_encoder_layer_against_pytorch(EncoderLayer, norm_first, cases):
    for seed, (d_model, n_heads, d_ff, batch, length, lengths) in enumerate(cases):
        torch.manual_seed(seed)
        if norm_first:
            layer = EncoderLayer(d_model, n_heads, d_ff, dropout=0.3, norm_first=True).eval()
        else:
            layer = EncoderLayer(d_model, n_heads, d_ff, dropout=0.3).eval()   # norm_first defaults to False
        randomise_norms(layer, seed)
        theirs = copy_layer(torch_layer("encoder", d_model, n_heads, d_ff, norm_first), layer)
        x = torch.randn(batch, length, d_model)
        mask = None if lengths is None else lengths_mask(lengths, length)
        what = (f"EncoderLayer({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}).eval()"
                f"(x [{batch}, {length}, {d_model}]{'' if mask is None else ', src_mask [' + str(batch) + ', 1, 1, ' + str(length) + ']'})")
        out = call(lambda: layer(x, mask), what, "Is src_mask passed to the self-attention as its mask?")
        assert torch.equal(out, layer(x, mask)), (f"{what}: two calls in eval mode differ; dropout must be off in eval mode "
                                                  "(use nn.Dropout modules, or F.dropout(..., training=self.training))")
        mask_theirs = torch_mask(mask, batch, n_heads, length, length) if mask is not None else None
        with torch.no_grad():
            expected = theirs(x.double(), src_mask=mask_theirs)
        found = {k: torch.no_grad()(v) for k, v in encoder_layer_mistakes(theirs, x.double(), mask_theirs, norm_first).items()}
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


def check_decoder_layer_against_pytorch(DecoderLayer, norm_first, cases):
    for seed, (d_model, n_heads, d_ff, batch, tgt_len, src_len, tgt_lengths, src_lengths) in enumerate(cases):
        torch.manual_seed(seed)
        if norm_first:
            layer = DecoderLayer(d_model, n_heads, d_ff, dropout=0.3, norm_first=True).eval()
        else:
            layer = DecoderLayer(d_model, n_heads, d_ff, dropout=0.3).eval()   # norm_first defaults to False
        randomise_norms(layer, seed)
        theirs = copy_layer(torch_layer("decoder", d_model, n_heads, d_ff, norm_first), layer)
        x, memory = torch.randn(batch, tgt_len, d_model), torch.randn(batch, src_len, d_model)
        tgt_mask = None if tgt_lengths is None else lengths_mask(tgt_lengths, tgt_len) & causal_mask(tgt_len)
        src_mask = None if src_lengths is None else lengths_mask(src_lengths, src_len)
        what = (f"DecoderLayer({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}).eval()(x [{batch}, {tgt_len}, {d_model}], "
                f"memory [{batch}, {src_len}, {d_model}]" + ("" if src_mask is None else f", src_mask [{batch}, 1, 1, {src_len}]")
                + ("" if tgt_mask is None else f", tgt_mask [{batch}, 1, {tgt_len}, {tgt_len}]") + ")")
        out = call(lambda: layer(x, memory, src_mask, tgt_mask), what,
                   "The self-attention uses tgt_mask, the cross-attention takes queries from x, keys and values from memory, with src_mask.")
        assert torch.equal(out, layer(x, memory, src_mask, tgt_mask)), (
            f"{what}: two calls in eval mode differ; dropout must be off in eval mode "
            "(use nn.Dropout modules, or F.dropout(..., training=self.training))")
        tgt_m = None if tgt_mask is None else torch_mask(tgt_mask, batch, n_heads, tgt_len, tgt_len)
        src_m = None if src_mask is None else torch_mask(src_mask, batch, n_heads, tgt_len, src_len)
        with torch.no_grad():
            expected = theirs(x.double(), memory.double(), tgt_mask=tgt_m, memory_mask=src_m)
        found = {k: torch.no_grad()(v) for k, v in decoder_layer_mistakes(theirs, x.double(), memory.double(), tgt_m, src_m, norm_first).items()}
        testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=found)


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
           src_padding_encoder=True, src_padding_cross=True, output="logits", parts=False):
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
            memory = theirs.encoder(src_x, src_key_padding_mask=options["src_key_padding_mask"])
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


def tokens(lengths, size, vocab, pad, generator):
    """Random ids, never pad nor 0, with padding after lengths[b] positions."""
    ids = torch.randint(1, vocab - 1, (len(lengths), size), generator=generator)
    ids = ids + (ids >= pad).long() * (pad > 0)            # skip the padding id
    return ids.masked_fill(~lengths_mask(lengths, size)[:, 0, 0], pad)


def check_encoder_layer_structure(EncoderLayer):
    """The hidden tests of `test_EncoderLayer_structure`."""
    for d_model, n_heads, d_ff, p in [(24, 3, 40, 0.3), (8, 8, 8, 0.0)]:
        layer = EncoderLayer(d_model, n_heads, d_ff, dropout=p, norm_first=True)
        what = f"EncoderLayer({d_model}, {n_heads}, {d_ff}, dropout={p})"
        count = sum(q.numel() for q in layer.parameters())
        expected = 4 * (d_model * d_model + d_model) + 2 * d_model * d_ff + d_ff + d_model + 4 * d_model
        assert count == expected, f"{what} has {count} parameters, expected {expected}"
        assert layer.feed_forward.linear1.out_features == d_ff, f"{what}.feed_forward should have d_ff = {d_ff} hidden units"
        for name, module in [("dropout", layer.dropout), ("self_attn.dropout", layer.self_attn.dropout),
                             ("feed_forward.dropout", layer.feed_forward.dropout)]:
            assert module.p == p, (f"{what}.{name}.p is {module.p}, expected {p}: pass the dropout argument on "
                                   "(to nn.Dropout, MultiHeadAttention and PositionwiseFeedForward)")
        layer.eval()(torch.randn(2, 3, d_model))
        heads = layer.self_attn.attn.shape[1]
        assert heads == n_heads, f"{what}.self_attn has {heads} heads, expected {n_heads}: pass n_heads on to MultiHeadAttention"
    default = EncoderLayer(8, 2, 16)
    assert default.dropout.p == 0.1, f"dropout should default to 0.1, got {default.dropout.p}"


def check_encoder_layer_post_ln(EncoderLayer):
    """The hidden tests of `test_EncoderLayer_post_ln`."""
    check_encoder_layer_against_pytorch(EncoderLayer, False, [(16, 4, 32, 3, 5, None), (24, 3, 40, 2, 7, [7, 4]), (8, 1, 12, 1, 4, [3]),
                                  (16, 8, 24, 4, 1, None)])


def check_encoder_layer_pre_ln(EncoderLayer):
    """The hidden tests of `test_EncoderLayer_pre_ln`."""
    check_encoder_layer_against_pytorch(EncoderLayer, True, [(16, 4, 32, 3, 5, None), (24, 3, 40, 2, 7, [7, 4]), (8, 1, 12, 1, 4, [3]),
                                 (16, 8, 24, 4, 1, None)])


def check_encoder_layer_mask(EncoderLayer):
    """The hidden tests of `test_EncoderLayer_mask`."""
    for seed, norm_first in enumerate((False, True)):
        torch.manual_seed(seed)
        layer = EncoderLayer(16, 4, 24, dropout=0.2, norm_first=norm_first).eval()
        randomise_norms(layer, seed)
        theirs = copy_layer(torch_layer("encoder", 16, 4, 24, norm_first), layer)
        batch, length = 3, 6
        x = torch.randn(batch, length, 16)
        # a padding mask [B, 1, 1, S] and a general mask [B, 1, S, S] (every position may attend to itself)
        general = (torch.rand(batch, 1, length, length) < 0.5) | torch.eye(length, dtype=torch.bool)
        for mask, kind in [(lengths_mask([6, 3, 1], length), "a padding mask [3, 1, 1, 6]"),
                           (general, "a mask [3, 1, 6, 6] with a different pattern per query")]:
            what = f"EncoderLayer(16, 4, 24, norm_first={norm_first}).eval()(x, {kind})"
            out = call(lambda: layer(x, mask), what, "Pass src_mask to the self-attention.")
            mask_theirs = torch_mask(mask, batch, 4, length, length)
            with torch.no_grad():
                expected = theirs(x.double(), src_mask=mask_theirs)
            found = {k: torch.no_grad()(v) for k, v in encoder_layer_mistakes(theirs, x.double(), mask_theirs, norm_first).items()}
            testing.assert_close(out, expected, what, atol=1e-5, mistakes=found)


def check_encoder_layer_dropout(EncoderLayer):
    """The hidden tests of `test_EncoderLayer_dropout`."""
    for seed, (norm_first, mask) in enumerate([(False, None), (True, lengths_mask([5, 2], 5)), (False, lengths_mask([3, 5], 5))]):
        torch.manual_seed(seed)
        layer = EncoderLayer(16, 4, 24, dropout=0.3, norm_first=norm_first).train()
        randomise_norms(layer, seed)
        x = torch.randn(2, 5, 16)
        what = f"EncoderLayer(16, 4, 24, dropout=0.3, norm_first={norm_first}).train()(x{'' if mask is None else ', src_mask'})"
        with testing.same_random_numbers(seed):
            out = layer(x, mask)
        found = {}
        for description, options in [
                ("no dropout is applied to the sublayers' outputs (self.dropout(sublayer(...)) before the residual sum)",
                 dict(output_dropout=False)),
                ("the dropout is applied after the residual sum; it belongs on the sublayer's output, before the sum",
                 dict(after_sum=True)),
                ("the dropout is applied to the first sublayer's output only; the feed-forward's output needs it too",
                 dict(first_only=True))]:
            with testing.same_random_numbers(seed):
                found[description] = encoder_layer_with_dropout(layer, x, mask, 0.3, norm_first, **options).detach()
        with testing.same_random_numbers(seed):
            expected = encoder_layer_with_dropout(layer, x, mask, 0.3, norm_first).detach()
        testing.assert_close(out, expected, what + ", compared with the layer computed from its own submodules drawing the same "
                     "random numbers", atol=1e-5, mistakes=found)


def check_decoder_layer_structure(DecoderLayer):
    """The hidden tests of `test_DecoderLayer_structure`."""
    for d_model, n_heads, d_ff, p in [(24, 3, 40, 0.3), (8, 8, 8, 0.0)]:
        layer = DecoderLayer(d_model, n_heads, d_ff, dropout=p, norm_first=True)
        what = f"DecoderLayer({d_model}, {n_heads}, {d_ff}, dropout={p})"
        count = sum(q.numel() for q in layer.parameters())
        expected = 8 * (d_model * d_model + d_model) + 2 * d_model * d_ff + d_ff + d_model + 6 * d_model
        assert count == expected, f"{what} has {count} parameters, expected {expected}"
        for name, module in [("dropout", layer.dropout), ("self_attn.dropout", layer.self_attn.dropout),
                             ("cross_attn.dropout", layer.cross_attn.dropout), ("feed_forward.dropout", layer.feed_forward.dropout)]:
            assert module.p == p, (f"{what}.{name}.p is {module.p}, expected {p}: pass the dropout argument on "
                                   "(to nn.Dropout, both MultiHeadAttentions and PositionwiseFeedForward)")
        call(lambda: layer.eval()(torch.randn(2, 3, d_model), torch.randn(2, 5, d_model)),
             f"{what}(x [2, 3, {d_model}], memory [2, 5, {d_model}])",
             "The cross-attention takes its queries from x, its keys and values from memory.")
        for name in ("self_attn", "cross_attn"):
            heads = getattr(layer, name).attn.shape[1]
            assert heads == n_heads, f"{what}.{name} has {heads} heads, expected {n_heads}: pass n_heads on"
        shape = list(layer.cross_attn.attn.shape)
        assert shape == [2, n_heads, 3, 5], (
            f"{what}: the cross-attention weights have shape {shape}, expected [2, {n_heads}, 3, 5] (target positions x "
            "source positions): queries from x, keys and values from memory")


def check_decoder_layer_post_ln(DecoderLayer):
    """The hidden tests of `test_DecoderLayer_post_ln`."""
    check_decoder_layer_against_pytorch(DecoderLayer, False, [(16, 4, 32, 3, 4, 6, None, None), (24, 3, 40, 2, 5, 3, [5, 3], [3, 2]), (8, 2, 12, 2, 5, 5, [5, 4], [2, 5]), (16, 8, 24, 1, 1, 7, [1], [4])])


def check_decoder_layer_pre_ln(DecoderLayer):
    """The hidden tests of `test_DecoderLayer_pre_ln`."""
    check_decoder_layer_against_pytorch(DecoderLayer, True, [(16, 4, 32, 3, 4, 6, None, None), (24, 3, 40, 2, 5, 3, [5, 3], [3, 2]), (8, 2, 12, 2, 5, 5, [5, 4], [2, 5]), (16, 8, 24, 1, 1, 7, [1], [4])])


def check_decoder_layer_masks(DecoderLayer):
    """The hidden tests of `test_DecoderLayer_masks`."""
    for norm_first in (False, True):
        # the masks alone, then together, with T != S and with T == S (where swapped masks still run)
        check_decoder_layer_against_pytorch(DecoderLayer, norm_first, [(16, 4, 24, 3, 5, 4, [5, 2, 4], None), (16, 4, 24, 3, 5, 4, None, [4, 1, 3]),
                                           (16, 2, 24, 2, 6, 6, [6, 3], [2, 6]), (8, 4, 16, 2, 3, 7, [3, 3], [7, 2])])
        # causality measured with gradients, target padding included
        torch.manual_seed(1)
        layer = DecoderLayer(16, 4, 24, dropout=0.1, norm_first=norm_first).eval()
        x = torch.randn(2, 6, 16, requires_grad=True)
        memory = torch.randn(2, 3, 16)
        tgt_mask = lengths_mask([6, 4], 6) & causal_mask(6)
        out = call(lambda: layer(x, memory, None, tgt_mask), "DecoderLayer(...)(x [2, 6, 16], memory [2, 3, 16], None, tgt_mask)",
                   "The self-attention takes tgt_mask.")
        for position in range(5):
            grad, = torch.autograd.grad((out[:, position] * torch.randn(16)).sum(), x, retain_graph=True)
            assert grad[:, position + 1:].abs().max() == 0, (
                f"DecoderLayer(norm_first={norm_first}): output position {position} depends on later target positions: "
                "the self-attention must use tgt_mask")


def check_decoder_layer_dropout(DecoderLayer):
    """The hidden tests of `test_DecoderLayer_dropout`."""
    for seed, norm_first in enumerate((False, True)):
        torch.manual_seed(seed)
        layer = DecoderLayer(16, 4, 24, dropout=0.3, norm_first=norm_first).train()
        randomise_norms(layer, seed)
        x, memory = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
        src_mask, tgt_mask = lengths_mask([3, 2], 3), lengths_mask([5, 4], 5) & causal_mask(5)
        what = f"DecoderLayer(16, 4, 24, dropout=0.3, norm_first={norm_first}).train()(x, memory, src_mask, tgt_mask)"
        with testing.same_random_numbers(seed):
            out = call(lambda: layer(x, memory, src_mask, tgt_mask), what, "Check the masks.")
        found = {}
        for description, options in [
                ("no dropout is applied to the sublayers' outputs (self.dropout(sublayer(...)) before the residual sum)",
                 dict(output_dropout=False)),
                ("the dropout is applied after the residual sum; it belongs on the sublayer's output, before the sum",
                 dict(after_sum=True)),
                ("the dropout is applied to the first sublayer's output only; every sublayer's output needs it",
                 dict(first_only=True))]:
            with testing.same_random_numbers(seed):
                found[description] = decoder_layer_with_dropout(layer, x, memory, src_mask, tgt_mask, 0.3, norm_first, **options).detach()
        with testing.same_random_numbers(seed):
            expected = decoder_layer_with_dropout(layer, x, memory, src_mask, tgt_mask, 0.3, norm_first).detach()
        testing.assert_close(out, expected, what + ", compared with the layer computed from its own submodules drawing the same "
                     "random numbers", atol=1e-5, mistakes=found)


def check_stack_structure(stack, kind, namespace):
    """The hidden tests of `test_Encoder_structure` (kind "encoder") and `test_Decoder_structure` ("decoder")."""
    name, layer_class = ("Encoder", course.EncoderLayer) if kind == "encoder" else ("Decoder", course.DecoderLayer)
    with testing.substituted(namespace, EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for n_layers, d_model, n_heads, d_ff, p, norm_first in [(1, 8, 2, 12, 0.3, False), (4, 12, 3, 20, 0.0, True)]:
            built = stack(n_layers, d_model, n_heads, d_ff, dropout=p, norm_first=norm_first)
            what = f"{name}({n_layers}, {d_model}, {n_heads}, {d_ff}, dropout={p}, norm_first={norm_first})"
            assert len(built.layers) == n_layers, f"{what} has {len(built.layers)} layers"
            one = sum(q.numel() for q in layer_class(d_model, n_heads, d_ff).parameters())
            count = sum(q.numel() for q in built.parameters())
            expected = n_layers * one + (2 * d_model if norm_first else 0)
            assert count == expected, (f"{what} has {count} parameters, expected {expected}: distinct layers"
                                       + (" and one final LayerNorm" if norm_first else ", no final norm"))
            for layer in built.layers:
                assert layer.feed_forward.linear1.out_features == d_ff and layer.dropout.p == p, (
                    f"{what}: pass d_model, n_heads, d_ff and dropout on to every {name}Layer")
                layer.eval()(*[torch.randn(1, 2, d_model)] + ([] if kind == "encoder" else [torch.randn(1, 3, d_model)]))
                assert layer.self_attn.attn.shape[1] == n_heads, f"{what}: pass n_heads on to every {name}Layer"


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


def check_encoder_structure(Encoder, namespace):
    """The hidden tests of `test_Encoder_structure`."""
    check_stack_structure(Encoder, "encoder", namespace)


def check_encoder_values(Encoder, namespace):
    """The hidden tests of `test_Encoder_values`."""
    with testing.substituted(namespace, EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, (n_layers, norm_first, lengths) in enumerate([(3, False, [6, 2, 4]), (3, True, [6, 2, 4]), (1, False, None),
                                                                (1, True, [5, 6, 1]), (2, True, None)]):
            torch.manual_seed(seed)
            encoder = Encoder(n_layers, 16, 4, 24, dropout=0.3, norm_first=norm_first).eval()
            randomise_norms(encoder, seed)
            theirs = torch_stack(encoder, "encoder", 16, 4, 24, norm_first)
            x = torch.randn(3, 6, 16)
            mask = None if lengths is None else lengths_mask(lengths, 6)
            what = (f"Encoder({n_layers}, 16, 4, 24, norm_first={norm_first}).eval()(x [3, 6, 16]"
                    + ("" if mask is None else ", src_mask [3, 1, 1, 6]") + ")")
            out = call(lambda: encoder(x, mask), what, "Each layer is called as layer(x, src_mask).")
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

            found = stack_mistakes(run, theirs.layers, norm_first)
            if mask is not None:
                found["src_mask is not passed to the layers"] = lambda: run(theirs.layers, padding=None)
            if n_layers > 1:
                found["the layers are applied in reverse order"] = lambda: run(list(theirs.layers)[::-1])
                found["every layer reads the stack's input x instead of the previous layer's output"] = (
                    lambda: run(theirs.layers, chain=False))
            testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=found)


def check_stack_dropout(stack, kind, namespace):
    """The hidden tests of `test_Encoder_dropout` / `test_Decoder_dropout`: in train mode the stack gives what its own
    layers give applied in turn with the same random numbers, and its dropout is active."""
    name = kind.capitalize()
    with testing.substituted(namespace, EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, norm_first in enumerate((False, True)):
            torch.manual_seed(seed)
            model = stack(3, 16, 4, 24, dropout=0.3, norm_first=norm_first).train()
            randomise_norms(model, seed)
            x = torch.randn(2, 5, 16)
            if kind == "encoder":
                rest, inputs = (lengths_mask([5, 3], 5),), "x, src_mask"
                forward = lambda: model(x, *rest)
            else:
                memory = torch.randn(2, 3, 16)
                rest, inputs = (memory, lengths_mask([3, 2], 3), lengths_mask([5, 4], 5) & causal_mask(5)), "x, memory, masks"
                forward = lambda: call_decoder(model, "Decoder(3, 16, 4, 24).train()(x, memory, src_mask, tgt_mask)",
                                               x, *rest)
            assert all(layer.dropout.p == 0.3 for layer in model.layers), f"pass the dropout argument on to every {name}Layer"
            with testing.same_random_numbers(seed):
                out = forward()
            with testing.same_random_numbers(seed):   # reference: the student's own layers applied in turn
                h = x
                for layer in model.layers:
                    h = layer(h, *rest)
                expected = h if model.norm is None else model.norm(h)
            testing.assert_close(out, expected, f"{name}(3, 16, 4, 24, dropout=0.3, norm_first={norm_first}).train()({inputs}) "
                                 "(same random numbers as the layers applied in turn)", atol=1e-5)
            with torch.no_grad():
                model.eval()
                assert not torch.allclose(out, model(x, *rest)), "train mode gives the eval-mode output: dropout is not active"


def check_encoder_dropout(Encoder, namespace):
    """The hidden tests of `test_Encoder_dropout`."""
    check_stack_dropout(Encoder, "encoder", namespace)


def check_decoder_structure(Decoder, namespace):
    """The hidden tests of `test_Decoder_structure`."""
    check_stack_structure(Decoder, "decoder", namespace)


def check_decoder_values(Decoder, namespace):
    """The hidden tests of `test_Decoder_values`."""
    with testing.substituted(namespace, EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, (n_layers, norm_first, src_len, tgt_lengths, src_lengths) in enumerate([
                (3, False, 4, [5, 3, 4], [4, 2, 1]), (3, True, 4, [5, 3, 4], [4, 2, 1]), (1, False, 7, None, None),
                (1, True, 5, [5, 5, 2], None), (2, False, 5, None, [5, 1, 3])]):
            torch.manual_seed(seed)
            decoder = Decoder(n_layers, 16, 4, 24, dropout=0.3, norm_first=norm_first).eval()
            randomise_norms(decoder, seed)
            theirs = torch_stack(decoder, "decoder", 16, 4, 24, norm_first)
            x, memory = torch.randn(3, 5, 16), torch.randn(3, src_len, 16)
            tgt_mask = None if tgt_lengths is None else lengths_mask(tgt_lengths, 5) & causal_mask(5)
            src_mask = None if src_lengths is None else lengths_mask(src_lengths, src_len)
            what = (f"Decoder({n_layers}, 16, 4, 24, norm_first={norm_first}).eval()(x [3, 5, 16], memory [3, {src_len}, 16]"
                    + ("" if src_mask is None else f", src_mask [3, 1, 1, {src_len}]")
                    + ("" if tgt_mask is None else ", tgt_mask [3, 1, 5, 5]") + ")")
            out = call_decoder(decoder, what, x, memory, src_mask, tgt_mask)
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

            found = stack_mistakes(run, theirs.layers, norm_first)
            if tgt_mask is not None:
                found["tgt_mask is not passed to the layers"] = lambda: run(theirs.layers, tgt_mask=None)
            if src_mask is not None:
                found["src_mask is not passed to the layers"] = lambda: run(theirs.layers, memory_key_padding_mask=None)
            if n_layers > 1 and src_mask is None and src_len == 5:
                found["each layer attends to its own input instead of the encoder's memory"] = (
                    lambda: run(theirs.layers, own_memory=True))
            testing.assert_close(out, expected, what, atol=1e-5, dtype=torch.float32, mistakes=found)


def check_decoder_dropout(Decoder, namespace):
    """The hidden tests of `test_Decoder_dropout`."""
    check_stack_dropout(Decoder, "decoder", namespace)


def check_transformer_structure(Transformer, namespace):
    """The hidden tests of `test_Transformer_structure`."""
    with testing.substituted(namespace, Encoder=course.Encoder, Decoder=course.Decoder,
                     EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        model = Transformer(17, 9, d_model=24, n_heads=3, num_encoder_layers=1, num_decoder_layers=2, d_ff=20, dropout=0.3,
                            max_len=33, pad_idx=2, norm_first=True)
        what = ("Transformer(17, 9, d_model=24, n_heads=3, num_encoder_layers=1, num_decoder_layers=2, d_ff=20, "
                "dropout=0.3, max_len=33, pad_idx=2, norm_first=True)")
        assert model.pad_idx == 2, f"{what}.pad_idx is {model.pad_idx}, expected 2"
        assert (model.src_embed.embedding.num_embeddings, model.tgt_embed.embedding.num_embeddings) == (17, 9), (
            f"{what}: the source table needs 17 rows and the target table 9")
        assert (model.generator.in_features, model.generator.out_features) == (24, 9), f"{what}: the generator should map 24 -> 9"
        assert list(model.pos_encoding.pe.shape) == [33, 24], f"{what}: pos_encoding should be PositionalEncoding(24, 33, 0.3)"
        assert model.pos_encoding.dropout.p == 0.3, f"{what}: pass dropout on to PositionalEncoding"
        assert model.encoder.norm is not None and model.decoder.norm is not None, f"{what}: pass norm_first on to Encoder and Decoder"
        for layer in list(model.encoder.layers) + list(model.decoder.layers):
            assert layer.dropout.p == 0.3 and layer.feed_forward.linear1.out_features == 20, (
                f"{what}: pass d_ff and dropout on to Encoder and Decoder")
        src, tgt = torch.tensor([[3, 4, 5, 2]]), torch.tensor([[1, 6, 2]])
        call(lambda: model.eval()(src, tgt), f"{what}(src [1, 4], tgt [1, 3])", "Check the masks forward builds.")
        assert model.encoder.layers[0].self_attn.attn.shape[1] == 3, f"{what}: pass n_heads on to Encoder and Decoder"
        assert sum(1 for m in model.modules() if isinstance(m, PositionalEncoding)) == 1, (
            f"{what}: one PositionalEncoding serves both sides")


def check_transformer_init(Transformer, namespace):
    """The hidden tests of `test_Transformer_init`."""
    with testing.substituted(namespace, Encoder=course.Encoder, Decoder=course.Decoder,
                     EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, norm_first in enumerate((False, True)):
            torch.manual_seed(seed)
            model = Transformer(90, 50, d_model=32, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=48,
                                norm_first=norm_first)
            matrices = [(name, p) for name, p in model.named_parameters() if p.dim() > 1]
            for name, weight in matrices:
                weight = weight.detach()
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
            for name, p in model.named_parameters():
                if p.dim() == 1 and name.endswith("gamma"):
                    assert torch.all(p == 1), f"{name} changed: only parameters with more than one dimension get Xavier"


def check_transformer_values(Transformer, namespace):
    """The hidden tests of `test_Transformer_values`."""
    with testing.substituted(namespace, Encoder=course.Encoder, Decoder=course.Decoder,
                     EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, (src_vocab, tgt_vocab, n_enc, n_dec, norm_first, pad, src_lengths, tgt_lengths) in enumerate([
                (23, 31, 2, 1, False, 0, [7, 4, 1], [5, 5, 2]), (31, 23, 1, 2, True, 3, [7, 7, 5], [5, 3, 4]),
                (12, 40, 2, 2, False, 1, [6], [5]), (40, 12, 2, 2, True, 0, [2, 7], [1, 5])]):
            torch.manual_seed(seed)
            model = Transformer(src_vocab, tgt_vocab, d_model=16, n_heads=4, num_encoder_layers=n_enc, num_decoder_layers=n_dec,
                                d_ff=24, dropout=0.3, max_len=20, pad_idx=pad, norm_first=norm_first).eval()
            randomise_norms(model, seed)
            with torch.no_grad():
                model.generator.bias.uniform_(-0.5, 0.5)
            theirs = torch_transformer(model, 16, 4, 24, norm_first)
            generator = torch.Generator().manual_seed(seed)
            src = tokens(src_lengths, max(src_lengths), src_vocab, pad, generator)
            tgt = tokens(tgt_lengths, max(tgt_lengths), tgt_vocab, pad, generator)
            what = (f"Transformer({src_vocab}, {tgt_vocab}, d_model=16, n_heads=4, num_encoder_layers={n_enc}, "
                    f"num_decoder_layers={n_dec}, d_ff=24, pad_idx={pad}, norm_first={norm_first}).eval()"
                    f"(src {list(src.shape)}, tgt {list(tgt.shape)})")
            out = call(lambda: model(src, tgt), what, "The encoder and the cross-attention take src_mask = padding_mask(src, "
                       "self.pad_idx), the decoder's self-attention tgt_mask = target_mask(tgt, self.pad_idx).")
            d = 16
            testing.assert_close(out, transformer_logits(model, theirs, src, tgt, pad), what, atol=1e-4, dtype=torch.float32,
                         mistakes=named_mistakes(model, theirs, src, tgt, pad))
            # encode and decode on their own
            memory, hidden = transformer_logits(model, theirs, src, tgt, pad, parts=True)
            src_mask, tgt_mask = padding_mask(src, pad), target_mask(tgt, pad)
            testing.assert_close(model.encode(src, src_mask), memory, f"{what}: encode(src, src_mask)", atol=1e-4, mistakes={
                "encode ignores src_mask": lambda: theirs.encoder(
                    F.embedding(src, model.src_embed.embedding.weight.double()) * math.sqrt(d) + sinusoids(src.size(1), d))})
            testing.assert_close(model.decode(tgt, memory.float(), src_mask, tgt_mask), hidden,
                         f"{what}: decode(tgt, memory, src_mask, tgt_mask)", atol=1e-4, mistakes={
                "decode applies the generator; it should return the decoder's states [B, T, d_model]":
                    lambda: F.linear(hidden, model.generator.weight.double(), model.generator.bias.double())})


def check_transformer_masks(Transformer, namespace):
    """The hidden tests of `test_Transformer_masks`."""
    with testing.substituted(namespace, Encoder=course.Encoder, Decoder=course.Decoder,
                     EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, (norm_first, pad) in enumerate([(False, 2), (True, 0), (True, 5)]):
            torch.manual_seed(seed)
            model = Transformer(25, 35, d_model=16, n_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=24,
                                dropout=0.2, max_len=30, pad_idx=pad, norm_first=norm_first).eval()
            randomise_norms(model, seed)
            generator = torch.Generator().manual_seed(seed)
            src = tokens([6, 3, 1], 6, 25, pad, generator)
            tgt = tokens([5, 5, 2], 5, 35, pad, generator)
            what = f"Transformer(25, 35, ..., pad_idx={pad}, norm_first={norm_first}).eval()"
            logits = call(lambda: model(src, tgt), what + "(src [3, 6], tgt [3, 5])", "Check the masks.")
            # padding of the source never changes the logits of the real target tokens
            longer = torch.cat([src, torch.full((3, 4), pad)], dim=1)
            assert torch.allclose(model(longer, tgt), logits, atol=1e-5), (
                f"{what}: four more padding tokens at the end of the source changed the logits: build src_mask with "
                "padding_mask(src, self.pad_idx) and pass it to the encoder and the cross-attention")
            # causality, position by position
            for position in range(4):
                changed, tail = tgt.clone(), (tgt[:, position + 1:] + 1) % 35
                tail[tail == pad] = (pad + 1) % 35
                changed[:, position + 1:] = tail
                assert torch.allclose(model(src, changed)[:, :position + 1], logits[:, :position + 1], atol=1e-5), (
                    f"{what}: changing the target tokens after position {position} changed the logits up to position "
                    f"{position}: build tgt_mask with target_mask(tgt, self.pad_idx)")
            # padding appended to the target leaves the earlier logits alone
            more = torch.cat([tgt, torch.full((3, 2), pad)], dim=1)
            assert torch.allclose(model(src, more)[:, :5], logits, atol=1e-5), (
                f"{what}: appending padding to the target changed the earlier logits")
            theirs = torch_transformer(model, 16, 2, 24, norm_first)
            testing.assert_close(logits, transformer_logits(model, theirs, src, tgt, pad), what + "(src, tgt)", atol=1e-4,
                         mistakes=named_mistakes(model, theirs, src, tgt, pad))


def check_transformer_dropout(Transformer, namespace):
    """The hidden tests of `test_Transformer_dropout`."""
    with testing.substituted(namespace, Encoder=course.Encoder, Decoder=course.Decoder,
                     EncoderLayer=course.EncoderLayer, DecoderLayer=course.DecoderLayer):
        for seed, norm_first in enumerate((False, True)):
            torch.manual_seed(seed)
            model = Transformer(25, 35, d_model=16, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=24,
                                dropout=0.3, max_len=30, pad_idx=0, norm_first=norm_first).train()
            generator = torch.Generator().manual_seed(seed)
            src, tgt = tokens([6, 4], 6, 25, 0, generator), tokens([5, 3], 5, 35, 0, generator)
            drops = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
            assert drops and all(p == 0.3 for p in drops), (
                f"the dropout modules have probabilities {sorted(set(drops))}, expected 0.3 everywhere: pass dropout on")
            with testing.same_random_numbers(seed):
                out = call(lambda: model(src, tgt), "model(src, tgt)", "Check the masks forward builds.")
            # reference: the contract's data path through the student's own methods, with the same random numbers
            with testing.same_random_numbers(seed):
                src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt, 0)
                expected = model.generator(model.decode(tgt, model.encode(src, src_mask), src_mask, tgt_mask))
            testing.assert_close(out, expected, f"Transformer(..., dropout=0.3, norm_first={norm_first}).train()(src, tgt), against "
                         "generator(decode(tgt, encode(src, src_mask), src_mask, tgt_mask)) drawing the same random numbers "
                         "(forward should build the masks, encode, then decode),", atol=1e-5)
            with torch.no_grad():
                assert not torch.allclose(out, model.eval()(src, tgt), atol=1e-4), "train mode gives the eval-mode logits"


_LAYER = (copy_norm, copy_layer, torch_layer, compose, encoder_layer_mistakes,
          encoder_layer_with_dropout, decoder_layer_mistakes, decoder_layer_with_dropout)
_MODEL = (torch_transformer, sinusoids, transformer_logits, named_mistakes)
ANSWER_HELPERS = {"EncoderLayer": _LAYER, "DecoderLayer": _LAYER, "Encoder": _LAYER + (torch_stack,),
                  "Decoder": _LAYER + (torch_stack,), "Transformer": _LAYER + (torch_stack,) + _MODEL}
