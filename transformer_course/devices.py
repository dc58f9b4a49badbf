"""Where a model runs and in what precision: the device choice and mixed precision on a CUDA GPU."""
from contextlib import nullcontext

import torch

__all__ = ["choose_device", "amp_dtype", "autocast"]


def choose_device(device="auto"):
    """"auto": the GPU when there is one (CUDA, else Apple's MPS), else the CPU. Any other name is checked:
    ValueError for one PyTorch does not know or this machine does not have."""
    if device not in (None, "auto"):
        try:
            chosen = torch.device(device)
        except RuntimeError:
            raise ValueError(f"unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps") from None
        if (chosen.type == "cuda" and not torch.cuda.is_available()) or (chosen.type == "mps" and not _has_mps()):
            raise ValueError(f"device {device!r} is not available on this machine: use cpu, or auto (a GPU if "
                             "there is one)")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _has_mps():
        return torch.device("mps")
    return torch.device("cpu")


def _has_mps():
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def amp_dtype(device, amp=True):
    """The dtype of mixed precision on a CUDA GPU, None elsewhere or without `amp`: bfloat16 on Ampere or newer
    (no loss scaling needed), else float16 with loss scaling (e.g. Colab's T4, where bfloat16 would only be
    emulated)."""
    if not amp or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.get_device_capability(device)[0] >= 8 else torch.float16


def autocast(device, dtype):
    """torch.autocast to `dtype` on `device`'s type, or a context that does nothing when `dtype` is None."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
