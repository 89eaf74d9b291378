"""The memory breakdown (docs/memory_breakdown.md) as typed fields: the plain dict that
`capture.memory_breakdown.breakdown_dict` writes (`StepTimer.summary()`,
`Recorder.memory_breakdown()`, a snapshot trainprof wrote), read with `decode.record`."""

from __future__ import annotations

import msgspec
from msgspec import field


class BreakdownBytes(msgspec.Struct):
    """Bytes of each part of the peak; None where unknown (runtime and process: CPU only)."""

    parameters: int | None = None
    gradients: int | None = None
    optimizer_state: int | None = None
    activations: int | None = None  # the rest of the peak
    runtime: int | None = None
    process: int | None = None
    peak: int | None = None


class DtypeRow(msgspec.Struct):
    """Bytes and storages of one category on one device in one dtype."""

    category: str
    device: str
    dtype: str
    bytes: int
    tensors: int


class MemoryBreakdown(msgspec.Struct):
    """Where the memory of a peak goes: its parts, the rows by dtype, the optimizer's state."""

    device: str | None = None
    bytes: BreakdownBytes = field(default_factory=BreakdownBytes)
    peak_source: str | None = None
    rows: list[DtypeRow] = field(default_factory=list)
    optimizer_state_keys: dict[str, int] = field(default_factory=dict)
    optimizer_state_per_parameter: float | None = None
    notes: list[str] = field(default_factory=list)


class RecordedBy(msgspec.Struct):
    """What trainprof added to a snapshot it wrote (its `trainprof` key): the rank, why it was
    written (`cycle`, `oom`), the step, the breakdown."""

    rank: int | None = None
    reason: str | None = None
    step: int | None = None
    memory_breakdown: MemoryBreakdown | None = None
