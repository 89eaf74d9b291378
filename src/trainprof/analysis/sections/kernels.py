"""Per-kernel-name statistics: the TensorBoard plugin's kernel view, with modern Tensor Core names.

Blocks per SM and estimated achieved occupancy are Kineto's per-launch figures, averaged over a
kernel's calls weighted by duration. Calls that do not report them are left out of the mean
(the plugin counted them as 0, which biased the mean down).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.calls.attribution import device_links
from trainprof.analysis.calls.calltree import call_tree, canonical_names
from trainprof.analysis.calls.precision import Precision, op_precisions
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.sections.kernel_shares import (
    ClassPart,
    KernelClassShares,
    class_part,
    combine_class_parts,
)
from trainprof.analysis.sections.occupancy import FULL_FILL, launch_fill, sm_counts
from trainprof.analysis.sorting import group_min_max
from trainprof.analysis.streaming.parts import no_steps
from trainprof.analysis.streaming.windows import Window, WindowedSection, owns
from trainprof.analysis.tabular import group_ids, share
from trainprof.lazy import LazyPattern
from trainprof.structs import Record, fields
from trainprof.trace.kernel_class import (
    CLASS_LABELS,
    FUSED_ATTENTION,
    NAME_LIMIT,
    CaselessPattern,
    KernelClass,
    KernelClasses,
)
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.model import FLAG_COMM, Kind, Trace


class KernelRow(Record):
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


#: Ops whose kernels could run on Tensor Cores (matmuls, convolutions, attention, RNNs): the
#: TensorBoard plugin's allow-list, by pattern so that new spellings match.
_TC_ELIGIBLE_OP = LazyPattern(
    r"conv|(?:^|::|_)(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|einsum)(?:$|_)"
    r"|scaled_dot_product|_flash_attention|_efficient_attention|_cudnn_attention"
    r"|cudnn_rnn|lstm|(?:^|::|_)gru(?:$|_)", re.IGNORECASE)
#: Softmax ops (not log-softmax, a loss); fused attention by op or kernel name is
#: trace/kernel_class.py's FUSED_ATTENTION.
_SOFTMAX_OP = LazyPattern(r"(?:^|::)_?softmax(?:$|_backward)", re.IGNORECASE)


class KernelFacts(Record):
    """Kernel time (µs, whole trace, communication kernels left out) behind the GPU rules."""

    compute_us: float = 0.0
    #: Launched by an op that could use Tensor Cores, and of that, by Tensor Core kernels.
    tc_eligible_us: float = 0.0
    tc_eligible_on_tc_us: float = 0.0
    #: Of the eligible time, by the launching op's input types (analysis/calls/precision.py):
    #: ops already in 16- or 8-bit, ops in fp64, and the time neither on Tensor Cores nor in
    #: such ops (fp32, or types not recorded): what reduced precision could move to them.
    tc_eligible_narrow_us: float = 0.0
    tc_eligible_fp64_us: float = 0.0
    tc_eligible_fp32_off_tc_us: float = 0.0
    #: Calls with fewer blocks than FULL_FILL per free SM (analysis/sections/occupancy.py: SMs held by a
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


class KernelStats(Record):
    """Kernels of one trace, largest total time first."""

    total_us: float
    calls: int
    tensor_core_pct: float | None  # share of kernel time in Tensor Core kernels
    facts: KernelFacts = field(default_factory=KernelFacts)
    classes: KernelClassShares | None = None
    rows: list[KernelRow] = field(default_factory=list)

    def top(self, n: int) -> list[KernelRow]:
        return self.rows[:n]

    def to_pandas(self) -> Any:
        return data_frame([r.to_dict() for r in self.rows])


class KernelPart(msgspec.Struct):
    """What one window tells of the kernels it owns: per canonical kernel name (``key``,
    ascending) the figures of its calls and its first call, the kernel time per (kernel, op)
    pair, the GPU-rule facts and the class shares."""

    key: np.ndarray  # canonical name index
    first_name: np.ndarray  # name index of the first call
    first_class: np.ndarray
    first_decided: list[str]
    first_comm: np.ndarray
    calls: np.ndarray
    total: np.ndarray
    low: np.ndarray
    high: np.ndarray
    blocks: np.ndarray  # (4, n): weighted sum, weight, plain sum, count (see _weighted_mean)
    occupancy: np.ndarray
    pair_kernel: np.ndarray  # canonical kernel name index
    pair_op: np.ndarray  # canonical op name index
    pair_us: np.ndarray
    pair_name: np.ndarray  # name index of the op of the pair's first call
    facts: KernelFacts
    classes: ClassPart
    names: list[str]  # the trace's name table (shared, not a copy)


def kernel_part(window: Window) -> KernelPart:
    """The kernels that start in the window's region."""
    trace = window.trace
    ev = trace.events
    kernels = np.flatnonzero((ev.kind == Kind.KERNEL) & owns(window, ev.ts))
    canon = canonical_names(ev.names)
    first, group = group_ids(canon[ev.name[kernels]])
    n = len(first)
    dur = ev.dur[kernels]
    low, high = group_min_max(group, dur, n)
    classes = kernel_classes(trace)
    heads = kernels[first]
    op_event = _kernel_op_events(trace, kernels)
    has = op_event >= 0
    pair_first, pair = group_ids(group[has], canon[ev.name[op_event[has]]])
    return KernelPart(
        key=canon[ev.name[heads]], first_name=ev.name[heads], first_class=classes.cls[heads],
        first_decided=[_decided_by(classes, int(e)) for e in heads],
        first_comm=(ev.flags[heads] & FLAG_COMM) > 0,
        calls=np.bincount(group, minlength=n), total=np.bincount(group, weights=dur, minlength=n),
        low=low, high=high,
        blocks=_weighted_sums(group, dur, ev.blocks_per_sm[kernels], n),
        occupancy=_weighted_sums(group, dur, ev.occupancy[kernels], n),
        pair_kernel=canon[ev.name[heads]][group[has][pair_first]],
        pair_op=canon[ev.name[op_event[has][pair_first]]],
        pair_us=np.bincount(pair, weights=dur[has], minlength=len(pair_first)),
        pair_name=ev.name[op_event[has][pair_first]],
        facts=kernel_facts(trace, kernels),
        classes=class_part(trace, kernels),
        names=ev.names,
    )


def combine_kernels(parts: list[KernelPart], steps: StepWindows | None = None) -> KernelStats:
    """The kernel table of every window's kernels."""
    calls_all = sum(int(p.calls.sum()) for p in parts)
    if not calls_all:
        return KernelStats(rows=[], total_us=0.0, calls=0, tensor_core_pct=None)
    names = parts[0].names
    cat = _concat(parts)
    keys, first, inverse = np.unique(cat["key"], return_index=True, return_inverse=True)
    n = len(keys)
    total = np.bincount(inverse, weights=cat["total"], minlength=n)
    calls = np.bincount(inverse, weights=cat["calls"], minlength=n).astype(np.int64)
    low = np.full(n, np.inf)
    high = np.full(n, -np.inf)
    np.minimum.at(low, inverse, cat["low"])
    np.maximum.at(high, inverse, cat["high"])
    blocks = _weighted_mean(*(np.bincount(inverse, weights=w, minlength=n)
                              for w in cat["blocks"]))
    occupancy = _weighted_mean(*(np.bincount(inverse, weights=w, minlength=n)
                                 for w in cat["occupancy"]))
    op, op_time = _launching_ops(cat, keys, names)
    all_time = float(sum(p.total.sum() for p in parts))
    rows = []
    for g in range(n):
        f = first[g]
        cls = KernelClass(int(cat["first_class"][f]))
        rows.append(KernelRow(
            name=names[cat["first_name"][f]], calls=int(calls[g]), total_us=float(total[g]),
            mean_us=float(total[g] / calls[g]), min_us=float(low[g]), max_us=float(high[g]),
            share_pct=share(float(total[g]), all_time) or 0.0,
            blocks_per_sm=_or_none(blocks[g]), occupancy_pct=_or_none(occupancy[g]),
            tensor_cores=cls == KernelClass.TENSOR_CORE,
            communication=bool(cat["first_comm"][f]),
            op=op[g], op_share_pct=share(op_time[g], float(total[g])) if op[g] else None,
            kernel_class=CLASS_LABELS[cls], classified_by=cat["first_decided"][f],
        ))
    rows.sort(key=lambda r: (-r.total_us, r.name))
    tc = sum(r.total_us for r in rows if r.tensor_cores)
    return KernelStats(rows=rows, total_us=all_time, calls=calls_all,
                       tensor_core_pct=share(tc, all_time), facts=_sum_facts(parts),
                       classes=combine_class_parts([p.classes for p in parts], names))


class _KernelSection(WindowedSection[KernelPart, KernelStats], frozen=True):
    """Kernels need no steps: ``kernel_stats(trace)`` runs over the whole trace."""

    def __call__(self, trace: Trace, steps: StepWindows | None = None) -> KernelStats:
        whole = Window(trace, steps if steps is not None else no_steps())
        return self.combine([self.partial(whole)], whole.steps)


#: Per kernel name: calls, total/mean/min/max, blocks per SM, occupancy, Tensor Cores, op. Each
#: window counts the kernels that start in its region; their launch and op lie in its margin.
kernel_stats = _KernelSection(partial=kernel_part, combine=combine_kernels, cost=0.76)


def _concat(parts: list[KernelPart]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(KernelPart):
        values = [getattr(p, f.name) for p in parts]
        if f.name == "first_decided":
            out[f.name] = [x for v in values for x in v]
        elif f.name in ("blocks", "occupancy"):
            out[f.name] = np.concatenate(values, axis=1)
        elif f.name not in ("facts", "classes", "names"):
            out[f.name] = np.concatenate(values)
    return out


def _sum_facts(parts: list[KernelPart]) -> KernelFacts:
    out = KernelFacts()
    for f in fields(KernelFacts):
        setattr(out, f.name, sum((getattr(p.facts, f.name) for p in parts),
                                 type(getattr(out, f.name))()))
    return out


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
    op_event = _kernel_op_events(trace, kernels)
    op = np.where(op_event >= 0, ev.name[np.maximum(op_event, 0)], -1)
    precision = np.where(op_event >= 0, op_precisions(trace)[np.maximum(op_event, 0)],
                         Precision.UNKNOWN)
    narrow, fp64 = precision == Precision.NARROW, precision == Precision.FP64
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
        tc_eligible_narrow_us=float(dur[eligible & narrow].sum()),
        tc_eligible_fp64_us=float(dur[eligible & fp64].sum()),
        tc_eligible_fp32_off_tc_us=float(dur[eligible & ~on_tc & ~narrow & ~fp64].sum()),
        underfilled_us=float(dur[under].sum()),
        underfilled_empty_us=float((dur * empty).sum()),
        reported_blocks_us=float(dur[reported].sum()),
        full_beside_comm_us=float(dur[naive & ~under & ~fill.persistent].sum()),
        persistent_us=float(dur[reported & fill.persistent].sum()),
        softmax_us=float(dur[softmax].sum()),
        softmax_calls=int(softmax.sum()),
        fused_attention_us=float(dur[fused].sum()),
    )


def _kernel_op_events(trace: Trace, kernels: np.ndarray) -> np.ndarray:
    """Per kernel call, the event of the innermost op around its launch, or -1."""
    links = device_links(trace)
    node = links.op[np.searchsorted(links.device, kernels)]
    tree = call_tree(trace)
    out = np.full(len(kernels), -1, dtype=np.int64)
    out[node >= 0] = tree.event[node[node >= 0]]
    return out


def _name_mask(names: list[str], used: np.ndarray, pattern: LazyPattern | CaselessPattern
               ) -> np.ndarray:
    """Per name index, whether it is among ``used`` and matches ``pattern``."""
    out = np.zeros(len(names), dtype=bool)
    for n in used:
        out[n] = bool(pattern.search(names[n][:NAME_LIMIT]))
    return out


def _weighted_sums(group: np.ndarray, weight: np.ndarray, values: np.ndarray,
                   n: int) -> np.ndarray:
    """Per group, the sums a weighted mean of the finite values needs (see _weighted_mean)."""
    values = values.astype(np.float64)
    ok = np.isfinite(values)
    w = np.where(ok, weight, 0.0)
    return np.stack([np.bincount(group, weights=np.where(ok, values, 0.0) * w, minlength=n),
                     np.bincount(group, weights=w, minlength=n),
                     np.bincount(group, weights=np.where(ok, values, 0.0), minlength=n),
                     np.bincount(group, weights=ok.astype(np.float64), minlength=n)])


def _weighted_mean(num: np.ndarray, den: np.ndarray, plain: np.ndarray,
                   count: np.ndarray) -> np.ndarray:
    """The weighted mean (nan when no value); zero-length calls only: the plain mean."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, plain / count)


def _launching_ops(cat: dict[str, Any], keys: np.ndarray,
                   names: list[str]) -> tuple[list[str | None], np.ndarray]:
    """Per kernel group (``keys``), the op name that launched most of its time, and that time.
    Ties go to the op whose canonical name comes first, as on the whole trace."""
    n = len(keys)
    out: list[str | None] = [None] * n
    time = np.zeros(n)
    if not len(cat["pair_kernel"]):
        return out, time
    first, pair = group_ids(cat["pair_kernel"], cat["pair_op"])
    pair_time = np.bincount(pair, weights=cat["pair_us"])
    pair_kernel, pair_op = cat["pair_kernel"][first], cat["pair_op"][first]
    group = np.searchsorted(keys, pair_kernel)
    for k in np.lexsort((pair_op, -pair_time, group)):  # heaviest op first within each kernel
        g = int(group[k])
        if out[g] is None:
            out[g] = names[cat["pair_name"][first[k]]]
            time[g] = pair_time[k]
    return out, time


def _or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
