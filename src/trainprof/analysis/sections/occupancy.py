"""How much of the GPU each kernel launch can fill: its blocks against the SMs free to it.

A launch fills the GPU when it has about one block for every SM that is free while it runs: the
device's SM count minus the SMs held at the same moment by communication kernels (each block of
a communication kernel holds an SM, as NCCL's and DeepEP's do). Kernels whose name says they are
persistent size their grid to the free SMs by design and count as full. Blocks come from the
launch's grid (Kineto's ``grid``), else from Kineto's "blocks per SM" times the SM count. How
many blocks can share one SM (threads, registers and shared memory against the SM's limits)
gives the theoretical occupancy. See docs/kernel_classes.md.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.sorting import unique_below
from trainprof.trace.kernel_class import KernelClass, is_persistent_kernel
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.model import Kind, Trace

_SHAPES = "_trainprof_launch_shapes"
#: A launch with at least this many blocks per free SM fills the GPU ("about one per SM").
FULL_FILL = 0.9
#: Most blocks one SM holds at once, by compute capability (CUDA programming guide, table of
#: technical specifications); 32 for the others.
_MAX_BLOCKS_PER_SM = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24, (12, 0): 24}


class LaunchFill(msgspec.Struct):
    """Per kernel call (in the order given), nan where the trace does not say."""

    blocks: np.ndarray  # thread blocks launched
    free_sms: np.ndarray  # SMs not held by a concurrent communication kernel
    fill: np.ndarray  # blocks per free SM
    persistent: np.ndarray  # bool: the name says the grid is sized to the free SMs
    #: bool: exactly the SMs a communication kernel of the rank leaves (SM count - its blocks),
    #: a grid sized beside communication even when none runs at that moment
    sized_beside_comm: np.ndarray
    resident_blocks: np.ndarray  # blocks one SM can hold at once (threads, registers, smem)
    theoretical_occupancy_pct: np.ndarray  # resident threads / the SM's thread limit

    @property
    def underfilled(self) -> np.ndarray:
        """Launches known to leave free SMs empty."""
        return (np.isfinite(self.fill) & (self.fill < FULL_FILL) & ~self.persistent
                & ~self.sized_beside_comm)


def launch_fill(trace: Trace, kernels: np.ndarray) -> LaunchFill:
    """Blocks, free SMs and fill of each kernel call (event indices ``kernels``)."""
    ev = trace.events
    blocks, threads, regs, smem = _launch_shapes(trace, kernels)
    sms = sm_counts(trace, kernels, np.nan)
    bps = ev.blocks_per_sm[kernels].astype(np.float64)
    total_sms = np.where(np.isfinite(sms), sms, 1.0)
    held = _comm_sms_held(trace, kernels)
    free = np.maximum(total_sms - held, 1.0)
    beside = _sized_beside_comm(trace, kernels, blocks, total_sms)
    unique = np.unique(ev.name[kernels])
    persistent_name = np.zeros(len(ev.names), dtype=bool)
    persistent_name[unique] = [is_persistent_kernel(ev.names[k]) for k in unique.tolist()]
    resident, occupancy = _resident(trace, kernels, threads, regs, smem)
    # Without an SM count, Kineto's blocks per SM is the fill against all SMs.
    fill = np.where(np.isfinite(sms), blocks / free, bps)
    fill[~(fill > 0)] = np.nan
    return LaunchFill(blocks=blocks, free_sms=free, fill=fill,
                      persistent=persistent_name[ev.name[kernels]],
                      sized_beside_comm=beside, resident_blocks=resident, theoretical_occupancy_pct=occupancy)


def _launch_shapes(trace: Trace, kernels: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per call: blocks (from the grid, else blocks per SM x SMs), threads per block,
    registers per thread and shared memory; nan where unknown."""
    ev = trace.events
    d = ev.detail[kernels]
    shapes = _detail_shapes(trace, d)
    out = np.where((d >= 0)[:, None], shapes[np.maximum(d, 0)], np.nan)
    blocks, threads, regs, smem = (out[:, i].copy() for i in range(4))
    sms = sm_counts(trace, kernels, np.nan)
    from_bps = ~np.isfinite(blocks)
    blocks[from_bps] = (ev.blocks_per_sm[kernels].astype(np.float64) * sms)[from_bps]
    blocks[~(blocks > 0)] = np.nan
    return blocks, threads, regs, smem


def _detail_shapes(trace: Trace, wanted: np.ndarray) -> np.ndarray:
    """``_shapes_of`` of the details table, read once per trace and only for the rows asked
    (a window of a long trace shares the table but asks for its own kernels' rows)."""
    details = trace.events.details
    cached = trace.__dict__.get(_SHAPES)
    if cached is None:
        cached = (np.full((max(len(details), 1), 4), np.nan), np.zeros(len(details), dtype=bool))
        trace.__dict__[_SHAPES] = cached
    shapes, done = cached
    need = unique_below(wanted[wanted >= 0], len(details))[0]
    need = need[~done[need]]
    if len(need):
        # events with the same launch share one detail object (trace/piece_columns.py): each
        # object is read once
        rows = [details[i] for i in need.tolist()]
        _, first, back = np.unique(np.fromiter(map(id, rows), dtype=np.int64, count=len(rows)),
                                   return_index=True, return_inverse=True)
        shapes[need] = _shapes_of([rows[i] for i in first.tolist()])[:len(first)][back]
        done[need] = True
    return shapes


def sm_counts(trace: Trace, kernels: np.ndarray, missing: float) -> np.ndarray:
    """Per call, the SM count of its device (``missing`` where the trace does not say)."""
    device = trace.events.device[kernels]
    out = np.full(len(kernels), missing, dtype=float)
    for dev in np.unique(device).tolist():
        out[device == dev] = trace.num_sms(dev) or missing
    return out


def _shapes_of(details: list[dict[str, Any]]) -> np.ndarray:
    """``_launch_shape`` of every detail, as rows. Kineto writes grid and block as lists of
    three numbers: read so, they are multiplied as arrays; any other form, one by one."""
    shapes = np.full((max(len(details), 1), 4), np.nan)
    if not details:
        return shapes
    try:
        grid = np.array([d["grid"] for d in details], dtype=np.float64)
        block = np.array([d["block"] for d in details], dtype=np.float64)
        regular = grid.ndim == 2 and block.ndim == 2 and grid.shape[1] and block.shape[1]
    except (KeyError, TypeError, ValueError, OverflowError):
        regular = False
    if not regular:
        for i, detail in enumerate(details):
            shapes[i] = _launch_shape(detail)
        return shapes
    with np.errstate(over="ignore", invalid="ignore"):
        for col, dims in ((0, grid), (1, block)):
            product = np.prod(dims, axis=1)
            ok = (dims > 0).all(axis=1) & np.isfinite(product)
            shapes[:, col] = np.where(ok, product, np.nan)
    shapes[:, 2] = _numbers([d.get("registers") for d in details])
    shapes[:, 3] = _numbers([d.get("shared_memory") for d in details])
    return shapes


def _numbers(values: list[Any]) -> np.ndarray | list[float]:
    """``_number`` of each value: converted as one array when all are ints and floats."""
    if set(map(type, values)) <= {int, float}:
        return np.array(values, dtype=np.float64)
    return [_number(x) for x in values]


def _launch_shape(detail: dict[str, Any]) -> tuple[float, float, float, float]:
    """(blocks, threads per block, registers per thread, shared memory) of a launch."""
    return (_product(detail.get("grid")), _product(detail.get("block")),
            _number(detail.get("registers")), _number(detail.get("shared_memory")))


def _product(dims: Any) -> float:
    if type(dims) is not list or not dims:
        return math.nan
    out = 1.0
    for x in dims:
        x = _number(x)
        if not x > 0:
            return math.nan
        out *= x
    return out if math.isfinite(out) else math.nan


def _number(x: Any) -> float:
    return float(x) if type(x) in (int, float) else math.nan


def _comm_sms_held(trace: Trace, kernels: np.ndarray) -> np.ndarray:
    """Per call, the most SMs that communication kernels on its device hold while it runs
    (one SM per block, at most the device's SMs)."""
    ev = trace.events
    is_comm = kernel_classes(trace).cls == KernelClass.COMMUNICATION
    comm_all = np.flatnonzero(is_comm & (ev.kind == Kind.KERNEL))
    held = np.zeros(len(kernels))
    if not len(comm_all):
        return held
    comm_blocks = np.minimum(_launch_shapes(trace, comm_all)[0],
                             sm_counts(trace, comm_all, np.inf))
    starts, ends, device = ev.ts[kernels], event_ends(ev)[kernels], ev.device[kernels]
    for dev in np.unique(ev.device[comm_all]).tolist():
        comm = comm_all[(ev.device[comm_all] == dev) & np.isfinite(comm_blocks)]
        if not len(comm):
            continue
        points, level = iv.weighted_union(
            ev.ts[comm], event_ends(ev)[comm],
            comm_blocks[(ev.device[comm_all] == dev) & np.isfinite(comm_blocks)], cap=np.inf)
        mine = (device == dev) & ~is_comm[kernels]
        lo = np.searchsorted(points, starts[mine], side="right") - 1
        hi = np.searchsorted(points, ends[mine], side="left") - 1
        held[mine] = np.where(hi < 0, 0.0, _range_max(level, np.maximum(lo, 0),
                                                       np.maximum(hi, lo)))
    return held


def _sized_beside_comm(trace: Trace, kernels: np.ndarray, blocks: np.ndarray,
                       sms: np.ndarray) -> np.ndarray:
    """Per call, whether its blocks are exactly the SMs a communication kernel on its device
    leaves free (DeepEP-style jobs size compute grids to SM count - communication SMs)."""
    ev = trace.events
    out = np.zeros(len(kernels), dtype=bool)
    comm_all = np.flatnonzero((kernel_classes(trace).cls == KernelClass.COMMUNICATION)
                              & (ev.kind == Kind.KERNEL))
    if not len(comm_all):
        return out
    comm_blocks = _launch_shapes(trace, comm_all)[0]
    for dev in np.unique(ev.device[comm_all]).tolist():
        mine = ev.device[kernels] == dev
        taken = np.unique(comm_blocks[(ev.device[comm_all] == dev) & np.isfinite(comm_blocks)])
        left = sms[mine][:1] - taken if mine.any() else taken[:0]
        out[mine] = np.isin(blocks[mine], left[left > 0])
    return out


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo:hi + 1]) per pair, by a sparse table (O(n log n))."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    lo = np.clip(lo, 0, len(values) - 1)
    hi = np.clip(hi, lo, len(values) - 1)
    k = np.floor(np.log2(hi - lo + 1)).astype(int)
    out = np.empty(len(lo))
    for level in np.unique(k).tolist():  # a few dozen levels at most
        sel = k == level
        t = table[level]
        out[sel] = np.maximum(t[lo[sel]], t[hi[sel] - (1 << level) + 1])
    return out


def _resident(trace: Trace, kernels: np.ndarray, threads: np.ndarray, regs: np.ndarray,
              smem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Blocks per SM the SM's limits allow, and the theoretical occupancy they give (%)."""
    ev = trace.events
    n = len(kernels)
    resident, occupancy = np.full(n, np.nan), np.full(n, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):  # zero registers or shared memory
        for dev in np.unique(ev.device[kernels]).tolist():
            _resident_on(trace, dev, kernels, threads, regs, smem, resident, occupancy)
    return resident, occupancy


def _resident_on(trace: Trace, dev: int, kernels: np.ndarray, threads: np.ndarray,
                 regs: np.ndarray, smem: np.ndarray, resident: np.ndarray,
                 occupancy: np.ndarray) -> None:
    """Fill ``resident`` and ``occupancy`` for the calls on device ``dev``."""
    ev = trace.events
    props = next((p for p in trace.device_properties if p.get("id") == dev), {})
    max_threads = _number(props.get("maxThreadsPerMultiprocessor"))
    if not np.isfinite(max_threads):
        return
    mine = (ev.device[kernels] == dev) & np.isfinite(threads)
    cc = trace.compute_capability(dev)
    limit = np.full(mine.sum(), float(_MAX_BLOCKS_PER_SM.get(cc or (0, 0), 32)))
    limit = np.minimum(limit, np.floor(max_threads / threads[mine]))
    reg_file = _number(props.get("regsPerMultiprocessor"))
    used = regs[mine] * threads[mine]
    if np.isfinite(reg_file):
        limit = np.where(used > 0, np.minimum(limit, np.floor(reg_file / used)), limit)
    smem_sm = _number(props.get("sharedMemPerMultiprocessor"))
    if np.isfinite(smem_sm):
        limit = np.where(smem[mine] > 0, np.minimum(limit, np.floor(smem_sm / smem[mine])), limit)
    resident[mine] = limit
    occupancy[mine] = np.minimum(limit * threads[mine] / max_threads, 1.0) * 100.0
