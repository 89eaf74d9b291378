"""Two real CPU training runs that once got no finding at all: a model left in float64, and a
validation pass inside every step. Each is recorded with torch.profiler (blind_spots.py, well
under a second of training each) and checked against a reading of the trace file written
here, independent of the analysis; the float32 and no-eval controls get neither finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainprof
from trainprof.analysis.calls.precision import Precision, precision_of_types
from trainprof.diagnose.rules.outside_training import EVALUATE_LESS
from trainprof.diagnose.rules.precision import FLOAT32, FP64_SPEEDUP

import blind_spots

pytestmark = pytest.mark.slow  # real training under torch.profiler (a few tenths of a second)

#: Gaps between ops the analysis counts as the Python between them (host_outside.GLUE_US).
GLUE_US = 100.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, trainprof.Analysis]]:
    out = {}
    for kind in blind_spots.KINDS:
        path = blind_spots.record(kind, tmp_path_factory.mktemp(kind),
                                  with_stack=kind == "eval_every_step")
        out[kind] = (path, trainprof.analyze(path))
    return out


def _events(path: Path) -> tuple[list[dict], list[dict]]:
    """(ProfilerStep ranges, cpu_op events) of a trace file."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    ops = [e for e in events if e.get("cat") == "cpu_op"
           and not e["name"].startswith("ProfilerStep#")]
    return steps, ops


def _inside(e: dict, steps: list[dict]) -> bool:
    return any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)


def _all_double(args: dict) -> bool:
    """Every floating input of at least one dimension is double, and there is one."""
    floats = [t for t, d in zip(args.get("Input type", []), args.get("Input Dims", []),
                                strict=False)
              if d and t in ("double", "float", "c10::Half", "c10::BFloat16")]
    return bool(floats) and all(t == "double" for t in floats)


def _outermost(events: list[dict]) -> list[dict]:
    """The events not nested (by time, on their thread) in another of them."""
    out: list[dict] = []
    end: dict[object, float] = {}
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end.get(e["tid"], -1.0):
            out.append(e)
            end[e["tid"]] = e["ts"] + e["dur"]
    return out


def test_a_float64_model_is_wide_precision_with_its_cost(runs):
    path, a = runs["fp64"]
    steps, ops = _events(path)
    fp64 = _outermost([e for e in ops if _inside(e, steps) and _all_double(e["args"])])
    expected = sum(e["dur"] for e in fp64) / sum(s["dur"] for s in steps) * 100
    f = next(f for f in a.findings if f.id == "wide_precision")
    share = next(e.value for e in f.evidence if e.what.startswith("step time in fp64 ops"))
    assert share == pytest.approx(expected, rel=1e-3)
    assert f.saving_pct == pytest.approx(expected * (1 - 1 / FP64_SPEEDUP), rel=1e-3)
    assert {"aten::linear", "AddmmBackward0"} <= {e.what.removeprefix("fp64 op ")
                                                  for e in f.evidence}
    assert f.fix == FLOAT32 and "model.float()" in f.fix.pytorch
    assert "torch.from_numpy(array).float()" in f.fix.pytorch


def test_the_float32_control_has_no_precision_finding(runs):
    _, a = runs["fp32"]
    assert "wide_precision" not in {f.id for f in a.findings}
    assert a.ranks[0].sections.operators.fp64_ops == []


def test_a_validation_pass_in_every_step_is_outside_training(runs):
    """The eval pass runs after the optimizer: its ops, with the Python glue between them,
    fill the step from the end of ``Optimizer.step`` on."""
    path, a = runs["eval_every_step"]
    steps, ops = _events(path)
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    work = 0.0
    for s in steps:
        start, end = s["ts"], s["ts"] + s["dur"]
        opt_end = max(e["ts"] + e["dur"] for e in events if e["name"].startswith(
            "Optimizer.step#") and start <= e["ts"] < end)
        spans = sorted((max(e["ts"], opt_end), min(e["ts"] + e["dur"], end)) for e in ops
                       if e["ts"] + e["dur"] > opt_end and e["ts"] < end)
        merged: list[list[float]] = []
        for lo, hi in spans:
            if merged and lo - merged[-1][1] < GLUE_US:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        work += sum(hi - lo for lo, hi in merged)
    expected = work / sum(s["dur"] for s in steps) * 100
    f = next(f for f in a.findings if f.id == "outside_training")
    assert f.saving_pct == pytest.approx(expected, abs=0.5)
    assert expected > 40  # the validation pass is most of the step
    assert f.fix == EVALUATE_LESS and "inference" in f.title
    top = [e for e in f.evidence if e.what.startswith("inference: ")]
    assert top[0].what == "inference: aten::linear" and "_validate" in top[0].where


def test_the_no_eval_control_has_no_outside_training_finding(runs):
    _, a = runs["no_eval"]
    assert "outside_training" not in {f.id for f in a.findings}
    assert a.ranks[0].sections.host.outside_training.median_pct < 10


@pytest.mark.parametrize("types, dims, expected", [
    (["double", "double", "double"], [[4, 8], [8], [4, 8]], Precision.FP64),
    (["float", "double", "Scalar"], [[4, 8], [], []], Precision.FP32),  # a 0-dim double
    (["double", "Scalar"], [[], []], Precision.UNKNOWN),
    (["c10::BFloat16", "c10::BFloat16", "float"], [[2, 2], [2, 2], [2]], Precision.NARROW),
    (["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float"], [[2, 2], [2, 2], [1]],
     Precision.NARROW),
    (["double", "unsigned char"], [[3], [3]], Precision.FP64),  # a uint8 mask
    (["long int", "long int"], [[3], [3]], Precision.UNKNOWN),
])
def test_op_precision_from_input_types(types, dims, expected):
    assert precision_of_types(types, dims) == expected
