"""An Nsight Systems export too large for memory, spilled to disk rank by rank (docs/nsys.md).

``spilled_export`` reads each activity table in pieces of consecutive rowids (``WHERE rowid >=
? AND rowid < ?``: the rowid is the table's B-tree key, so a piece costs its own rows; exports
have no index on ``start``, so a time range would scan the whole table once per window). Each
piece becomes the model's rows as in the whole read (trace/nsys/build.py), and each process's
share, sorted by start, is one piece of that rank's spill (trace/spill.py): the spill is then
read back window by window in time order by the streamed analysis
(analysis/streaming/streamed.py), exactly as a spilled JSON trace. What the whole read decides
over every row (each rank's origin, its threads and streams, the numbers of step ranges without
one, steps found from repeating kernels: trace/nsys/repeating.py) is settled once every piece is
written, by rewriting those columns of each piece (the steps found are one more piece).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.trace import columns as col
from trainprof.trace.model import DEVICE_KINDS, LAUNCH_KINDS, Kind
from trainprof.trace.nsys import build, tables
from trainprof.trace.nsys.nvtx import nvtx_ranges, rank_marks, step_notes
from trainprof.trace.nsys.repeating import step_rows
from trainprof.trace.nsys.schema import Export
from trainprof.trace.nsys.tables import Catalog, Rows, empty_rows
from trainprof.trace.spill import Piece, SpilledTrace, kept_markers, marker_events

#: Rows of one table read at a time: the memory of the read does not grow with the export (the
#: spill pass of the 50x export of the 2xH100 capture peaks at 109 MiB, docs/nsys.md).
PIECE_ROWS = 1 << 18
#: Bytes of spill per byte of export, with a margin (1.26 measured on the 10x export of the
#: 2xH100 capture, 1.27 on the 50x).
DISK_BYTES_PER_EXPORT_BYTE = 2.0
_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_TEMPORARY = ("start_ns", "lane")


def _readers(marker: re.Pattern[str] | None
             ) -> list[tuple[str, Callable[[Export, Catalog], Rows | None]]]:
    """(table, reader) in the whole read's order; the device tables come first, so that every
    process with GPU work and every stream's device is known before the rest is read."""
    def ranges(db: Export, cat: Catalog) -> Rows | None:
        return nvtx_ranges(db, cat, marker, number=False)[0]
    return [(_KERNEL, tables.kernels), ("CUPTI_ACTIVITY_KIND_MEMCPY", tables.memcpys),
            ("CUPTI_ACTIVITY_KIND_MEMSET", tables.memsets),
            ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", tables.syncs),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", tables.runtime), ("NVTX_EVENTS", ranges)]


@contextlib.contextmanager
def spilled_export(path: Path, folder: str | Path | None = None,
                   step_marker: re.Pattern[str] | None = None, piece_rows: int = PIECE_ROWS
                   ) -> Iterator[list[SpilledTrace]]:
    """The export's ranks spilled under ``folder`` (default: the system's temporary folder),
    in rank order; the spill is removed on leaving. Raises ``TraceError`` like the whole
    read."""
    root = Path(tempfile.mkdtemp(prefix="trainprof-nsys-spill-", dir=folder))
    try:
        yield _Spiller(path, root, step_marker, max(piece_rows, 1)).run()
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _Rank(msgspec.Struct):
    """One process's spill while it is written."""

    folder: Path
    pieces: list[Piece] = field(default_factory=list)
    first_ns: int | None = None
    lanes: set[int] = field(default_factory=set)
    negative: int = 0


class _Spiller:
    def __init__(self, path: Path, root: Path, marker: re.Pattern[str] | None,
                 piece_rows: int) -> None:
        self.path, self.root, self.marker, self.piece_rows = path, root, marker, piece_rows
        self.cat = Catalog()
        self.ranks: dict[int, _Rank] = {}
        self.triples: set[tuple[int, int, int]] = set()
        self.host_only: set[int] = set()
        self.steps = 0
        self.marked: set[int] = set()  # processes with step ranges or optimizer ranges

    def run(self) -> list[SpilledTrace]:
        with Export(self.path) as db:
            build.require_kernels(db, self.path)
            one_process = "globalPid" not in db.columns(_KERNEL)
            self.devices = build.device_properties(db)
            for table, read in _readers(self.marker):
                for lo, hi in _pieces(db, table, self.piece_rows):
                    db.rowids = (lo, hi)
                    rows = read(db, self.cat)
                    if rows is not None and len(rows):
                        if one_process:
                            rows.process[:] = 0
                        self._add(rows)
            db.rowids = None
            notes = [*step_notes(self.steps), *(n for n in (db.schema_note(),) if n)]
            if not db.has("NVTX_EVENTS"):
                notes.append("The export has no NVTX_EVENTS table: no host ops, annotations "
                             "or steps (record with nsys profile --trace=cuda,nvtx).")
            marks, pids, metadata = rank_marks(db), build.process_names(db), build.export_metadata(db)
            marks = build.with_environment_rank(sorted(self.ranks), marks,
                                                build.environment_rank(db))
        return self._finish(notes, marks, pids, metadata)

    def _add(self, rows: Rows) -> None:
        """One piece of a table: each process's rows written to its spill."""
        on_device = np.isin(rows.kind, list(DEVICE_KINDS))
        if on_device.any():
            self.triples.update(map(tuple, build.device_triples(rows).tolist()))
            for key in tables.distinct(rows.process[on_device])[0].tolist():
                self.ranks.setdefault(key, _Rank(self.root / f"process{key}"))
        if (rows.kind == Kind.SYNC).any():
            build.sync_lanes(rows, np.array(sorted(self.triples), np.int64).reshape(-1, 3))
        self.steps += int(np.count_nonzero(rows.kind == Kind.STEP))
        self.marked |= set(tables.distinct(rows.process[rows.kind == Kind.STEP])[0].tolist())
        self.marked |= build.optimizer_processes(rows, self.cat)
        processes, which = tables.distinct(rows.process)
        for i, key in enumerate(processes.tolist()):
            rank = self.ranks.get(key)
            if rank is None:
                self.host_only.add(key)
                continue
            mine = rows.take(np.flatnonzero(which == i))
            self._write(rank, mine.take(np.argsort(mine.start, kind="stable")))

    def _write(self, rank: _Rank, rows: Rows) -> None:
        """A process's rows of a piece, in time order, as one piece of its spill; the times
        (ns), lanes and flags are settled in ``_finish``."""
        folder = rank.folder / f"piece{len(rank.pieces):05d}"
        folder.mkdir(parents=True)
        lane = (rows.lane[:, 0] << 32) + (rows.lane[:, 1] & 0xFFFFFFFF)
        rank.lanes.update(tables.distinct(lane)[0].tolist())
        first = int(rows.start[0])
        rank.first_ns = first if rank.first_ns is None else min(rank.first_ns, first)
        rank.negative += int(np.count_nonzero(rows.end < rows.start))
        columns = build.event_columns(rows, 0, self.devices, np.zeros(len(rows), np.int32),
                                      rows.name, rows.detail, rows.shape)
        columns.update(start_ns=rows.start, lane=lane, flags=np.zeros(len(rows), np.uint8))
        del columns["ts"]
        for name, values in columns.items():
            np.save(folder / f"events.{name}.npy", values)
        rank.pieces.append(Piece(folder, {"events": len(rows), "memory": 0, "flows": 0}))

    def _finish(self, notes: list[str], marks: dict[int, int],
                pids: dict[int, tuple[int, str]], metadata: dict[str, Any]
                ) -> list[SpilledTrace]:
        keys = sorted(self.ranks)
        numbers, rank_note = build.ranks_of(keys, marks, pids)
        notes += rank_note
        if self.host_only:
            notes.append(f"{len(self.host_only)} process(es) without GPU work left out.")
        for key in keys:
            if key not in self.marked and (note := self._structure_steps(key)) is not None:
                notes += [note] if note not in notes else []
        if not self.devices:
            notes.append("The export has no TARGET_INFO_GPU table: device names and SM counts "
                         "are unknown (blocks per SM and the roofline's peaks need them).")
        for key in keys:
            self._number_steps(self.ranks[key])
        flags = build.flags_of(self.cat, list(range(len(self.cat.names))))
        out = []
        for number, key in zip(numbers, keys, strict=True):
            said = bool(rank_note) or key in marks
            info = build.rank_metadata(metadata, number, len(keys) if rank_note else 0, said)
            out.append(self._spilled(self.ranks[key], key, number, flags, info,
                                     [*notes, *build.negative_note(self.ranks[key].negative)]))
        return sorted(out, key=lambda s: s.rank)

    def _structure_steps(self, key: int) -> str | None:
        """Steps found from the process's repeating kernels (as ``build._structure_steps``
        finds them in the whole read), written as one more piece; the note on how."""
        rank = self.ranks[key]
        kinds = [Kind.KERNEL, *LAUNCH_KINDS]
        parts = []
        for piece in rank.pieces:
            kind = piece.column("events", "kind")
            rows = np.flatnonzero(np.isin(kind, kinds))
            parts.append({n: np.asarray(piece.column("events", n)[rows])
                          for n in ("kind", "name", "start_ns", "dur", "correlation", "lane")})
        cols = {n: np.concatenate([p[n] for p in parts]) for n in parts[0]}
        end = cols["start_ns"] + np.round(cols["dur"] * 1000).astype(np.int64)
        lane = np.stack([cols["lane"] >> 32, cols["lane"] & 0xFFFFFFFF], axis=1)
        both = empty_rows(len(end), start=cols["start_ns"], end=end,
                          process=np.full(len(end), key, np.int64), lane=lane,
                          kind=cols["kind"], name=cols["name"], correlation=cols["correlation"])
        kernels = both.take(np.flatnonzero(both.kind == Kind.KERNEL))
        kernels = kernels.take(np.argsort(kernels.start, kind="stable"))
        launches = np.flatnonzero(both.kind != Kind.KERNEL)
        found, note = step_rows(self.cat, kernels, both, lambda: launches, key)
        if found is not None:
            self._write(rank, found.take(np.argsort(found.start, kind="stable")))
        return note

    def _number_steps(self, rank: _Rank) -> None:
        """Number the process's step ranges without a number in time order, ties in the
        table's order (as ``nvtx.number_steps`` numbers them in the whole read)."""
        found = []
        for i, piece in enumerate(rank.pieces):
            kind, name = piece.column("events", "kind"), piece.column("events", "name")
            rows = np.flatnonzero((kind == Kind.STEP) & (name < 0))
            if len(rows):
                found.append((np.asarray(piece.column("events", "start_ns")[rows]),
                              np.full(len(rows), i), rows))
        if not found:
            return
        start, piece_of, row = (np.concatenate(c) for c in zip(*found, strict=True))
        order = np.lexsort((row, piece_of, start))
        named = np.empty(len(order), np.int32)
        named[order] = [self.cat.name(Kind.STEP, f"ProfilerStep#{k}")
                        for k in range(1, len(order) + 1)]
        for i in np.unique(piece_of).tolist():
            folder = rank.pieces[i].folder
            names = np.load(folder / "events.name.npy")
            mine = piece_of == i
            names[row[mine]] = named[mine]
            np.save(folder / "events.name.npy", names)

    def _spilled(self, rank: _Rank, key: int, number: int, flags: np.ndarray,
                 metadata: dict[str, Any], notes: list[str]) -> SpilledTrace:
        """The process's spill with its times from its origin, its lanes numbered in order
        and its flags set; its markers kept in memory."""
        t0_ns = (rank.first_ns or 0) // 1000 * 1000
        lanes = np.array(sorted(rank.lanes), np.int64)
        markers = []
        for i, piece in enumerate(rank.pieces):
            start = np.load(piece.folder / "events.start_ns.npy")
            lane = np.load(piece.folder / "events.lane.npy")
            fixed = {"ts": (start - t0_ns) / 1000.0,
                     "tid": np.searchsorted(lanes, lane).astype(np.int32),
                     "flags": flags[np.load(piece.folder / "events.name.npy")]}
            for name, values in fixed.items():
                np.save(piece.folder / f"events.{name}.npy", values)
            for name in _TEMPORARY:
                (piece.folder / f"events.{name}.npy").unlink()
            columns = {n: piece.column("events", n) for n in ("kind", "flags")}
            if (kept := kept_markers(columns, i)) is not None:
                rows = kept["_row"]
                markers.append({**{n: np.asarray(piece.column("events", n)[rows])
                                   for n in col._EVENT_FIELDS}, "_piece": kept["_piece"],
                                "_row": rows})
        used = sorted({d for p, _, d in self.triples if p == key and d >= 0})
        props = [d for d in self.devices if d.get("id") in used] or self.devices
        names: dict[str, list[Any]] = {"names": self.cat.names, "shapes": self.cat.shapes, "stacks": [],
                 "details": self.cat.details, "op_arg_texts": []}
        return SpilledTrace(
            path=self.path, folder=rank.folder, pieces=rank.pieces, t0_us=t0_ns / 1000.0,
            shift=0.0, tables=names,
            threads=[(int(k >> 32), int(k & 0xFFFFFFFF)) for k in lanes.tolist()],
            metadata={**metadata, "deviceProperties": props}, notes=notes,
            markers=marker_events(markers, names, 0.0), devices=used, rank=number)


def _pieces(db: Export, table: str, piece_rows: int) -> list[tuple[int, int]]:
    """[lo, hi) rowid ranges of about ``piece_rows`` rows each covering the table."""
    count, low, high = db.row_count(table)
    if not count:
        return []
    span = high - low + 1
    step = max(span * piece_rows // count, 1)
    return [(lo, min(lo + step, high + 1)) for lo in range(low, high + 1, step)]
