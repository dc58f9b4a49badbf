"""Notebook 03: what the device tests' probes send of a returned mask, and the stand-ins of target_mask's tests.

A tensor on the 'meta' device has a shape, a dtype and a device but no values, so it cannot travel as probe
data; the probes send what the device tests check instead. Nothing here knows an expected value.

target_mask's tests put ``padding_double`` and ``causal_double`` in place of padding_mask and causal_mask: masks of
the right shape, dtype and device whose values are random (drawn from the hidden tests' secret), not the masks. A
target_mask that combines what they return is right; a mistake in padding_mask or causal_mask costs points in their
own tests only. The judges call the same stand-ins to know what they returned.
"""


def draw(generator, low, high):
    """An int from low..high (both included), drawn with ``generator``: the hidden tests' sizes and ids."""
    import torch

    return int(torch.randint(low, high + 1, (), generator=generator))


def _random_mask(tag, *shape):
    import torch

    from ..probing import secret_generator

    return torch.rand(*shape, generator=secret_generator(tag)) < 0.5


def padding_double(tokens, pad_idx):
    """A stand-in for padding_mask: bool [B, 1, 1, T] on the tokens' device, random but the same for tokens of the same
    shape and the same pad_idx; tokens that are not [B, T] raise ValueError, as the contract says."""
    if tokens.dim() != 2:
        raise ValueError(f"the test's stand-in for padding_mask takes tokens [batch, seq], got {list(tokens.shape)}")
    batch, length = tokens.shape
    return _random_mask(f"padding_mask stand-in {batch} {length} {pad_idx}", batch, 1, 1, length).to(tokens.device)


def causal_double(size, device=None):
    """A stand-in for causal_mask: bool [1, 1, size, size] on ``device`` (the default device when None), random but
    the same for the same size."""
    if size < 1:
        raise ValueError(f"the test's stand-in for causal_mask takes a positive size, got {size}")
    mask = _random_mask(f"causal_mask stand-in {size}", 1, 1, size, size)
    return mask if device is None else mask.to(device)


def mask_facts(value):
    """What a device test needs of one result of the student's function, as plain data: the ``Raised`` of an
    exception as it is; else whether it is a tensor, its type, and for a tensor its device, shape and dtype
    (and its values, unless it is on the 'meta' device)."""
    import torch

    from ..probing import Raised

    if isinstance(value, Raised):
        return value
    if not isinstance(value, torch.Tensor):
        return {"tensor": False, "type": type(value).__name__}
    return {"tensor": True, "type": type(value).__name__, "device": str(value.device),
            "device_type": value.device.type, "shape": list(value.shape), "dtype": str(value.dtype),
            "values": None if value.is_meta else value}
