"""How far each modelled op runs from the device's roofline (docs/roofline.md).

An op recorded with shapes (``record_shapes=True``) gets its FLOPs and bytes from
``roofline_models``; its GPU time is that of the kernels (and memsets) launched under it
(itself and the ops below it, by correlation id). The outermost modelled op of a call owns the time (``linear``
rather than the ``addmm`` inside it), so nothing is counted twice. Against the device's peaks
(``trainprof.hardware``): arithmetic intensity I = FLOPs / bytes; the roofline time is
max(FLOPs / peak, bytes / bandwidth); the op is compute-bound when I is at or above the ridge
point peak / bandwidth; % of roofline = roofline time / measured time; time lost = measured time
minus roofline time. Ops are summed per op, shape and dtype, and per op class.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.calls.attribution import device_links
from trainprof.analysis.calls.calltree import CallTree, call_tree
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.roofline.models import MATRIX_CLASSES, OP_CLASSES, OpCost, op_cost
from trainprof.analysis.roofline.peaks import trace_device
from trainprof.analysis.streaming.windows import Window, WindowedSection, owned_step_span
from trainprof.analysis.tabular import group_ids
from trainprof.hardware.table import Device
from trainprof.structs import Derived, Record
from trainprof.trace.model import DEVICE_KINDS, Kind, Trace

#: Shape rows kept in the result (the most time lost first); classes are always complete.
TOP_SHAPES = 50


class RooflineRow(Record):
    """One op and shape and dtype (or one op class), summed over its calls; times in µs."""

    op: str
    op_class: str
    shape: str
    dtype: str
    calls: int
    flops: float
    bytes: float
    time_us: float
    intensity: float  # FLOP per byte
    achieved_tflops: float
    achieved_tb_s: float
    ceiling: str | None = None  # the peak-table dtype of the compute roof
    peak_tflops: float | None = None
    bound: str | None = None  # "compute" or "memory"
    roofline_us: float | None = None
    pct_of_roofline: float | None = None
    lost_us: float | None = None


class Roofline(Record):
    json_derived = (Derived("coverage_pct", "kernel_time_us"), Derived("lost_us", "coverage_pct"))

    device: Device | None
    device_source: str | None  # "table" or "--hardware"; None when the device is unknown
    ops: int  # modelled op calls with kernel time
    time_us: float  # their GPU time
    kernel_time_us: float  # all GPU time (kernels, memsets, copies) in the window
    classes: list[RooflineRow]
    shapes: list[RooflineRow]  # the TOP_SHAPES that lose most time
    notes: list[str] = field(default_factory=list)

    @property
    def coverage_pct(self) -> float:
        return self.time_us / self.kernel_time_us * 100.0 if self.kernel_time_us else 0.0

    @property
    def lost_us(self) -> float:
        return float(sum(r.lost_us or 0.0 for r in self.classes))

    def to_pandas(self, by: str = "shape") -> Any:
        """One row per op class and shape (``by="class"``: per op class), most time lost
        first."""
        rows = self.shapes if by == "shape" else self.classes
        return data_frame([r.to_dict() for r in rows])


#: A row's key: (op, op class, shape label, dtype); a class row's is ("", class, "", "").
RowKey = tuple[str, str, str, str]


class RooflineSum(msgspec.Struct):
    """One row's figures summed over its calls: what a window carries per op and shape."""

    first: tuple[float, float, float]  # (thread, start, -end) of its first call: tree order
    calls: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    time_us: float = 0.0
    dtypes: set[str] = field(default_factory=set)
    ceilings: set[str] = field(default_factory=set)
    compute_us: float = 0.0  # the calls' times at the compute roof ...
    memory_us: float = 0.0  # ... at the memory roof
    ideal_us: float = 0.0  # and at the roofline, max of the two per call
    no_peak: bool = False  # a call's dtype has no units on the device: no roofline

    def add(self, c: OpCost, us: float, device: Device | None) -> None:
        """One call of ``us`` µs."""
        self.calls += 1
        self.flops += c.flops
        self.bytes += c.bytes
        self.time_us += us
        self.dtypes.add(c.dtype)
        if device is None or self.no_peak:
            return
        ceiling, peak = compute_ceiling(c.op_class, c.dtype, c.flops / us / 1e6, device)
        if peak is None:
            self.no_peak = True  # no such units on this device (fp8 on an A100)
            return
        self.ceilings.add(ceiling)
        t_compute, t_memory = c.flops / (peak * 1e6), c.bytes / (device.hbm_tb_s * 1e6)
        self.compute_us += t_compute
        self.memory_us += t_memory
        self.ideal_us += max(t_compute, t_memory)

    def merge(self, other: RooflineSum) -> None:
        """Add the calls of ``other`` (a later window's)."""
        self.first = min(self.first, other.first)
        self.calls += other.calls
        self.flops += other.flops
        self.bytes += other.bytes
        self.time_us += other.time_us
        self.dtypes |= other.dtypes
        self.ceilings |= other.ceilings
        self.compute_us += other.compute_us
        self.memory_us += other.memory_us
        self.ideal_us += other.ideal_us
        self.no_peak |= other.no_peak


class RooflinePart(msgspec.Struct):
    """What one window adds: its GPU time and its modelled calls summed per row."""

    device: Device | None
    source: str | None
    notes: list[str]
    kernel_us: float
    shapes: dict[RowKey, RooflineSum]
    classes: dict[RowKey, RooflineSum]


def _roofline_part(window: Window, hardware: Device | None = None) -> RooflinePart:
    """The GPU time and the modelled calls that start in the window's share of the span
    (``hardware``: the device given, ``--hardware``; None: the table's)."""
    trace = window.trace
    device, source = trace_device(trace, hardware)
    ev = trace.events
    start, end = owned_step_span(window)
    on_gpu = ev.of_kind(*DEVICE_KINDS)
    kernel_us = float(ev.dur[on_gpu & (ev.ts >= start) & (ev.ts < end)].sum())
    notes = []
    if trace.has_gpu and device is None:
        notes.append(f"{trace.device_name()!r} is not in the device table: FLOPs and bytes "
                     "only; give its peaks with --hardware FILE.json (docs/hardware.md).")
    part = RooflinePart(device, source, notes, kernel_us, {}, {})
    calls = _modelled_calls(trace, start, end)
    if calls is None:
        return part
    for name, c, us, first in zip(*calls, strict=True):
        for rows, key in ((part.shapes, (name, c.op_class, c.dims, c.dtype)),
                          (part.classes, ("", c.op_class, "", ""))):
            row = rows.get(key)
            if row is None:
                row = rows[key] = RooflineSum(first)
            row.add(c, float(us), device)
    return part


def _roofline_combine(parts: list[RooflinePart], steps: StepWindows) -> Roofline:
    """The section from every window's part."""
    head = parts[0]
    shapes: dict[RowKey, RooflineSum] = {}
    classes: dict[RowKey, RooflineSum] = {}
    for part in parts:
        for into, rows in ((shapes, part.shapes), (classes, part.classes)):
            for key, row in rows.items():
                if key in into:
                    into[key].merge(row)
                else:
                    into[key] = row
    kernel_us = sum(p.kernel_us for p in parts)
    shape_rows = _rows(shapes, head.device)
    class_rows = _rows(classes, head.device)
    return Roofline(head.device, head.source, sum(r.calls for r in class_rows),
                    sum(r.time_us for r in class_rows) if class_rows else 0.0, kernel_us,
                    class_rows, shape_rows[:TOP_SHAPES], list(head.notes))


#: The roofline section of one trace, over its step window: ``roofline(trace, steps)``, or
#: window by window with ``roofline.over(windows, steps)``. A window owns the modelled ops
#: that start in its share of the step span; the kernels they launched (which may run into the
#: next step) are in its margin. It carries sums per op and shape and per op class.
def roofline_for(hardware: Device | None) -> WindowedSection[RooflinePart, Roofline]:
    """The roofline section against the peaks of ``hardware`` (None: the device table's)."""
    if hardware is None:
        return roofline
    return WindowedSection(lambda window: _roofline_part(window, hardware), _roofline_combine,
                           cost=0.03)


roofline: WindowedSection[RooflinePart, Roofline] = WindowedSection(_roofline_part,
                                                                      _roofline_combine,
                                                                      cost=0.03)


def _by_lost(r: RooflineRow) -> tuple[float, float, str, str]:
    return (-(r.lost_us or 0.0), -r.time_us, r.op, r.shape)


def _modelled_calls(trace: Trace, start: float, end: float
                    ) -> tuple[list[str], list[OpCost], np.ndarray, list[tuple[float, float, float]]] | None:
    """(op names, costs, kernel µs, tree-order keys) of the outermost modelled ops that start
    in [start, end) and launched kernels; None when there are none."""
    ev = trace.events
    tree = call_tree(trace)
    if not len(tree):
        return None
    node_ev = tree.event
    candidate = ((ev.kind[node_ev] == Kind.CPU_OP) & (ev.shape[node_ev] >= 0)
                 & ~tree.merged)
    idx = np.flatnonzero(candidate)
    if not len(idx):
        return None
    # Cost once per distinct (name, shapes, types and values).
    first, which = group_ids(ev.name[node_ev[idx]], ev.shape[node_ev[idx]],
                             ev.op_args[node_ev[idx]])
    unique = [_cost(trace, node_ev[idx[f]]) for f in first]
    has = np.array([c is not None for c in unique], dtype=bool)[which]
    modelled = np.zeros(len(tree), dtype=bool)
    modelled[idx[has]] = True
    outer = modelled & (tree.nearest(modelled, include_self=False) < 0)
    times = _kernel_time_below(trace, tree)
    ts = ev.ts[node_ev]
    keep = outer & (times > 0) & (ts >= start) & (ts < end)
    pos = np.flatnonzero(keep[idx])
    if not len(pos):
        return None
    names = [ev.names[ev.name[node_ev[idx[p]]]] for p in pos]
    costs = [unique[which[p]] for p in pos]
    e = node_ev[idx[pos]]
    order = list(zip(ev.tid[e].tolist(), ev.ts[e].tolist(), (-event_ends(ev)[e]).tolist(), strict=True))
    return names, costs, times[idx[pos]], order


def _cost(trace: Trace, e: int) -> OpCost | None:
    ev = trace.events
    try:
        dims = json.loads(ev.shapes[ev.shape[e]])
        types, values = (json.loads(ev.op_arg_texts[ev.op_args[e]]) if ev.op_args[e] >= 0
                         else (None, None))
    except (ValueError, TypeError):
        return None
    return op_cost(ev.names[ev.name[e]], dims, types, values)


def _kernel_time_below(trace: Trace, tree: CallTree) -> np.ndarray:
    """GPU µs (kernels, and the memsets and copies a library launches with them, as cuBLAS
    does) launched by each call-tree node and the nodes below it."""
    ev = trace.events
    links = device_links(trace)
    ok = links.owner >= 0
    own = np.bincount(links.owner[ok], weights=ev.dur[links.device[ok]], minlength=len(tree))
    cum = np.concatenate([[0.0], np.cumsum(own)])
    return cum[tree.end] - cum[np.arange(len(tree))]


def _rows(sums: dict[RowKey, RooflineSum], device: Device | None) -> list[RooflineRow]:
    """Rows in first-call order, then by op class, then most time lost first."""
    rows = [_row(key, sums[key], device) for key in sorted(sums, key=lambda k: sums[k].first)]
    rows.sort(key=lambda r: OP_CLASSES.index(r.op_class))
    rows.sort(key=_by_lost)
    return rows


def _row(key: RowKey, s: RooflineSum, device: Device | None) -> RooflineRow:
    name, op_class, dims, dtype = key
    row = RooflineRow(
        op=name, op_class=op_class, shape=dims, dtype=dtype or ",".join(sorted(s.dtypes)),
        calls=s.calls, flops=s.flops, bytes=s.bytes, time_us=s.time_us,
        intensity=s.flops / s.bytes, achieved_tflops=s.flops / s.time_us / 1e6,
        achieved_tb_s=s.bytes / s.time_us / 1e6)
    if device is not None and not s.no_peak:
        ceilings = sorted(s.ceilings)
        row.ceiling = ",".join(ceilings)
        row.peak_tflops = device.peak(ceilings[0])
        row.bound = "compute" if s.compute_us >= s.memory_us else "memory"
        row.roofline_us = s.ideal_us
        row.pct_of_roofline = s.ideal_us / row.time_us * 100.0
        row.lost_us = max(row.time_us - s.ideal_us, 0.0)
    return row


def compute_ceiling(op_class: str, dtype: str, achieved_tflops: float,
                    device: Device) -> tuple[str, float | None]:
    """The peak-table dtype whose peak bounds this work, and that peak (TFLOP/s).

    Matrix ops use their dtype's matrix peak (an fp32 one that beats the fp32 peak ran on TF32
    Tensor Cores, so TF32 bounds it); other ops run on the vector units, bounded by fp32 (fp64
    for double).
    """
    if op_class in MATRIX_CLASSES:
        if dtype == "fp32" and device.peak("tf32") and achieved_tflops > (device.peak("fp32")
                                                                           or 0.0):
            return "tf32", device.peak("tf32")
        return dtype, device.peak(dtype)
    vector = "fp64" if dtype == "fp64" else "fp32"
    return vector, device.peak(vector)
