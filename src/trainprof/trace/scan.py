"""The compiled scanner of trace pieces (trace/_scan.c), and what it gives back.

``scan_piece(piece)`` returns a ``ScannedPiece`` (the fields ``ColumnBuilder.add_piece`` needs,
as arrays) or None, and then the piece is decoded with msgspec as before: when the extension is
not built (or is a stale build), when ``TRAINPROF_PURE_PYTHON=1``, or when the scanner cannot be
sure its result is exactly msgspec's (docs/performance.md, "The compiled scanner").
``scan_range(buffer, start, cut_after)`` also finds where the piece ends, and reads it in place.
"""

from __future__ import annotations

import os
from collections import Counter
from types import ModuleType
from typing import Any

import msgspec
import numpy as np

from trainprof.trace import decode
from trainprof.trace.decode import _Event

#: The layout this module reads; the C module's VERSION must match (else: pure Python).
SCAN_VERSION = 3

# Columns of ``ScannedPiece.spans`` (codes into ``texts``; -1: absent), in _scan.c's order.
PH, CAT, NAME, PID, TID, DEVICE, STREAM = range(7)
INPUT_DIMS, INPUT_TYPES, CONCRETE, CALL_STACK = range(7, 11)
#: grid, block, registers, shared_memory, collective, ..., pg_ranks: decode._DETAIL_FIELDS.
DETAIL_COLUMNS = range(11, 22)
# Columns of ``numbers`` (NaN: null or absent; dur is 0.0 when absent).
TS, DUR, BLOCKS_PER_SM, OCCUPANCY, BYTES, FLOPS = range(6)
DEVICE_TYPE, DEVICE_ID, MEM_BYTES, TOTAL_ALLOCATED, TOTAL_RESERVED, ADDR = range(6, 12)
# Columns of ``tuples``: codes into ``cat_names``, ``threads`` and ``details`` (-1: none).
CAT_NAME, THREAD, DETAIL = range(3)
# Columns of ``ids`` (NO_ID: null or absent).
ID, CORRELATION, EXTERNAL_ID, EXTERNAL_ID_OLD = range(4)
NO_ID = np.iinfo(np.int64).min

#: Pieces scanned ("accepted"), left to msgspec by the scanner ("refused"), and scanned but
#: then decoded by msgspec after all ("redecoded": a case ColumnBuilder.add_piece leaves to
#: ColumnBuilder.add, such as a missing time). Counted in this process only.
SCAN_STATS: Counter = Counter()


def _load() -> ModuleType | None:
    try:
        from trainprof.trace import _scan  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _scan if getattr(_scan, "VERSION", None) == SCAN_VERSION else None


_SCANNER = _load()


def available() -> bool:
    """Whether pieces are scanned by the compiled scanner here (built, current, not turned
    off with ``TRAINPROF_PURE_PYTHON=1``)."""
    return _SCANNER is not None and os.environ.get("TRAINPROF_PURE_PYTHON", "") in ("", "0")


class ScannedPiece(msgspec.Struct):
    """One piece's events as columns (one row per event, in order) and the unique JSON texts
    of their typed-Any and raw values, which ``spans`` index. The piece's text is ``piece``, or
    when it has a ``span`` (start, end): ``[`` + ``piece[start:end]`` + ``]``, ``piece`` being
    bytes or blocks of bytes to join."""

    piece: bytes | bytearray | tuple[bytes, ...]
    spans: np.ndarray  # int32 [n, 22]
    numbers: np.ndarray  # float64 [n, 12]
    ids: np.ndarray  # int64 [n, 4]
    has_args: np.ndarray  # bool [n]: args is an object
    texts: list[bytes]
    tuples: np.ndarray  # int32 [n, 3]
    cat_names: np.ndarray  # int32 [k, 2]: the (cat, name) span codes of each CAT_NAME code
    threads: np.ndarray  # int32 [k, 2]: (pid, tid)
    details: np.ndarray  # int32 [k, 11]: the span codes of DETAIL_COLUMNS
    span: tuple[int, int] | None = None
    _values: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.has_args)

    def values(self) -> list[Any]:
        """``texts`` decoded (once), as msgspec decodes a field typed Any."""
        if self._values is None:
            self._values = (decode.ANY_DECODER.decode(b"[" + b",".join(self.texts) + b"]")
                            if self.texts else [])
        return self._values

    def events(self) -> list[_Event]:
        """The events as msgspec decodes them (the scanner accepted the piece, so this
        succeeds)."""
        return decode.LIST_DECODER.decode(self.text())

    def text(self) -> bytes:
        """The piece's JSON text, ``[`` ... ``]``."""
        data = b"".join(self.piece) if isinstance(self.piece, tuple) else bytes(self.piece)
        if self.span is None:
            return data
        start, end = self.span
        return b"[" + data[start:end] + b"]"


def scan_piece(piece: bytes) -> ScannedPiece | None:
    """The piece's events as columns, or None: decode it with msgspec."""
    if not available():
        return None
    assert _SCANNER is not None
    found = _SCANNER.scan(piece)
    if found is None:
        SCAN_STATS["refused"] += 1
        return None
    SCAN_STATS["accepted"] += 1
    return _scanned(piece, found)


def scan_range(buffer: bytearray, start: int, cut_after: int) -> tuple[ScannedPiece, int] | None:
    """The events from ``buffer[start]`` on up to the first whose closing ``}`` is at or after
    ``cut_after`` and which ``,`` and another event follow, read in place as ``scan_piece``
    reads that piece, and where the next event starts; None when the scanner refuses that piece
    or finds no such cut in ``buffer`` (cut and decode it as before). The piece's text is
    ``buffer`` and its ``span``: replace them if ``buffer`` is to change."""
    if not available():
        return None
    assert _SCANNER is not None
    found = _SCANNER.scan_range(buffer, start, cut_after)
    if found is None:
        return None
    SCAN_STATS["accepted"] += 1
    end, next_start = found[:2]
    scanned = _scanned(buffer, found[2:])
    scanned.span = (start, end)
    return scanned, next_start


def _scanned(piece: bytes | bytearray, found: tuple[Any, ...]) -> ScannedPiece:
    """The scanner's result as arrays."""
    assert _SCANNER is not None
    n, spans, numbers, ids, has_args, texts, tuples, cat_names, threads, details = found
    return ScannedPiece(
        piece=piece,
        spans=np.frombuffer(spans, dtype=np.int32).reshape(n, _SCANNER.N_SPAN),
        numbers=np.frombuffer(numbers, dtype=np.float64).reshape(n, _SCANNER.N_NUMBER),
        ids=np.frombuffer(ids, dtype=np.int64).reshape(n, _SCANNER.N_ID),
        has_args=np.frombuffer(has_args, dtype=np.uint8).astype(bool),
        texts=texts,
        tuples=np.frombuffer(tuples, dtype=np.int32).reshape(n, 3),
        cat_names=np.frombuffer(cat_names, dtype=np.int32).reshape(-1, 2),
        threads=np.frombuffer(threads, dtype=np.int32).reshape(-1, 2),
        details=np.frombuffer(details, dtype=np.int32).reshape(-1, _SCANNER.N_DETAIL),
    )


def events_or_scanned(piece: bytes) -> ScannedPiece | list[_Event]:
    """The piece scanned, else decoded by msgspec (whose errors propagate)."""
    scanned = scan_piece(piece)
    return decode.LIST_DECODER.decode(piece) if scanned is None else scanned
