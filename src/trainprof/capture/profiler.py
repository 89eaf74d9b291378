"""`trainprof.profile`: torch.profiler with a schedule, one gzipped trace per rank and cycle, and
no way to break the training loop it records.

    with trainprof.profile(output_trace_dir="traces") as prof:
        for batch in loader:
            ...              # the training step, unchanged
            prof.step()
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainprof.capture import profiler_guard
from trainprof.capture.config import DEFAULT_SCHEDULE, ProfileConfig
from trainprof.capture.memory_watch import MemoryWatch
from trainprof.capture.native_log import QuietStderr
from trainprof.capture.nvtx import NvtxMarks
from trainprof.capture.ranks import current_rank
from trainprof.capture.safety import WarnOnce, another_profiler_running
from trainprof.capture.writer import write_trace

__all__ = ["ProfileConfig", "Recorder", "profile"]


def profile(config: Any = None, /, *, accelerator: Any = None, **options: Any) -> Recorder:
    """Records training with torch.profiler; use as a context manager and call `.step()` per step.

    `config` is a `ProfileConfig`, an accelerate `ProfileKwargs`, or None; keyword `options` (any
    `ProfileConfig` field) override it. With an `accelerator` (given by name, or as `config`), its
    rank names the files, its registered `ProfileKwargs` is the default config, and all ranks
    meet at a barrier on exit.
    """
    if accelerator is None and _is_accelerator(config):
        config, accelerator = None, config
    if config is None and accelerator is not None:
        config = getattr(accelerator, "profile_handler", None)
    if config is None:
        config = ProfileConfig()
    elif not isinstance(config, ProfileConfig):
        config = ProfileConfig.from_profile_kwargs(config)
    config = config.with_options(**options)
    if accelerator is None:
        return Recorder(config)
    return Recorder(
        config,
        rank=int(accelerator.process_index),
        barrier=accelerator.wait_for_everyone,
    )


def _is_accelerator(value: Any) -> bool:
    """An accelerate `Accelerator` (or one like it): it has a rank and a barrier."""
    return hasattr(value, "process_index") and hasattr(value, "wait_for_everyone")


class Recorder:
    """A running recording: `start`, `step` once per training step, `stop` (or use `with`).

    Any failure of the profiler or of a write is turned into a single `RecordingWarning`; after a
    profiler failure the recorder stops recording and `step()` does nothing.
    """

    def __init__(
        self,
        config: ProfileConfig,
        *,
        rank: int | None = None,
        barrier: Callable[[], Any] | None = None,
    ) -> None:
        self.config = config
        self.trace_files: list[Path] = []
        self.profiler: torch.profiler.profile | None = None
        self.steps = 0
        self._fixed_rank = rank
        self._barrier = barrier
        self._warn = WarnOnce()
        self._in_step = False
        self._memory: MemoryWatch | None = None
        self._summary_shared = False
        self._summary_recording: int | None = None  # capture/job_summary.py: joined at start
        self._quiet = QuietStderr()  # the profiler's own log lines (capture/native_log.py)
        self._schedule: Callable[[int], Any] | None = None
        self.nvtx = NvtxMarks(ops=config.nvtx_ops, record_shapes=config.record_shapes)

    @property
    def rank(self) -> int:
        return self._fixed_rank if self._fixed_rank is not None else current_rank()

    @property
    def recording(self) -> bool:
        return self.profiler is not None

    def memory_breakdown(self) -> dict[str, Any] | None:
        """Parameters, gradients, optimizer state and the rest of the peak, in bytes, of the first
        optimizer that stepped (docs/memory_breakdown.md); None before one has."""
        return self._memory.breakdown() if self._memory is not None else None

    @property
    def memory_snapshots(self) -> list[Path]:
        """Allocator snapshot files written so far: one per cycle, then one per OOM error."""
        snapshots = self._memory.snapshots if self._memory is not None else None
        return [*snapshots.files, *snapshots.oom_files] if snapshots is not None else []

    def start(self) -> Recorder:
        self._join_cluster_summary()
        if not self.config.records_rank(self.rank):
            return self
        if another_profiler_running():  # leave the user's own profiler its session
            self._warn("another torch profiler is already recording; trainprof records nothing "
                       "and training goes on")
            return self
        profiler_guard.watch(self)  # a profiler the user starts later makes this one step aside
        try:
            self.profiler = torch.profiler.profile(
                activities=self.config.torch_activities(),
                schedule=self.config.torch_schedule(),
                on_trace_ready=self._on_trace_ready,
                record_shapes=self.config.record_shapes,
                profile_memory=self.config.profile_memory,
                with_stack=self.config.with_stack,
                with_flops=self.config.with_flops,
                with_modules=self.config.with_modules,
            )
            self._schedule = self.config.torch_schedule()
            with self._quiet.around():
                self.profiler.__enter__()
        except Exception as error:
            self._give_up("the profiler could not start; training goes on unrecorded", error)
        self._memory = MemoryWatch(self.config, self.rank)
        self._memory.start(self.profiler.step_num if self.profiler is not None else 0)
        if self.config.nvtx or self.config.nvtx_ops:
            self.nvtx.start(self.steps, self.rank)
        return self

    def step(self) -> None:
        """Marks the end of one training step (the profiler's `ProfilerStep#N` boundary)."""
        self.steps += 1
        self.nvtx.step(self.steps)
        if self.profiler is None:
            return
        self._in_step = True
        try:
            with warnings.catch_warnings():
                # torch's note that each cycle starts afresh: we write every cycle to its own file.
                warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
                if self._schedule_changes():
                    with self._quiet.around():
                        self.profiler.step()
                else:
                    self.profiler.step()
            if self._memory is not None:
                self._memory.at_step(self.profiler.step_num)
        except Exception as error:
            # With a schedule, the profiler really starts here, at the first warm-up step.
            self._give_up(f"the profiler failed at step {self.steps}; training goes on unrecorded", error)
        finally:
            self._in_step = False

    def stop(self, wait_for_others: bool = True, failure: BaseException | None = None) -> None:
        """Ends recording (writing a cycle in progress), then meets the other ranks at the barrier
        if one was given; pass `wait_for_others=False` after an error, when they may be gone, and
        the `failure` itself (an out-of-memory error gets a snapshot with `memory_snapshot`)."""
        profiler, self.profiler = self.profiler, None
        self.nvtx.stop()
        profiler_guard.unwatch(self)
        if profiler is not None:
            try:
                with self._quiet.around():
                    profiler.__exit__(None, None, None)
            except Exception as error:
                self._warn("the profiler failed while stopping; the last cycle may be lost", error)
            self._warn_if_nothing_recorded()
        self._quiet.close()
        if self._memory is not None:
            self._memory.stop(failure)
        if wait_for_others:
            self._share_cluster_summary()
        if self._barrier is not None and wait_for_others:
            try:
                self._barrier()
            except Exception as error:
                self._warn("waiting for the other ranks after recording failed", error)

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, exc_type: object, failure: BaseException | None, *exc_info: object) -> None:
        self.stop(wait_for_others=exc_type is None, failure=failure)

    def _schedule_changes(self) -> bool:
        """Whether this step moves the schedule to another action (the profiler starts, stops
        or writes, and prints its log lines)."""
        if self._schedule is None or self.profiler is None:
            return True
        try:
            step = self.profiler.step_num
            return self._schedule(step) != self._schedule(step + 1)
        except Exception:
            return True

    def _on_trace_ready(self, profiler: torch.profiler.profile) -> None:
        # Inside step(), torch has already moved step_num on to the next step.
        last_step = profiler.step_num - 1 if self._in_step else profiler.step_num
        out_dir = self.config.trace_dir()
        if out_dir is not None:
            try:
                self.trace_files.append(write_trace(profiler, out_dir, self.rank, last_step))
            except Exception as error:
                self._warn(f"could not write a trace to {str(out_dir)!r}; training goes on", error)
        if self._memory is not None:
            self._memory.cycle_done(last_step)
        if self.config.on_trace_ready is not None:
            try:
                self.config.on_trace_ready(profiler)
            except Exception as error:
                self._warn("the on_trace_ready callback failed; training goes on", error)

    def _join_cluster_summary(self) -> None:
        """In a distributed job: tell the other ranks that this one will share its summary."""
        if self.config.cluster_summary and self.config.trace_dir() is not None:
            from trainprof.capture.job_summary import join_cluster_summary

            self._summary_recording = join_cluster_summary()

    def _share_cluster_summary(self) -> None:
        """Once, in a distributed job: the ranks meet and rank 0 writes cluster_summary.json."""
        out_dir = self.config.trace_dir()
        if self._summary_shared or not self.config.cluster_summary or out_dir is None:
            return
        self._summary_shared = True
        from trainprof.capture.job_summary import share_cluster_summary

        share_cluster_summary(self.trace_files, out_dir, self.config.records_rank(self.rank),
                              self.config.cluster_summary_timeout_s, self._warn,
                              self._summary_recording)

    def step_aside(self) -> None:
        """Another torch profiler is starting (capture/profiler_guard.py): stop, keeping the
        cycle recorded so far."""
        self._give_up("another torch profiler started; trainprof stopped recording so that it "
                      "can run, and training goes on", None)

    def _give_up(self, message: str, error: BaseException | None) -> None:
        self._warn(message, error)
        profiler, self.profiler = self.profiler, None  # the NVTX marks go on (capture/nvtx.py)
        profiler_guard.unwatch(self)
        if profiler is not None:
            # Leave no half-started Kineto session behind for the next profiler.
            with contextlib.suppress(Exception):
                profiler.__exit__(None, None, None)

    def _warn_if_nothing_recorded(self) -> None:
        if self.trace_files or self.config.trace_dir() is None:
            return
        option = self.config.schedule_option
        schedule = dict(DEFAULT_SCHEDULE if option is None else option)
        self._warn(
            f"no trace was written: the loop ran {self.steps} step(s), too few for the schedule "
            f"{schedule} to record one; use a shorter schedule (profile(schedule_option=...), or "
            "trainprof run's --wait/--warmup/--active)"
        )
