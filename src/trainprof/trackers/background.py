"""Per-step logging off the training thread: the step timer hands each step's figures to a
queue, and one daemon thread sends them. A slow or dead server never stalls a step."""

from __future__ import annotations

import json
import queue
import tempfile
import threading
from pathlib import Path
from typing import Any

from trainprof.trackers.base import Guarded
from trainprof.trackers.metrics import timer_metrics

#: Steps waiting to be sent before new ones are dropped (a tracker far behind, or hanging).
MAX_PENDING = 10_000
#: Seconds ``close()`` waits for the queue to drain.
CLOSE_TIMEOUT_S = 30.0
#: Seconds between sends: the thread wakes this often and sends every step queued since, so
#: that it does not take the interpreter from the training thread at every step.
SEND_EVERY_S = 1.0


class StepLogger:
    """Sends ``(step, metrics)`` to trackers from a background thread."""

    def __init__(self, trackers: list[Guarded]) -> None:
        self.trackers = trackers
        self.dropped = 0
        self._queue: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue(MAX_PENDING)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainprof-trackers", daemon=True)
        self._thread.start()

    def step(self, index: int, record: dict[str, Any]) -> None:
        """Queue one step's record (``step_ms``, ``data_ms``, ...); never blocks."""
        try:
            self._queue.put_nowait((index, record))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            closing = self._closing.wait(SEND_EVERY_S)
            series = []
            while True:
                try:
                    step, record = self._queue.get_nowait()
                except queue.Empty:
                    break
                series.append((step, timer_metrics(record)))
            if series:
                for tracker in self.trackers:
                    tracker.log_series(series)
            if closing:
                return

    def close(self, summary: dict[str, float] | None = None,
              result: dict[str, Any] | None = None) -> None:
        """Send what is queued (waiting at most ``CLOSE_TIMEOUT_S``), then the ``summary``
        metrics and the ``result`` (as ``trainprof-step-timer.json``), and close the trackers."""
        self._closing.set()
        self._thread.join(CLOSE_TIMEOUT_S)
        with tempfile.TemporaryDirectory(prefix="trainprof-") as folder:
            path = Path(folder) / "trainprof-step-timer.json"
            if result is not None:
                path.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
            for tracker in self.trackers:
                if summary:
                    tracker.log_metrics(summary, None)
                if result is not None:
                    tracker.log_artifact(path)
                tracker.close()
