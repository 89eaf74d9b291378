"""A copy of a trace with added events first in its event array (``trainprof annotate``).

``commands/annotate.py`` analyses the trace once (columns, not the JSON text) and builds the
events (``annotate_events``); the trace is then copied here as a stream: the bytes
are read block by block (gunzipped when needed), the added events are
written just after the ``"traceEvents": [`` that opens the event array, and everything else is
passed through unchanged. So the file is never held in memory, and every event, key and
metadata field of the original stays as it was. The output is gzipped when its name ends in
``.gz`` and written atomically (a temporary file in the same folder, then a rename).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

from trainprof.errors import TraceError
from trainprof.trace.stream import byte_blocks

_FIRST_CHAR = re.compile(rb"\S")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def copy_with_events(src: Path, out: IO[bytes], added: bytes) -> None:
    """Stream ``src`` into ``out`` with ``added`` (comma-joined JSON events) first in the array."""
    blocks = byte_blocks(src)
    buf = bytearray()
    pos = _array_start(buf, blocks, src)
    while not bytes(buf[pos:]).strip():  # is the array empty? look at its first character
        block = next(blocks, None)
        if block is None:
            break
        buf += block
    empty = bytes(buf[pos:]).lstrip().startswith(b"]")
    out.write(buf[:pos])
    out.write(added)
    if added and not empty:
        out.write(b",")
    out.write(buf[pos:])
    for block in blocks:
        out.write(block)


def _array_start(buf: bytearray, blocks: Iterator[bytes], src: Path) -> int:
    """Read into ``buf`` until the event array's ``[`` is found; the position after it."""
    searched = 0
    while True:
        first = _FIRST_CHAR.search(buf)
        if first is not None:
            head = buf[first.start()]
            if head == ord("["):
                return first.end()
            if head != ord("{"):
                raise TraceError(f"{src} is not a JSON trace.")
            match = _EVENTS_KEY.search(buf, searched)
            while match is not None:
                if _opens_the_array(buf[:match.start()]):
                    return match.end()
                match = _EVENTS_KEY.search(buf, match.start() + 1)
            searched = max(len(buf) - 32, 0)
        block = next(blocks, None)
        if block is None:
            raise TraceError(f"{src} has no 'traceEvents' list.")
        buf += block


def _opens_the_array(before: bytearray) -> bool:
    """Whether the key found is the top-level one (not text inside some earlier value)."""
    try:
        return isinstance(msgspec.json.decode(bytes(before) + b'"traceEvents": []}'), dict)
    except msgspec.DecodeError:
        return False
