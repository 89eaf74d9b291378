"""Read a trace too large for memory: spill its columns to disk, then assemble it window by window.

Pass 1 (``spill_file``) reads the file piece by piece (trace/stream.py, trace/columns.py) and
writes each piece's columns, sorted by start time within the piece, to a temporary folder as
``.npy`` files. Only the interned tables (names, shapes, stacks, op args, threads, and the
kernels' launch details, deduplicated), the metadata, the step markers (``ProfilerStep#N`` and
optimizer annotations) and a few totals stay in memory.

Pass 2 (``SpilledTrace.window``) assembles the events that start in ``[start, end)``: each
piece is sorted, so its rows in range are found by bisection of a memory-mapped column; the
pieces' rows are joined and sorted by time (stably, in file order, as the whole read sorts
them). The window equals ``time_slice(load_file(path), start, end)`` event for event, launch
context included (``apply_launch_context`` is decided over the whole file after pass 1).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof import structs
from trainprof.errors import TraceError
from trainprof.trace import columns as col
from trainprof.trace.columns import ColumnBuilder
from trainprof.trace.decode import repair_notes
from trainprof.trace.kernel_class import classes_of_names, is_communication_frame
from trainprof.trace.kernel_context import LAUNCH_CONTEXT_KEY, _launched_in_context
from trainprof.trace.model import (
    DEVICE_KINDS,
    FLAG_COMM,
    FLAG_OPTIMIZER,
    LAUNCH_KINDS,
    Events,
    Flows,
    Kind,
    MemoryEvents,
    Trace,
)
from trainprof.trace.parallel_decode import Redo, SegmentMerger, decode_workers, decoded_segments
from trainprof.trace.stream import EventReader

#: Complete events gathered before a piece is written (about 100 MB of columns): few files,
#: and a piece's sort stays cheap.
PIECE_EVENTS = 1_000_000
#: Bytes of disk the spill takes per byte of JSON, checked before spilling (0.27 measured on
#: the reference trace, about 0.35 on compact JSON; with a margin).
DISK_BYTES_PER_JSON_BYTE = 0.8
_EVENT_DTYPES = {"kind": np.uint8, "name": np.int32, "tid": np.int32, "flags": np.uint8,
                 "shape": np.int32, "stack": np.int32, "detail": np.int32, "op_args": np.int32}
_MEMORY_DTYPES = {"device_type": np.int8, "device_id": np.int16, "tid": np.int32}
_FLOW_DTYPES = {"id": np.int64, "phase": np.uint8, "tid": np.int32, "forward_backward": bool}
_GROUPS = (("events", col._EVENT_FIELDS, _EVENT_DTYPES), ("memory", col._MEMORY_FIELDS,
           _MEMORY_DTYPES), ("flows", col._FLOW_FIELDS, _FLOW_DTYPES))


class Piece(msgspec.Struct):
    """One spilled piece: its folder and row counts per group."""

    folder: Path
    rows: dict[str, int]
    #: Rows of its events flagged as communication by their launch context (sorted).
    launch_context: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def column(self, group: str, name: str) -> np.ndarray:
        """A column, memory-mapped (read only)."""
        return np.load(self.folder / f"{group}.{name}.npy", mmap_mode="r")


class SpilledTrace(msgspec.Struct):
    """A trace spilled to disk by ``spill_file``; ``close()`` (or ``with``) removes the spill."""

    path: Path
    folder: Path
    pieces: list[Piece]
    t0_us: float
    shift: float  # subtracted from every spilled time (the origin settled after pass 1)
    tables: dict[str, list]
    threads: list[tuple[Any, Any]]
    metadata: dict[str, Any]
    notes: list[str]
    markers: Events  # the step markers and optimizer annotations, sorted by time
    devices: list[int]  # device ids that ran kernels, copies or memsets
    rank: int = 0

    def __enter__(self) -> SpilledTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def has_gpu(self) -> bool:
        return bool(self.devices)

    def event_count(self, start: float = -math.inf, end: float = math.inf) -> int:
        """Complete events starting in ``[start, end)`` (no column is read beyond bisection)."""
        total = 0
        for piece in self.pieces:
            ts = piece.column("events", "ts")
            lo, hi = self._range(ts, start, end)
            total += hi - lo
        return total

    def time_span(self) -> tuple[float, float]:
        """The earliest start and latest start of any complete event."""
        firsts, lasts = [], []
        for piece in self.pieces:
            ts = piece.column("events", "ts")
            if len(ts):
                firsts.append(float(ts[0]) - self.shift)
                lasts.append(float(ts[-1]) - self.shift)
        return (min(firsts), max(lasts)) if firsts else (0.0, 0.0)

    def event_columns(self, names: tuple[str, ...], start: float = -math.inf,
                      end: float = math.inf) -> dict[str, np.ndarray]:
        """Some columns of the complete events starting in ``[start, end)``, in trace order."""
        parts = self._rows("events", ("ts", *names), start, end)
        return {n: parts[n] for n in names} | {"ts": parts["ts"]}

    def window(self, start: float = -math.inf, end: float = math.inf) -> Trace:
        """The events starting in ``[start, end)`` as a ``Trace`` (see the module docstring)."""
        ev = self._rows("events", col._EVENT_FIELDS, start, end, launch=True)
        by_launch = ev.pop("_launch")
        mem = self._rows("memory", col._MEMORY_FIELDS, start, end)
        flows = self._rows("flows", col._FLOW_FIELDS, start, end, flows=True)
        trace = Trace(
            path=self.path, rank=self.rank, window=0, t0_us=self.t0_us,
            events=Events(**ev, names=self.tables["names"], shapes=self.tables["shapes"],
                          stacks=self.tables["stacks"], details=self.tables["details"],
                          op_arg_texts=self.tables["op_arg_texts"]),
            memory=MemoryEvents(**mem), flows=Flows(**flows), threads=self.threads,
            metadata=self.metadata, notes=list(self.notes))
        trace.__dict__[LAUNCH_CONTEXT_KEY] = by_launch
        return trace

    # -- assembly --------------------------------------------------------------------------

    def _range(self, ts: np.ndarray, start: float, end: float) -> tuple[int, int]:
        """Rows of a sorted spilled column whose shifted time is in ``[start, end)``."""
        return self._first_at(ts, start), self._first_at(ts, end)

    def _first_at(self, ts: np.ndarray, bound: float) -> int:
        """The first row whose shifted time ``ts - shift`` is at least ``bound`` (exactly as
        the subtraction rounds: bisect near the unshifted bound, then step to the edge)."""
        n = len(ts)
        if bound == -math.inf:
            return 0
        if bound == math.inf:  # every row with a time (NaN sorts last)
            return int(np.searchsorted(ts, math.inf, side="right"))
        i = int(np.searchsorted(ts, bound + self.shift, side="left"))
        while i > 0 and ts[i - 1] - self.shift >= bound:
            i -= 1
        while i < n and ts[i] - self.shift < bound:
            i += 1
        return i

    def _rows(self, group: str, names: tuple[str, ...], start: float, end: float,
              launch: bool = False, flows: bool = False) -> dict[str, np.ndarray]:
        parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
        order_parts: list[np.ndarray] = []
        flagged: list[np.ndarray] = []
        offset = 0
        for piece in self.pieces:
            if not piece.rows[group]:
                continue
            ts = piece.column(group, "ts")
            lo, hi = self._range(ts, start, end)
            if flows:  # flows keep file order; one without a time is in every window
                nan_from = int(np.searchsorted(ts, math.inf, side="right"))
                rows = np.r_[lo:hi, nan_from:len(ts)]
                if not len(rows):
                    continue
                order = np.argsort(piece.column(group, "order")[rows], kind="stable")
                rows = rows[order]
                for n in names:
                    parts[n].append(piece.column(group, n)[rows])
                continue
            if hi <= lo:
                continue
            for n in names:
                parts[n].append(piece.column(group, n)[lo:hi])
            if launch and len(piece.launch_context):
                mine = piece.launch_context[(piece.launch_context >= lo)
                                            & (piece.launch_context < hi)]
                flagged.append(mine - lo + offset)
            order_parts.append(np.arange(hi - lo))
            offset += hi - lo
        dtypes = dict(_GROUPS[[g for g, _, _ in _GROUPS].index(group)][2])
        out = {n: (np.concatenate(p) if len(p) > 1 else np.array(p[0]) if p else np.empty(0, dtype=dtypes.get(n, np.float64)))
               for n, p in parts.items()}
        if "ts" in out:
            out["ts"] = out["ts"] - self.shift
        by_launch = np.concatenate(flagged) if flagged else np.empty(0, dtype=np.int64)
        if not flows and len(order_parts) > 1:
            order = np.argsort(out["ts"], kind="stable")
            out = {n: v[order] for n, v in out.items()}
            if len(by_launch):
                position = np.empty(len(order), dtype=np.int64)
                position[order] = np.arange(len(order))
                by_launch = np.sort(position[by_launch])
        if launch:
            if len(by_launch):
                out["flags"][by_launch] |= FLAG_COMM
            out["_launch"] = by_launch.astype(np.int64)
        return out


def spill_file(path: str | Path, folder: str | Path | None = None,
               piece_events: int = PIECE_EVENTS) -> SpilledTrace:
    """Pass 1: read ``path`` into a spill under ``folder`` (default: the system's temporary
    folder). Raises ``TraceError`` like ``load_file``, and when the disk lacks room."""
    path = Path(path)
    root = Path(tempfile.mkdtemp(prefix="trainprof-spill-", dir=folder))
    try:
        workers = decode_workers(path)
        spilled = _Spiller(path, root, piece_events).run_parallel(workers) if workers > 1 \
            else None
        if spilled is None:  # a small file, or one the workers cannot cut: read it serially
            for leftover in root.iterdir():
                shutil.rmtree(leftover)
            spilled = _Spiller(path, root, piece_events).run()
        return spilled
    except BaseException:  # Ctrl-C included: leave nothing behind
        shutil.rmtree(root, ignore_errors=True)
        raise


def check_disk(folder: str | Path | None, json_bytes: int,
               per_byte: float = DISK_BYTES_PER_JSON_BYTE) -> None:
    """Raise ``TraceError`` when the spill of a trace this size would not fit on the disk
    (``per_byte``: bytes of spill per byte of the file)."""
    where = Path(folder or tempfile.gettempdir())
    need = int(json_bytes * per_byte)
    free = shutil.disk_usage(where).free
    if need > free:
        raise TraceError(f"Streaming this trace needs about {need / 2**30:.1f} GiB of disk in "
                         f"{where} and {free / 2**30:.1f} GiB are free; set TMPDIR to a "
                         "folder with more room.")


class _Spiller:
    """Pass 1 of ``spill_file``."""

    def __init__(self, path: Path, root: Path, piece_events: int) -> None:
        self.path, self.root, self.piece_events = path, root, piece_events
        self.builder = ColumnBuilder(path)
        self.pieces: list[Piece] = []
        self.details: dict[bytes, int] = {}
        self.detail_list: list[dict[str, Any]] = []
        self.markers: list[dict[str, np.ndarray]] = []
        self.firsts: dict[str, float] = {}
        self.devices: set[int] = set()
        self.pending = 0

    def run_parallel(self, workers: int) -> SpilledTrace | None:
        """Pass 1 with ``workers`` decoding processes (trace/parallel_decode.py); None when
        the file must be read serially."""
        found = decoded_segments(self.path, workers)
        if found is None:
            return None
        outcomes, reader = found
        metadata = dict(reader.metadata)
        merger = SegmentMerger(self.path, metadata)
        self.builder = merger.out
        try:
            for outcome in outcomes:
                merger.add(*outcome)
                self.pending = sum(len(e["ts"]) for e in self.builder._events)
                if self.pending >= self.piece_events:
                    self._flush()
        except Redo:
            return None
        finally:
            outcomes.close()  # stops the workers now, also on an error or Ctrl-C
        self._flush()
        repairs: Counter = Counter()
        repairs["negative_dur"] += self.builder.negative_durations
        return self._finish(metadata, repairs)

    def run(self) -> SpilledTrace:
        """Pass 1, serially."""
        reader = EventReader(self.path)
        try:
            for chunk in reader.chunks():
                self.builder.add(chunk)
                self.pending += len(chunk)
                del chunk
                if self.pending >= self.piece_events:
                    self._flush()
            self._flush()
        except RecursionError:
            raise TraceError(f"{self.path} nests values too deeply to be read (over a thousand "
                             "levels inside one event); no Kineto trace does that.") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"{self.path} is not valid UTF-8 JSON (byte {exc.start} of a "
                             f"piece: {exc.reason}); is the file damaged?") from None
        repairs: Counter = Counter(reader.repairs)
        repairs["negative_dur"] += self.builder.negative_durations
        return self._finish(reader.metadata, repairs)

    def _flush(self) -> None:
        b = self.builder
        groups = {"events": b._events, "memory": b._memory, "flows": b._flows}
        if not any(groups.values()):
            return
        folder = self.root / f"piece{len(self.pieces):05d}"
        folder.mkdir()
        rows = {}
        for group, fields, dtypes in _GROUPS:
            cols = col._joined(groups[group], fields, dtypes)
            if group == "flows":
                cols["order"] = np.arange(len(cols["ts"]), dtype=np.int64)
            cols = _sorted(cols)
            if group == "events":
                cols["detail"] = self._interned_details(cols["detail"])
                self._keep_markers(cols, len(self.pieces))
                device = cols["device"][np.isin(cols["kind"], list(DEVICE_KINDS))]
                self.devices.update(int(d) for d in np.unique(device[device >= 0]))
            if len(cols["ts"]) and group not in self.firsts:
                self.firsts[group] = float(np.nanmin(cols["ts"]))
            elif len(cols["ts"]):
                self.firsts[group] = min(self.firsts[group], float(np.nanmin(cols["ts"])))
            for name, values in cols.items():
                np.save(folder / f"{group}.{name}.npy", values)
            rows[group] = len(cols["ts"])
        self.pieces.append(Piece(folder, rows))
        b._events, b._memory, b._flows = [], [], []
        b.details.clear()
        self.pending = 0

    def _interned_details(self, detail: np.ndarray) -> np.ndarray:
        """Detail indices into one deduplicated table (launch configurations repeat)."""
        out = np.full(len(detail), -1, dtype=np.int32)
        source = self.builder.details
        for i in np.flatnonzero(detail >= 0).tolist():
            d = source[detail[i]]
            key = msgspec.json.encode(d)
            hit = self.details.get(key)
            if hit is None:
                hit = self.details[key] = len(self.detail_list)
                self.detail_list.append(d)
            out[i] = hit
        return out

    def _keep_markers(self, cols: dict[str, np.ndarray], piece: int) -> None:
        kept = kept_markers(cols, piece)
        if kept is not None:
            self.markers.append(kept)

    def _finish(self, metadata: dict[str, Any], repairs: Counter) -> SpilledTrace:
        if not any(p.rows["events"] or p.rows["memory"] for p in self.pieces):
            raise TraceError(f"{self.path} holds no trace events (the profiler recorded "
                             "nothing).")
        b = self.builder
        ref = next((self.firsts[g] for g in ("events", "memory", "flows") if g in self.firsts),
                   None)
        shift = float(math.floor(ref)) if ref is not None else 0.0
        t0 = (b.t0 or 0.0) + shift
        base_ns = metadata.get("baseTimeNanoseconds")
        if isinstance(base_ns, int | float) and base_ns:
            t0 += base_ns / 1000.0
        tables: dict[str, list] = {
            "names": b.names,
            "shapes": [k.decode("utf-8", "replace") for k in b._shapes],
            "op_arg_texts": [k.decode("utf-8", "replace") for k in b._op_args],
            "stacks": [col._json_string(k) for k in b._stacks],
            "details": self.detail_list,
        }
        spilled = SpilledTrace(
            path=self.path, folder=self.root, pieces=self.pieces, t0_us=t0, shift=shift,
            tables=tables, threads=list(b.threads), metadata=metadata,
            notes=repair_notes(repairs), markers=marker_events(self.markers, tables, shift),
            devices=sorted(self.devices))
        _decide_launch_context(spilled)
        return spilled



def kept_markers(cols: dict[str, np.ndarray], piece: int) -> dict[str, np.ndarray] | None:
    """The step markers and optimizer annotations among a piece's sorted event columns, with
    their piece and row (None without any)."""
    rows = np.flatnonzero((cols["kind"] == Kind.STEP) | ((cols["flags"] & FLAG_OPTIMIZER) != 0))
    if not len(rows):
        return None
    kept = {n: np.asarray(v[rows]) for n, v in cols.items()}
    kept["_piece"] = np.full(len(rows), piece, dtype=np.int64)
    kept["_row"] = rows
    return kept


def marker_events(markers: list[dict[str, np.ndarray]], tables: dict[str, list],
                  shift: float) -> Events:
    """The kept markers of every piece as ``Events``, in time order (ties in file order)."""
    fields = [f.name for f in structs.fields(Events) if f.name in col._EVENT_FIELDS]
    if not markers:
        cols = {n: np.empty(0, dtype=_EVENT_DTYPES.get(n, np.float64)) for n in fields}
    else:
        joined = {n: np.concatenate([m[n] for m in markers])
                  for n in (*fields, "_piece", "_row")}
        joined["ts"] = joined["ts"] - shift
        order = np.lexsort((joined["_row"], joined["_piece"], joined["ts"]))
        cols = {n: joined[n][order] for n in fields}
    return Events(**cols, names=tables["names"], shapes=tables["shapes"],
                  stacks=tables["stacks"], details=tables["details"],
                  op_arg_texts=tables["op_arg_texts"])


def _sorted(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    order = np.argsort(cols["ts"], kind="stable")
    return {k: v[order] for k, v in cols.items()}


_CONTEXT_FIELDS = ("kind", "name", "flags", "correlation", "tid", "ts", "dur")


def _decide_launch_context(spilled: SpilledTrace) -> None:
    """``apply_launch_context`` over the whole spilled file: kernels of unknown names launched
    inside a communication context are flagged (kept per piece, applied as windows load)."""
    names = spilled.tables["names"]
    kernel_names = [np.unique(p.column("events", "name")[p.column("events", "kind")
                                                         == Kind.KERNEL])
                    for p in spilled.pieces if p.rows["events"]]
    used = np.unique(np.concatenate(kernel_names)) if kernel_names else np.empty(0, np.int32)
    if not len(used):
        return
    _, known = classes_of_names(names, used)
    frames = np.array([is_communication_frame(n) for n in names], dtype=bool)
    picked: list[dict[str, np.ndarray]] = []
    for i, p in enumerate(spilled.pieces):
        if not p.rows["events"]:
            continue
        kind, name, flags = (p.column("events", n) for n in ("kind", "name", "flags"))
        comm = (flags & FLAG_COMM) != 0
        candidate = (kind == Kind.KERNEL) & ~known[name] & ~comm
        context = (np.isin(kind, [Kind.CPU_OP, Kind.USER_ANNOTATION]) & comm) | (
            (kind == Kind.PYTHON) & frames[name])
        rows = np.flatnonzero(candidate | context)
        if len(rows):
            picked.append(_picked(p, i, rows))
    candidates = [m["correlation"][m["kind"] == Kind.KERNEL] for m in picked]
    wanted = np.unique(np.concatenate(candidates)) if candidates else np.empty(0, np.int64)
    if not len(wanted):
        return
    for i, p in enumerate(spilled.pieces):
        if not p.rows["events"]:
            continue
        kind, corr = p.column("events", "kind"), p.column("events", "correlation")
        rows = np.flatnonzero(np.isin(kind, list(LAUNCH_KINDS)) & np.isin(corr, wanted))
        if len(rows):
            picked.append(_picked(p, i, rows))
    joined = {n: np.concatenate([m[n] for m in picked]) for n in picked[0]}
    joined["ts"] = joined["ts"] - spilled.shift
    order = np.lexsort((joined["_row"], joined["_piece"], joined["ts"]))
    joined = {n: v[order] for n, v in joined.items()}
    n = len(order)
    small = Events(kind=joined["kind"], name=joined["name"], ts=joined["ts"],
                   dur=joined["dur"], tid=joined["tid"], device=np.full(n, -1, np.int16),
                   stream=np.full(n, -1), correlation=joined["correlation"],
                   external_id=np.full(n, -1), blocks_per_sm=np.full(n, np.nan, np.float32),
                   occupancy=np.full(n, np.nan, np.float32), nbytes=np.full(n, np.nan),
                   flags=joined["flags"], flops=np.full(n, np.nan), shape=np.full(n, -1),
                   stack=np.full(n, -1), detail=np.full(n, -1), op_args=np.full(n, -1),
                   names=names)
    trace = Trace(path=spilled.path, rank=0, window=0, t0_us=0.0, events=small,
                  memory=MemoryEvents(*(np.empty(0) for _ in range(8))),
                  flows=Flows(*(np.empty(0) for _ in range(5))), threads=[], metadata={})
    kernels = np.flatnonzero(small.kind == Kind.KERNEL)
    kernels = kernels[~((small.flags[kernels] & FLAG_COMM) != 0)]
    flagged = kernels[_launched_in_context(trace, kernels)]
    for i, p in enumerate(spilled.pieces):
        mine = joined["_piece"][flagged] == i
        p.launch_context = np.sort(joined["_row"][flagged][mine]).astype(np.int64)


def _picked(piece: Piece, index: int, rows: np.ndarray) -> dict[str, np.ndarray]:
    out = {n: np.asarray(piece.column("events", n)[rows]) for n in _CONTEXT_FIELDS}
    out["_piece"] = np.full(len(rows), index, dtype=np.int64)
    out["_row"] = rows.astype(np.int64)
    return out


def remove_quietly(spilled: SpilledTrace | None) -> None:
    """Close a spill if there is one (for ``finally`` blocks)."""
    if spilled is not None:
        with contextlib.suppress(OSError):
            spilled.close()
