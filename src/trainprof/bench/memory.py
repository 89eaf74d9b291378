"""Peak memory per strategy: the high-water mark reset before each one is measured.

On a GPU, the caching allocator's peak (`torch.cuda.reset_peak_memory_stats`). On the CPU, the
process's peak resident memory, which Linux resets when "5" is written to
`/proc/self/clear_refs`; elsewhere it cannot be reset, and a strategy run in the same process
as others gets no peak (with `isolate=True` each has a process of its own).
"""

from __future__ import annotations

import torch

_CLEAR_REFS = "/proc/self/clear_refs"
_RESET_PEAK_RSS = "5"


def reset_peak_memory(device: torch.device) -> bool:
    """Starts a new peak for `capture.device.peak_memory_bytes`; False when it cannot."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    if device.type != "cpu":
        return False
    try:
        with open(_CLEAR_REFS, "w") as handle:
            handle.write(_RESET_PEAK_RSS)
    except OSError:
        return False
    return True
