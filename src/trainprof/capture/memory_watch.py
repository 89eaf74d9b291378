"""The memory side of `trainprof.profile`: the breakdown of the first optimizer that steps, and,
with `memory_snapshot=True` on a CUDA machine, allocator snapshots beside the traces.

The `Recorder` calls `start`, `at_step`, `cycle_done` and `stop`; each is a line there.
"""

from __future__ import annotations

from typing import Any

import torch

from trainprof.capture.config import ProfileConfig
from trainprof.capture.memory_breakdown import MemoryProbe
from trainprof.capture.memory_snapshot import SnapshotRecorder
from trainprof.capture.safety import WarnOnce

NO_CUDA = ("memory_snapshot needs a CUDA device and this machine has none: no allocator "
           "snapshot is recorded (the memory breakdown still is)")
NO_FOLDER = "memory_snapshot needs output_trace_dir (the snapshots go beside the traces)"


class MemoryWatch:
    """The breakdown probe and, when asked for and possible, the snapshot recorder."""

    def __init__(self, config: ProfileConfig, rank: int) -> None:
        self.config = config
        self.rank = rank
        self.snapshots: SnapshotRecorder | None = None
        self._warn = WarnOnce()  # its own: a snapshot notice must not hide a profiler failure
        self._probe = MemoryProbe(None, self._warn)
        self._hook: Any = None

    def start(self, step: int) -> None:
        """Watches optimizer steps for the breakdown; arms snapshots if asked for."""
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._after_optimizer_step)
        except Exception as error:
            self._warn("could not watch the optimizer for the memory breakdown", error)
        if self.config.memory_snapshot:
            self.snapshots = self._snapshot_recorder()
            if self.snapshots is not None:
                self.snapshots.start(step)

    def at_step(self, step: int) -> None:
        if self.snapshots is not None:
            self.snapshots.at_step(step)

    def cycle_done(self, step: int) -> None:
        if self.snapshots is not None:
            self.snapshots.cycle_done(step)

    def stop(self, error: BaseException | None = None) -> None:
        """Ends watching; an out-of-memory `error` leaving the block is dumped if not already."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.snapshots is not None:
            self.snapshots.dump_oom_on_exit(error)
            self.snapshots.close()

    def breakdown(self) -> dict[str, Any] | None:
        return self._probe.breakdown()

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._probe.captured is None:  # the first optimizer to step, once
            self._probe.capture_once(None, optimizer)

    def _snapshot_recorder(self) -> SnapshotRecorder | None:
        if not torch.cuda.is_available():
            self._warn(NO_CUDA)
            return None
        out_dir = self.config.trace_dir()
        if out_dir is None:
            self._warn(NO_FOLDER)
            return None
        return SnapshotRecorder(out_dir, self.rank, self._warn, self.config.torch_schedule(),
                                breakdown=self.breakdown)
