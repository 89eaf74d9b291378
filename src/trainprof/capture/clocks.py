"""Timestamps for the step timer: host nanoseconds on the CPU, CUDA events on a GPU.

A CUDA event is recorded into the stream, so the elapsed time between two events is GPU time and
needs no synchronisation when taken; it is only read once the later event has completed.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class CpuClock:
    """`time.perf_counter_ns`; every mark is ready at once."""

    immediate = True
    now = staticmethod(time.perf_counter_ns)

    @staticmethod
    def elapsed_ms(start: int, end: int) -> float:
        return (end - start) / 1e6

    @staticmethod
    def ready(mark: Any) -> bool:
        return True

    @staticmethod
    def wait(mark: Any) -> None:
        pass

    @staticmethod
    def release(step: Any) -> None:
        pass


class CudaClock:
    """CUDA events on the current stream, reused from a pool so a long run allocates few."""

    immediate = False
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pool: list[torch.cuda.Event] = []

    def now(self) -> torch.cuda.Event:
        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    @staticmethod
    def elapsed_ms(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end)

    @staticmethod
    def ready(mark: torch.cuda.Event) -> bool:
        return mark.query()

    @staticmethod
    def wait(mark: torch.cuda.Event) -> None:
        mark.synchronize()

    def release(self, step: Any) -> None:
        """Returns a read-back step's events to the pool."""
        marks = [step.start, step.data_end, step.end]
        marks += [mark for _, start, end in step.intervals for mark in (start, end)]
        # The end of one step is the start of the next, so each event goes back once.
        self._pool.extend({id(m): m for m in marks if m is not None and m is not step.end}.values())


def clock_for(device: torch.device) -> CpuClock | CudaClock:
    return CudaClock(device) if device.type == "cuda" else CpuClock()
