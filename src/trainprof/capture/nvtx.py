"""NVTX marks for Nsight Systems: each training step as an NVTX range ``ProfilerStep#N``
(the name trainprof reads back from an nsys export as a step, trace/nsys/nvtx.py), and on
request torch's own op ranges (``torch.autograd.profiler.emit_nvtx``).

Without CUDA (NVTX ships with CUDA builds of torch), the marks are a no-op that says so once
per process. The numbering follows torch.profiler's: the range open before the first
``step()`` is ``ProfilerStep#0``.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

from trainprof.capture.safety import RecordingWarning
from trainprof.vocabulary import NVTX_RANK_MARK

logger = logging.getLogger("trainprof")

#: The name of step N's range.
STEP_RANGE = "ProfilerStep#{}"

#: What the no-op says, once per process.
NO_CUDA = ("trainprof: NVTX marks need CUDA (a CUDA build of torch and a GPU); none here, so no "
           "NVTX ranges are recorded")
_said: list[bool] = []


def nvtx_available() -> bool:
    """Whether NVTX ranges can be recorded here (torch with CUDA, and a GPU)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # no torch, or a broken CUDA install: no marks either way
        return False


def _say_no_cuda_once() -> None:
    if _said:
        logger.debug(NO_CUDA)
        return
    _said.append(True)
    warnings.warn(NO_CUDA, RecordingWarning, stacklevel=4)


class NvtxMarks:
    """A ``ProfilerStep#N`` range around each step; torch's op ranges too with ``ops``."""

    def __init__(self, ops: bool = False, record_shapes: bool = False) -> None:
        self.ops, self.record_shapes = ops, record_shapes
        self.active = False
        self.ranges = 0  #: ranges opened so far
        self._emit: Any = None

    def start(self, step: int = 0, rank: int | None = None) -> None:
        if not nvtx_available():
            _say_no_cuda_once()
            return
        import torch

        if rank is not None:
            torch.cuda.nvtx.mark(f"{NVTX_RANK_MARK}{rank}")

        if self.ops:
            try:
                emit = torch.autograd.profiler.emit_nvtx(record_shapes=self.record_shapes)
                emit.__enter__()
                self._emit = emit
            except Exception as error:  # e.g. another profiler holds torch's profiler state
                warnings.warn(f"trainprof: torch's NVTX op ranges could not start ({error}); "
                              "only the steps are marked", RecordingWarning, stacklevel=3)
        self.active = True
        self._push(step)

    def step(self, step: int) -> None:
        """Close the range of the step that ended and open ``ProfilerStep#step``."""
        if self.active:
            self._pop()
            self._push(step)

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self._pop()
        emit, self._emit = self._emit, None
        if emit is not None:
            with contextlib.suppress(Exception):
                emit.__exit__(None, None, None)

    def _push(self, step: int) -> None:
        import torch

        torch.cuda.nvtx.range_push(STEP_RANGE.format(step))
        self.ranges += 1

    def _pop(self) -> None:
        import torch

        torch.cuda.nvtx.range_pop()
