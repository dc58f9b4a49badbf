"""The package's finished notebook-01 components against independent oracles."""
import math

import pytest
import torch
from torch import nn

from transformer_course import PositionalEncoding, TokenEmbedding, positional_encoding


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
