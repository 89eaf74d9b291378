"""`ProfileConfig`: accelerate's `ProfileKwargs` fields and meanings, plus trainprof's defaults."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any

import msgspec
import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from trainprof import structs

#: Where traces go when neither `output_trace_dir` nor `on_trace_ready` is given.
DEFAULT_OUTPUT_DIR = "trainprof-traces"

#: Skip 5 steps (lazy initialisation, allocator growth, autotuning and compilation happen there),
#: warm the profiler up for 1, record 3, once. A long loop is recorded once, in steady state.
DEFAULT_SCHEDULE: Mapping[str, int] = MappingProxyType(
    {"skip_first": 0, "wait": 5, "warmup": 1, "active": 3, "repeat": 1}
)

SCHEDULE_KEYS = frozenset({"wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait"})
REQUIRED_SCHEDULE_KEYS = ("wait", "warmup", "active")  # torch.profiler.schedule has no defaults for these

_ACTIVITY_NAMES = {
    "cpu": "CPU",
    "cuda": "CUDA",
    "xpu": "XPU",
    "mtia": "MTIA",
    "hpu": "HPU",
    "privateuse1": "PrivateUse1",
}


def machine_activities() -> list[str]:
    """The activities this machine can record: the CPU plus whichever accelerator is present."""
    names = ["cpu"]
    if torch.cuda.is_available():  # true on ROCm too; Kineto records HIP kernels as CUDA
        names.append("cuda")
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        names.append("xpu")
    return names


def to_torch_activity(name: str | ProfilerActivity) -> ProfilerActivity:
    """Maps "cpu", "cuda", ... to `torch.profiler.ProfilerActivity`, as accelerate does."""
    if isinstance(name, ProfilerActivity):
        return name
    attr = _ACTIVITY_NAMES.get(str(name).lower())
    if attr is None or not hasattr(ProfilerActivity, attr):
        raise ValueError(f"unknown profiler activity {name!r}; use one of {sorted(_ACTIVITY_NAMES)}")
    return getattr(ProfilerActivity, attr)


def record_every_step(step: int) -> ProfilerAction:
    """A schedule that records from the start to the end as one cycle.

    torch's own "no schedule" does the same but then leaves out the `ProfilerStep#N` spans that
    the analysis uses to find steps; passing a schedule keeps them.
    """
    return ProfilerAction.RECORD


class ProfileConfig(msgspec.Struct):
    """What to record and where; field names and meanings follow accelerate's `ProfileKwargs`.

    Differences, all on purpose: `activities=None` means what this machine has; a missing
    `schedule_option` means `DEFAULT_SCHEDULE` (pass `{}` to record every step as one cycle);
    `output_trace_dir=None` means `DEFAULT_OUTPUT_DIR` unless `on_trace_ready` is given; `ranks`
    limits recording to some global ranks (None: all); `memory_snapshot` also dumps the CUDA
    allocator's history beside the traces (docs/memory_snapshots.md); `cluster_summary` has
    rank 0 of a distributed job write `cluster_summary.json` (docs/distributed.md).
    """

    activities: list[str] | None = None
    schedule_option: Mapping[str, int] | None = None
    on_trace_ready: Callable[[Any], None] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | os.PathLike[str] | None = None
    ranks: Collection[int] | int | None = None
    memory_snapshot: bool = False
    #: NVTX ranges ``ProfilerStep#N`` around each step, for Nsight Systems (capture/nvtx.py);
    #: ``nvtx_ops`` adds torch's op ranges (``emit_nvtx``, with shapes under record_shapes).
    nvtx: bool = False
    nvtx_ops: bool = False
    #: In a distributed job, each rank summarises its traces when recording stops and rank 0
    #: writes cluster_summary.json beside them; the ranks wait for each other at most this long.
    cluster_summary: bool = True
    cluster_summary_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        # Check now, so a typo fails at the call site rather than warning mid-training.
        for name in self.activities or ():
            to_torch_activity(name)
        option = self.schedule_option or {}
        unknown = set(option) - SCHEDULE_KEYS
        if unknown:
            raise ValueError(f"unknown schedule_option keys {sorted(unknown)}; use {sorted(SCHEDULE_KEYS)}")
        missing = [key for key in REQUIRED_SCHEDULE_KEYS if option and key not in option]
        if missing:
            raise ValueError(f"schedule_option needs {missing} too (or pass {{}} to record every step)")
        if isinstance(self.ranks, int):
            self.ranks = (self.ranks,)

    @classmethod
    def from_profile_kwargs(cls, kwargs: Any) -> ProfileConfig:
        """Builds a config from accelerate's `ProfileKwargs` (or anything with the same fields)."""
        names = [f.name for f in structs.fields(cls) if f.name != "ranks"]
        given = {name: getattr(kwargs, name) for name in names if hasattr(kwargs, name)}
        if not given:  # a dict, a path, ...: not silently the defaults
            raise TypeError("profile() takes a ProfileConfig, an accelerate ProfileKwargs or an "
                            f"Accelerator, not {type(kwargs).__name__}; pass options by keyword")
        return cls(**given)

    def with_options(self, **options: Any) -> ProfileConfig:
        """A copy with some fields replaced; an unknown name is a `TypeError` that lists the valid ones."""
        valid = {f.name for f in structs.fields(self)}
        unknown = set(options) - valid
        if unknown:
            raise TypeError(f"unknown profile option(s) {sorted(unknown)}; valid: {sorted(valid)}")
        return structs.replace(self, **options)

    def torch_activities(self) -> list[ProfilerActivity]:
        return [to_torch_activity(name) for name in (self.activities or machine_activities())]

    def torch_schedule(self) -> Callable[[int], Any]:
        """The torch schedule; for an empty `schedule_option`, one that records every step."""
        option = DEFAULT_SCHEDULE if self.schedule_option is None else self.schedule_option
        if not option:
            return record_every_step
        return torch.profiler.schedule(**option)

    def trace_dir(self) -> str | os.PathLike[str] | None:
        """Where trace files go, or None when only the user's `on_trace_ready` handles traces."""
        if self.output_trace_dir is None and self.on_trace_ready is None:
            return DEFAULT_OUTPUT_DIR
        return self.output_trace_dir

    def records_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks  # type: ignore[operator]
