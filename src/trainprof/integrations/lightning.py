"""A Lightning callback that records training with trainprof: one trace file per rank and cycle.

    from trainprof.integrations.lightning import TrainprofCallback
    trainer = Trainer(callbacks=[TrainprofCallback(schedule_option={"wait": 2, "warmup": 1, "active": 3})])

Options are `trainprof.profile`'s. A step is one training batch (`on_train_batch_end`). Without
`output_trace_dir`, files go to `<trainer.default_root_dir>/trainprof-traces`. A Trainer given
`profiler="pytorch"` keeps its own profiler: two torch profilers cannot run at once (together
they crash the process in torch 2.13), so the callback warns once and records nothing.

`log_to=True` logs the analysis of rank 0's trace into the Trainer's own loggers
(`trainer.loggers`: W&B, MLflow, TensorBoard) when training ends; `log_to` also takes what
`trainprof.log_analysis` takes ("mlflow", a run...). docs/trackers.md.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from trainprof.capture.config import DEFAULT_OUTPUT_DIR, ProfileConfig
from trainprof.capture.profiler import Recorder
from trainprof.capture.safety import RecordingWarning

try:  # the unified package first; the standalone one for older projects
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.profilers import PyTorchProfiler
except ImportError:  # pragma: no cover
    from pytorch_lightning.callbacks import Callback  # type: ignore[assignment]
    from pytorch_lightning.profilers import PyTorchProfiler  # type: ignore[assignment]

__all__ = ["TrainprofCallback"]


class TrainprofCallback(Callback):
    """Starts the profiler when training starts, steps it after every batch, stops at the end."""

    def __init__(self, config: Any = None, *, log_to: Any = None, **options: Any) -> None:
        """`config`: a `ProfileConfig` or an accelerate `ProfileKwargs`; `options` override it.
        `log_to`: True for the Trainer's loggers, or trackers (docs/trackers.md)."""
        super().__init__()
        self.log_to = log_to
        if config is None:
            config = ProfileConfig()
        elif not isinstance(config, ProfileConfig):
            config = ProfileConfig.from_profile_kwargs(config)
        self.config = config.with_options(**options)
        self.recorder: Recorder | None = None  # kept after training, for its trace_files
        self._running = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if isinstance(getattr(trainer, "profiler", None), PyTorchProfiler):
            warnings.warn("trainprof: the Trainer runs its own torch profiler (profiler='pytorch'), "
                          "and two cannot run at once; trainprof records nothing and training "
                          "goes on", RecordingWarning, stacklevel=2)
            return
        config = self.config
        if config.output_trace_dir is None and config.on_trace_ready is None:
            out_dir = os.path.join(trainer.default_root_dir, DEFAULT_OUTPUT_DIR)
            config = config.with_options(output_trace_dir=out_dir)
        self.recorder = Recorder(config, rank=trainer.global_rank, barrier=trainer.strategy.barrier)
        self.recorder.start()
        self._running = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._running:
            self.recorder.step()  # type: ignore[union-attr]

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._stop(wait_for_others=True)
        if self.log_to is not None and self.log_to is not False and trainer.global_rank == 0:
            self._log_analysis(trainer)

    def _log_analysis(self, trainer: Any) -> None:
        """The analysis of this rank's traces, to the trackers; a failure is one warning."""
        files = self.trace_files
        if not files:
            return
        try:
            from trainprof.pipeline import analyze
            from trainprof.trace.load import load_file
            from trainprof.trackers.api import log_analysis

            analysis = analyze([load_file(f) for f in files])
            log_analysis(analysis, trainer if self.log_to is True else self.log_to)
        except Exception as error:  # training is over and went well: never fail it now
            warnings.warn(f"trainprof: could not log the analysis ({type(error).__name__}: "
                          f"{error})", RecordingWarning, stacklevel=2)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._stop(wait_for_others=False)  # the other ranks may be gone: no barrier

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._stop(wait_for_others=False)

    @property
    def trace_files(self) -> list[Any]:
        """The files written so far on this rank."""
        return self.recorder.trace_files if self.recorder is not None else []

    def _stop(self, wait_for_others: bool) -> None:
        if self._running:
            self._running = False
            self.recorder.stop(wait_for_others=wait_for_others)  # type: ignore[union-attr]
