"""A folder's ranks hold only the critical-path pieces their JSON and reports show."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import trainprof
from trainprof.analysis.overview.rank import analyze_trace
from trainprof.trace.load import load_file

from helpers.paths import BERT, NS_TRACE, TRACE_FILTER


@pytest.mark.parametrize("path", [NS_TRACE, BERT, TRACE_FILTER / "sampled_rank-0.json.gz"],
                         ids=["v100", "h100", "trace_filter"])
def test_compact_keeps_the_longest_pieces_and_the_same_json(path):
    full = analyze_trace(load_file(path), workers=1).sections.critical_path
    small = full.compact()
    assert json.dumps(small.to_dict()) == json.dumps(full.to_dict())
    keep = full._pieces_per_step
    for big, kept in zip(full.steps, small.steps, strict=True):
        assert len(kept.pieces) == min(keep, len(big.pieces))
        assert kept.pieces.count == len(big.pieces)
        # the same pieces as the longest of the whole step, one by one, in time order
        assert kept.pieces.longest(len(kept.pieces)) == big.pieces.longest(keep)
        durations = big.pieces.end_us - big.pieces.start_us
        shortest_kept = min(p.end_us - p.start_us for p in kept.pieces.longest(keep))
        assert np.count_nonzero(durations > shortest_kept) <= keep
    assert len(pickle.dumps(small)) * 5 < len(pickle.dumps(full))


def test_a_folders_ranks_hold_compact_paths_and_one_trace_holds_all():
    folder = trainprof.analyze(TRACE_FILTER)
    assert len(folder.ranks) == 2
    for rank in folder.ranks:
        path = rank.sections.critical_path
        alone = trainprof.analyze(rank.path).ranks[0].sections.critical_path
        assert all(len(s.pieces) == s.pieces.count for s in alone.steps)  # one trace: all
        assert all(len(s.pieces) <= path._pieces_per_step < s.pieces.count for s in path.steps)
        assert json.dumps(path.to_dict()) == json.dumps(alone.to_dict())
