"""The JSON result written a rank at a time is byte for byte the document formatted whole."""

from __future__ import annotations

import json
import tracemalloc

import msgspec
import pytest

import trainprof
from trainprof import structs
from trainprof.analysis.results import Analysis
from trainprof.report.json import json_chunks, to_json_bytes, write_json
from trainprof.tidy import tidy

from helpers.paths import NCCL_TRACE, SHARED_TRACE_FILES, TRACE_FILTER


def formatted_whole(analysis: Analysis) -> bytes:
    """The reference: the whole document's values made plain, tidied and indented at once."""
    encoder = msgspec.json.Encoder(enc_hook=lambda v: v.to_dict() if hasattr(v, "to_dict")
                                   else v.tolist() if hasattr(v, "tolist") else str(v))
    plain = msgspec.json.decode(encoder.encode(analysis.to_dict()))
    return msgspec.json.format(encoder.encode(tidy(plain)), indent=2) + b"\n"


@pytest.mark.parametrize("path", [NCCL_TRACE, SHARED_TRACE_FILES[0]], ids=lambda p: p.name)
def test_one_rank_is_the_whole_document(path):
    analysis = trainprof.analyze(path)
    assert to_json_bytes(analysis) == formatted_whole(analysis)


def test_many_ranks_are_the_whole_document(tmp_path):
    one = trainprof.analyze(TRACE_FILTER)
    ranks = [structs.replace(one.ranks[0], rank=r) for r in range(5)]
    analysis = structs.replace(one, ranks=ranks)
    out = write_json(analysis, tmp_path / "job.json")
    data = out.read_bytes()
    assert data == formatted_whole(analysis)
    assert [r["rank"] for r in json.loads(data)["ranks"]] == list(range(5))
    assert len(list(json_chunks(analysis))) == 5 + 2  # before the ranks, each rank, after


def test_no_ranks_is_the_whole_document():
    one = trainprof.analyze(TRACE_FILTER)
    empty = structs.replace(one, ranks=[])
    assert to_json_bytes(empty) == formatted_whole(empty)
    assert json.loads(to_json_bytes(empty))["ranks"] == []


def test_writing_a_rank_at_a_time_holds_one_rank(tmp_path):
    """Peak Python memory of writing 40 ranks stays near one rank's, not forty ranks'."""
    one = trainprof.analyze(TRACE_FILTER)
    analysis = structs.replace(
        one, ranks=[structs.replace(one.ranks[0], rank=r) for r in range(40)])
    tracemalloc.start()
    try:
        write_json(analysis, tmp_path / "job.json")
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        formatted_whole(analysis)
        _, whole = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert streamed < whole / 5
