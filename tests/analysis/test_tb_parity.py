"""The step-time breakdown and GPU figures reproduce the TensorBoard plugin's published numbers."""

from __future__ import annotations

import json

import pytest

import trainprof

from helpers.paths import RESNET_W0, RESNET_W0_SPAN2, RESNET_W4, RESNET_W4_SPAN2, RESULT_CHECK

PLUGIN_COLUMNS = {"Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset",
                  "Runtime": "runtime", "DataLoader": "dataloader", "CPU Exec": "cpu_exec",
                  "Other": "other"}


def plugin_overviews() -> list[dict]:
    """The overview responses in result_check_file.txt (span 1 of workers_0, then workers_4)."""
    lines = RESULT_CHECK.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"steps"')]


@pytest.mark.parametrize("index, trace", [(0, RESNET_W0), (1, RESNET_W4)])
def test_per_step_breakdown_matches_plugin(index, trace):
    overview = plugin_overviews()[index]
    names = [c["name"] for c in overview["steps"]["columns"] if c.get("type") == "number"]
    rank = trainprof.analyze(trace).ranks[0]
    ours = {s["step"]: s["ms"] * 1000 for s in rank.steps.per_step}
    rows = overview["steps"]["rows"]
    assert [int(r[0]) for r in rows] == list(ours)
    for row in rows:
        values = dict(zip(names, row[1::2], strict=True))
        total = sum(values.values())
        # Same step length, within 1 µs per category of rounding.
        assert ours[int(row[0])] == pytest.approx(total, abs=len(values))


@pytest.mark.parametrize(
    "trace, expected",
    [
        (RESNET_W0, {"kernel": 55.5, "dataloader": 33.4, "cpu_exec": 7.7, "runtime": 1.6,
                     "memcpy": 1.1, "other": 0.7}),
        (RESNET_W0_SPAN2, {"kernel": 63.6, "dataloader": 22.9}),
        (RESNET_W4, {"kernel": 70.3, "dataloader": 0.8, "cpu_exec": 16.1, "runtime": 7.5,
                     "memcpy": 2.2, "other": 3.0}),
        (RESNET_W4_SPAN2, {"kernel": 69.4, "dataloader": 0.2, "cpu_exec": 10.0, "other": 10.9}),
    ],
)
def test_average_breakdown_within_one_point(trace, expected):
    rank = trainprof.analyze(trace).ranks[0]
    for category, pct in expected.items():
        assert rank.breakdown_pct[category] == pytest.approx(pct, abs=1.0), category
    assert sum(rank.breakdown_pct.values()) == pytest.approx(100.0, abs=1e-6)


def test_plugin_per_step_categories_within_one_point():
    overview = plugin_overviews()[0]
    names = [c["name"] for c in overview["steps"]["columns"] if c.get("type") == "number"]
    rank = trainprof.analyze(RESNET_W0).ranks[0]
    from trainprof.analysis.overview.breakdown import step_breakdown
    from trainprof.analysis.overview.steps import find_steps
    from trainprof.trace.load import load_file

    trace = load_file(RESNET_W0)
    bd = step_breakdown(trace, find_steps(trace))
    for i, row in enumerate(overview["steps"]["rows"]):
        values = dict(zip(names, row[1::2], strict=True))
        total = sum(values.values())
        for plugin_name, ours in PLUGIN_COLUMNS.items():
            share_plugin = values[plugin_name] / total * 100
            share_ours = bd.per_step[ours][i] / bd.step_us[i] * 100
            assert share_ours == pytest.approx(share_plugin, abs=1.0), (row[0], plugin_name)
    assert rank.steps.mean_ms == pytest.approx(177.6, abs=0.1)


@pytest.mark.parametrize(
    "trace, util, sm_eff, occupancy",
    [(RESNET_W0, 55.5, 54.7, 49.1), (RESNET_W4, 70.3, 69.2, 48.9)],
)
def test_gpu_summary_matches_plugin(trace, util, sm_eff, occupancy):
    gpu = trainprof.analyze(trace).ranks[0].gpu
    assert gpu.utilization_pct == pytest.approx(util, abs=1.0)
    assert gpu.sm_efficiency_pct == pytest.approx(sm_eff, abs=1.0)
    assert gpu.achieved_occupancy_pct == pytest.approx(occupancy, abs=1.0)
    assert gpu.tensor_core_pct == 0.0  # FP32 on V100: no Tensor Core kernels
