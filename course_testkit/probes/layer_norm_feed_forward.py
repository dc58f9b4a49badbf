"""Notebook 05: what the test cells' probes do with the student's LayerNorm and PositionwiseFeedForward.

Nothing here knows an expected value. It draws the weights a test copies into the student's module (from a
seeded generator, so the judge draws the same ones), copies them in, and reads what the judges need of a
module: its structure as plain data, what its parts compute, its gradients after a backward pass.
"""
import math

import torch
from torch import nn

from ..probing import attempt
from ..testing import same_random_numbers

LAYER_NORM_TENSORS = ("gamma", "beta")
FEED_FORWARD_LAYERS = ("linear1", "linear2")


def _tensor(module, dotted):
    """``module.<dotted>`` (e.g. "linear1.weight"), or None where an attribute is missing."""
    value = module
    for name in dotted.split("."):
        value = getattr(value, name, None)
    return value


def loaded(module, weights):
    """``module`` with ``weights`` ({"gamma": tensor, "linear1.weight": tensor, ...}) copied into its own
    tensors (outside autograd); returns it."""
    with torch.no_grad():
        for name, value in weights.items():
            owner, _, attribute = name.rpartition(".")
            getattr(_tensor(module, owner) if owner else module, attribute).copy_(value)
    return module


def feed_forward_weights(d_model, d_ff, generator, dtype=torch.float32):
    """Weights for a PositionwiseFeedForward(d_model, d_ff), drawn as nn.Linear draws its own
    (uniform in ±1/sqrt(fan_in)) from ``generator``: the same in the kernel and in the grader."""
    weights = {}
    for name, (fan_in, fan_out) in zip(FEED_FORWARD_LAYERS, ((d_model, d_ff), (d_ff, d_model))):
        bound = 1 / math.sqrt(fan_in)
        weights[f"{name}.weight"] = ((torch.rand(fan_out, fan_in, generator=generator) * 2 - 1) * bound).to(dtype)
        weights[f"{name}.bias"] = ((torch.rand(fan_out, generator=generator) * 2 - 1) * bound).to(dtype)
    return weights


def layer_norm_facts(module):
    """What the parameter tests read of a LayerNorm: whether it is an nn.Module, its attributes gamma and beta
    (None where not a tensor), which of them are parameters (with requires_grad), its parameter count and its
    state_dict's keys."""
    is_module = isinstance(module, nn.Module)
    tensors = {name: getattr(module, name, None) for name in LAYER_NORM_TENSORS}
    parameters = dict(module.named_parameters()) if is_module else {}
    return {"module": is_module,
            "tensors": {name: t if isinstance(t, torch.Tensor) else None for name, t in tensors.items()},
            "parameters": {name: p for name, p in parameters.items() if name in LAYER_NORM_TENSORS},
            "requires_grad": {name: bool(p.requires_grad) for name, p in parameters.items() if name in LAYER_NORM_TENSORS},
            "n_params": sum(p.numel() for p in parameters.values()) if is_module else 0,
            "state_dict": list(module.state_dict()) if is_module else []}


def feed_forward_facts(module):
    """What the structure tests read of a PositionwiseFeedForward: whether it and its linear1, linear2 and
    dropout are an nn.Module, nn.Linear and nn.Dropout; the linear layers' sizes, weight shapes and whether
    they have a bias; dropout's p; the parameter count."""
    is_module = isinstance(module, nn.Module)
    layers = {}
    for name in FEED_FORWARD_LAYERS:
        layer = getattr(module, name, None)
        weight = getattr(layer, "weight", None)
        layers[name] = {"linear": isinstance(layer, nn.Linear), "in": getattr(layer, "in_features", None),
                        "out": getattr(layer, "out_features", None), "bias": getattr(layer, "bias", None) is not None,
                        "weight": list(weight.shape) if isinstance(weight, torch.Tensor) else None}
    dropout = getattr(module, "dropout", None)
    return {"module": is_module, "layers": layers, "dropout": isinstance(dropout, nn.Dropout),
            "p": getattr(dropout, "p", None),
            "n_params": sum(p.numel() for p in module.parameters()) if is_module else 0}


def gradients(module, x, upstream, names, *others):
    """``(module(x) * upstream).sum().backward()`` on a copy of ``x`` that requires grad: the output, what
    backward() raised (or None), the gradients that reached x and the module's tensors ``names`` (None where
    none did); and, without autograd, the module's outputs (or a Raised each) on ``others``."""
    x = x.detach().clone().requires_grad_()
    out = module(x)
    backward = attempt(lambda: (out * upstream).sum().backward())
    grads = {"x": x.grad}
    for name in names:
        grads[name] = getattr(_tensor(module, name), "grad", None)
    with torch.no_grad():
        outputs = [attempt(module, other) for other in others]
    return {"out": out, "backward": backward, "grads": grads, "others": outputs}


def feed_forward_parts(module, weights, x, hidden, ones, seed):
    """For the structure tests: what the student's linear1 gives ``x`` and its linear2 gives ``hidden`` once they hold
    ``weights`` (``feed_forward_weights``), and what its dropout keeps of ``ones`` in train mode with the random numbers
    of ``seed``: each a Raised where it failed."""
    found = {"loaded": attempt(loaded, module, weights)}
    found["linear1"] = attempt(lambda: module.linear1(x))
    found["linear2"] = attempt(lambda: module.linear2(hidden))
    with same_random_numbers(seed):
        found["dropout"] = attempt(lambda: module.dropout.train()(ones))
    return found
