"""What the step timer needs to know about the device: its peak FLOP/s and peak memory in use."""

from __future__ import annotations

import sys
from typing import Any

import torch

#: Dense (no sparsity) BF16/FP16 tensor-core peak FLOP/s from the vendors' data sheets, matched
#: against the words of `torch.cuda.get_device_name()` in this order (more specific names first). Training in
#: FP32 or TF32 reaches less than this; pass `peak_flops=` to StepTimer for another number.
PEAK_FLOPS_BY_NAME: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("V100", 125e12),
    ("T4", 65e12),
    ("MI300X", 1307e12),
    ("MI250X", 383e12),
)


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter; the CPU when it has none."""
    if model is not None:
        for parameter in model.parameters():
            return parameter.device
    return torch.device("cpu")


def peak_flops_for(device: torch.device) -> float | None:
    """The table's peak for this GPU, or None (CPUs and unknown GPUs)."""
    if device.type != "cuda":
        return None
    return peak_flops_of_name(torch.cuda.get_device_name(device))


def peak_flops_of_name(name: str) -> float | None:
    """The table's peak for a GPU named as `torch.cuda.get_device_name` names it, or None."""
    # Whole words, so that "A10" does not match an A10G nor "L4" an L40S.
    words = set(name.replace("-", " ").split())
    for key, flops in PEAK_FLOPS_BY_NAME:
        if words.issuperset(key.split()):
            return flops
    return None


def peak_memory_bytes(device: torch.device) -> int | None:
    """Peak memory in use: the CUDA caching allocator's high-water mark, else the process's peak
    RSS. On Linux that is /proc's VmHWM, which starts afresh when the program starts (not
    `ru_maxrss`, which a process started from a large one, such as a launcher or a test runner,
    inherits from it) and which `/proc/self/clear_refs` can reset."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    hwm = _linux_peak_rss()
    if hwm is not None:
        return hwm
    try:
        import resource
    except ImportError:  # Windows: current RSS is the best we have
        return _current_rss()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB


def _linux_peak_rss() -> int | None:
    """VmHWM from /proc/self/status, in bytes; None where there is no such file."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    except (OSError, ValueError, IndexError):
        return None
    return None


def _current_rss() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)
