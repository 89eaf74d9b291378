"""An Nsight Systems export into the columnar ``Trace`` of each process that ran GPU work.

One process is one rank: the rank the recorder's NVTX mark says, else (a lone process) the
``RANK`` of the environment nsys launched it with, else the order of the processes' ids (the
lowest pid is rank 0), said in a note. Times are ns in the export and µs in the model: each
rank's origin is its earliest event floored to a whole µs, and every time is an exact integer
count of ns from that origin divided by 1000.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from trainprof.errors import TraceError
from trainprof.trace import model
from trainprof.trace.model import Events, Flows, MemoryEvents, Trace
from trainprof.trace.nsys import tables
from trainprof.trace.nsys.nvtx import nvtx_ranges
from trainprof.trace.nsys.repeating import step_rows
from trainprof.trace.nsys.schema import Export
from trainprof.trace.nsys.tables import Catalog, Rows, empty_rows

_READERS = (tables.kernels, tables.memcpys, tables.memsets, tables.syncs, tables.runtime)
#: ``TARGET_INFO_GPU`` columns -> Kineto's ``deviceProperties`` keys.
_DEVICE_KEYS = {"id": "id", "name": "name", "totalMemory": "totalGlobalMem",
                "computeMajor": "computeMajor", "computeMinor": "computeMinor",
                "smCount": "numSms", "maxThreadsPerBlock": "maxThreadsPerBlock",
                "maxRegistersPerBlock": "regsPerBlock", "maxRegistersPerSm": "regsPerMultiprocessor",
                "maxShmemPerBlock": "sharedMemPerBlock", "maxShmemPerSm": "sharedMemPerMultiprocessor",
                "maxShmemPerBlockOptin": "sharedMemPerBlockOptin", "threadsPerWarp": "warpSize",
                "l2CacheSize": "l2CacheSize", "memoryBandwidth": "memoryBandwidth",
                "clockRate": "clockRate"}


def read_export(path: Path, step_marker: re.Pattern[str] | None = None) -> list[Trace]:
    """One ``Trace`` per process with GPU work, in rank order. Raises ``TraceError``."""
    with Export(path) as db:
        require_kernels(db, path)
        cat = Catalog()
        rows, notes, marks, found_notes = _all_rows(db, cat, step_marker)
        devices, metadata = device_properties(db), export_metadata(db)
        pids, launched_rank = process_names(db), environment_rank(db)
    keys = tables.few_distinct(rows.process[np.isin(rows.kind, list(model.DEVICE_KINDS))])
    marks = with_environment_rank(keys, marks, launched_rank)
    numbers, note = ranks_of(keys, marks, pids)
    notes += [*note, *_left_out(keys, rows), *found_notes]
    if not devices:
        notes.append("The export has no TARGET_INFO_GPU table: device names and SM counts are "
                     "unknown (blocks per SM and the roofline's peaks need them).")
    by_process = _by_process(rows, keys)
    traces = [_trace(path, rank, by_process[key], cat, devices, notes,
                     rank_metadata(metadata, rank, len(keys) if note else 0,
                                    bool(note) or key in marks))
              for rank, key in zip(numbers, keys, strict=True)]
    return sorted(traces, key=lambda t: t.rank)


def _structure_steps(kernels: Rows | None, calls: Rows | None, ranges: Rows | None,
                     cat: Catalog) -> tuple[list[Rows], list[str]]:
    """Step rows found from the repeating kernels (trace/nsys/repeating.py) of each process
    without step ranges or torch's optimizer ranges (``ranges``: the NVTX ranges), and the
    notes on how; ``calls``: the CUDA API calls (the kernels' launches)."""
    if kernels is None:
        return [], []
    marked: set[int] = set()
    if ranges is not None:
        marked = set(tables.few_distinct(ranges.process[ranges.kind == model.Kind.STEP]))
    calls = calls if calls is not None else empty_rows(0, start=np.empty(0, np.int64),
                                                       end=np.empty(0, np.int64),
                                                       process=np.empty(0, np.int64),
                                                       lane=np.empty((0, 2), np.int64),
                                                       kind=np.empty(0, np.uint8),
                                                       name=np.empty(0, np.int32))
    launch = np.arange(len(calls))
    optimizer: set[int] | None = None
    out, notes = [], []
    processes = tables.few_distinct(kernels.process)
    for key in (k for k in processes if k not in marked):
        mine = np.flatnonzero(kernels.process == key) if len(processes) > 1 else None
        start = kernels.start if mine is None else kernels.start[mine]
        if np.any(start[1:] < start[:-1]):  # not yet in time order
            order = np.argsort(start, kind="stable")
            mine = order if mine is None else mine[order]
        found, note = step_rows(cat, kernels if mine is None else kernels.take(mine), calls, partial(
            _of_process, calls, launch, key), key)
        if found is None or note is None:
            continue
        if optimizer is None:
            optimizer = optimizer_processes(ranges, cat) if ranges is not None else set()
        if key not in optimizer:
            out.append(found)
            notes += [note] if note not in notes else []
    return out, notes


def _of_process(rows: Rows, index: np.ndarray, key: int) -> np.ndarray:
    return index[rows.process[index] == key]


def optimizer_processes(rows: Rows, cat: Catalog) -> set[int]:
    """Processes with torch's ``Optimizer.step`` ranges (the step finder's second source)."""
    host = np.flatnonzero(rows.kind == model.Kind.USER_ANNOTATION)
    names, index = tables.distinct(rows.name[host])
    flagged = np.array([model.is_optimizer(model.Kind.USER_ANNOTATION, cat.names[i])
                        for i in names.tolist()], bool)
    return set(tables.distinct(rows.process[host[flagged[index]]])[0].tolist()) \
        if flagged.any() else set()


def _by_process(rows: Rows, keys: list[int]) -> dict[int, Rows]:
    """The rows of each process (key) in time order, ties in table order: one stable sort by
    (process, start) for all, then a take of each process's run of it."""
    order = np.lexsort((rows.start, rows.process))
    process = rows.process[order]
    lo = np.searchsorted(process, keys, side="left").tolist()
    hi = np.searchsorted(process, keys, side="right").tolist()
    return {key: rows.take(order[a:b]) for key, a, b in zip(keys, lo, hi, strict=True)}


def require_kernels(db: Export, path: Path) -> None:
    """A TraceError unless the export recorded at least one kernel."""
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    found = db.has(table) and next(db.query(f"SELECT EXISTS (SELECT 1 FROM {table})"))[0][0]
    if not found:
        raise TraceError(f"{path} records no CUDA kernels (a CPU-only capture? record with "
                         "nsys profile --trace=cuda,nvtx).")


def _all_rows(db: Export, cat: Catalog, step_marker: re.Pattern[str] | None
              ) -> tuple[Rows, list[str], dict[int, int], list[str]]:
    """Every table's rows, joined (with the steps found from repeating kernels where no range
    marks them), the notes on what the export lacks, the ranks the recorder's NVTX marks say,
    and the notes on the steps found."""
    read = [reader(db, cat) for reader in _READERS]
    ranges, notes, marks = nvtx_ranges(db, cat, step_marker)
    parts = [rows for rows in (*read, ranges) if rows is not None]
    notes += [n for n in (db.schema_note(),) if n]
    if not db.has("NVTX_EVENTS"):
        notes.append("The export has no NVTX_EVENTS table: no host ops, annotations or steps "
                      "(record with nsys profile --trace=cuda,nvtx).")
    if "globalPid" not in db.columns("CUPTI_ACTIVITY_KIND_KERNEL"):
        for part in parts:
            part.process[:] = 0  # no process ids on the device side: one process
    found, found_notes = _structure_steps(read[0], read[-1], ranges, cat)
    rows = Rows.join([*parts, *found])
    sync_lanes(rows)
    return rows, notes, marks, found_notes


def _trace(path: Path, rank: int, rows: Rows, cat: Catalog, devices: list[dict[str, Any]],
           notes: list[str], metadata: dict[str, Any]) -> Trace:
    used = tables.distinct(rows.device[rows.device >= 0])[0].tolist()
    props = [d for d in devices if d.get("id") in used] or devices
    t0_ns = int(rows.start.min()) // 1000 * 1000
    lanes, lane = _lanes(rows.lane)
    names, name = _compacted(rows.name)
    details, detail = _compacted(rows.detail)
    shapes, shape = _compacted(rows.shape)
    columns: dict[str, Any] = event_columns(rows, t0_ns, props,
                                            lane.reshape(-1).astype(np.int32), name, detail,
                                            shape)
    columns["flags"] = flags_of(cat, names)[name]
    events = Events(**columns, names=[cat.names[i] for i in names],
                    shapes=[cat.shapes[i] for i in shapes],
                    details=[cat.details[i] for i in details])
    return Trace(path=path, rank=rank, window=0, t0_us=t0_ns / 1000.0, events=events,
                 memory=_no_memory(), flows=_no_flows(),
                 threads=lanes, metadata={**metadata, "deviceProperties": props},
                 notes=[*notes, *negative_note(int(np.count_nonzero(rows.end < rows.start)))])


def event_columns(rows: Rows, t0_ns: int, devices: list[dict[str, Any]], tid: np.ndarray,
                  name: np.ndarray, detail: np.ndarray, shape: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """The ``Events`` columns of ``rows`` but ``flags`` (times from ``t0_ns``; ``tid``,
    ``name``, ``detail`` and ``shape`` as the trace's tables number them)."""
    n = len(rows)
    return dict(
        kind=rows.kind, name=name, ts=(rows.start - t0_ns) / 1000.0,
        dur=np.maximum(rows.end - rows.start, 0) / 1000.0, tid=tid, device=rows.device,
        stream=rows.stream, correlation=rows.correlation, external_id=np.full(n, -1, np.int64),
        blocks_per_sm=_blocks_per_sm(rows, devices), occupancy=np.full(n, np.nan, np.float32),
        nbytes=rows.nbytes, flops=np.full(n, np.nan), shape=shape,
        stack=np.full(n, -1, np.int32), detail=detail, op_args=np.full(n, -1, np.int32))


def negative_note(count: int) -> list[str]:
    return [f"{count} event(s) ended before they started; read as lasting 0."] if count else []


def device_triples(rows: Rows) -> np.ndarray:
    """The distinct (process, stream, device) of the rows' device work."""
    on_device = np.isin(rows.kind, list(model.DEVICE_KINDS))
    return tables.distinct(np.stack([rows.process[on_device], rows.stream[on_device],
                                     rows.device[on_device].astype(np.int64)], axis=1))[0]


def sync_lanes(rows: Rows, triples: np.ndarray | None = None) -> None:
    """Put each synchronisation record on its stream's device (else its process's only
    device) among ``triples`` (``device_triples``, by default of ``rows``): the export's
    ``deviceId`` of these records is 0 for every process in nsys 2026.2 (seen on the 2-GPU
    capture)."""
    if triples is None:
        triples = device_triples(rows)
    streams = {(p, s): d for p, s, d in triples.tolist()}
    devices: dict[int, set[int]] = {}
    for p, _, d in triples.tolist():
        devices.setdefault(p, set()).add(d)
    sync = np.flatnonzero(rows.kind == model.Kind.SYNC)
    if not len(sync):
        return
    cases, case = tables.distinct(np.stack([rows.process[sync], rows.lane[sync, 1],
                                            rows.lane[sync, 0]], axis=1))
    lane = []  # the device of each distinct (process, stream, recorded device)
    for process, stream, recorded in cases.tolist():
        only = devices.get(process, set())
        fallback = next(iter(only)) if len(only) == 1 else recorded
        lane.append(streams.get((process, stream), fallback))
    rows.lane[sync, 0] = np.array(lane, dtype=np.int64)[case]


def _lanes(lane: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """(the distinct (pid, tid) or (device, stream) pairs, each row's index into them)."""
    key = (lane[:, 0] << 32) + (lane[:, 1] & 0xFFFFFFFF)
    unique, index = np.unique(key, return_inverse=True)
    return [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in unique.tolist()], index


def _compacted(index: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(the distinct indices >= 0 used, in order; the column renumbered into them, -1 staying
    -1), without sorting the column."""
    valid = index >= 0
    used = np.zeros(int(index.max(initial=-1)) + 1, dtype=bool)
    used[index[valid]] = True
    renumber = np.cumsum(used, dtype=np.int64) - 1
    out = np.full(len(index), -1, np.int32)
    out[valid] = renumber[index[valid]]
    return np.flatnonzero(used).tolist(), out


def flags_of(cat: Catalog, names: list[int]) -> np.ndarray:
    """FLAG_* of each name used (a name's index fixes its kind, tables.Catalog)."""
    return np.array([model.name_flags(cat.kinds[i], cat.names[i]) for i in names],
                    dtype=np.uint8).reshape(-1)


def _blocks_per_sm(rows: Rows, devices: list[dict[str, Any]]) -> np.ndarray:
    """Blocks of each kernel launch per SM of its device (as Kineto's "blocks per SM")."""
    sms = np.full(max([int(d["id"]) for d in devices if d.get("numSms")] + [-1]) + 1, np.nan)
    for d in devices:
        if d.get("numSms"):
            sms[int(d["id"])] = float(d["numSms"])
    out = np.full(len(rows), np.nan, np.float32)
    known = (rows.device >= 0) & (rows.device < len(sms)) & ~np.isnan(rows.grid_blocks)
    out[known] = rows.grid_blocks[known] / sms[rows.device[known]]
    return out


def device_properties(db: Export) -> list[dict[str, Any]]:
    table = "TARGET_INFO_GPU"
    columns = [c for c in _DEVICE_KEYS if c in db.columns(table)]
    if "id" not in columns:
        return []
    quoted = ", ".join(f'"{c}"' for c in columns)
    out: dict[int, dict[str, Any]] = {}
    for rows in db.query(f'SELECT {quoted} FROM "{table}"'):
        for row in rows:
            props = {_DEVICE_KEYS[c]: v for c, v in zip(columns, row, strict=True)}
            out.setdefault(int(props["id"]), props)
    return [out[k] for k in sorted(out)]


def export_metadata(db: Export) -> dict[str, Any]:
    meta = db.meta
    return {"nsys": {"product_version": meta.get("EXPORT_PRODUCT_VERSION"),
                     "schema_version": meta.get("EXPORT_SCHEMA_VERSION")}}


def rank_metadata(metadata: dict[str, Any], rank: int, world: int, said: bool
                   ) -> dict[str, Any]:
    """The rank said the way Kineto's ``distributedInfo`` says it, when the export says it (a
    mark) or holds several processes (their order); the world size only in the second case."""
    if not said:
        return dict(metadata)
    info: dict[str, Any] = {"rank": rank}
    if world > 1:
        info["world_size"] = world
    return {**metadata, "distributedInfo": info}


def process_names(db: Export) -> dict[int, tuple[int, str]]:
    """Process key (globalPid >> 24) -> (pid, name) from ``PROCESSES``."""
    if not {"globalPid", "pid"} <= db.columns("PROCESSES"):
        return {}
    name = db.pick("PROCESSES", "name", default="''")
    return {int(g) >> 24: (int(p), str(n)) for rows in db.query(
        f"SELECT globalPid, pid, {name} FROM PROCESSES") for g, p, n in rows}


def environment_rank(db: Export) -> int | None:
    """The ``RANK`` of the environment nsys launched its target with (``META_DATA_CAPTURE``'s
    ``PROCESS_N:ENVIRONMENT_VARIABLE`` rows, ``RANK="3"``, nsys 2026.2), when one is there:
    nsys run per rank by the launcher (``torchrun ... nsys profile python train.py``,
    ``srun nsys profile ...``). The environment of processes nsys's target started (torchrun's
    workers under ``nsys profile torchrun``) is not recorded."""
    if not {"name", "value"} <= db.columns("META_DATA_CAPTURE"):
        return None
    found = {str(v) for rows in db.query(
        "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE' "
        "AND value LIKE 'RANK=%'") for (v,) in rows}
    numbers = {v[len("RANK="):].strip().strip('"') for v in found if v.startswith("RANK=")}
    if len(numbers) != 1:
        return None
    (number,) = numbers
    return int(number) if number.isdigit() else None


def with_environment_rank(keys: list[int], marks: dict[int, int], rank: int | None
                          ) -> dict[int, int]:
    """The recorder's rank marks, and for a lone process without one the rank of the
    environment it was launched with (``environment_rank``)."""
    if rank is None or len(keys) != 1 or keys[0] in marks:
        return marks
    return {**marks, keys[0]: rank}


def ranks_of(keys: list[int], marks: dict[int, int], pids: dict[int, tuple[int, str]]
           ) -> tuple[list[int], list[str]]:
    """The rank of each process (key): from trainprof's NVTX marks when every process has a
    distinct one, else the order of their ids; and the note that says which."""
    marked = [marks.get(k) for k in keys]
    if all(m is not None for m in marked) and len(set(marked)) == len(keys):
        return [int(m) for m in marked if m is not None], []
    if len(keys) < 2:
        return [0] * len(keys), []
    said = ", ".join(f"pid {pids.get(k, (k & 0xFFFFFF, ''))[0]} -> rank {r}"
                     for r, k in enumerate(keys))
    return list(range(len(keys))), [
        f"{len(keys)} processes ran GPU work; the export records no rank (no trainprof.rank "
        f"NVTX mark), so they are ranks in the order of their process ids ({said})."]


def _left_out(keys: list[int], rows: Rows) -> list[str]:
    host_only = set(tables.few_distinct(rows.process)) - set(keys)
    return [f"{len(host_only)} process(es) without GPU work left out."] if host_only else []


def _no_memory() -> MemoryEvents:
    f, i8, i16, i32 = (np.empty(0, t) for t in (np.float64, np.int8, np.int16, np.int32))
    return MemoryEvents(ts=f, device_type=i8, device_id=i16, nbytes=f.copy(),
                        total_allocated=f.copy(), total_reserved=f.copy(), addr=f.copy(), tid=i32)


def _no_flows() -> Flows:
    return Flows(id=np.empty(0, np.int64), phase=np.empty(0, np.uint8),
                 ts=np.empty(0), tid=np.empty(0, np.int32), forward_backward=np.empty(0, bool))
