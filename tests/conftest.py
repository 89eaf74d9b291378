"""Shared fixtures: the real traces in tests/data/traces and the synthetic trace builder."""

from __future__ import annotations

import os

import pytest

from helpers.paths import SHARED


def pytest_configure(config: pytest.Config) -> None:
    from helpers.exclusive import name_the_lock

    config.addinivalue_line("markers", "alone: runs while no other test runs (tests/helpers/exclusive.py)")
    name_the_lock()
    if not SHARED.is_dir():
        raise pytest.UsageError(
            f"The real traces are missing: expected them at {os.path.relpath(SHARED)} "
            "(they are part of the repository: is this a partial checkout?)."
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    from helpers.exclusive import remove_the_lock

    remove_the_lock()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test holds the run's lock shared, or exclusively when marked ``alone``, over its
    whole run: the set-up and tear-down of its module and session fixtures too (a server or a
    cluster started for a module), not only the test's own body."""
    from helpers.exclusive import alone, beside_others

    with (alone() if item.get_closest_marker("alone") else beside_others()):
        yield


@pytest.fixture
def builder():
    from helpers.tracegen import TraceBuilder

    return TraceBuilder()


#: Session fixtures that record a job (seconds each), and their xdist group: under ``pytest -n``,
#: the tests that use one run in one worker, so that the job is recorded once, not once per
#: worker (tests that use two of them put both in their group's worker).
RECORDING_FIXTURES = {"parallel_jobs": "gloo_jobs", "ddp_jobs": "gloo_jobs", "tp_ep_jobs": "gloo_jobs",
                      "recorded": "pathologies", "ddp": "pathologies"}


def pytest_itemcollected(item):
    """The tests of one recording share an xdist group (``--dist loadgroup``), marked as each is
    collected: before any ``pytest_collection_modifyitems``, where xdist reads the groups."""
    used = [group for name, group in RECORDING_FIXTURES.items()
            if name in getattr(item, "fixturenames", ())]
    if used:
        item.add_marker(pytest.mark.xdist_group(used[0]))


def pytest_collection_modifyitems(config, items):
    """The forked-section tests run first: the sections fork only in a process with no other
    thread (analysis/parallel/section_workers.py), and a Dask client leaves its IO loop thread
    running for the rest of the process (tests/analysis/test_on_dask.py)."""
    first = [item for item in items if item.path.name == "test_section_workers.py"]
    if first:
        rest = [item for item in items if item.path.name != "test_section_workers.py"]
        items[:] = first + rest
