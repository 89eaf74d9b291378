"""Per-kernel-name statistics: the TensorBoard plugin's kernel view, with modern Tensor Core names.

Blocks per SM and estimated achieved occupancy are Kineto's per-launch figures, averaged over a
kernel's calls weighted by duration. Calls that do not report them are left out of the mean
(the plugin counted them as 0, which biased the mean down).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis.attribution import device_links
from trainprof.analysis.calltree import call_tree, canonical_names
from trainprof.analysis.frames import data_frame
from trainprof.analysis.kernel_shares import KernelClassShares, kernel_class_shares
from trainprof.analysis.occupancy import FULL_FILL, launch_fill, sm_counts
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.tabular import group_ids, share
from trainprof.trace.kernel_class import (
    CLASS_LABELS,
    FUSED_ATTENTION,
    NAME_LIMIT,
    KernelClass,
    KernelClasses,
)
from trainprof.trace.kernel_context import kernel_classes
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
    #: "compute", "tensor_core" or "communication" (trace/kernel_class.py), and what decided it:
    #: "name", "launch" (the op or Python frame that launched it) or "unclassified" (a guess).
    kernel_class: str = "compute"
    classified_by: str = "name"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Ops whose kernels could run on Tensor Cores (matmuls, convolutions, attention, RNNs): the
#: TensorBoard plugin's allow-list, by pattern so that new spellings match.
_TC_ELIGIBLE_OP = re.compile(
    r"conv|(?:^|::|_)(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|einsum)(?:$|_)"
    r"|scaled_dot_product|_flash_attention|_efficient_attention|_cudnn_attention"
    r"|cudnn_rnn|lstm|(?:^|::|_)gru(?:$|_)", re.IGNORECASE)
#: Softmax ops (not log-softmax, a loss); fused attention by op or kernel name is
#: trace/kernel_class.py's FUSED_ATTENTION.
_SOFTMAX_OP = re.compile(r"(?:^|::)_?softmax(?:$|_backward)", re.IGNORECASE)


@dataclass
class KernelFacts:
    """Kernel time (µs, whole trace, communication kernels left out) behind the GPU rules."""

    compute_us: float = 0.0
    #: Launched by an op that could use Tensor Cores, and of that, by Tensor Core kernels.
    tc_eligible_us: float = 0.0
    tc_eligible_on_tc_us: float = 0.0
    #: Calls with fewer blocks than FULL_FILL per free SM (analysis/occupancy.py: SMs held by a
    #: concurrent communication kernel are not free; persistent kernels are full), and the SM
    #: time they leave empty: sum of duration x (1 - blocks per free SM).
    underfilled_us: float = 0.0
    underfilled_empty_us: float = 0.0
    reported_blocks_us: float = 0.0  # time of the calls whose blocks are known
    #: Time of the calls that would count as under-filled against all SMs, but fill the SMs
    #: left free by a concurrent communication kernel or are sized to them (not persistent),
    #: and of the calls named persistent.
    full_beside_comm_us: float = 0.0
    persistent_us: float = 0.0
    #: Softmax kernels (launched by a softmax op) and fused attention kernels.
    softmax_us: float = 0.0
    softmax_calls: int = 0
    fused_attention_us: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KernelStats:
    """Kernels of one trace, largest total time first."""

    rows: list[KernelRow]
    total_us: float
    calls: int
    tensor_core_pct: float | None  # share of kernel time in Tensor Core kernels
    facts: KernelFacts = field(default_factory=KernelFacts)
    classes: KernelClassShares | None = None

    def top(self, n: int) -> list[KernelRow]:
        return self.rows[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"total_us": self.total_us, "calls": self.calls,
                "tensor_core_pct": self.tensor_core_pct, "facts": self.facts.to_dict(),
                "classes": self.classes.to_dict() if self.classes else None,
                "rows": [r.to_dict() for r in self.rows]}

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
    classes = kernel_classes(trace)
    rows = []
    for g in range(n):
        e = kernels[first[g]]
        name = ev.names[ev.name[e]]
        cls = KernelClass(int(classes.cls[e]))
        rows.append(KernelRow(
            name=name, calls=int(calls[g]), total_us=float(total[g]),
            mean_us=float(total[g] / calls[g]), min_us=float(low[g]), max_us=float(high[g]),
            share_pct=share(float(total[g]), all_time) or 0.0,
            blocks_per_sm=_or_none(blocks[g]), occupancy_pct=_or_none(occupancy[g]),
            tensor_cores=cls == KernelClass.TENSOR_CORE,
            communication=bool(ev.flags[e] & FLAG_COMM),
            op=op[g], op_share_pct=share(op_time[g], float(total[g])) if op[g] else None,
            kernel_class=CLASS_LABELS[cls], classified_by=_decided_by(classes, e),
        ))
    rows.sort(key=lambda r: (-r.total_us, r.name))
    tc = sum(r.total_us for r in rows if r.tensor_cores)
    return KernelStats(rows=rows, total_us=all_time, calls=len(kernels),
                       tensor_core_pct=share(tc, all_time), facts=kernel_facts(trace, kernels),
                       classes=kernel_class_shares(trace, kernels))


def _decided_by(classes: KernelClasses, event: int) -> str:
    if classes.by_launch[event]:
        return "launch"
    return "name" if classes.by_name[event] else "unclassified"


def kernel_facts(trace: Trace, kernels: np.ndarray) -> KernelFacts:
    """Tensor Core eligibility, under-filled launches and attention, per kernel call."""
    ev = trace.events
    kernels = kernels[~ev.flagged(FLAG_COMM)[kernels]]
    if not len(kernels):
        return KernelFacts()
    dur = ev.dur[kernels]
    op = _kernel_ops(trace, kernels)
    op_names = np.unique(op[op >= 0])
    eligible = _name_mask(ev.names, op_names, _TC_ELIGIBLE_OP)[np.maximum(op, 0)] & (op >= 0)
    softmax = _name_mask(ev.names, op_names, _SOFTMAX_OP)[np.maximum(op, 0)] & (op >= 0)
    k_names = np.unique(ev.name[kernels])
    on_tc = kernel_classes(trace).cls[kernels] == KernelClass.TENSOR_CORE
    fused = _name_mask(ev.names, k_names, FUSED_ATTENTION)[ev.name[kernels]]
    fused |= _name_mask(ev.names, op_names, FUSED_ATTENTION)[np.maximum(op, 0)] & (op >= 0)
    fill = launch_fill(trace, kernels)
    reported = np.isfinite(fill.fill)
    under = fill.underfilled
    naive = reported & (fill.fill * fill.free_sms < FULL_FILL * sm_counts(trace, kernels, 1.0))
    empty = np.where(under, 1.0 - fill.fill, 0.0)
    return KernelFacts(
        compute_us=float(dur.sum()),
        tc_eligible_us=float(dur[eligible].sum()),
        tc_eligible_on_tc_us=float(dur[eligible & on_tc].sum()),
        underfilled_us=float(dur[under].sum()),
        underfilled_empty_us=float((dur * empty).sum()),
        reported_blocks_us=float(dur[reported].sum()),
        full_beside_comm_us=float(dur[naive & ~under & ~fill.persistent].sum()),
        persistent_us=float(dur[reported & fill.persistent].sum()),
        softmax_us=float(dur[softmax].sum()),
        softmax_calls=int(softmax.sum()),
        fused_attention_us=float(dur[fused].sum()),
    )


def _kernel_ops(trace: Trace, kernels: np.ndarray) -> np.ndarray:
    """Per kernel call, the name index of the innermost op around its launch, or -1."""
    ev = trace.events
    links = device_links(trace)
    node = links.op[np.searchsorted(links.device, kernels)]
    tree = call_tree(trace)
    out = np.full(len(kernels), -1, dtype=np.int64)
    has = node >= 0
    out[has] = ev.name[tree.event[node[has]]]
    return out


def _name_mask(names: list[str], used: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Per name index, whether it is among ``used`` and matches ``pattern``."""
    out = np.zeros(len(names), dtype=bool)
    for n in used:
        out[n] = bool(pattern.search(names[n][:NAME_LIMIT]))
    return out


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
