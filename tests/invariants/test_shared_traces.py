"""Every property of tests/invariants/properties.py on every shared trace (each file, and the
two-rank folder as one job)."""

from __future__ import annotations

import pytest

import trainprof
from invariants.properties import PROPERTIES, json_of

from helpers.paths import SHARED, SHARED_TRACE_FILES, TRACE_FILTER

TRACES = SHARED_TRACE_FILES
JOBS = [TRACE_FILTER]


@pytest.fixture(scope="module")
def analyses():
    cache = {}

    def get(path):
        if path not in cache:
            a = trainprof.analyze(path)
            cache[path] = (a, json_of(a))
        return cache[path]

    return get


def test_every_shared_trace_is_covered():
    assert len(TRACES) >= 15, TRACES


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__)
@pytest.mark.parametrize("path", TRACES + JOBS, ids=lambda p: str(p.relative_to(SHARED)))
def test_property_holds_on_shared_trace(analyses, path, prop):
    a, d = analyses(path)
    prop(a, d)
