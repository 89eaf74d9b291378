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
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis.attribution import device_links
from trainprof.analysis.calltree import CallTree, call_tree
from trainprof.analysis.device_peaks import trace_device
from trainprof.analysis.frames import data_frame
from trainprof.analysis.roofline_models import MATRIX_CLASSES, OP_CLASSES, OpCost, op_cost
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.tabular import group_ids
from trainprof.hardware.table import Device
from trainprof.trace.model import DEVICE_KINDS, Kind, Trace

#: Shape rows kept in the result (the most time lost first); classes are always complete.
TOP_SHAPES = 50


@dataclass
class RooflineRow:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Roofline:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": None if self.device is None else self.device.to_dict(),
            "device_source": self.device_source, "ops": self.ops, "time_us": self.time_us,
            "kernel_time_us": self.kernel_time_us, "coverage_pct": self.coverage_pct,
            "lost_us": self.lost_us, "classes": [r.to_dict() for r in self.classes],
            "shapes": [r.to_dict() for r in self.shapes], "notes": self.notes,
        }


def roofline(trace: Trace, steps: StepWindows) -> Roofline:
    """The roofline section of one trace, over its step window."""
    device, source = trace_device(trace)
    ev = trace.events
    start, end = steps.span
    on_gpu = ev.of_kind(*DEVICE_KINDS)
    kernel_us = float(ev.dur[on_gpu & (ev.ts >= start) & (ev.ts < end)].sum())
    notes = []
    if trace.has_gpu and device is None:
        notes.append(f"{trace.device_name()!r} is not in the device table: FLOPs and bytes "
                     "only; give its peaks with --hardware FILE.json (docs/hardware.md).")
    calls = _modelled_calls(trace, start, end)
    if calls is None:
        return Roofline(device, source, 0, 0.0, kernel_us, [], [], notes)
    names, costs, times = calls
    shapes = _summed(names, costs, times, device, by_shape=True)
    classes = _summed(names, costs, times, device, by_shape=False)
    shapes.sort(key=_by_lost)
    classes.sort(key=_by_lost)
    return Roofline(device, source, len(costs), float(times.sum()),
                    kernel_us, classes, shapes[:TOP_SHAPES], notes)


def _by_lost(r: RooflineRow) -> tuple[float, float, str, str]:
    return (-(r.lost_us or 0.0), -r.time_us, r.op, r.shape)


def _modelled_calls(trace: Trace, start: float, end: float
                    ) -> tuple[list[str], list[OpCost], np.ndarray] | None:
    """(op names, costs, kernel µs) of the outermost modelled ops that start in the window and
    launched kernels; None when there are none."""
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
    return names, costs, times[idx[pos]]


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


def _summed(names: list[str], costs: list[OpCost], times: np.ndarray, device: Device | None,
            by_shape: bool) -> list[RooflineRow]:
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, (name, c) in enumerate(zip(names, costs, strict=True)):
        key = (name, c.op_class, c.dims, c.dtype) if by_shape else ("", c.op_class, "", "")
        groups.setdefault(key, []).append(i)
    rows = []
    for (name, op_class, dims, dtype), members in groups.items():
        flops = float(sum(costs[i].flops for i in members))
        nbytes = float(sum(costs[i].bytes for i in members))
        us = float(times[members].sum())
        row = RooflineRow(
            op=name, op_class=op_class, shape=dims, dtype=dtype or _dtypes(costs, members),
            calls=len(members), flops=flops, bytes=nbytes, time_us=us,
            intensity=flops / nbytes, achieved_tflops=flops / us / 1e6,
            achieved_tb_s=nbytes / us / 1e6)
        if device is not None:
            _place(row, [costs[i] for i in members], [float(times[i]) for i in members], device)
        rows.append(row)
    rows.sort(key=lambda r: OP_CLASSES.index(r.op_class))
    return rows


def _dtypes(costs: list[OpCost], members: list[int]) -> str:
    return ",".join(sorted({costs[i].dtype for i in members}))


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


def _place(row: RooflineRow, costs: list[OpCost], times: list[float], device: Device) -> None:
    """Roofline figures of a row: each call's own ceiling, summed."""
    bandwidth = device.hbm_tb_s * 1e6  # bytes per µs
    ideal = 0.0
    compute_us = memory_us = 0.0
    ceilings = set()
    for c, us in zip(costs, times, strict=True):
        ceiling, peak = compute_ceiling(c.op_class, c.dtype, c.flops / us / 1e6, device)
        if peak is None:
            return  # no such units on this device (fp8 on an A100): no roofline
        ceilings.add(ceiling)
        t_compute, t_memory = c.flops / (peak * 1e6), c.bytes / bandwidth
        compute_us += t_compute
        memory_us += t_memory
        ideal += max(t_compute, t_memory)
    row.ceiling = ",".join(sorted(ceilings))
    row.peak_tflops = device.peak(sorted(ceilings)[0])
    row.bound = "compute" if compute_us >= memory_us else "memory"
    row.roofline_us = ideal
    row.pct_of_roofline = ideal / row.time_us * 100.0
    row.lost_us = max(row.time_us - ideal, 0.0)
