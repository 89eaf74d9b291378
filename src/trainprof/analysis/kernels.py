"""Per-kernel-name statistics: the TensorBoard plugin's kernel view, with modern Tensor Core names.

Blocks per SM and estimated achieved occupancy are Kineto's per-launch figures, averaged over a
kernel's calls weighted by duration. Calls that do not report them are left out of the mean
(the plugin counted them as 0, which biased the mean down).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from trainprof.analysis.attribution import device_links
from trainprof.analysis.calltree import call_tree, canonical_names
from trainprof.analysis.frames import data_frame
from trainprof.analysis.gpu import uses_tensor_cores
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.tabular import group_ids, share
from trainprof.trace.model import FLAG_COMM, Kind, Trace


@dataclass
class KernelRow:
    """One kernel name over all its calls. Times in µs."""

    name: str
    calls: int
    total_us: float
    mean_us: float
    min_us: float
    max_us: float
    share_pct: float  # of all kernel time
    blocks_per_sm: float | None  # duration-weighted mean, None when no call reports it
    occupancy_pct: float | None  # estimated achieved occupancy, duration-weighted mean
    tensor_cores: bool  # the name says it runs on Tensor Cores
    communication: bool
    op: str | None  # the op whose launches account for most of this kernel's time
    op_share_pct: float | None  # that op's share of the kernel's time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KernelStats:
    """Kernels of one trace, largest total time first."""

    rows: list[KernelRow]
    total_us: float
    calls: int
    tensor_core_pct: float | None  # share of kernel time in Tensor Core kernels

    def top(self, n: int) -> list[KernelRow]:
        return self.rows[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"total_us": self.total_us, "calls": self.calls,
                "tensor_core_pct": self.tensor_core_pct, "rows": [r.to_dict() for r in self.rows]}

    def to_pandas(self) -> Any:
        return data_frame([r.to_dict() for r in self.rows])


def kernel_stats(trace: Trace, steps: StepWindows | None = None) -> KernelStats:
    """Per kernel name: calls, total/mean/min/max, blocks per SM, occupancy, Tensor Cores, op."""
    ev = trace.events
    kernels = np.flatnonzero(ev.kind == Kind.KERNEL)
    if not len(kernels):
        return KernelStats(rows=[], total_us=0.0, calls=0, tensor_core_pct=None)
    canon = canonical_names(ev.names)
    first, group = group_ids(canon[ev.name[kernels]])
    n = len(first)
    dur = ev.dur[kernels]
    total = np.bincount(group, weights=dur, minlength=n)
    calls = np.bincount(group, minlength=n)
    low = np.full(n, np.inf)
    high = np.full(n, -np.inf)
    np.minimum.at(low, group, dur)
    np.maximum.at(high, group, dur)
    blocks = _weighted_mean(group, dur, ev.blocks_per_sm[kernels], n)
    occupancy = _weighted_mean(group, dur, ev.occupancy[kernels], n)
    op, op_time = _launching_ops(trace, kernels, group, n)
    all_time = float(dur.sum())
    rows = []
    for g in range(n):
        e = kernels[first[g]]
        name = ev.names[ev.name[e]]
        rows.append(KernelRow(
            name=name, calls=int(calls[g]), total_us=float(total[g]),
            mean_us=float(total[g] / calls[g]), min_us=float(low[g]), max_us=float(high[g]),
            share_pct=share(float(total[g]), all_time) or 0.0,
            blocks_per_sm=_or_none(blocks[g]), occupancy_pct=_or_none(occupancy[g]),
            tensor_cores=uses_tensor_cores(name), communication=bool(ev.flags[e] & FLAG_COMM),
            op=op[g], op_share_pct=share(op_time[g], float(total[g])) if op[g] else None,
        ))
    rows.sort(key=lambda r: (-r.total_us, r.name))
    tc = sum(r.total_us for r in rows if r.tensor_cores)
    return KernelStats(rows=rows, total_us=all_time, calls=len(kernels),
                       tensor_core_pct=share(tc, all_time))


def _weighted_mean(group: np.ndarray, weight: np.ndarray, values: np.ndarray,
                   n: int) -> np.ndarray:
    """Per group, the weighted mean of the finite values (nan when none)."""
    values = values.astype(np.float64)
    ok = np.isfinite(values)
    w = np.where(ok, weight, 0.0)
    num = np.bincount(group, weights=np.where(ok, values, 0.0) * w, minlength=n)
    den = np.bincount(group, weights=w, minlength=n)
    # Zero-length calls only: the plain mean of what they report.
    plain = np.bincount(group, weights=np.where(ok, values, 0.0), minlength=n)
    count = np.bincount(group, weights=ok.astype(np.float64), minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, plain / count)


def _launching_ops(trace: Trace, kernels: np.ndarray, group: np.ndarray,
                   n: int) -> tuple[list[str | None], np.ndarray]:
    """Per kernel group, the op name that launched most of its time, and that time."""
    ev = trace.events
    links = device_links(trace)
    tree = call_tree(trace)
    op_node = links.op[np.searchsorted(links.device, kernels)]
    has = op_node >= 0
    names: list[str | None] = [None] * n
    time = np.zeros(n)
    if not has.any():
        return names, time
    op_event = tree.event[op_node[has]]
    canon = canonical_names(ev.names)[ev.name[op_event]]
    first, pair = group_ids(group[has], canon)
    pair_time = np.bincount(pair, weights=ev.dur[kernels[has]])
    pair_group = group[has][first]
    for k in np.lexsort((-pair_time, pair_group)):  # heaviest op first within each kernel
        g = int(pair_group[k])
        if names[g] is None:
            names[g] = ev.names[ev.name[op_event[first[k]]]]
            time[g] = pair_time[k]
    return names, time


def _or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
