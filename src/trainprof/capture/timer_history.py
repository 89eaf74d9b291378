"""The step timer's summary into the run history: ``StepTimer(history=True)`` or
``trainprof.history.record(timer)``. Recording at the end of training never raises into it."""

from __future__ import annotations

from typing import Any

import torch

from trainprof.capture.ranks import current_rank, world_size
from trainprof.capture.safety import WarnOnce
from trainprof.history.rows import RunRecord
from trainprof.history.sources import from_step_timer


def timer_record(timer: Any, name: str, **context: Any) -> RunRecord:
    """The record of a StepTimer: its summary, every measured step's time, rank and device."""
    summary = timer.summary()
    times = timer.step_times_ms()
    context.setdefault("rank", current_rank())
    context.setdefault("world_size", world_size())
    context.setdefault("devices", device_label(timer.device))
    return from_step_timer(summary, name, times, **context)


def device_label(device: torch.device) -> str:
    """``CPU``, or the GPU's name (as the trace analysis names devices)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type.upper()


def record_timer(timer: Any, history: bool | str, warn: WarnOnce) -> int | None:
    """Records the timer in the history (``history``: True, or the run's name); a failure warns
    once, says where the row was kept, and returns None."""
    from trainprof.history.api import record
    from trainprof.history.context import default_name

    name = history if isinstance(history, str) else default_name()
    try:
        return record(timer, name=name)
    except Exception as error:  # a full disk or a damaged database must not stop training
        warn("could not add this run to the history", error)
        return None
