"""``trainprof run --live`` and ``--record``: a step timer beside the profiler.

The timer sees the script without changes: a step ends at each ``optimizer.step()`` (as the
profiler's steps do), backward through ``torch.autograd.backward``, and every DataLoader batch
is timed as the data phase of its step, its size counted for samples/s. The forward pass is
not known (`trainprof run` does not know which module is the model): it is part of "other".

With ``--record`` every rank's timer gives the history its row (the steps of the whole run,
not only the profiled window): ``commands/run.py`` stores ``timer.to_run_record()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trainprof.capture.steps import StepTimer


@contextmanager
def run_timer(live: bool, wanted: bool) -> Iterator[StepTimer | None]:
    """A step timer for the script's run when ``live`` (a live panel) or ``wanted`` (its record,
    for ``--record``) asks for one; None otherwise."""
    if not (live or wanted):
        yield None
        return
    timer = StepTimer(log_every=None, live=live)
    try:
        with timed_data_loaders(timer):
            yield timer
    finally:
        timer.close()


@contextmanager
def timed_data_loaders(timer: StepTimer) -> Iterator[None]:
    """Every DataLoader's ``next()`` goes through ``timer.fetch`` while the script runs."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original = _BaseDataLoaderIter.__next__

    def timed_next(self: Any) -> Any:
        return timer.fetch(lambda: original(self))

    _BaseDataLoaderIter.__next__ = timed_next  # type: ignore[method-assign]
    try:
        yield
    finally:
        _BaseDataLoaderIter.__next__ = original  # type: ignore[method-assign]
