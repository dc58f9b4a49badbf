"""Notebook 01: what the probes send of the student's modules, which cannot travel themselves.

A TokenEmbedding or a PositionalEncoding is an object of the student's class: the probes send plain facts about
it (which attributes it has, their shapes, its buffers and parameters) and its outputs and gradients on the
test's inputs. Nothing here knows an expected value: the judges rebuild the inputs and the weights from the same
seeds and compute what is expected. ``table_double`` stands in for positional_encoding in PositionalEncoding's
tests: it is not the encoding, and the judges call it too.
"""
import torch
from torch import nn

from ..probing import attempt


def table_double(max_len, d_model):
    """A stand-in for positional_encoding in the tests of PositionalEncoding: a float32 table [max_len, d_model] of
    pseudo-random numbers in [-1, 1), drawn from the hidden tests' secret, the same for the same sizes. A module
    graded with it shows whether it keeps and adds the table it was given; a mistake in positional_encoding costs
    points in positional_encoding's tests only."""
    from ..probing import secret_generator

    generator = secret_generator(f"positional_encoding stand-in {max_len} {d_model}")
    return 2 * torch.rand(max_len, d_model, generator=generator) - 1


def embedding_structure(embed):
    """What the structure tests check of a TokenEmbedding: whether it is a module, whether its ``embedding``
    is an nn.Embedding, the shape of its table, its padding_idx and its number of trainable values."""
    table = getattr(embed, "embedding", None)
    is_table = isinstance(table, nn.Embedding)
    is_module = isinstance(embed, nn.Module)
    return {"module": is_module, "embedding": is_table,
            "shape": list(table.weight.shape) if is_table else None,
            "padding_idx": table.padding_idx if is_table else None,
            "parameters": sum(p.numel() for p in embed.parameters()) if is_module else None}


def table_gradient(embed, tokens):
    """The gradient of embed(tokens).sum() with respect to the table ``embed.embedding.weight``."""
    embed(tokens).sum().backward()
    return embed.embedding.weight.grad


def embedded_with(embed, weight, tokens):
    """``embed(tokens)`` after ``weight`` (the test's seeded table) is copied into ``embed.embedding.weight``."""
    with torch.no_grad():
        embed.embedding.weight.copy_(weight)
    return embed(tokens)


def encoding_buffers(module):
    """What the buffer tests check of a PositionalEncoding: where ``pe`` is registered, the tensor itself (None if
    it is not one), its shape, the state_dict's keys, the dropout attribute and the number of trainable values."""
    pe = getattr(module, "pe", None)
    dropout = getattr(module, "dropout", None)
    return {"pe_parameter": "pe" in dict(module.named_parameters()), "pe_buffer": "pe" in dict(module.named_buffers()),
            "pe": pe if isinstance(pe, torch.Tensor) else None, "pe_type": type(pe).__name__,
            "pe_shape": list(pe.shape) if isinstance(pe, torch.Tensor) else None,
            "in_state_dict": "pe" in module.state_dict(), "dropout": isinstance(dropout, nn.Dropout),
            "p": dropout.p if isinstance(dropout, nn.Dropout) else None,
            "parameters": sum(p.numel() for p in module.parameters())}


def output_and_gradient(module, x):
    """``module(x)``, and the gradient of its sum with respect to x (``backward``: what backward() raised, if it
    did)."""
    x = x.detach().clone().requires_grad_()
    out = module(x)
    backward = attempt(lambda: out.sum().backward())
    return {"out": out, "backward": backward, "grad": x.grad}


def attempt_on(module, function, *args):
    """``attempt(function, *args)`` for a module the probe built with ``attempt``; if building it raised, that
    ``Raised`` (so that the judge reports the constructor's error, not a call of a ``Raised``)."""
    from ..probing import Raised

    return module if isinstance(module, Raised) else attempt(function, *args)
