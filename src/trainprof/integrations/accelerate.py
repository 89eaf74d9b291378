"""trainprof with Hugging Face accelerate.

In the training script, in place of `accelerator.profile()`:

    from trainprof.integrations.accelerate import profile
    with profile(accelerator, output_trace_dir="traces") as prof:
        for batch in loader:
            ...
            prof.step()

It takes the `ProfileKwargs` registered on the Accelerator (or the one given), adds trainprof's
defaults (a schedule, gzip, `rank{R}.step{N}.pt.trace.json.gz` files, never failing the loop) and
meets all processes at `accelerator.wait_for_everyone()` at the end, as `accelerator.profile()`
does. Files that `accelerator.profile()` itself wrote (`profile_{i}.json`) are read by
`trainprof analyze` too, as ranks.

Without touching the script, let `accelerate launch` start `trainprof run` in each process:

    accelerate launch [launch options] -m trainprof run --out traces -- train.py --lr 3e-4

Each process records its own rank (from the launcher's RANK), steps are counted at each real
optimizer step (accumulation steps that skip `optimizer.step()` are not steps), and the lowest
recorded rank prints the analysis.
"""

from __future__ import annotations

import warnings
from typing import Any

from trainprof.capture.config import ProfileConfig
from trainprof.capture.profiler import Recorder
from trainprof.capture.profiler import profile as _profile
from trainprof.capture.safety import RecordingWarning

__all__ = ["LoggedRecording", "config_from_profile_kwargs", "profile"]


def config_from_profile_kwargs(kwargs: Any, **options: Any) -> ProfileConfig:
    """A `ProfileConfig` with the fields of accelerate's `ProfileKwargs`, plus `options`."""
    return ProfileConfig.from_profile_kwargs(kwargs).with_options(**options)


def profile(accelerator: Any, profile_handler: Any = None, *, log_to: Any = None,
            **options: Any) -> Any:
    """`accelerator.profile(profile_handler)`, the trainprof way; `options` override fields.

    `log_to=True` logs the analysis of the main process's trace into the Accelerator's own
    trackers (`log_with`) when the block ends without an error; `log_to` also takes what
    `trainprof.log_analysis` takes (docs/trackers.md)."""
    recorder = _profile(profile_handler, accelerator=accelerator, **options)
    if log_to is None or log_to is False:
        return recorder
    return LoggedRecording(recorder, accelerator if log_to is True else log_to, accelerator)


class LoggedRecording:
    """A `Recorder` that, on a clean exit on the main process, logs its trace's analysis."""

    def __init__(self, recorder: Recorder, log_to: Any, accelerator: Any) -> None:
        self.recorder = recorder
        self.log_to = log_to
        self.accelerator = accelerator

    def __getattr__(self, name: str) -> Any:
        return getattr(self.recorder, name)

    def __enter__(self) -> LoggedRecording:
        self.recorder.__enter__()
        return self

    def __exit__(self, exc_type: object, failure: BaseException | None,
                 *exc_info: object) -> None:
        self.recorder.__exit__(exc_type, failure, *exc_info)
        if exc_type is None and getattr(self.accelerator, "is_main_process", True):
            self._log()

    def _log(self) -> None:
        files = self.recorder.trace_files
        if not files:
            return
        try:
            from trainprof.pipeline import analyze
            from trainprof.trace.load import load_file
            from trainprof.trackers.api import log_analysis

            log_analysis(analyze([load_file(f) for f in files]), self.log_to)
        except Exception as error:  # the training went well: never fail it now
            warnings.warn(f"trainprof: could not log the analysis ({type(error).__name__}: "
                          f"{error})", RecordingWarning, stacklevel=2)
