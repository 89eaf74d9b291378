"""The JSON result: a stable contract (``schema: trainprof.analysis/1``) for tools and CI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainprof.analysis.results import Analysis
from trainprof.fileio import atomic_output
from trainprof.jsontext import formatted


def to_json_bytes(analysis: Analysis | dict[str, Any]) -> bytes:
    """Pretty-printed JSON; non-finite floats become null."""
    return b"".join(json_chunks(analysis))


def json_chunks(analysis: Analysis | dict[str, Any]) -> Iterator[bytes]:
    """``to_json_bytes``'s bytes in pieces: an ``Analysis`` one rank at a time, so that a job of
    thousands of ranks never holds every rank's result as JSON values at once (the ranks'
    dictionaries, their tidied copies and their text are made and dropped rank by rank)."""
    if not isinstance(analysis, Analysis) or not analysis.ranks:
        yield formatted(analysis.to_dict() if isinstance(analysis, Analysis) else analysis)
        return
    head = {**analysis.to_dict_without_ranks(), "ranks": [_RANKS_MARK]}
    before, marker, after = formatted(head).partition(_MARK_LINE)
    if not marker:
        raise AssertionError("the ranks' place was not found in the JSON document")
    yield before
    for i, rank in enumerate(analysis.ranks):
        text = formatted(rank.to_dict()).rstrip(b"\n")
        yield (b",\n" if i else b"") + _RANK_INDENT + text.replace(b"\n", b"\n" + _RANK_INDENT)
    yield after


#: A value no trace can put in the ranks' place of the document (JSON text has no NUL byte).
_RANKS_MARK = "\x00trainprof ranks\x00"
_RANK_INDENT = b"    "  # a rank's depth in the document: "ranks" (1), its list item (2)
_MARK_LINE = _RANK_INDENT + b'"\\u0000trainprof ranks\\u0000"'


def write_json(analysis: Analysis | dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the result atomically (a reader never sees half a file), a rank at a time."""
    with atomic_output(path) as handle:
        for chunk in json_chunks(analysis):
            handle.write(chunk)
    return Path(path)
