"""Read a trace file as a stream of typed event chunks, never holding the whole JSON text.

The file is gunzipped block by block. The top-level keys before ``"traceEvents": [`` are
decoded on their own, the event array is cut at event boundaries (``}`` ``,`` ``{``) into
pieces of about ``CHUNK_BYTES`` and each piece is decoded with msgspec, and what follows the
array is decoded last. A cut that falls inside a string or a nested object makes the piece
invalid JSON, which is how it is detected: the piece is then extended to the next boundary.
So a cut can never produce wrong events, only a retry.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import re
import threading
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec

from trainprof.errors import NotATraceError, TraceError
from trainprof.trace import decode
from trainprof.trace.decode import _Event
from trainprof.trace.scan import ScannedPiece, scan_piece, scan_range
from trainprof.trace.scan import available as scan_available

#: One piece's events: typed by msgspec, or as columns by the compiled scanner (trace/scan.py).
Chunk = list[_Event] | ScannedPiece

#: Size of the pieces the event array is decoded in. Each piece's typed events live until its
#: columns are built, so this bounds the loader's peak memory; 1 MiB (about 4k events) is also
#: faster than larger pieces (the lists stay in cache). docs/performance.md.
CHUNK_BYTES = 1024 * 1024
#: Bytes read past a piece's CHUNK_BYTES before the scanner cuts it in place: the event that
#: straddles the mark must end in the buffer (else the piece is cut by searching, as without it).
CUT_MARGIN = 64 * 1024
#: Size of the blocks read from disk. A gzipped block inflates 10 to 20 times, so blocks are
#: small enough that one never outgrows a piece.
BLOCK_BYTES = 64 * 1024

_FIRST_CHAR = re.compile(rb"\S")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_BOUNDARY_GAP = frozenset(b" \t\r\n\x0b\x0c,")
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def _cut_is_the_cause(exc: msgspec.DecodeError, piece_len: int) -> bool:
    """A bad cut breaks a piece at its very end (truncated, or our closing bracket); an error
    earlier in the piece is in the data itself."""
    found = _ERROR_BYTE.search(str(exc))
    return found is None or int(found.group(1)) >= piece_len - 2


def _open_boundary(buf: bytearray) -> int:
    """Where a boundary cut by the end of ``buf`` could start: its last ``}`` when only
    whitespace and commas follow it, else the end."""
    end = len(buf)
    i = end
    while i > 0 and buf[i - 1] in _BOUNDARY_GAP:
        i -= 1
    return i - 1 if i > 0 and buf[i - 1] == 0x7D else end


def byte_blocks(path: Path) -> Iterator[bytes]:
    """The file's bytes in blocks, gunzipped when it is gzip (by magic number, not name)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below, also on error)
    except OSError as exc:
        raise TraceError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    with handle:
        first = handle.read(BLOCK_BYTES)
        if first[:2] != b"\x1f\x8b":
            while first:
                yield first
                first = handle.read(BLOCK_BYTES)
            return
        blocks = _gunzip(path, handle, first)
        big = os.fstat(handle.fileno()).st_size >= PREFETCH_MIN_BYTES
        yield from (_prefetched(blocks) if big else blocks)


#: A gzip file at least this large is gunzipped in a thread ahead of its reader: zlib lets go of
#: the interpreter while it inflates, so the gunzip overlaps the scanning (a few ms of thread
#: start-up and hand-over would cost more than it saves on a small file).
PREFETCH_MIN_BYTES = 2 * 2**20
#: Blocks gunzipped ahead (about 0.7 MB of JSON each at Kineto's ratio of about 11).
PREFETCH_DEPTH = 8
_DONE = object()


def _prefetched(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """``blocks`` produced by a thread up to ``PREFETCH_DEPTH`` ahead, in order; its error is
    raised here, where the serial read would raise it. Leaving early (an error in the reader,
    Ctrl-C) stops the thread at its next block."""
    ahead: queue.Queue = queue.Queue(PREFETCH_DEPTH)
    stop = threading.Event()

    def produce() -> None:
        try:
            for block in blocks:
                while not stop.is_set():
                    try:
                        ahead.put(block, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ahead.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 (raised again in the reader's thread)
            ahead.put(exc)

    thread = threading.Thread(target=produce, name="trainprof-gunzip", daemon=True)
    thread.start()
    try:
        while True:
            item = ahead.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # let it see the stop (it may be waiting on a full queue)
            with contextlib.suppress(queue.Empty):
                ahead.get_nowait()
            thread.join(0.05)


@functools.cache
def _inflater() -> tuple[Callable[[int], Any], tuple[type[BaseException], ...]]:
    """``decompressobj`` and the errors of the fastest inflater here: ISA-L's (the ``isal``
    package, about 5x zlib's speed on trace JSON), else the standard library's zlib (found
    once: a failed import is searched for again at every attempt)."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.decompressobj, (zlib.error,)
    isal_error = cast("type[BaseException]", isal_zlib.error)  # its stub calls it an instance
    return isal_zlib.decompressobj, (isal_error, zlib.error)


def _gunzip(path: Path, handle: BinaryIO, first: bytes) -> Iterator[bytes]:
    decompressobj, errors = _inflater()
    inflate = decompressobj(16 + zlib.MAX_WBITS)
    block = first
    try:
        while block:
            out = inflate.decompress(block)
            while inflate.eof and inflate.unused_data:  # another gzip member follows
                rest = inflate.unused_data
                inflate = decompressobj(16 + zlib.MAX_WBITS)
                out += inflate.decompress(rest)
            if out:
                yield out
            block = handle.read(BLOCK_BYTES)
        tail = inflate.flush()
    except errors as exc:
        raise TraceError(f"{path} is not a readable gzip file ({exc}).") from None
    if tail:
        yield tail
    if not inflate.eof:
        raise TraceError(f"{path} is not a readable gzip file (it is truncated).")


class EventReader:
    """Iterate ``chunks()`` for lists of typed events; ``metadata`` is complete afterwards."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.metadata: dict[str, Any] = {}
        self._blocks = byte_blocks(path)
        self._buf = bytearray()
        #: The blocks whose bytes are in ``_buf`` (the first may start before it), with the
        #: offset of each in the file's JSON: a piece scanned in place keeps its text as blocks.
        self._blocks_held: deque[tuple[int, bytes]] = deque()
        self._dropped = 0  # bytes of JSON dropped from the front of ``_buf`` so far
        self._eof = False
        self._bare = False  # the file is a bare event array, not an object
        #: Entries read leniently (decode.decode_leniently), by kind; see decode.repair_notes.
        self.repairs: Counter = Counter()
        self._read = 0  # bytes of JSON read so far

    def _more(self) -> bool:
        """Append the next block to the buffer; False at the end of the file."""
        if self._eof:
            return False
        block = next(self._blocks, None)
        if block is None:
            self._eof = True
            return False
        self._buf += block
        self._blocks_held.append((self._read, block))
        self._read += len(block)
        return True

    def _drop(self, n: int) -> None:
        """Drop ``_buf[:n]``, and the blocks that only held it."""
        del self._buf[:n]
        self._dropped += n
        held = self._blocks_held
        while len(held) > 1 and held[1][0] <= self._dropped:
            held.popleft()

    def _clear(self) -> None:
        """Drop the whole buffer (the rest is read)."""
        self._buf = bytearray()
        self._blocks_held.clear()

    def _held_text(self, start: int, end: int) -> tuple[tuple[bytes, ...], tuple[int, int]]:
        """``_buf[start:end]`` as the blocks that hold it and its span in their
        concatenation (no copy)."""
        first, last = self._dropped + start, self._dropped + end
        blocks = [(at, b) for at, b in self._blocks_held if at < last and at + len(b) > first]
        return tuple(b for _, b in blocks), (first - blocks[0][0], last - blocks[0][0])

    @property
    def bytes_read(self) -> int:
        """Bytes of JSON read so far (for progress)."""
        return self._read

    def _decode(self, data: bytes | bytearray, decoder: msgspec.json.Decoder) -> Any:
        try:
            return decoder.decode(data)
        except msgspec.ValidationError as exc:
            if decoder is decode.LIST_DECODER:
                return self._lenient(data)
            raise decode.trace_error(self.path, exc) from None
        except msgspec.DecodeError as exc:
            raise decode.trace_error(self.path, exc) from None

    def _events(self, data: bytes | bytearray | msgspec.Raw) -> Chunk:
        """A whole event array (the tail, or a document read whole), scanned or decoded."""
        scanned = scan_piece(bytes(data))
        return self._decode(data, decode.LIST_DECODER) if scanned is None else scanned

    def _lenient(self, piece: bytes | bytearray) -> list[_Event]:
        events, repairs = decode.decode_leniently(self.path, piece)
        self.repairs.update(repairs)
        return events

    def chunks(self) -> Iterator[Chunk]:
        start = self._array_start()
        if start is None:  # no event array found: decode the whole document for the error
            yield from self._whole_document()
            return
        yield from self._array_pieces(start)

    def _array_start(self) -> int | None:
        """Position just after the event array's ``[``; reads the metadata before it."""
        while True:
            first = _FIRST_CHAR.search(self._buf)
            if first is not None or not self._more():
                break
        if first is None:
            raise NotATraceError(f"{self.path} is empty.")
        head = self._buf[first.start():first.start() + 1]
        if head == b"[":
            self._bare = True
            return first.end()
        if head != b"{":
            raise self._not_an_object(first.start())
        searched = 0
        while True:
            match = _EVENTS_KEY.search(self._buf, max(searched - 32, 0))
            if match is not None:
                break
            searched = len(self._buf)
            if not self._more():
                return None
        try:
            before = decode.FILE_DECODER.decode(
                bytes(self._buf[:match.start()]) + b'"traceEvents": []}'
            )
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None  # the key sat inside some other value: read the file whole
        self.metadata.update(decode.metadata_of(before))
        return match.end()

    def _not_an_object(self, start: int) -> NotATraceError:
        """The error for a file that starts with neither ``{`` nor ``[``: JSON of another kind
        (``42``, ``null``, ``"text"``) is not a trace; anything else is not JSON."""
        sample = bytes(self._buf[start:start + 12])
        while len(self._buf) < 1024 * 1024 and self._more():
            pass  # a scalar document is short: read it whole, up to 1 MiB
        if self._eof:
            try:
                value = msgspec.json.decode(bytes(self._buf))
            except msgspec.DecodeError:
                pass
            else:
                kind = ("null" if value is None else "true or false" if isinstance(value, bool)
                        else "text" if isinstance(value, str) else "a number")
                return NotATraceError(f"{self.path} is JSON but not a trace: it holds {kind}, not an "
                                  "object with a 'traceEvents' list.")
        return NotATraceError(f"{self.path} is not JSON (it starts with {sample!r}).")

    def _whole_document(self) -> Iterator[Chunk]:
        while self._more():
            pass
        parsed = self._decode(self._buf, decode.FILE_DECODER)
        self._clear()
        events = parsed.traceEvents
        if not len(events):
            raise NotATraceError(f"{self.path} is JSON but not a trace: it has no 'traceEvents' "
                                 "list.")
        first = _FIRST_CHAR.search(bytes(events)[:64])
        if first is None or first.group(0) != b"[":
            raise TraceError(f"{self.path} is not a Kineto trace: 'traceEvents' is not a list.")
        self.metadata.update(decode.metadata_of(parsed))
        yield self._events(events)

    def _array_pieces(self, pos: int) -> Iterator[Chunk]:
        while True:
            while len(self._buf) - pos < CHUNK_BYTES and self._more():
                pass
            piece_end = self._decodable_piece(pos)
            if piece_end is None:
                break
            events, next_pos = piece_end
            yield events
            self._drop(next_pos)
            pos = 0
        tail = bytes(self._buf[pos:])
        self._clear()
        if self._bare:
            yield self._events(b"[" + tail)
            return
        parsed = self._decode(b'{"traceEvents": [' + tail, decode.FILE_DECODER)
        self.metadata.update(decode.metadata_of(parsed))
        yield self._events(parsed.traceEvents)

    def _decodable_piece(self, pos: int) -> tuple[Chunk, int] | None:
        """The next piece of at least CHUNK_BYTES ending at a real event boundary, decoded,
        and where the following piece starts; None when the rest is the tail."""
        scanned = self._scanned_piece(pos)
        return scanned if scanned is not None else self._searched_piece(pos)

    def _scanned_piece(self, pos: int) -> tuple[ScannedPiece, int] | None:
        """The piece cut and read in place by the compiled scanner: it ends at the first event
        that closes at or after CHUNK_BYTES, which is where the search below cuts a piece it
        can decode (the earlier boundaries it finds are inside that event, and give pieces cut
        inside it). None when the scanner cannot (off, refused, no cut in the buffer)."""
        if not scan_available():
            return None
        while len(self._buf) - pos < CHUNK_BYTES + CUT_MARGIN and self._more():
            pass
        found = scan_range(self._buf, pos, pos + CHUNK_BYTES)
        if found is None:
            return None
        scanned, next_pos = found
        assert scanned.span is not None
        scanned.piece, scanned.span = self._held_text(*scanned.span)  # _buf changes next
        return scanned, next_pos

    def _searched_piece(self, pos: int) -> tuple[Chunk, int] | None:
        """``_decodable_piece`` by searching for a boundary and decoding the piece before it."""
        search_from = pos + CHUNK_BYTES
        while True:
            if search_from >= len(self._buf) and not self._more():
                return None
            match = _BOUNDARY.search(self._buf, search_from)
            if match is None:
                # Search only the new bytes next time (from a boundary the block end may have
                # cut): a long string is scanned once, not once per block (linear time).
                search_from = max(search_from, _open_boundary(self._buf))
                if not self._more():
                    return None
                continue
            piece = b"[" + bytes(self._buf[pos:match.start() + 1]) + b"]"
            scanned = scan_piece(piece)  # valid JSON: the cut is at an event boundary
            if scanned is not None:
                return scanned, match.end() - 1
            try:
                return decode.LIST_DECODER.decode(piece), match.end() - 1
            except msgspec.ValidationError:  # a DecodeError too: caught first
                return self._lenient(piece), match.end() - 1
            except msgspec.DecodeError as exc:
                if not _cut_is_the_cause(exc, len(piece)):
                    raise decode.trace_error(self.path, exc) from None
                search_from = match.start() + 1  # the cut fell inside an event: go on


class Segment(msgspec.Struct):
    """Consecutive pieces of the event array, for a decode worker (trace/parallel_decode.py).

    ``spans`` are each piece's (start, end) in ``data``; a piece is decoded as ``[data[s:e]]``.
    The last segment is the tail instead: ``prefix + data`` is the rest of the document."""

    data: bytes
    spans: list[tuple[int, int]]
    prefix: bytes = b""


class SegmentReader(EventReader):
    """The event array in segments of whole pieces, cut where ``chunks()`` cuts them as long as
    no cut falls inside a string (decoding the piece then fails at its end, and the caller
    decodes the file serially instead)."""

    def segments(self, segment_bytes: int) -> Iterator[Segment] | None:
        """The segments, or None when the file is not an object or array of events we can cut
        (read it serially)."""
        start = self._array_start()
        return None if start is None else self._segments(start, segment_bytes)

    def _segments(self, pos: int, segment_bytes: int) -> Iterator[Segment]:
        spans: list[tuple[int, int]] = []
        while True:
            cut = self._next_cut(pos)
            if cut is None:
                break
            spans.append((pos, cut[0]))
            pos = cut[1]
            if pos - spans[0][0] >= segment_bytes:
                yield self._segment(spans)
                self._drop(pos)
                pos, spans = 0, []
        if spans:
            yield self._segment(spans)
        tail = bytes(self._buf[pos:])
        self._clear()
        yield Segment(tail, [], b"[" if self._bare else b'{"traceEvents": [')

    def _segment(self, spans: list[tuple[int, int]]) -> Segment:
        first = spans[0][0]
        with memoryview(self._buf) as view:  # one copy, not two
            data = bytes(view[first:spans[-1][1]])
        return Segment(data, [(s - first, e - first) for s, e in spans])

    def _next_cut(self, pos: int) -> tuple[int, int] | None:
        """Where the piece from ``pos`` ends and the next starts, as ``_decodable_piece`` finds
        them before decoding; None when the rest is the tail."""
        while len(self._buf) - pos < CHUNK_BYTES and self._more():
            pass
        search_from = pos + CHUNK_BYTES
        while True:
            if search_from >= len(self._buf) and not self._more():
                return None
            match = _BOUNDARY.search(self._buf, search_from)
            if match is not None:
                return match.start() + 1, match.end() - 1
            search_from = max(search_from, _open_boundary(self._buf))
            if not self._more():
                return None
