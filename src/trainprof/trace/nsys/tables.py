"""The activity tables of an Nsight Systems export as rows of the trace model.

Each reader turns one table (kernels, copies, memsets, synchronisations, CUDA API calls, NVTX
ranges) into ``Rows``: times in ns as recorded, the process and lane of each row, and the
model's kind, name and device fields. The names are what Kineto writes for the same activity
(``Memcpy HtoD (Pinned -> Device)``, ``Stream Sync``, ``cudaLaunchKernel`` without nsys's
``_v7000`` suffix), so that every rule of trace/model.py applies unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.structs import fields
from trainprof.trace.model import Kind
from trainprof.trace.nsys.schema import Export

#: ``ENUM_CUDA_MEMCPY_OPER`` as nsys 2026.1/2026.2 export it (used where the table is absent).
MEMCPY_KINDS = {0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD",
                7: "DTOA", 8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "UVM_HTOD", 12: "UVM_DTOH",
                13: "UVM_DTOD"}
#: ``ENUM_CUDA_MEM_KIND`` labels as nsys 2026.x exports them (note: not CUPTI's numbering).
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                5: "Device Static", 6: "Managed Static", 7: "Unknown"}
#: ``ENUM_CUPTI_SYNC_TYPE`` as nsys 2026.x exports it.
SYNC_TYPES = {0: "UNKNOWN", 1: "EVENT_SYNCHRONIZE", 2: "STREAM_WAIT_EVENT",
              3: "STREAM_SYNCHRONIZE", 4: "CONTEXT_SYNCHRONIZE"}
#: Kineto's names of the same synchronisation records (trace/model.py reads these).
_SYNC_NAMES = {"EVENT_SYNCHRONIZE": "Event Sync", "STREAM_WAIT_EVENT": "Stream Wait Event",
               "STREAM_SYNCHRONIZE": "Stream Sync", "CONTEXT_SYNCHRONIZE": "Context Sync"}
#: Kineto's spelling of a copy kind (CUPTI's ``HTOD`` is ``HtoD`` in a Kineto trace).
_COPY_SPELLING = {"HTOD": "HtoD", "DTOH": "DtoH", "HTOA": "HtoA", "ATOH": "AtoH", "ATOA": "AtoA",
                  "ATOD": "AtoD", "DTOA": "DtoA", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP",
                  "UVM_HTOD": "HtoD", "UVM_DTOH": "DtoH", "UVM_DTOD": "DtoD"}
_API_VERSION = re.compile(r"_v\d+$")
#: A process's (and a thread's) id inside nsys's global ids: bits 24-47 of globalPid/globalTid;
#: the thread id is bits 0-23. Everything above bit 24 together names the process.
_ID_BITS = 24
_ID_MASK = (1 << _ID_BITS) - 1
#: Values spanning at most this many (or twice the number of rows) are made distinct by a
#: table of their range rather than by sorting them.
DENSE_RANGE = 1 << 16


class Rows(msgspec.Struct):
    """Rows of one or more tables, column by column."""

    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    process: np.ndarray  # int64: globalPid >> 24 (0 where the export has no process ids)
    lane: np.ndarray  # int64 (n, 2): (pid, tid) of a host thread, (device, stream) on the GPU
    kind: np.ndarray  # uint8, a Kind
    name: np.ndarray  # int32 into Catalog.names
    device: np.ndarray  # int16, -1 on the host
    stream: np.ndarray  # int64, -1 on the host
    correlation: np.ndarray  # int64, -1 when absent
    nbytes: np.ndarray  # float64, nan when absent
    grid_blocks: np.ndarray  # float64: blocks of a kernel launch, nan for others
    detail: np.ndarray  # int32 into Catalog.details, -1
    shape: np.ndarray  # int32 into Catalog.shapes, -1

    def __len__(self) -> int:
        return len(self.start)

    def take(self, mask: np.ndarray) -> Rows:
        return Rows(**{f.name: getattr(self, f.name)[mask] for f in fields(self)})

    @staticmethod
    def join(parts: list[Rows]) -> Rows:
        return Rows(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                       for f in fields(Rows)})


class Catalog(msgspec.Struct):
    """Names (with their kind and flags), launch details and shapes, interned per export."""

    names: list[str] = field(default_factory=list)
    kinds: list[Kind] = field(default_factory=list)  #: the kind of each name
    details: list[dict[str, Any]] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)
    _names: dict[tuple[int, str], int] = field(default_factory=dict)
    _shapes: dict[str, int] = field(default_factory=dict)

    def name(self, kind: Kind, text: str) -> int:
        key = (int(kind), text)
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = len(self.names)
            self.names.append(text)
            self.kinds.append(kind)
        return found

    def shape(self, text: str) -> int:
        found = self._shapes.get(text)
        if found is None:
            found = self._shapes[text] = len(self.shapes)
            self.shapes.append(text)
        return found


def empty_rows(n: int, **given: np.ndarray) -> Rows:
    """Rows of ``n`` events: the columns given, the others absent."""
    out: dict[str, np.ndarray] = {
        "device": np.full(n, -1, np.int16), "stream": np.full(n, -1, np.int64),
        "correlation": np.full(n, -1, np.int64), "nbytes": np.full(n, np.nan),
        "grid_blocks": np.full(n, np.nan), "detail": np.full(n, -1, np.int32),
        "shape": np.full(n, -1, np.int32)}
    out.update(given)
    return Rows(**out)


def process_of(global_id: np.ndarray) -> np.ndarray:
    return global_id >> _ID_BITS


def _interned(values: np.ndarray, text_of: Any) -> np.ndarray:
    """Index (int32) for each value, from ``text_of(unique value)`` computed once per value."""
    if not len(values):
        return np.empty(0, np.int32)
    unique, inverse = distinct(values)
    table = np.array([text_of(u) for u in unique], dtype=np.int32)
    return table[inverse]


#: ``few_distinct``'s passes before it sorts instead.
FEW = 16


def distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, sorted, or rows, index of each into them); never ``np.unique`` without
    an index (numpy 2.4 then imports numpy.ma: 0.05 s of a read). Rows are told apart by one int64
    code made from each column's own distinct values (numpy's row-wise unique compares raw
    bytes and costs more than the rest of a table's read)."""
    if values.ndim == 1:
        return _distinct_column(values)
    code = np.zeros(len(values), np.int64)
    radix = 1
    for column in values.T:
        _, inverse = _distinct_column(column)
        size = int(inverse.max()) + 1
        if radix * size >= 2**62:  # too many combinations for one code: compare rows
            unique, rows = np.unique(values, return_inverse=True, axis=0)
            return unique, rows.reshape(-1)
        code += inverse.reshape(-1) * radix
        radix *= size
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return values[first], inverse.reshape(-1)


def few_distinct(values: np.ndarray, limit: int = FEW) -> list[int]:
    """The distinct values of a column that holds a few (processes), sorted: one pass per value
    found instead of a sort of the whole column (15 ms for the 10x export's 340k kernels); a
    sort where there are more than ``limit``."""
    found: list[int] = []
    rest = values
    while len(rest):
        if len(found) == limit:
            return _distinct_column(values)[0].tolist()
        found.append(int(rest[0]))
        rest = rest[rest != rest[0]]
    return sorted(found)


def _distinct_column(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of one column; by a table of the values'
    range instead of a sort where they are small (ids into StringIds, launch sizes)."""
    low = int(values.min(initial=0))
    span = int(values.max(initial=0)) - low + 1
    if low < 0 or span > max(DENSE_RANGE, 2 * len(values)):
        unique, inverse = np.unique(values, return_inverse=True)
        return unique, inverse.reshape(-1)
    present = np.zeros(span, bool)
    present[values - low] = True
    unique = np.flatnonzero(present)
    rank = np.cumsum(present, dtype=np.int64) - 1
    return (unique + low).astype(values.dtype), rank[values - low]


def _device_rows(db: Export, table: str, extra: list[str]) -> np.ndarray | None:
    """start, end, deviceId, streamId, correlationId, globalPid, then ``extra``, as int64."""
    if not db.has(table):
        return None
    db.require(table, "start", "end")
    cols = ["start", "end", db.pick(table, "deviceId"), db.pick(table, "streamId"),
            db.pick(table, "correlationId"), db.pick(table, "globalPid", default="0"), *extra]
    sql = f'SELECT {", ".join(_quoted(c) for c in cols)} FROM {db.source(table)}'
    return db.int_columns(sql, len(cols))


def _quoted(column: str) -> str:
    return f'"{column}"' if column.isidentifier() else column


def _on_device(m: np.ndarray, kind: Kind, name: np.ndarray, **given: np.ndarray) -> Rows:
    n = len(m)
    return empty_rows(n, start=m[:, 0], end=m[:, 1], process=process_of(m[:, 5]),
                      lane=m[:, [2, 3]].copy(), kind=np.full(n, kind, np.uint8), name=name,
                      device=m[:, 2].astype(np.int16), stream=m[:, 3].copy(),
                      correlation=m[:, 4].copy(), **given)


def kernels(db: Export, cat: Catalog) -> Rows | None:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    extra = [db.pick(table, "demangledName", "shortName", "mangledName"),
             *(db.pick(table, c) for c in ("gridX", "gridY", "gridZ", "blockX", "blockY",
                                             "blockZ", "registersPerThread")),
             db.pick(table, "staticSharedMemory", default="0"),
             db.pick(table, "dynamicSharedMemory", default="0")]
    m = _device_rows(db, table, extra)
    if m is None:
        return None
    strings = db.strings
    names = _interned(m[:, 6], lambda i: cat.name(
        Kind.KERNEL, strings.get(int(i)) or f"(kernel name {int(i)})"))
    launch = m[:, 7:16]
    details = _interned(launch, lambda row: _launch_detail(cat, row))
    grid = np.where(launch[:, 0] > 0, launch[:, 0] * launch[:, 1] * launch[:, 2], np.nan)
    return _on_device(m, Kind.KERNEL, names, detail=details, grid_blocks=grid.astype(float))


def _launch_detail(cat: Catalog, row: np.ndarray) -> int:
    """A launch configuration as Kineto's kernel args give it (trace/decode.py)."""
    gx, gy, gz, bx, by, bz, regs, static = (int(v) for v in row[:8])
    if gx < 0 and bx < 0:
        return -1
    cat.details.append({"grid": [gx, gy, gz], "block": [bx, by, bz],
                        "registers": regs if regs >= 0 else None,
                        "shared_memory": static + int(row[8]) if static >= 0 else None})
    return len(cat.details) - 1


def _kind_word(enum: dict[int, str], value: int) -> str:
    """The kind word of an ENUM name (``CUDA_MEMCPY_KIND_HTOD`` -> ``HTOD``)."""
    name = enum.get(value, "UNKNOWN")
    return name.split("_KIND_", 1)[-1].split("_TYPE_", 1)[-1]


def memcpys(db: Export, cat: Catalog) -> Rows | None:
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    extra = [db.pick(table, "bytes"), db.pick(table, "copyKind"), db.pick(table, "srcKind"),
             db.pick(table, "dstKind")]
    m = _device_rows(db, table, extra)
    if m is None:
        return None
    copy_kinds = db.enum("ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS)
    memory = _memory_labels(db)

    def text(row: np.ndarray) -> int:
        word = _kind_word(copy_kinds, int(row[0]))
        src, dst = memory.get(int(row[1]), "Unknown"), memory.get(int(row[2]), "Unknown")
        return cat.name(Kind.MEMCPY, f"Memcpy {_COPY_SPELLING.get(word, word)} "
                                     f"({src} -> {dst})")

    names = _interned(m[:, 7:10], text)
    return _on_device(m, Kind.MEMCPY, names, nbytes=_bytes(m[:, 6]))


def _bytes(column: np.ndarray) -> np.ndarray:
    return np.where(column >= 0, column.astype(np.float64), np.nan)


def _memory_labels(db: Export) -> dict[int, str]:
    """Memory kind -> Kineto's word for it (``Pageable``, ``Pinned``, ``Device`` ...)."""
    if {"id", "label"} <= db.columns("ENUM_CUDA_MEM_KIND"):
        return {int(i): str(label) for rows in db.query(
            "SELECT id, label FROM ENUM_CUDA_MEM_KIND") for i, label in rows}
    return MEMORY_KINDS


def memsets(db: Export, cat: Catalog) -> Rows | None:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    m = _device_rows(db, table, [db.pick(table, "bytes"), db.pick(table, "memKind")])
    if m is None:
        return None
    memory = _memory_labels(db)
    names = _interned(m[:, 7], lambda k: cat.name(
        Kind.MEMSET, f"Memset ({memory.get(int(k), 'Unknown')})"))
    return _on_device(m, Kind.MEMSET, names, nbytes=_bytes(m[:, 6]))


def syncs(db: Export, cat: Catalog) -> Rows | None:
    """CUPTI synchronisation records, as Kineto's ``cuda_sync`` events (on their stream's lane,
    with the device fields of a host event, as trace/columns.py reads them)."""
    table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    m = _device_rows(db, table, [db.pick(table, "syncType", "deprecatedSyncType")])
    if m is None:
        return None
    types = db.enum("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES)
    names = _interned(m[:, 6], lambda t: cat.name(
        Kind.SYNC, _SYNC_NAMES.get(_kind_word(types, int(t)), "Unknown")))
    rows = _on_device(m, Kind.SYNC, names)
    rows.device[:] = -1
    rows.stream[:] = -1
    return rows


def host_lane(global_tid: np.ndarray) -> np.ndarray:
    return np.stack([(global_tid >> _ID_BITS) & _ID_MASK, global_tid & _ID_MASK], axis=1)


def runtime(db: Export, cat: Catalog) -> Rows | None:
    """CUDA runtime and driver calls (``cu*`` names are driver calls)."""
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not db.has(table):
        return None
    db.require(table, "start", "end")
    cols = ["start", "end", db.pick(table, "globalTid", default="0"),
            db.pick(table, "correlationId"), db.pick(table, "nameId")]
    m = db.int_columns(f'SELECT {", ".join(_quoted(c) for c in cols)} FROM {db.source(table)}',
                       5)
    strings = db.strings
    kind_of: dict[int, Kind] = {}

    def text(i: int) -> int:
        name = _API_VERSION.sub("", strings.get(int(i)) or f"(CUDA call {int(i)})")
        kind = api_kind(name)
        index = cat.name(kind, name)
        kind_of[index] = kind
        return index

    names = _interned(m[:, 4], text)
    kinds = np.array([kind_of[i] for i in names.tolist()], dtype=np.uint8)
    return empty_rows(len(m), start=m[:, 0], end=m[:, 1], process=process_of(m[:, 2]),
                      lane=host_lane(m[:, 2]), kind=kinds, name=names,
                      correlation=m[:, 3].copy())


def api_kind(name: str) -> Kind:
    """A CUDA API call's kind: driver (``cuLaunchKernel``) or runtime (``cudaLaunchKernel``)."""
    return Kind.DRIVER if name.startswith("cu") and not name.startswith("cuda") else Kind.RUNTIME
