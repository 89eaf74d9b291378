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

Without touching the script, let `accelerate launch` start trainprof's runner in each process:

    accelerate launch [launch options] -m trainprof.capture.runner --out traces -- train.py --lr 3e-4

Each process records its own rank (from the launcher's RANK), steps are counted at each real
optimizer step (accumulation steps that skip `optimizer.step()` are not steps), and the lowest
recorded rank prints the analysis.
"""

from __future__ import annotations

from typing import Any

from trainprof.capture.config import ProfileConfig
from trainprof.capture.profiler import Recorder
from trainprof.capture.profiler import profile as _profile

__all__ = ["config_from_profile_kwargs", "profile"]


def config_from_profile_kwargs(kwargs: Any, **options: Any) -> ProfileConfig:
    """A `ProfileConfig` with the fields of accelerate's `ProfileKwargs`, plus `options`."""
    return ProfileConfig.from_profile_kwargs(kwargs).with_options(**options)


def profile(accelerator: Any, profile_handler: Any = None, **options: Any) -> Recorder:
    """`accelerator.profile(profile_handler)`, the trainprof way; `options` override fields."""
    return _profile(profile_handler, accelerator=accelerator, **options)
