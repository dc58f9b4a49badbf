"""Notebook 03: what the device tests' probes send of a returned mask.

A tensor on the 'meta' device has a shape, a dtype and a device but no values, so it cannot travel as probe
data; the probes send what the device tests check instead. Nothing here knows an expected value.
"""


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
