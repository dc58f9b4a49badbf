"""Oracles of notebook 05 (LayerNorm, PositionwiseFeedForward), shared by its hidden tests and
tests/test_components.py.

The expected values come from PyTorch's F.layer_norm in float64 (and autograd through it for the
gradients), and from the feed-forward formula written out in float64 with the student's own weights and
PyTorch's dropout drawn from the same random numbers. Neither is the course's solution
(transformer_course.layers). Standardisation written out here computes what the known mistakes compute, so
that a message can name the mistake. Every check takes what the student's module returned (the data its probe
sent, in notebook 05's judged test cells) and what the module held: its weights (the module itself, or
``feed_forward_with`` of the weights the probe copied into it) or its gradients.
"""
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from .. import testing
from ..probing import Raised, returned

KEEPDIM_HINT = ("did you forget keepdim=True? The mean and variance must keep a last dimension of size 1 to "
                "broadcast against x")


def _standardised(x, eps, *, dims=(-1,), correction=0, eps_outside=False, no_keepdim=False):
    """Standardisation written out in float64 (differentiable in ``x``); the keyword arguments build what common
    mistakes produce."""
    x = x.double()
    n = 1
    for d in dims:
        n *= x.shape[d]
    mean = x.sum(dim=dims, keepdim=True) / n
    var = ((x - mean) ** 2).sum(dim=dims, keepdim=True) / (n - correction)
    if no_keepdim:
        mean, var = mean.squeeze(-1), var.squeeze(-1)
    if eps_outside:
        return (x - mean) / (var.sqrt() + eps)
    return (x - mean) / (var + eps).sqrt()


def _affine_mistakes(x, gamma, beta, eps):
    """What the common mistakes of the variance and eps give, then scaled by ``gamma`` and shifted by ``beta``
    (float64), to name them in the message."""
    def made(**mistake):
        return lambda: gamma * _standardised(x, eps, **mistake) + beta
    return {
        "the unbiased variance (dividing by d - 1, the default of torch.var / torch.std); "
        "layer norm divides by d (unbiased=False)": made(correction=1),
        "eps is added to the standard deviation; it belongs inside the square root: sqrt(var + eps)":
            made(eps_outside=True),
        "torch.std (unbiased) plus eps: use the biased variance and put eps inside the square root":
            made(correction=1, eps_outside=True),
    }


def _value_mistakes(x, eps):
    """What the common mistakes of the standardisation give for ``x``, to name them in the message."""
    shape = tuple(x.shape)
    mistakes = _affine_mistakes(x, 1.0, 0.0, eps)
    mistakes["the statistics were taken over dimension 0, across the batch (batch norm); use the last dimension"] = \
        lambda: _standardised(x, eps, dims=(0,))
    if eps != 1e-5:
        mistakes["the eps argument is ignored (hard-coded 1e-5?): use the eps given to __init__"] = \
            lambda: _standardised(x, 1e-5)
    if len(shape) >= 3:
        mistakes["the statistics were taken over dimension 1, across the positions; use the last dimension"] = \
            lambda: _standardised(x, eps, dims=(1,))
        mistakes["the statistics were taken over a whole sentence (the last two dimensions); "
                 "layer norm normalises every token on its own, over its features"] = \
            lambda: _standardised(x, eps, dims=(-2, -1))
    if len(shape) == 2 and shape[0] == shape[1]:
        mistakes["keepdim=True is missing: without it the mean of row i is subtracted from column i"] = \
            lambda: _standardised(x, eps, no_keepdim=True)
    return mistakes


def returned_norm(result, what):
    """For a judge: what the student's LayerNorm returned; a broadcasting RuntimeError (x minus statistics that lost
    their last dimension) is named: keepdim=True is missing."""
    if isinstance(result, Raised) and result.type_name == "RuntimeError" and "size of tensor" in result.message:
        raise AssertionError(f"{what} raised RuntimeError ({result.first_line}): {KEEPDIM_HINT}")
    return returned(result, what)


def check_values(out, x, eps, what):
    """LayerNorm(d, eps) with gamma 1 and beta 0: ``out`` against F.layer_norm in float64."""
    testing.assert_close(out, F.layer_norm(x.double(), (x.shape[-1],), eps=eps), what, atol=1e-4, rtol=1e-4,
                         dtype=torch.float32, mistakes=_value_mistakes(x, eps))


def check_constant_tokens(out, x, eps, what):
    """Tokens with (almost) no variance, where eps decides the result."""
    testing.assert_close(out, F.layer_norm(x.double(), (x.shape[-1],), eps=eps), what, atol=1e-4, rtol=1e-4, mistakes={
        "eps is added to the standard deviation; it belongs inside the square root: sqrt(var + eps)":
            lambda: _standardised(x, eps, eps_outside=True),
        "the unbiased variance (dividing by d - 1); layer norm divides by d":
            lambda: _standardised(x, eps, correction=1),
        "the eps argument is ignored (hard-coded?): use the eps given to __init__":
            lambda: _standardised(x, 1e-5 if eps != 1e-5 else 0.5),
        "eps is 1e-6; the default should be 1e-5 (as in nn.LayerNorm)": lambda: _standardised(x, 1e-6),
    })


def check_affine(out, x, gamma, beta, eps, what):
    """``out`` of a LayerNorm whose gamma and beta were set to ``gamma`` and ``beta``: PyTorch's layer norm
    with the same gamma and beta, in float64."""
    d = x.shape[-1]
    x_hat = F.layer_norm(x.double(), (d,), eps=eps)
    g, b = gamma.double(), beta.double()
    testing.assert_close(out, F.layer_norm(x.double(), (d,), g, b, eps), what, atol=1e-4, rtol=1e-4, mistakes={
        "beta is never added; the last step is + beta": g * x_hat,
        "the result is never multiplied by gamma": x_hat + b,
        "gamma and beta are swapped in the formula; gamma scales, beta shifts": b * x_hat + g,
        "gamma is applied before the normalisation, where the normalisation undoes it; "
        "scale the normalised x": lambda: F.layer_norm(x.double() * g, (d,), eps=eps) + b,
        **_affine_mistakes(x, g, b, eps),
    })


def check_gradients(grads, x, upstream, gamma, beta, eps):
    """The gradients that (norm(x) * upstream).sum().backward() left in x and in the gamma and beta of a
    LayerNorm holding ``gamma`` and ``beta`` (``grads``: {"x", "gamma", "beta"}, None where none arrived,
    as probes.layer_norm_feed_forward.gradients records them) against autograd through PyTorch's layer norm in float64."""
    d = x.shape[-1]
    x64 = x.detach().double().requires_grad_()
    g64 = gamma.detach().double().requires_grad_()
    b64 = beta.detach().double().requires_grad_()
    (F.layer_norm(x64, (d,), g64, b64, eps) * upstream.double()).sum().backward()
    # What x's gradient would be if the mean and variance were treated as constants.
    x_d = x.detach().double()
    var = x_d.var(dim=-1, unbiased=False, keepdim=True)
    detached = g64.detach() * upstream.double() / (var + eps).sqrt()
    what = f"LayerNorm({d}, eps={eps}): the gradient"
    assert grads["x"] is not None, f"{what} with respect to x is missing: is the output detached from x?"
    mistakes = {"the mean and variance were treated as constants (detached, or computed under torch.no_grad()): "
                "they depend on x and must stay in the autograd graph": detached}
    for description, gradient in _mistaken_gradients(x, upstream, gamma, beta, eps).items():
        mistakes["the gradient of a LayerNorm with this mistake: " + description] = gradient
    testing.assert_close(grads["x"], x64.grad, f"{what} with respect to x", atol=1e-4, rtol=1e-3, mistakes=mistakes)
    assert grads["gamma"] is not None and grads["beta"] is not None, f"{what} reached neither gamma nor beta"
    testing.assert_close(grads["gamma"], g64.grad, f"{what} with respect to gamma", atol=1e-4, rtol=1e-3)
    testing.assert_close(grads["beta"], b64.grad, f"{what} with respect to beta", atol=1e-4, rtol=1e-3)


def _mistaken_gradients(x, upstream, gamma, beta, eps):
    """description -> (a function giving) the gradient in x of (mistaken LayerNorm(x) * upstream).sum(), for each of
    _affine_mistakes."""
    x64 = x.detach().double().requires_grad_()
    made = _affine_mistakes(x64, gamma.detach().double(), beta.detach().double(), eps)
    return {description: (lambda output=output: torch.autograd.grad((output() * upstream.double()).sum(), x64)[0])
            for description, output in made.items()}


def feed_forward_with(weights):
    """A stand-in for a PositionwiseFeedForward holding ``weights`` ({"linear1.weight": tensor, ...}, the
    weights a probe copied into the student's module): the checks below read ``.linear1.weight`` and the like
    of it as they read a module's."""
    return SimpleNamespace(**{name: SimpleNamespace(weight=weights[f"{name}.weight"], bias=weights[f"{name}.bias"])
                              for name in ("linear1", "linear2")})


def _network(ffn, x, *, activation=torch.relu, hidden_mask=None, relu_after=False):
    """linear2(activation(linear1(x)) * hidden_mask) in float64 with the weights of ``ffn`` (a module, or
    ``feed_forward_with`` of its weights); the keyword arguments build what common mistakes produce."""
    w1, b1 = ffn.linear1.weight.detach().double(), ffn.linear1.bias.detach().double()
    w2, b2 = ffn.linear2.weight.detach().double(), ffn.linear2.bias.detach().double()
    hidden = x.detach().double() @ w1.T + b1
    if not relu_after:
        hidden = activation(hidden)
    out = (hidden if hidden_mask is None else hidden * hidden_mask) @ w2.T + b2
    return out.clamp(min=0) if relu_after else out


def _dropout_mask(shape, p, seed, dtype=torch.float32):
    """What F.dropout keeps of a tensor of ones with the random numbers of ``seed``, in float64."""
    with testing.same_random_numbers(seed):
        return F.dropout(torch.ones(shape, dtype=dtype), p, training=True).double()


def check_feed_forward_eval(out, ffn, x, p, seed, what):
    """Eval mode (``out`` of a module built with dropout ``p``, drawn with the random numbers of ``seed``): the
    formula with the module's weights."""
    hidden_shape = tuple(x.shape[:-1]) + (ffn.linear1.weight.shape[0],)
    identity = lambda h: h
    testing.assert_close(out, _network(ffn, x), what, atol=1e-4, rtol=1e-4, dtype=torch.float32, mistakes={
        "there is no ReLU between linear1 and linear2": lambda: _network(ffn, x, activation=identity),
        "the ReLU is applied after linear2; it belongs between the layers": lambda: _network(ffn, x, relu_after=True),
        "that is GELU; the paper's network uses ReLU": lambda: _network(ffn, x, activation=F.gelu),
        "that is GELU (tanh approximation); the paper's network uses ReLU":
            lambda: _network(ffn, x, activation=lambda h: F.gelu(h, approximate="tanh")),
        "dropout is still applied in eval mode: use self.dropout, or F.dropout(..., training=self.training)":
            lambda: _network(ffn, x, hidden_mask=_dropout_mask(hidden_shape, p, seed)),
    })


def check_feed_forward_train(out, ffn, x, p, seed, what):
    """Train mode with dropout ``p`` (``out`` drawn with the random numbers of ``seed``): the formula with
    PyTorch's dropout mask drawn from the same random numbers."""
    shape, dtype = tuple(x.shape), x.dtype
    hidden_shape = shape[:-1] + (ffn.linear1.weight.shape[0],)
    xd = x.double()
    mistakes = {
        "dropout is never applied in train mode": lambda: _network(ffn, xd),
        "dropout is applied to the output of linear2; it belongs between the layers, on the ReLU activations":
            lambda: _network(ffn, xd) * _dropout_mask(shape, p, seed, dtype),
        "dropout is applied to the input x; it belongs between the layers, on the ReLU activations":
            lambda: _network(ffn, xd * _dropout_mask(shape, p, seed, dtype)),
    }
    if p != 0.1:
        mistakes["the dropout probability is fixed at 0.1: pass the dropout argument on to nn.Dropout"] = \
            lambda: _network(ffn, xd, hidden_mask=_dropout_mask(hidden_shape, 0.1, seed, dtype))
    testing.assert_close(out, _network(ffn, xd, hidden_mask=_dropout_mask(hidden_shape, p, seed, dtype)), what,
                         atol=1e-4, rtol=1e-4, dtype=dtype, mistakes=mistakes)


def check_feed_forward_float64(out, ffn, x, what):
    """A float64 module on float64 input keeps float64 precision."""
    testing.assert_close(out, _network(ffn, x), what, atol=1e-10, rtol=1e-10, dtype=torch.float64)


def check_feed_forward_parts(found, weights, x, hidden, ones, p, seed, what):
    """The structure test's values, from what probes.layer_norm_feed_forward.feed_forward_parts recorded: linear1 and linear2,
    holding ``weights``, compute x W1ᵀ + b1 and hidden W2ᵀ + b2; dropout keeps of ``ones`` what F.dropout with ``p``
    keeps with the same random numbers."""
    returned(found["loaded"], f"giving {what} the test's weights")
    for name, inputs in (("linear1", x), ("linear2", hidden)):
        expected = inputs @ weights[f"{name}.weight"].T + weights[f"{name}.bias"]
        testing.assert_close(returned(found[name], f"{what}.{name}(x)"), expected, f"{what}.{name}(x), given the test's "
                             "weights,", atol=1e-5, rtol=1e-5,
                             mistakes={"the bias is not added": expected - weights[f"{name}.bias"]})
    with testing.same_random_numbers(seed):
        kept = F.dropout(ones, p)
    testing.assert_close(returned(found["dropout"], f"{what}.dropout in train mode"), kept, f"{what}.dropout in train mode",
                         atol=1e-6, rtol=1e-6)
