"""ISA-L's inflate (the ``isal`` package) and zlib's give the same bytes and the same errors."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

from trainprof.errors import TraceError
from trainprof.trace import stream

isal_zlib = pytest.importorskip("isal.isal_zlib", reason="isal is installed by make setup")

NCCL_TRACE = Path("tests/data/traces/hta/tests/data/nccl_parser_config/nccl_data.json.gz")


def zlib_only() -> tuple:
    return zlib.decompressobj, (zlib.error,)


def test_isal_is_the_inflater_where_installed():
    decompressobj, errors = stream._inflater()
    assert decompressobj is isal_zlib.decompressobj and isal_zlib.error in errors


def test_both_inflaters_give_the_file(monkeypatch):
    expected = gzip.decompress(NCCL_TRACE.read_bytes())
    assert b"".join(stream.byte_blocks(NCCL_TRACE)) == expected
    monkeypatch.setattr(stream, "_inflater", zlib_only)
    assert b"".join(stream.byte_blocks(NCCL_TRACE)) == expected


def test_several_gzip_members_are_read_by_both(tmp_path, monkeypatch):
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + gzip.compress(b"]}"))
    assert b"".join(stream.byte_blocks(path)) == b'{"traceEvents": []}'
    monkeypatch.setattr(stream, "_inflater", zlib_only)
    assert b"".join(stream.byte_blocks(path)) == b'{"traceEvents": []}'


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gzip_is_one_trace_error_with_both(tmp_path, monkeypatch, damage):
    raw = NCCL_TRACE.read_bytes()
    path = tmp_path / "bad.json.gz"
    path.write_bytes(raw[:30_000] if damage == "truncated"
                     else raw[:10] + bytes(b ^ 0x5A for b in raw[10:4000]) + raw[4000:])
    with pytest.raises(TraceError, match="is not a readable gzip file"):
        b"".join(stream.byte_blocks(path))
    monkeypatch.setattr(stream, "_inflater", zlib_only)
    with pytest.raises(TraceError, match="is not a readable gzip file"):
        b"".join(stream.byte_blocks(path))
