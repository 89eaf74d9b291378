"""The step timer's plain record: its summary, every measured step's time, its rank and device.

``StepTimer.to_run_record()`` hands this to whoever stores runs (``trainprof.history.record``
turns it into a history row): plain data, so the store never needs to know the timer.
"""

from __future__ import annotations

from typing import Any

import torch

from trainprof.capture.ranks import current_rank, world_size


def timer_record(timer: Any) -> dict[str, Any]:
    """``{"summary", "step_times_ms", "rank", "world_size", "devices"}`` of a StepTimer."""
    return {"summary": timer.summary(), "step_times_ms": timer.step_times_ms(),
            "rank": current_rank(), "world_size": world_size(),
            "devices": device_label(timer.device)}


def device_label(device: torch.device) -> str:
    """``CPU``, or the GPU's name (as the trace analysis names devices)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type.upper()
