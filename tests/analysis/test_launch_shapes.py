"""The launch shapes read as arrays equal the one-by-one reading, on real traces and odd ones."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis.sections.occupancy import _launch_shape, _shapes_of
from trainprof.trace.load import load_file

from helpers.paths import BERT, NCCL_TRACE, NS_TRACE


def one_by_one(details):
    return np.array([_launch_shape(d) for d in details]) if details else np.full((1, 4), np.nan)


@pytest.mark.parametrize("trace", [NS_TRACE, BERT, NCCL_TRACE], ids=["v100", "h100", "nccl"])
def test_array_reading_equals_one_by_one_on_real_traces(trace):
    details = load_file(trace).events.details
    assert len(details) >= 50
    assert np.array_equal(_shapes_of(details), one_by_one(details), equal_nan=True)


def test_odd_shapes_fall_back_and_agree():
    details = [{"grid": [2, 3, 1], "block": [128, 1, 1], "registers": 32, "shared_memory": 0},
               {"grid": [0, 1, 1], "block": [64, 1, 1], "registers": "x", "shared_memory": 8},
               {"grid": [1e300, 1e300, 1], "block": [1, 1, 1]},
               {"collective": "allreduce"}, {"grid": "3", "block": [1]}]
    for part in (details[:3], details):
        assert np.array_equal(_shapes_of(part), one_by_one(part), equal_nan=True)
    assert _shapes_of(details)[0].tolist() == [6.0, 128.0, 32.0, 0.0]


def test_registers_and_shared_memory_read_as_one_array_agree():
    # All ints and floats: read as one array; a bool, a string or None anywhere: one by one.
    plain = [{"grid": [1, 1, 1], "block": [32, 1, 1], "registers": r, "shared_memory": m}
             for r, m in ((16, 0), (255, 2**70), (1.5, 49152.0))]
    odd = [*plain, {"grid": [1, 1, 1], "block": [1, 1, 1], "registers": True,
                    "shared_memory": None}]
    for part in (plain, odd):
        assert np.array_equal(_shapes_of(part), one_by_one(part), equal_nan=True)
    assert _shapes_of(plain)[:, 2].tolist() == [16.0, 255.0, 1.5]
    assert np.isnan(_shapes_of(odd)[3, 2])


def test_shared_detail_objects_are_read_once_and_give_every_row(monkeypatch):
    """Events with one launch share one detail dict: ``_detail_shapes`` reads each object once
    and still gives every row its own shape."""
    from trainprof.analysis.sections import occupancy

    trace = load_file(NS_TRACE)
    details = trace.events.details
    distinct = len({id(d) for d in details})
    assert distinct < len(details)  # the loader shares them
    read = []
    real = occupancy._shapes_of
    monkeypatch.setattr(occupancy, "_shapes_of", lambda ds: read.append(len(ds)) or real(ds))
    shapes = occupancy._detail_shapes(trace, np.arange(len(details)))
    assert read == [distinct]
    assert np.array_equal(shapes[:len(details)], one_by_one(details), equal_nan=True)
