"""The finished components of notebooks 02-06 against independent oracles.

Oracles: for notebooks 02-05 and 06 the hidden tests' own (course_testkit.oracles: float64 formulas,
F.scaled_dot_product_attention, brute-force masks, nn.MultiheadAttention with our weights copied in,
F.layer_norm, nn.TransformerEncoder(Layer) / nn.TransformerDecoder(Layer) with our weights copied in).
PyTorch's masks have the opposite polarity to ours: for them True means "masked out".
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_testkit.oracles import attention as attention_oracle
from course_testkit.oracles import layer_norm_feed_forward as layer_norm_oracle
from course_testkit.oracles import masking as masking_oracle
from course_testkit.oracles import multi_head_attention as multi_head_oracle
from course_testkit.oracles.multi_head_attention import copy_weights
from course_testkit.oracles.transformer import copy_layer, sinusoids, torch_layer, torch_stack
from course_testkit.probes.attention import dropout_calls
from course_testkit.probes.multi_head_attention import attn_calls, give_weights, stand_in
from course_testkit.testing import same_random_numbers
from transformer_course.attention import MultiHeadAttention, merge_heads, scaled_dot_product_attention, split_heads
from transformer_course.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, LayerNorm, PositionwiseFeedForward
from transformer_course.masks import causal_mask, padding_mask, target_mask
from transformer_course.model import Transformer

D_MODEL, N_HEADS, D_FF = 16, 4, 32
PAD = 0


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# ----------------------------------------------------------------------------- helpers

def lengths_to_keep(lengths, length):
    """[B] lengths -> bool [B, length], True at real (non-padding) positions."""
    return torch.arange(length)[None, :] < torch.as_tensor(lengths)[:, None]


def random_tokens(lengths, length, vocab_size):
    """[B, length] ids in 1..vocab_size-1, padded with PAD after each row's length."""
    tokens = torch.randint(1, vocab_size, (len(lengths), length))
    return tokens.masked_fill(~lengths_to_keep(lengths, length), PAD)


@torch.no_grad()
def randomize_(module):
    """Move every parameter away from its initial value, so a parameter that is ignored or copied
    to the wrong place shows up (LayerNorm gains stay positive)."""
    for name, p in module.named_parameters():
        p.uniform_(0.5, 1.5) if name.endswith("gamma") else p.uniform_(-0.5, 0.5)
    return module




# ----------------------------------------------------------------------------- 02 attention

def test_attention_matches_float64_formula_and_torch_sdpa():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 6)
    keep = torch.rand(2, 1, 5, 7) > 0.4
    keep[..., 0] = True  # every query keeps at least one key here
    output, weights = attention_oracle.check_attention(scaled_dot_product_attention, "attention", q, k, v, keep)
    expected_output, expected_weights = attention_oracle._formula(q, k, v, keep)
    torch.testing.assert_close(weights.double(), expected_weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(output.double(), expected_output, atol=1e-5, rtol=1e-5)
    assert (weights[~keep.expand_as(weights)] == 0).all()


def test_attention_without_mask_matches_torch_sdpa():
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 5)
    _, weights = attention_oracle.check_attention(scaled_dot_product_attention, "attention", q, k, v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))


def test_attention_fully_masked_row_is_zero_and_finite_with_finite_gradients():
    q, k, v = (torch.randn(2, 4, 3, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 4, 4, dtype=torch.bool)
    keep[0, 1] = False  # query 1 of batch 0 may attend to nothing
    output, weights = attention_oracle.check_attention(scaled_dot_product_attention, "attention", q, k, v, keep)
    assert torch.isfinite(output).all() and torch.isfinite(weights).all()
    assert (weights[0, 1] == 0).all() and (output[0, 1] == 0).all()
    output.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_attention_dropout_applies_to_weights_and_returns_weights_before_it():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    output, weights = scaled_dot_product_attention(q, k, v)
    seen = []
    dropped_output, dropped_weights = scaled_dot_product_attention(q, k, v, dropout=lambda w: seen.append(w) or 3 * w)
    torch.testing.assert_close(seen[0], weights)            # called on the weights
    torch.testing.assert_close(dropped_weights, weights)    # returned before dropout
    torch.testing.assert_close(dropped_output, 3 * output)  # used for the output
    # nn.Dropout in train mode: the same output as PyTorch's attention with the same random numbers
    keep = attention_oracle.random_keep(2, 3, 5)
    found = dropout_calls(scaled_dot_product_attention, q, k, v, keep, 0.3, seed=4)
    attention_oracle.check_dropout(found, "attention with nn.Dropout(0.3) in train mode", q, k, v, keep, 0.3, seed=4)


def test_attention_rejects_a_mask_that_is_not_bool():
    q = torch.randn(1, 2, 4)
    with pytest.raises(ValueError, match="bool"):
        scaled_dot_product_attention(q, q, q, torch.ones(1, 2, 2))


def test_checks_of_other_cells_take_attention_right_or_wrong_as_the_values_cells_name_it():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    keep = torch.tensor([[True, False, True, True, False]])
    for scale in (math.sqrt(4), 1.0, 4.0):   # right, not scaled, divided by d_k: graded in the values cells
        weights = (q @ k.T / scale).masked_fill(~keep, -math.inf).softmax(-1)
        attention_oracle.check_attention_like((weights @ v, weights), "attention", q, k, v, keep)
    with pytest.raises(AssertionError, match="not the attention weights"):
        attention_oracle.check_attention_like((torch.zeros(3, 2), torch.full((3, 5), 0.2)), "attention", q, k, v, keep)


# ----------------------------------------------------------------------------- 03 masks

def test_padding_mask():
    tokens = torch.tensor([[5, 3, 0, 0], [7, 0, 2, 9]])
    mask = padding_mask(tokens, pad_idx=0)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 4)
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, False, True, True]]
    assert padding_mask(tokens, pad_idx=7)[1, 0, 0].tolist() == [False, True, True, True]
    masking_oracle.check_padding_values(padding_mask, torch.randint(0, 4, (5, 7)), 2)
    with pytest.raises(ValueError, match="shape"):
        padding_mask(tokens[0], pad_idx=0)


def test_causal_mask():
    mask = causal_mask(5, device="cpu")
    assert mask.dtype == torch.bool and mask.shape == (1, 1, 5, 5)
    for size in (1, 5, 9):
        masking_oracle.check_causal_values(causal_mask, size)
    with pytest.raises(ValueError, match="0"):
        causal_mask(0)


def test_target_mask_is_padding_and_causal():
    tokens = torch.tensor([[4, 4, 4, 0], [4, 0, 4, 4]])
    mask = target_mask(tokens, pad_idx=0)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 4, 4)
    masking_oracle.check_target_values(target_mask, tokens, 0)
    masking_oracle.check_target_values(target_mask, torch.randint(0, 3, (4, 6)), 1)


def test_target_mask_checks_take_the_stand_ins_parts_or_the_true_ones():
    """target_mask's tests give it random stand-ins for padding_mask and causal_mask; either part may be computed."""
    from course_testkit.probes.masking import causal_double, padding_double
    tokens = torch.tensor([[4, 4, 1, 0, 0, 2], [3, 0, 2, 2, 1, 0], [0, 0, 0, 0, 0, 0]])
    parts = {"paddings": [padding_double(tokens, 0)], "causals": [causal_double(6)]}
    for answer in (lambda t, p: padding_double(t, p) & causal_double(t.size(1)),
                   lambda t, p: padding_double(t, p) & causal_mask(t.size(1)), target_mask):
        masking_oracle.check_target_values(answer, tokens, 0, **parts)
        masking_oracle.check_target_like(answer(tokens, 0), tokens, 0, "target_mask", **parts)
    with pytest.raises(AssertionError, match="use &"):
        masking_oracle.check_target_values(lambda t, p: padding_double(t, p) | causal_double(t.size(1)), tokens, 0, **parts)
    with pytest.raises(AssertionError, match="never the queries"):
        masking_oracle.check_target_values(
            lambda t, p: padding_double(t, p).transpose(-1, -2) & causal_double(t.size(1)), tokens, 0, **parts)
    assert causal_double(4, device="meta").device.type == "meta"


# ----------------------------------------------------------------------------- 04 multi-head attention

def test_split_heads_and_merge_heads():
    x = torch.randn(2, 3, 12)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 3)
    for h in range(4):
        torch.testing.assert_close(heads[:, h], x[..., 3 * h:3 * (h + 1)])
    torch.testing.assert_close(merge_heads(heads), x)
    with pytest.raises(ValueError, match=r"12.*5"):
        split_heads(x, 5)
    with pytest.raises(ValueError, match=r"\[2, 12\]"):
        split_heads(x[:, 0], 4)
    with pytest.raises(ValueError, match=r"\[2, 3, 12\]"):
        merge_heads(x)


def test_multi_head_attention_rejects_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"10.*3"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"8.*0"):
        MultiHeadAttention(8, 0)


def test_multi_head_attention_attributes():
    mha = MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.2)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        layer = getattr(mha, name)
        assert isinstance(layer, nn.Linear) and layer.bias is not None
        assert (layer.in_features, layer.out_features) == (D_MODEL, D_MODEL)
    assert isinstance(mha.dropout, nn.Dropout) and mha.dropout.p == 0.2
    assert mha.attn is None
    mha(torch.randn(2, 3, D_MODEL), torch.randn(2, 5, D_MODEL), torch.randn(2, 5, D_MODEL))
    assert mha.attn.shape == (2, N_HEADS, 3, 5)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "full"])
@pytest.mark.parametrize("inputs", ["self", "cross", "distinct"])
def test_multi_head_attention_matches_nn_multihead_attention(need_weights, mask_kind, inputs):
    ours = randomize_(MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.0)).double()
    ours.need_weights = need_weights
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, dropout=0.0, batch_first=True).double()
    copy_weights(ours, theirs)
    query, key, value = (torch.randn(3, length, D_MODEL).double() for length in (4, 6, 6))
    if inputs == "self":  # one tensor for all three (Tq = Tk)
        query = key = value = torch.randn(3, 6, D_MODEL).double()
    elif inputs == "cross":  # keys and values from the same memory
        value = key
    keep_keys = lengths_to_keep([6, 2, 4], 6)
    if mask_kind == "none":
        mask, their_masks = None, {}
    elif mask_kind == "padding":
        mask, their_masks = keep_keys[:, None, None, :], {"key_padding_mask": ~keep_keys}
    else:  # a different mask for every batch element and query, shared by the heads
        t_q = query.size(1)
        mask = (torch.rand(3, 1, t_q, 6) > 0.5) | torch.eye(t_q, 6, dtype=torch.bool)
        their_masks = {"attn_mask": ~mask.expand(3, N_HEADS, t_q, 6).reshape(3 * N_HEADS, t_q, 6)}
    expected, expected_weights = theirs(query, key, value, average_attn_weights=False, **their_masks)
    torch.testing.assert_close(ours(query, key, value, mask), expected)
    if need_weights:
        torch.testing.assert_close(ours.attn, expected_weights)
    else:
        assert ours.attn is None


@pytest.mark.parametrize("need_weights", [True, False])
def test_multi_head_attention_train_mode_matches_nn_with_the_same_seed(need_weights):
    ours = randomize_(MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.3)).double()
    ours.need_weights = need_weights
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, dropout=0.3, batch_first=True).double()
    copy_weights(ours, theirs)
    x = torch.randn(2, 5, D_MODEL).double()
    with sdpa_kernel(SDPBackend.MATH):  # the kernel whose dropout draws like nn.Dropout
        torch.manual_seed(7)
        output = ours(x, x, x)
        torch.manual_seed(7)
        expected = theirs(x, x, x, need_weights=need_weights)[0]
        torch.manual_seed(7)
        assert not torch.allclose(output, ours.eval()(x, x, x))  # dropout did something
    torch.testing.assert_close(output, expected)


def test_multi_head_attention_passes_the_hidden_tests_checks():
    mha = MultiHeadAttention(12, 3, dropout=0.3).eval()
    query, memory = torch.randn(2, 4, 12), torch.randn(2, 5, 12)
    multi_head_oracle.check_values(mha(query, memory, memory), mha, 3, "MultiHeadAttention(12, 3)", query, memory, memory)
    mask = lengths_to_keep([5, 2], 5)[:, None, None, :]
    multi_head_oracle.check_mask(mha(query, memory, memory, mask), mha, 3, "MultiHeadAttention(12, 3) with a mask",
                                 (query, memory, memory), mask)
    train_query = torch.randn(2, 4, 12)
    found = attn_calls({}, mha, query, memory, memory, mask, train_query)
    multi_head_oracle.check_attn(found, mha, 3, 0.3, "attn after MultiHeadAttention(12, 3)", query, memory, memory, mask,
                                 train_query)
    with same_random_numbers(11):
        output = mha.train()(query, memory, memory, mask)
    multi_head_oracle.check_dropout(output, mha, 3, 0.3, "MultiHeadAttention(12, 3, dropout=0.3).train()",
                                    query, memory, memory, mask, seed=11)


def test_the_judges_copy_of_the_weights_is_the_probes():
    """The judge rebuilds from the seed the weights the probe gave the student's module, shared layers included."""
    mha = MultiHeadAttention(12, 3)
    twin = stand_in(12, 5, give_weights(mha, 12, 5))
    assert mha.state_dict().keys() == twin.state_dict().keys()
    for name, tensor in mha.state_dict().items():
        assert torch.equal(tensor, twin.state_dict()[name]), name
    shared = MultiHeadAttention(12, 3)
    shared.w_k = shared.w_q
    shared.w_v = nn.Linear(12, 12, bias=False)
    layout = give_weights(shared, 12, 5)
    assert layout["w_q"] == layout["w_k"] == ["w_k", True] and layout["w_v"] == ["w_v", False]
    twin = stand_in(12, 5, layout)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        assert torch.equal(getattr(shared, name).weight, getattr(twin, name).weight), name
    assert twin.w_v.bias is None


def test_fast_path_equals_weights_path_including_fully_masked_rows_and_gradients():
    mha = randomize_(MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.1)).double().eval()
    query, memory = torch.randn(3, 4, D_MODEL).double(), torch.randn(3, 5, D_MODEL).double()
    mask = torch.rand(3, 1, 4, 5) > 0.5
    mask[0, 0, 2] = False  # one query with nothing to attend to
    mask[2] = False        # a whole batch element with nothing to attend to
    results = []
    for need_weights in (True, False):
        mha.need_weights = need_weights
        mha.zero_grad()
        output = mha(query, memory, memory, mask)
        output.pow(2).sum().backward()
        results.append((output, [p.grad.clone() for p in mha.parameters()]))
    (slow, slow_grads), (fast, fast_grads) = results
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, slow)
    for fast_grad, slow_grad in zip(fast_grads, slow_grads):
        torch.testing.assert_close(fast_grad, slow_grad)
    # a query that attends to nothing passes on only the output projection's bias
    torch.testing.assert_close(fast[2], mha.w_o.bias.expand(4, D_MODEL))


def test_fast_path_stays_finite_where_torch_sdpa_gives_nan(monkeypatch):
    """Some PyTorch versions' F.scaled_dot_product_attention return NaN for a query with no key to attend to."""
    def nan_sdpa(query, key, value, attn_mask=None, dropout_p=0.0):
        scores = (query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))).masked_fill(~attn_mask, -math.inf)
        return scores.softmax(dim=-1) @ value

    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(2, 3, D_MODEL)
    mask = torch.tensor([True, True, False]).expand(2, 1, 3, 3).clone()
    mask[1] = False
    expected = mha(x, x, x, mask)
    monkeypatch.setattr(F, "scaled_dot_product_attention", nan_sdpa)
    mha.need_weights = False
    output = mha(x, x, x, mask)
    torch.testing.assert_close(output, expected)
    output.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_fast_path_equals_weights_path_in_train_mode_with_the_same_seed():
    mha = randomize_(MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.5)).train()
    x = torch.randn(2, 6, D_MODEL)
    mask = causal_mask(6)
    outputs = []
    with sdpa_kernel(SDPBackend.MATH):
        for need_weights in (True, False):
            mha.need_weights = need_weights
            torch.manual_seed(3)
            outputs.append(mha(x, x, x, mask))
    torch.testing.assert_close(outputs[1], outputs[0])
    assert not torch.allclose(outputs[1], mha.eval()(x, x, x, mask))  # dropout is on in train mode


def test_fast_path_rejects_a_mask_that_is_not_bool():
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    mha.need_weights = False
    x = torch.randn(1, 3, D_MODEL)
    with pytest.raises(ValueError, match="bool"):
        mha(x, x, x, torch.zeros(1, 1, 3, 3))


# ----------------------------------------------------------------------------- 05 layer norm, feed-forward

def test_layer_norm_matches_formula_and_f_layer_norm():
    norm = randomize_(LayerNorm(D_MODEL, eps=0.1))
    x = torch.randn(3, 5, D_MODEL) * 0.3  # a small variance, so eps matters
    layer_norm_oracle.check_affine(norm(x), x, norm.gamma.detach(), norm.beta.detach(), 0.1, "LayerNorm")
    layer_norm_oracle.check_values(LayerNorm(D_MODEL, eps=0.1)(x), x, 0.1, "LayerNorm without gamma and beta")
    x = x.requires_grad_()
    upstream = torch.randn(x.shape)
    (norm(x) * upstream).sum().backward()
    grads = {"x": x.grad, "gamma": norm.gamma.grad, "beta": norm.beta.grad}
    layer_norm_oracle.check_gradients(grads, x, upstream, norm.gamma.detach(), norm.beta.detach(), 0.1)


def test_layer_norm_parameters_start_as_identity():
    norm = LayerNorm(D_MODEL)
    assert isinstance(norm.gamma, nn.Parameter) and isinstance(norm.beta, nn.Parameter)
    assert torch.equal(norm.gamma, torch.ones(D_MODEL)) and torch.equal(norm.beta, torch.zeros(D_MODEL))
    assert norm.eps == 1e-5


def test_feed_forward_matches_formula_in_eval_and_train_mode():
    ff = PositionwiseFeedForward(D_MODEL, D_FF, dropout=0.5)
    assert (ff.linear1.in_features, ff.linear1.out_features) == (D_MODEL, D_FF)
    assert (ff.linear2.in_features, ff.linear2.out_features) == (D_FF, D_MODEL)
    x = torch.randn(2, 3, D_MODEL)
    with same_random_numbers(1):
        output = ff.eval()(x)
    layer_norm_oracle.check_feed_forward_eval(output, ff, x, 0.5, 1, "PositionwiseFeedForward in eval mode")
    with same_random_numbers(1):
        output = ff.train()(x)
    layer_norm_oracle.check_feed_forward_train(output, ff, x, 0.5, 1, "PositionwiseFeedForward in train mode")


# ----------------------------------------------------------------------------- 06 layers and stacks

@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_nn_transformer_encoder_layer(norm_first):
    ours = randomize_(EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)).double()
    theirs = copy_layer(torch_layer("encoder", D_MODEL, N_HEADS, D_FF, norm_first), ours)
    x = torch.randn(3, 5, D_MODEL).double()
    keep = lengths_to_keep([5, 3, 1], 5)
    torch.testing.assert_close(ours(x, keep[:, None, None, :]), theirs(x, src_key_padding_mask=~keep))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_nn_transformer_decoder_layer(norm_first):
    ours = randomize_(DecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)).double()
    theirs = copy_layer(torch_layer("decoder", D_MODEL, N_HEADS, D_FF, norm_first), ours)
    x, memory = torch.randn(3, 4, D_MODEL).double(), torch.randn(3, 6, D_MODEL).double()
    keep_src, keep_tgt = lengths_to_keep([6, 2, 4], 6), lengths_to_keep([4, 4, 2], 4)
    tgt_mask = keep_tgt[:, None, None, :] & causal_mask(4)
    output = ours(x, memory, src_mask=keep_src[:, None, None, :], tgt_mask=tgt_mask)
    expected = theirs(x, memory, tgt_mask=~causal_mask(4)[0, 0], tgt_key_padding_mask=~keep_tgt,
                      memory_key_padding_mask=~keep_src)
    torch.testing.assert_close(output, expected)


def residual_oracle(x, sublayers, norms, p, norm_first):
    """Sublayers with their residual connections, written from the paper (Post-LN) or Pre-LN, dropout p."""
    for sublayer, norm in zip(sublayers, norms):
        layer_norm = lambda y: F.layer_norm(y, (D_MODEL,), norm.gamma, norm.beta)  # noqa: E731
        if norm_first:
            x = x + F.dropout(sublayer(layer_norm(x)).contiguous(), p)
        else:
            x = layer_norm(x + F.dropout(sublayer(x).contiguous(), p))
    return x


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_layers_in_train_mode_match_their_definition_with_the_same_seed(kind, norm_first):
    """Dropout where the contract puts it: on the attention weights, inside the feed-forward network and
    on each sublayer's output before the residual sum; the oracle draws its masks in the same order."""
    p = 0.3
    layer_class = EncoderLayer if kind == "encoder" else DecoderLayer
    ours = randomize_(layer_class(D_MODEL, N_HEADS, D_FF, dropout=p, norm_first=norm_first)).double().train()
    ff = ours.feed_forward
    self_attn = nn.MultiheadAttention(D_MODEL, N_HEADS, p, batch_first=True).double()
    copy_weights(ours.self_attn, self_attn)
    x, memory = torch.randn(2, 4, D_MODEL).double(), torch.randn(2, 5, D_MODEL).double()
    keep = lengths_to_keep([4, 2], 4)
    if kind == "encoder":
        mask, sublayers = keep[:, None, None, :], [lambda y: self_attn(y, y, y, key_padding_mask=~keep)[0]]
    else:
        cross_attn = nn.MultiheadAttention(D_MODEL, N_HEADS, p, batch_first=True).double()
        copy_weights(ours.cross_attn, cross_attn)
        mask = causal_mask(4)
        sublayers = [lambda y: self_attn(y, y, y, attn_mask=~mask[0, 0])[0],
                     lambda y: cross_attn(y, memory, memory)[0]]
    sublayers.append(lambda y: ff.linear2(F.dropout(F.relu(ff.linear1(y)), p)))
    norms = (ours.norm1, ours.norm2) if kind == "encoder" else (ours.norm1, ours.norm2, ours.norm3)
    with sdpa_kernel(SDPBackend.MATH):
        torch.manual_seed(11)
        output = ours(x, mask) if kind == "encoder" else ours(x, memory, tgt_mask=mask)
        torch.manual_seed(11)
        expected = residual_oracle(x, sublayers, norms, p, norm_first)
    torch.testing.assert_close(output, expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_nn_transformer_encoder(norm_first):
    ours = randomize_(Encoder(3, D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)).double()
    assert isinstance(ours.layers, nn.ModuleList) and len(ours.layers) == 3
    assert isinstance(ours.norm, LayerNorm) if norm_first else ours.norm is None
    theirs = torch_stack(ours, "encoder", D_MODEL, N_HEADS, D_FF, norm_first)
    x = torch.randn(2, 5, D_MODEL).double()
    keep = lengths_to_keep([5, 2], 5)
    torch.testing.assert_close(ours(x, keep[:, None, None, :]), theirs(x, src_key_padding_mask=~keep))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_matches_nn_transformer_decoder(norm_first):
    ours = randomize_(Decoder(3, D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)).double()
    assert isinstance(ours.layers, nn.ModuleList) and len(ours.layers) == 3
    assert isinstance(ours.norm, LayerNorm) if norm_first else ours.norm is None
    theirs = torch_stack(ours, "decoder", D_MODEL, N_HEADS, D_FF, norm_first)
    x, memory = torch.randn(2, 4, D_MODEL).double(), torch.randn(2, 6, D_MODEL).double()
    keep_src, keep_tgt = lengths_to_keep([6, 3], 6), lengths_to_keep([4, 3], 4)
    output = ours(x, memory, keep_src[:, None, None, :], keep_tgt[:, None, None, :] & causal_mask(4))
    expected = theirs(x, memory, tgt_mask=~causal_mask(4)[0, 0], tgt_key_padding_mask=~keep_tgt,
                      memory_key_padding_mask=~keep_src)
    torch.testing.assert_close(output, expected)


def test_unregistered_layers_counts_the_layers_a_plain_list_hides():
    """Notebook 06's hint for a stack whose layers are in a plain list: its .eval() does not reach them."""
    from course_testkit.probes.transformer import unregistered_layers

    encoder = Encoder(2, 16, 4, 32)
    assert unregistered_layers(encoder) == 0
    layers = list(encoder.layers)
    del encoder.layers
    encoder.layers = layers                     # a plain list: not a submodule
    assert unregistered_layers(encoder) == 2
    assert all(layer.training for layer in encoder.eval().layers)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal_by_gradients(norm_first):
    decoder = randomize_(Decoder(2, D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)).double()
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 3, D_MODEL, dtype=torch.float64, requires_grad=True)
    output = decoder(x, memory, tgt_mask=causal_mask(5))
    for t in range(5):
        grad_x, grad_memory = torch.autograd.grad(output[:, t].sum(), (x, memory), retain_graph=True)
        assert (grad_x[:, t + 1:] == 0).all(), f"position {t} depends on a later position"
        assert (grad_x[:, :t + 1].abs().sum(-1) > 0).all(), f"position {t} ignores an earlier position"
        assert (grad_memory.abs().sum(-1) > 0).all(), "the decoder ignores part of the memory"


# ----------------------------------------------------------------------------- 06 the Transformer

def small_model(norm_first=False, src_vocab_size=23, tgt_vocab_size=19, **kwargs):
    return Transformer(src_vocab_size, tgt_vocab_size, d_model=D_MODEL, n_heads=N_HEADS, num_encoder_layers=2,
                       num_decoder_layers=2, d_ff=D_FF, dropout=0.1, max_len=64, pad_idx=PAD,
                       norm_first=norm_first, **kwargs)


def test_transformer_attributes():
    model = small_model()
    assert model.pad_idx == PAD
    assert model.src_embed.embedding.num_embeddings == 23 and model.tgt_embed.embedding.num_embeddings == 19
    assert isinstance(model.encoder, Encoder) and isinstance(model.decoder, Decoder)
    assert isinstance(model.generator, nn.Linear)
    assert (model.generator.in_features, model.generator.out_features) == (D_MODEL, 19)
    assert not any(name.startswith("pos_encoding") for name, _ in model.named_parameters())


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_matches_an_nn_transformer_oracle_end_to_end(norm_first):
    model = small_model(norm_first).double().eval()
    randomize_(model.encoder), randomize_(model.decoder)
    encoder = torch_stack(model.encoder, "encoder", D_MODEL, N_HEADS, D_FF, norm_first)
    decoder = torch_stack(model.decoder, "decoder", D_MODEL, N_HEADS, D_FF, norm_first)
    src = random_tokens([7, 4, 2], 7, 23)
    tgt = random_tokens([5, 5, 3], 5, 19)
    pe = sinusoids(7, D_MODEL)
    scale = math.sqrt(D_MODEL)
    memory = encoder(F.embedding(src, model.src_embed.embedding.weight) * scale + pe[:7],
                     src_key_padding_mask=src == PAD)
    hidden = decoder(F.embedding(tgt, model.tgt_embed.embedding.weight) * scale + pe[:5], memory,
                     tgt_mask=~causal_mask(5)[0, 0], tgt_key_padding_mask=tgt == PAD,
                     memory_key_padding_mask=src == PAD)
    expected = F.linear(hidden, model.generator.weight, model.generator.bias)
    logits = model(src, tgt)
    assert logits.shape == (3, 5, 19)
    torch.testing.assert_close(logits, expected)
    # encode / decode are the two halves of forward
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    decoded = model.decode(tgt, model.encode(src, src_mask), src_mask, tgt_mask)
    torch.testing.assert_close(model.generator(decoded), logits)


def test_transformer_fast_path_gives_the_same_logits_and_no_weights():
    model = small_model().eval()
    src, tgt = random_tokens([6, 3], 6, 23), random_tokens([4, 2], 4, 19)
    logits = model(src, tgt)
    assert model.decoder.layers[-1].cross_attn.attn.shape == (2, N_HEADS, 4, 6)  # kept by default
    assert model.set_need_weights(False) is model
    torch.testing.assert_close(model(src, tgt), logits)
    assert all(m.attn is None for m in model.modules() if isinstance(m, MultiHeadAttention))


def test_source_and_target_padding_never_change_real_outputs():
    model = small_model().eval()
    src, tgt = random_tokens([6, 3], 6, 23), random_tokens([4, 2], 4, 19)
    logits = model(src, tgt)
    more_src = F.pad(src, (0, 3), value=PAD)
    torch.testing.assert_close(model(more_src, tgt), logits)
    memory = model.encode(src, padding_mask(src, PAD))
    torch.testing.assert_close(model.encode(more_src, padding_mask(more_src, PAD))[:, :6], memory)
    # and what stands at a padded source position is never read
    scrambled = src.masked_fill(src == PAD, 5)
    scrambled_logits = model.decode(tgt, model.encode(scrambled, padding_mask(src, PAD)), padding_mask(src, PAD),
                                    target_mask(tgt, PAD))
    torch.testing.assert_close(model.generator(scrambled_logits), logits)
    # target padding added at the end leaves the real target positions alone
    torch.testing.assert_close(model(src, F.pad(tgt, (0, 2), value=PAD))[:, :4], logits)


def test_transformer_logits_never_see_future_target_tokens():
    model = small_model().eval()
    src, tgt = random_tokens([5, 5], 5, 23), random_tokens([6, 6], 6, 19)
    logits = model(src, tgt)
    for t in range(5):
        changed = tgt.clone()
        changed[:, t + 1:] = torch.randint(1, 19, changed[:, t + 1:].shape)
        changed_logits = model(src, changed)
        torch.testing.assert_close(changed_logits[:, :t + 1], logits[:, :t + 1])
        assert not torch.allclose(changed_logits[:, t + 1:], logits[:, t + 1:])


@pytest.mark.parametrize("need_weights", [True, False])
def test_transformer_with_fully_padded_rows_stays_finite(need_weights):
    model = small_model().train().set_need_weights(need_weights)
    src = random_tokens([4, 0], 4, 23)  # the second source is padding only
    tgt = random_tokens([3, 3], 3, 19)
    tgt[1, 0] = PAD                    # and its target starts with padding: nothing to attend to at t = 0
    logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_different_source_and_target_vocabularies():
    model = small_model(src_vocab_size=40, tgt_vocab_size=7).eval()
    src = torch.randint(20, 40, (2, 5))  # ids no target embedding has
    tgt = torch.randint(1, 7, (2, 3))
    assert model(src, tgt).shape == (2, 3, 7)
    with pytest.raises(IndexError):
        model(tgt, src)  # target ids >= 7 do not exist


def test_every_matrix_starts_xavier_uniform_and_norms_start_as_identity():
    model = Transformer(50, 60, d_model=32, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64)
    matrices = [(name, p) for name, p in model.named_parameters() if p.dim() > 1]
    assert len(matrices) == 2 + 2 * 6 + 2 * 10 + 1  # embeddings, encoder and decoder layers, generator
    for name, p in matrices:
        fan_out, fan_in = p.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert p.abs().max() <= bound, f"{name} exceeds the Xavier bound"
        assert abs(p.std().item() / (bound / math.sqrt(3)) - 1) < 0.15, f"{name} does not look Xavier-uniform"
    for name, p in model.named_parameters():
        if name.endswith("gamma"):
            assert torch.equal(p, torch.ones_like(p)), name
        if name.endswith("beta"):
            assert torch.equal(p, torch.zeros_like(p)), name


def test_layers_are_distinct_modules_with_their_own_weights():
    model = small_model()
    params = list(model.parameters())
    assert len({p.data_ptr() for p in params}) == len(params), "some parameters are shared"
    for stack in (model.encoder.layers, model.decoder.layers):
        assert stack[0] is not stack[1]
        assert not torch.equal(stack[0].self_attn.w_q.weight, stack[1].self_attn.w_q.weight)
    assert not torch.equal(model.src_embed.embedding.weight[:19], model.tgt_embed.embedding.weight)


@pytest.mark.parametrize("query, key, value, what", [
    (torch.zeros(2, 3, 4), torch.zeros(2, 5, 6), torch.zeros(2, 5, 4), "same last dimension"),
    (torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 6, 4), "same length"),
])
def test_attention_rejects_mismatched_shapes(query, key, value, what):
    with pytest.raises(ValueError, match=what):
        scaled_dot_product_attention(query, key, value)
