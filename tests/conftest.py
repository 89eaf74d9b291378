"""Shared fixtures: the real traces in tests/data/traces and the synthetic trace builder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The real traces, copied into the repository with their licences (tests/data/traces/README.md).
SHARED = ROOT / "tests" / "data" / "traces"

KINETO = SHARED / "kineto" / "tb_plugin"
RESNET_W0 = KINETO / "samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RESNET_W0_SPAN2 = KINETO / "samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
RESNET_W4 = KINETO / "samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
RESNET_W4_SPAN2 = KINETO / "samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
HTA = SHARED / "hta" / "tests" / "data"
NS_TRACE = HTA / "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NCCL_TRACE = HTA / "nccl_parser_config/nccl_data.json.gz"
TRACE_FILTER = HTA / "trace_filter"
BIG_TRACE = HTA / "df_index_resolver/df_index_resolver.json.gz"
ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
H100 = SHARED / "tracelens" / "tests" / "traces" / "h100"
TIMESFORMER = H100 / "facebook_timesformer-base-finetuned-k400__1016002.json.gz"
BERT = H100 / "gaunernst_bert-small-uncased__1016001.json.gz"
PARAM = SHARED / "param/et_replay/tests/inputs/resnet_kineto.json.gz"
COMPILED = SHARED / "jupytertracerviz" / "trace.json"
GPU_METRICS = KINETO / "test/gpu_metrics_input.json"
RESULT_CHECK = KINETO / "test/result_check_file.txt"
#: Nsight Systems exports (nsys 2026.x, ``nsys export --type sqlite``), kept in the repository.
NSYS = ROOT / "tests" / "data" / "traces" / "nsys"
NSYS_H100 = NSYS / "h100_2gpu_1s.sqlite"
NSYS_HEALTHY = NSYS / "healthy_1pct.sqlite"
NSYS_MOCK = NSYS / "mock.sqlite"
NSYS_EXPORTS = (NSYS_H100, NSYS_HEALTHY, NSYS_MOCK)
#: Every trace file under shared/traces (the TensorBoard plugin's expected-output file is text):
#: the suites that run on every shared trace take this one list.
SHARED_TRACE_FILES = sorted(p for p in SHARED.rglob("*.json*") if "result_check" not in p.name)


def pytest_configure(config: pytest.Config) -> None:
    from exclusive import name_the_lock

    config.addinivalue_line("markers", "alone: runs while no other test runs (tests/exclusive.py)")
    name_the_lock()
    if not SHARED.is_dir():
        raise pytest.UsageError(
            f"The real traces are missing: expected them at {os.path.relpath(SHARED)} "
            "(they are part of the repository: is this a partial checkout?)."
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    from exclusive import remove_the_lock

    remove_the_lock()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test holds the run's lock shared, or exclusively when marked ``alone``, over its
    whole run: the set-up and tear-down of its module and session fixtures too (a server or a
    cluster started for a module), not only the test's own body."""
    from exclusive import alone, beside_others

    with (alone() if item.get_closest_marker("alone") else beside_others()):
        yield


@pytest.fixture
def builder():
    from tracegen import TraceBuilder

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
