"""Where a model runs and in what precision: the device choice, and mixed precision on a CUDA GPU or on a CPU
with bfloat16 instructions."""
from contextlib import nullcontext
from pathlib import Path

import torch

__all__ = ["choose_device", "amp_dtype", "autocast", "cpu_has_bfloat16", "precision_note"]


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
    """The dtype of mixed precision, None without `amp` or where it would not help:
    * a CUDA GPU: bfloat16 on Ampere or newer (no loss scaling needed), else float16 with loss scaling (e.g.
      Colab's T4, where bfloat16 would only be emulated);
    * a CPU with bfloat16 instructions (AVX512-BF16 or AMX): bfloat16, whose matrix products run about 1.5 times
      as fast; on other CPUs bfloat16 is emulated and slower, so float32 (None);
    * elsewhere (MPS): None."""
    if not amp:
        return None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.get_device_capability(device)[0] >= 8 else torch.float16
    if device.type == "cpu" and cpu_has_bfloat16():
        return torch.bfloat16
    return None


def cpu_has_bfloat16(cpuinfo="/proc/cpuinfo"):
    """Whether this CPU multiplies bfloat16 natively (the avx512_bf16 or amx_bf16 flag of Linux's cpuinfo)."""
    try:
        flags = set(Path(cpuinfo).read_text().split())
    except OSError:        # not Linux: no way to tell cheaply, so float32
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def precision_note(device, dtype, amp=True):
    """One line for a training log: the precision the run computes in, and why."""
    if dtype is not None:
        return f"precision: {str(dtype).removeprefix('torch.')} mixed precision (autocast) on {device.type}"
    if not amp:
        return "precision: float32 (mixed precision turned off)"
    if device.type == "cpu":
        return "precision: float32 (this CPU has no bfloat16 instructions, AVX512-BF16 or AMX)"
    return f"precision: float32 on {device.type}"


def autocast(device, dtype):
    """torch.autocast to `dtype` on `device`'s type, or a context that does nothing when `dtype` is None."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
