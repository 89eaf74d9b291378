"""Bus bandwidth of each collective against the device's link, with the nccl-tests conventions.

A communication kernel's message size, dtype and group size come from its own args (newer
NCCL kernels carry ``Collective name``, ``In msg nelems``, ``Group size``, ``dtype``) or from the
``record_param_comms`` / ``nccl:*`` host op around its launch. Per kernel, with S the larger of
the input and output messages in bytes, t its time and n the group size: algbw = S / t and
busbw = algbw x factor, where the factor is 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, and 1 for broadcast, reduce and point-to-point (nccl-tests'
PERFORMANCE.md). The link peak is the table's per-direction link bandwidth (half its
bidirectional figure) for groups of up to ``GPUS_PER_NODE`` ranks, else the NIC's.
docs/roofline.md.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.calls.nesting import HostRanges
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows, launch_links
from trainprof.analysis.roofline.peaks import trace_device
from trainprof.analysis.streaming.windows import Window, WindowedSection, owned_step_span
from trainprof.hardware.table import Device
from trainprof.structs import Record
from trainprof.trace.model import FLAG_COMM, Kind, Trace, collective_type, dtype_bytes

#: Groups of at most this many ranks are assumed to run inside one node (NVLink / xGMI).
GPUS_PER_NODE = 8
_HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)


def bus_factor(collective: str, n: int) -> float | None:
    """nccl-tests' busbw / algbw for a collective over n ranks (None: not a sized collective)."""
    if n < 1:
        return None
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "send", "recv", "send_recv", "gather", "scatter"):
        return 1.0
    return None


class CollectiveBandwidth(Record):
    """One collective type, message size and group size; times in µs, bandwidths in GB/s."""

    type: str
    bytes: float  # message size S of one call
    group_size: int
    count: int
    time_us: float
    algbw_gb_s: float  # S x count / time
    busbw_gb_s: float
    link: str | None = None  # "link" (NVLink/xGMI/PCIe) or "nic"
    peak_gb_s: float | None = None  # per direction
    pct_of_peak: float | None = None


class Collectives(Record):
    device: str | None  # the table entry the peaks come from
    sized: int  # kernels with a known size, type and group
    unsized: int  # communication kernels without
    rows: list[CollectiveBandwidth]  # by time, largest first
    notes: list[str] = field(default_factory=list)

    def to_pandas(self) -> Any:
        """One row per collective type and size, most time first."""
        return data_frame([r.to_dict() for r in self.rows])


class _Sizes(msgspec.Struct):
    type: np.ndarray  # object: collective type name per kernel ("" when unknown)
    nbytes: np.ndarray  # float, nan when unknown
    group: np.ndarray  # int, 0 when unknown


class CollectivesPart(msgspec.Struct):
    """What one window adds: its own sized kernels, summed per (type, bytes, group size) in
    the order first seen, and its counts. Bounded by the distinct collectives, not by calls."""

    device: Device | None
    kernels: int  # communication kernels the window owns
    sized: int
    groups: dict[tuple[str, float, int], list[float]]  # -> [calls, µs, bus factor]


def _collectives_part(window: Window, hardware: Device | None = None) -> CollectivesPart:
    """The communication kernels that start in the window's share of the step span
    (``hardware``: the device given, ``--hardware``; None: the table's)."""
    trace = window.trace
    ev = trace.events
    start, end = owned_step_span(window)
    kernels = np.flatnonzero((ev.kind == Kind.KERNEL) & ev.flagged(FLAG_COMM)
                             & (ev.ts >= start) & (ev.ts < end))
    device, _ = trace_device(trace, hardware)
    sizes = _sizes(trace, kernels)
    factor = np.array([bus_factor(t, int(n)) or np.nan for t, n in
                       zip(sizes.type, sizes.group, strict=True)], dtype=np.float64)
    ok = np.isfinite(sizes.nbytes) & np.isfinite(factor) & (ev.dur[kernels] > 0)
    groups: dict[tuple[str, float, int], list[float]] = {}
    for i in np.flatnonzero(ok):
        key = (sizes.type[i], float(sizes.nbytes[i]), int(sizes.group[i]))
        group = groups.setdefault(key, [0, 0.0, float(factor[i])])
        group[0] += 1
        group[1] += float(ev.dur[kernels[i]])
    return CollectivesPart(device, int(len(kernels)), int(ok.sum()), groups)


def _collectives_combine(parts: list[CollectivesPart], steps: StepWindows) -> Collectives:
    """The section from every window's part (windows in time order keep the first-seen order)."""
    device = parts[0].device if parts else None
    groups: dict[tuple[str, float, int], list[float]] = {}
    for part in parts:
        for key, (calls, us, factor) in part.groups.items():
            group = groups.setdefault(key, [0, 0.0, factor])
            group[0] += calls
            group[1] += us
    rows = []
    for (kind, nbytes, n), (calls, us, factor) in groups.items():
        algbw = nbytes * calls / us / 1e3  # bytes per µs -> GB/s
        row = CollectiveBandwidth(kind, nbytes, n, int(calls), us, algbw, algbw * factor)
        _against_peak(row, device)
        rows.append(row)
    rows.sort(key=lambda r: (-r.time_us, r.type, r.bytes))
    kernels = sum(p.kernels for p in parts)
    sized = sum(p.sized for p in parts)
    notes = []
    if kernels and not sized:
        notes.append("The communication kernels carry no message size or group size (record "
                     "with record_shapes=True, PyTorch 2.1 or newer, for record_param_comms).")
    return Collectives(None if device is None else device.name, sized, kernels - sized, rows,
                       notes)


#: The collectives section of one trace, over its step window: ``collectives(trace, steps)``,
#: or window by window with ``collectives.over(windows, steps)``. A window owns the kernels
#: that start in its share of the step span; their message sizes come from the host op around
#: the launch, which the window's margin holds.
collectives: WindowedSection[CollectivesPart, Collectives] = WindowedSection(
    _collectives_part, _collectives_combine, cost=0.04)


def collectives_for(hardware: Device | None) -> WindowedSection[CollectivesPart, Collectives]:
    """The collectives section against the links of ``hardware`` (None: the device table's)."""
    if hardware is None:
        return collectives
    return WindowedSection(lambda window: _collectives_part(window, hardware),
                           _collectives_combine, cost=0.04)


def link_peak(device: Device | None, group_size: int) -> tuple[str | None, float | None]:
    """("link" or "nic", per-direction GB/s) for a group of this size on this device."""
    if device is None:
        return None, None
    if group_size <= GPUS_PER_NODE and device.link_gb_s:
        return "link", device.link_gb_s / 2.0
    if device.nic_gb_s:
        return "nic", device.nic_gb_s / 2.0
    return None, None


def _against_peak(row: CollectiveBandwidth, device: Device | None) -> None:
    row.link, row.peak_gb_s = link_peak(device, row.group_size)
    if row.peak_gb_s:
        row.pct_of_peak = row.busbw_gb_s / row.peak_gb_s * 100.0


def _sizes(trace: Trace, kernels: np.ndarray) -> _Sizes:
    """Type, message bytes and group size of each communication kernel."""
    ev = trace.events
    n = len(kernels)
    names, which = np.unique(ev.name[kernels], return_inverse=True)
    types = np.array([collective_type(ev.names[i]) for i in names] or [""], dtype=object)
    out = _Sizes(types[which.reshape(n)] if n else np.empty(0, dtype=object),
                 np.full(n, np.nan), np.zeros(n, np.int64))
    # The host communication op around each kernel's launch (record_param_comms, nccl:*).
    host = np.flatnonzero(ev.of_kind(*_HOST_KINDS) & ev.flagged(FLAG_COMM) & (ev.detail >= 0))
    if len(host) and n:
        ranges = HostRanges.of(ev.ts[host], event_ends(ev)[host], ev.tid[host], host)
        dev, launch = launch_links(trace)
        launch_of = np.full(len(ev), -1, dtype=np.int64)
        launch_of[dev] = launch
        lk = launch_of[kernels]
        has = np.flatnonzero(lk >= 0)
        pos = ranges.innermost(ev.ts[lk[has]], ev.tid[lk[has]])
        for j, p in zip(has, pos, strict=True):
            if p >= 0:
                _fill(out, int(j), ev.details[ev.detail[ranges.index[p]]])
    for i, k in enumerate(kernels):  # the kernel's own args win
        if ev.detail[k] >= 0 and ev.details[ev.detail[k]].get("collective"):
            _fill(out, i, ev.details[ev.detail[k]])
    return out


def _fill(out: _Sizes, i: int, detail: dict[str, Any]) -> None:
    size = dtype_bytes(detail.get("dtype"))
    counts = [c for c in (detail.get("in_nelems"), detail.get("out_nelems"))
              if isinstance(c, int | float) and not isinstance(c, bool)]
    group = detail.get("group_size")
    if detail.get("collective"):
        out.type[i] = collective_type(str(detail["collective"]))
    if size is not None and counts:
        out.nbytes[i] = float(max(counts)) * size
    if isinstance(group, int) and not isinstance(group, bool) and group > 0:
        out.group[i] = group
