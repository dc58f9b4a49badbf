"""The package's finished notebook-01 components against independent oracles."""
import math

import pytest
import torch
from torch import nn

from transformer_course import PositionalEncoding, TokenEmbedding, positional_encoding
from transformer_course.embeddings import apply_rope


def loop_oracle(max_len, d_model):
    """The paper's formula, one value at a time, in double precision."""
    return torch.tensor([[math.sin(p / 10000 ** (j / d_model)) if j % 2 == 0 else
                          math.cos(p / 10000 ** ((j - 1) / d_model)) for j in range(d_model)]
                         for p in range(max_len)], dtype=torch.float64)


@pytest.mark.parametrize("max_len, d_model", [(1, 2), (9, 6), (300, 64)])
def test_positional_encoding_matches_the_formula(max_len, d_model):
    pe = positional_encoding(max_len, d_model)
    assert pe.dtype == torch.float32 and pe.shape == (max_len, d_model)
    torch.testing.assert_close(pe.double(), loop_oracle(max_len, d_model), atol=1e-6, rtol=0)


@pytest.mark.parametrize("max_len, d_model", [(10, 7), (0, 4), (4, 0), (-1, 4)])
def test_positional_encoding_rejects_bad_sizes(max_len, d_model):
    with pytest.raises(ValueError, match="d_model|max_len"):
        positional_encoding(max_len, d_model)


def test_token_embedding_is_a_scaled_lookup():
    embed = TokenEmbedding(20, 9, padding_idx=1)
    oracle = nn.Embedding.from_pretrained(embed.embedding.weight.detach().clone(), padding_idx=1)
    tokens = torch.randint(0, 20, (3, 4))
    torch.testing.assert_close(embed(tokens), oracle(tokens) * 3.0)
    assert embed.embedding.padding_idx == 1 and torch.all(embed.embedding.weight[1] == 0)


def test_positional_encoding_module():
    module = PositionalEncoding(8, max_len=12, dropout=0.5)
    assert "pe" in dict(module.named_buffers()) and not list(module.parameters())
    x = torch.randn(2, 12, 8)
    torch.testing.assert_close(module.eval()(x), x + positional_encoding(12, 8))
    module.train()
    torch.manual_seed(3)
    out = module(x)
    torch.manual_seed(3)
    torch.testing.assert_close(out, nn.functional.dropout(x + positional_encoding(12, 8), 0.5, training=True))
    with pytest.raises(ValueError, match="max_len"):
        module(torch.zeros(1, 13, 8))


def complex_rope_oracle(x, positions, base=10000.0):
    """RoPE as the RoFormer paper writes it: pair i as the complex number x[2i] + i x[2i+1], times exp(i p w_i)."""
    d_model = x.size(-1)
    omega = torch.tensor([base ** (-2 * i / d_model) for i in range(d_model // 2)], dtype=torch.float64)
    pairs = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.polar(torch.ones(len(positions), d_model // 2,
                                                                              dtype=torch.float64),
                                                                   positions.double()[:, None] * omega)
    return torch.stack([pairs.real, pairs.imag], dim=-1).flatten(-2)


def test_rope_is_the_papers_complex_rotation():
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 40, 900, 12345])
    rotated = apply_rope(x, positions)
    torch.testing.assert_close(rotated, complex_rope_oracle(x, positions), atol=1e-12, rtol=0)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=0)   # a rotation keeps lengths
    torch.testing.assert_close(apply_rope(x), apply_rope(x, torch.arange(7)), atol=0, rtol=0)


@pytest.mark.parametrize("d_model", [2, 8, 64])
def test_rope_scores_depend_on_the_offset_only(d_model):
    """q at p and k at p' score the same as q at p + s and k at p' + s, for every shift s (float64)."""
    generator = torch.Generator().manual_seed(d_model)
    query, key = torch.randn(2, d_model, dtype=torch.float64, generator=generator)

    def score(p, q):
        rotated = apply_rope(torch.stack([query, key]), torch.tensor([p, q]))
        return rotated[0] @ rotated[1]

    for p, q in [(0, 0), (3, 7), (10, 2), (100, 31)]:
        for shift in (1, 5, 250, 4000):
            assert abs(score(p, q) - score(p + shift, q + shift)) < 1e-9, (p, q, shift)
    assert abs(score(0, 0) - query @ key) < 1e-12                 # no rotation at position 0
    pe = positional_encoding(80, d_model).double()
    added = [(query + pe[p]) @ (key + pe[q]) for p, q in [(3, 7), (53, 57)]]
    assert abs(added[0] - added[1]) > 1e-3                        # the added encoding's score does move with the shift


def test_rope_rejects_odd_sizes():
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.zeros(3, 5))
