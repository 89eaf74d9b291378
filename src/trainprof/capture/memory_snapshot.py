"""CUDA allocator snapshots: the allocator's history over each recorded window, dumped beside the
traces, and one more at the moment of an out-of-memory error.

History is `torch.cuda.memory._record_memory_history` with Python stacks only (a couple of µs
per allocation), switched on at the first step of a recorded cycle and off when its trace is
written. The out-of-memory observer runs inside the allocator just before it raises; it dumps a
snapshot and returns, so the error still reaches the training loop. Nothing here ever raises
into training: a failure is one warning. See docs/memory_snapshots.md.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerAction

from trainprof.fileio import atomic_write_bytes

#: One snapshot per rank and recorded cycle, named like the cycle's trace (N: its last step).
SNAPSHOT_FILE_NAME = "rank{rank}.step{step}.memory_snapshot.pickle"
#: One per out-of-memory error, numbered from 1.
OOM_FILE_NAME = "rank{rank}.oom{index}.memory_snapshot.pickle"
#: History entries kept (a ring buffer; each holds a stack): enough for a few steps of a large
#: model, and a bound on host memory when a window is long.
MAX_ENTRIES = 100_000
#: Out-of-memory errors dumped per recording (a batch-size search can raise many).
MAX_OOM_SNAPSHOTS = 3
#: The key under which trainprof adds what it knows to the snapshot dict (torch's viewer
#: ignores keys it does not know).
TRAINPROF_KEY = "trainprof"

Warn = Callable[..., None]


class AllocatorHistory:
    """What the recorder drives on the CUDA caching allocator (a stand-in can replace it)."""

    def start(self) -> None:
        """History of every action with Python stacks; `ProfilerStep#N` (record_function)
        annotations go to `external_annotations`, which is how the analysis finds steps."""
        options: dict[str, Any] = {"enabled": "all", "context": "all", "stacks": "python",
                                   "max_entries": MAX_ENTRIES, "clear_history": True,
                                   "global_record_annotations": True}
        for dropped in ((), ("global_record_annotations",), ("clear_history",)):
            for name in dropped:  # older torch lacks the newer options
                options.pop(name, None)
            try:
                torch.cuda.memory._record_memory_history(**options)
                return
            except TypeError:
                continue
        raise RuntimeError("this torch's _record_memory_history takes none of our options")

    def stop(self) -> None:
        torch.cuda.memory._record_memory_history(enabled=None)

    def recording_already(self) -> bool:
        """Whether history is on already (the user's own): then it is theirs to start and stop."""
        enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)  # private: may move
        return bool(enabled()) if enabled is not None else False

    def snapshot(self) -> dict[str, Any]:
        return torch.cuda.memory._snapshot()

    def device_totals(self) -> dict[str, int]:
        return {str(i): int(torch.cuda.get_device_properties(i).total_memory)
                for i in range(torch.cuda.device_count())}

    def attach_oom_observer(self, observer: Callable[[int, int, int, int], None]) -> None:
        # Private, and missing from torch's stubs.
        torch._C._cuda_attach_out_of_memory_observer(observer)  # type: ignore[attr-defined]


#: Recorders that want a snapshot at an out-of-memory error; the observer, once attached,
#: stays for the life of the process (torch has no way to detach it), so it routes to these.
_ACTIVE: list[SnapshotRecorder] = []
_attached = False


def on_out_of_memory(device: int, requested: int, device_allocated: int, device_free: int) -> None:
    """The allocator's out-of-memory observer: every active recorder dumps a snapshot.

    Never raises: an exception here would replace the out-of-memory error the user must see.
    """
    for recorder in list(_ACTIVE):
        recorder.dump_oom(device, requested, device_allocated, device_free)


class SnapshotRecorder:
    """Allocator history over recorded windows, one snapshot per window and per OOM error."""

    def __init__(self, out_dir: str | os.PathLike[str], rank: int, warn: Warn,
                 schedule: Callable[[int], ProfilerAction],
                 breakdown: Callable[[], dict[str, Any] | None] = lambda: None,
                 history: Any = None) -> None:
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.files: list[Path] = []
        self.oom_files: list[Path] = []
        self._warn = warn
        self._schedule = schedule
        self._breakdown = breakdown
        self._history = history if history is not None else AllocatorHistory()
        self._recording = False
        self._owned = False  # whether we switched history on (and so switch it off)
        self._broken = False

    def start(self, step: int) -> None:
        """Arms the out-of-memory observer, and starts history if `step` is recorded."""
        global _attached
        _ACTIVE.append(self)
        if not _attached:
            try:
                self._history.attach_oom_observer(on_out_of_memory)
                _attached = True
            except Exception as error:
                self._warn("could not attach the out-of-memory observer; an OOM error will be "
                           "dumped when it leaves the recorded block instead", error)
        self.at_step(step)

    def at_step(self, step: int) -> None:
        """Called as each step begins: history starts with the first step of a recorded cycle."""
        if self._recording or self._broken or self._schedule(step) == ProfilerAction.NONE:
            return
        try:
            self._owned = not self._history.recording_already()
            if self._owned:
                self._history.start()
            self._recording = True
        except Exception as error:
            self._give_up("could not record the CUDA allocator's history; no snapshot", error)

    def cycle_done(self, step: int) -> None:
        """The cycle ending at `step` was written: dump its snapshot, stop history."""
        if not self._recording:
            return
        name = SNAPSHOT_FILE_NAME.format(rank=self.rank, step=step)
        path = self._dump(name, {"reason": "cycle", "step": step})
        if path is not None:
            self.files.append(path)
        self._stop_history()

    def dump_oom(self, device: int, requested: int, device_allocated: int, device_free: int
                 ) -> None:
        """A snapshot at an out-of-memory error (at most `MAX_OOM_SNAPSHOTS`). Never raises."""
        self._dump_oom({"device": int(device), "requested": int(requested),
                        "device_allocated": int(device_allocated), "device_free": int(device_free)})

    def dump_oom_on_exit(self, error: BaseException | None) -> None:
        """An out-of-memory error left the recorded block and the observer dumped nothing (it
        could not attach): dump now, while the failing frames still hold their tensors."""
        if not self.oom_files and isinstance(error, torch.OutOfMemoryError):
            self._dump_oom({"device": None, "requested": None, "message": str(error)[:500]})

    def _dump_oom(self, oom: dict[str, Any]) -> None:
        try:
            if len(self.oom_files) >= MAX_OOM_SNAPSHOTS:
                return
            name = OOM_FILE_NAME.format(rank=self.rank, index=len(self.oom_files) + 1)
            path = self._dump(name, {"reason": "oom", "oom": oom})
            if path is not None:
                self.oom_files.append(path)
        except Exception as error:  # the out-of-memory error must reach the user, not this one
            self._warn("could not dump a snapshot at the out-of-memory error", error)

    def close(self) -> None:
        """Stops history (a cycle cut short is not dumped twice) and disarms the observer."""
        self._stop_history()
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def _dump(self, name: str, info: dict[str, Any]) -> Path | None:
        try:
            snapshot = self._history.snapshot()
            snapshot[TRAINPROF_KEY] = {"rank": self.rank, **info,
                                       "device_totals": self._device_totals(),
                                       "memory_breakdown": self._breakdown()}
            data = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
            return atomic_write_bytes(self.out_dir / name, data)
        except Exception as error:
            self._warn(f"could not write the memory snapshot {name} to {str(self.out_dir)!r}", error)
            return None

    def _device_totals(self) -> dict[str, int]:
        try:
            return self._history.device_totals()
        except Exception:
            return {}

    def _stop_history(self) -> None:
        if not self._recording:
            return
        self._recording = False
        try:
            if self._owned:
                self._history.stop()
        except Exception as error:
            self._give_up("could not stop recording the CUDA allocator's history", error)

    def _give_up(self, message: str, error: BaseException) -> None:
        self._broken = True
        self._recording = False
        self._warn(message, error)
