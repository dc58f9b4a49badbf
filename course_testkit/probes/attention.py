"""Notebook 02: the calls the hidden tests' probes make, shared by the kernel (which makes them) and the judges.

Nothing here knows an expected value: it only lists which arguments the student's function is called with,
so that the oracles' checks, replayed in the grader (probing.replayed), find every result they ask for, and draws
the sizes of the hidden tests' inputs from their secret generator.
"""


def draw(generator, low, high):
    """An int from low..high (both included), drawn with ``generator``."""
    import torch

    return int(torch.randint(low, high + 1, (), generator=generator))


def telling_sizes(generator, low=2, high=12):
    """(Tq, Tk, d_k, d_v): four different sizes from low..high such that the scales of the known mistakes (none,
    d_k, sqrt(d_v), sqrt(Tq), sqrt(Tk), 1 / sqrt(d_k)) all differ from sqrt(d_k) and from each other: each
    mistake shows, and the message names the right one."""
    import math

    while True:
        n_q, n_k, d_k, d_v = (draw(generator, low, high) for _ in range(4))
        scales = {math.sqrt(d_k), 1.0, float(d_k), math.sqrt(d_v), math.sqrt(n_q), math.sqrt(n_k), 1 / math.sqrt(d_k)}
        if len({n_q, n_k, d_k, d_v}) == 4 and len(scales) == 7:
            return n_q, n_k, d_k, d_v


def attention_calls(q, k, v, keep=None):
    """The calls the oracles of scaled_dot_product_attention make for one case: the call itself, the same
    without the mask, and one call per [T, d] slice when there are leading dimensions."""
    calls = [((q, k, v) if keep is None else (q, k, v, keep), {})]
    if keep is not None:
        calls.append(((q, k, v), {}))
    if q.dim() > 2 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        calls += [((a, b, c), {}) for a, b, c in zip(q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]),
                                                     v.reshape(-1, *v.shape[-2:]))]
    return calls


ARGUMENTS = ("query", "key", "value", "mask", "dropout")


def on_copies(answer):
    """(``answer`` called on copies of its tensor arguments, the list of the arguments it changed in place).

    A function that changes its inputs in place (``query /= ...``) changes the caller's tensors: the copies keep one
    call from changing the next call's inputs, so that the other checks see what the function computes, and the list
    (filled as the calls run, each name once) lets a judge name the mistake itself."""
    import torch

    changed = []

    def copy(value):
        return value.clone() if isinstance(value, torch.Tensor) else value

    def call(*args, **kwargs):
        given = {**dict(zip(ARGUMENTS, args)), **kwargs}
        copies = {name: copy(value) for name, value in given.items()}
        try:
            return answer(*(copies[name] for name in ARGUMENTS[:len(args)]), **{name: copies[name] for name in kwargs})
        finally:
            changed.extend(name for name, value in given.items() if isinstance(value, torch.Tensor)
                           and name not in changed and not torch.equal(value.detach(), copies[name].detach()))
    return call, changed


def random_keep(*shape, generator=None):
    """A random bool mask in which every row has at least one True and at least one False."""
    import torch

    keep = torch.rand(*shape, generator=generator) < 0.5
    n_k = shape[-1]
    first = torch.randint(0, n_k, shape[:-1], generator=generator)
    second = (first + torch.randint(1, n_k, shape[:-1], generator=generator)) % n_k
    keep.scatter_(-1, first.unsqueeze(-1), True)
    keep.scatter_(-1, second.unsqueeze(-1), False)
    return keep


def recording(dropout, shape):
    """Wrap a dropout callable: remember what it got and what it returned (and check it got the weights)."""
    seen = []

    def record(w):
        assert list(w.shape) == list(shape), (
            f"dropout was called on a tensor of shape {list(w.shape)}: was it applied to the output? It belongs "
            f"on the attention weights, shape {list(shape)}, before they multiply value")
        dropped = dropout(w)
        seen.append((w.detach().clone(), dropped.detach().clone()))
        return dropped
    return record, seen


def dropout_calls(answer, q, k, v, keep, p, seed):
    """For oracles.attention.check_dropout: the answer with nn.Dropout(p) in train mode under ``seed`` (what
    dropout got and returned recorded), and the same call without dropout."""
    import torch

    from ..probing import attempt
    from ..testing import same_random_numbers

    args = (q, k, v) if keep is None else (q, k, v, keep)
    shape = list(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])) + [q.shape[-2], k.shape[-2]]
    dropout, seen = recording(torch.nn.Dropout(p).train(), shape)
    with same_random_numbers(seed):
        result = attempt(answer, *args, dropout=dropout)
    return {"result": result, "seen": seen, "plain": attempt(answer, *args),
            "contiguous": bool(seen) and seen[0][0].is_contiguous()}
