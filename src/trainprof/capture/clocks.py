"""Timestamps for the step timer: host seconds on the CPU, CUDA events on a GPU.

A CUDA event is recorded into the stream, so the time between two events is GPU time, and
taking it needs no synchronisation; it is only read once the later event has completed.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# The step timer's step layout (`steps.INDEX` ...), repeated here to keep this module free of it.
_START, _DATA_END, _END, _INTERVALS = 1, 2, 3, 7


class CpuClock:
    """`time.perf_counter`: marks are float seconds, ready at once."""

    immediate = True
    now = staticmethod(time.perf_counter)

    @staticmethod
    def ready(mark: Any) -> bool:
        return True

    @staticmethod
    def wait(mark: Any) -> None:
        pass

    @staticmethod
    def resolve(step: Any) -> None:
        pass


class CudaClock:
    """CUDA events on the current stream, reused from a pool so a long run allocates few."""

    immediate = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pool: list[torch.cuda.Event] = []
        self._origin = torch.cuda.Event(enable_timing=True)  # every mark is read against it
        self._origin.record(torch.cuda.current_stream(device))

    def now(self) -> torch.cuda.Event:
        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    @staticmethod
    def ready(mark: torch.cuda.Event) -> bool:
        return mark.query()

    @staticmethod
    def wait(mark: torch.cuda.Event) -> None:
        mark.synchronize()

    def resolve(self, step: list) -> None:
        """Replaces a finished step's events by float seconds, and pools the events again.

        `step` is the step timer's list: [index, start, data_end, end, samples, tokens,
        excluded, (phase, start, end), ...] (`steps.START` and after). The step's end event is
        also the next step's start, so it goes back to the pool when that step is resolved.
        """
        seconds, end = self._seconds, step[_END]
        intervals = step[_INTERVALS:]
        used = [step[_START], step[_DATA_END]] + [m for _, s, e in intervals for m in (s, e)]
        step[_INTERVALS:] = [(phase, seconds(s), seconds(e)) for phase, s, e in intervals]
        if step[_DATA_END] is not None:
            step[_DATA_END] = seconds(step[_DATA_END])
        step[_START], step[_END] = seconds(step[_START]), seconds(end)
        reusable = {id(m): m for m in used if isinstance(m, torch.cuda.Event) and m is not end}
        self._pool.extend(reusable.values())

    def _seconds(self, event: Any) -> float:
        if not isinstance(event, torch.cuda.Event):
            return event  # already resolved
        if not event.query():  # recorded on another stream than the step's end: rare, and late
            event.synchronize()
        return self._origin.elapsed_time(event) / 1e3


def clock_for(device: torch.device) -> CpuClock | CudaClock:
    return CudaClock(device) if device.type == "cuda" else CpuClock()
