"""`trainprof annotate`: a streamed copy of the trace with counter tracks and the findings."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import trainprof
from trainprof.commands.annotate import annotate, default_output
from trainprof.errors import TrainprofError
from trainprof.report.annotate import events as annotate_events
from trainprof.report.annotate.writer import copy_with_events
from trainprof.trace import stream

from helpers.paths import RESNET_W0, ROOT, TIMESFORMER
from helpers.tracegen import TraceBuilder


def read_events(path) -> tuple[dict, list[dict]]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return (doc, doc["traceEvents"]) if isinstance(doc, dict) else ({}, doc)


def ours(events: list[dict], ph: str) -> list[dict]:
    return [e for e in events if e.get("cat") == "trainprof" and e["ph"] == ph]


def test_resnet_copy_holds_counters_and_findings(tmp_path):
    out = tmp_path / "annotated.json.gz"
    done = annotate(RESNET_W0, out)
    original_doc, original = read_events(RESNET_W0)
    doc, events = read_events(out)
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == \
        {k: v for k, v in original_doc.items() if k != "traceEvents"}
    counters, instants = ours(events, "C"), ours(events, "i")
    path = ours(events, "X")  # the critical path's stretches (docs/critical_path.md)
    assert path and all(e["tid"].startswith("critical path") for e in path)
    added = len(counters) + len(instants) + len(path)
    assert len(events) == len(original) + added
    assert events[added:] == original  # the original, unchanged
    util = [e for e in counters if e["name"] == "GPU 0 utilisation"]
    assert len(util) >= 100 and all(0 <= e["args"]["%"] <= 100 for e in util)
    assert {e["pid"] for e in util} == {0}  # on the GPU's process track
    memory = [e for e in counters if e["name"].startswith("Memory allocated cuda:0")]
    assert memory and max(e["args"]["MB"] for e in memory) == pytest.approx(2791.6, abs=1)
    findings = trainprof.analyze(RESNET_W0).findings
    assert done.findings == len(findings) == len(instants)
    assert instants[0]["name"] == f"trainprof 1: {findings[0].title}"
    assert instants[0]["s"] == "p" and instants[0]["args"]["evidence"]
    steps = [e for e in original if str(e.get("name", "")).startswith("ProfilerStep#")]
    first, last = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    assert all(first <= e["ts"] <= last for e in instants)  # on the steps, in the file's time
    kernel_ts = [e["ts"] for e in original if e.get("cat") == "Kernel"]
    busy = [e["ts"] for e in util if e["args"]["%"] > 0]
    assert min(kernel_ts) - 10_000 <= min(busy) <= min(kernel_ts)  # buckets of 10 ms


def test_annotated_copy_analyses_like_the_original(tmp_path):
    out = annotate(TIMESFORMER, tmp_path / "t.json.gz").path
    before, after = trainprof.analyze(TIMESFORMER), trainprof.analyze(out)
    assert after.ranks[0].steps == before.ranks[0].steps
    assert after.ranks[0].breakdown_ms == before.ranks[0].breakdown_ms
    _, events = read_events(out)
    assert ours(events, "C") and len(ours(events, "i")) == len(before.findings)


def test_times_follow_base_time_nanoseconds(tmp_path):
    b = TraceBuilder(base=5_000.0)
    for n in range(3):
        b.step(n, n * 1000.0, 1000)
        b.launch(n * 1000.0 + 10, 5, k_ts=n * 1000.0 + 20, k_dur=300)
    b.metadata["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    out = annotate(b.write(tmp_path / "t.json"), tmp_path / "out.json").path
    _, events = read_events(out)  # a plain .json name: not gzipped
    (instant,) = ours(events, "i")
    assert instant["ts"] == pytest.approx(5_000.0)  # step 0's start, as the file writes it
    util = [e for e in ours(events, "C") if e["args"]["%"] > 0]
    assert util[0]["ts"] == pytest.approx(5_020.0, abs=1)  # the first kernel, 1 µs buckets


@pytest.mark.parametrize("text", [
    b'[\n{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]',  # a bare array
    b'{"traceEvents": [ ], "x": 1}',  # an empty array
    b'{"meta": {"traceEvents": [1]}, "traceEvents":[{"ph":"i","ts":1}]}',  # a nested decoy
])
def test_streamed_copy_is_valid_json_for_any_layout(tmp_path, monkeypatch, text):
    monkeypatch.setattr(stream, "BLOCK_BYTES", 7)  # cut the file in awkward places
    src = tmp_path / "t.json"
    src.write_bytes(text)
    out = io.BytesIO()
    copy_with_events(src, out, b'{"ph": "i", "name": "ours", "ts": 0}')
    doc = json.loads(out.getvalue())
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    original = json.loads(text)
    assert events[0]["name"] == "ours"
    assert events[1:] == (original if isinstance(original, list) else original["traceEvents"])


def test_bucket_sizes():
    assert annotate_events.bucket_us(500) == 1
    assert annotate_events.bucket_us(1_065_553) == 10_000  # 107 buckets of 10 ms
    assert annotate_events.bucket_us(5_000_000) == 10_000


def test_refuses_folders_and_overwriting(tmp_path):
    with pytest.raises(TrainprofError, match="one trace file"):
        annotate(RESNET_W0.parent, tmp_path / "x.json.gz")
    copy = tmp_path / "t.json"
    copy.write_bytes(b'{"traceEvents": []}')
    with pytest.raises(TrainprofError, match="overwrite"):
        annotate(copy, copy)
    assert default_output(RESNET_W0).name == "worker0.1623143089861.pt.trace.annotated.json.gz"


def test_cli_writes_the_copy(tmp_path):
    out = tmp_path / "a.json.gz"
    proc = subprocess.run([sys.executable, "-m", "trainprof", "annotate", str(TIMESFORMER), "-o",
                           str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "counter events" in proc.stdout and out.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["a.json.gz"]  # no temporary file left


def test_findings_sit_where_they_are_seen(tmp_path):
    """The DataLoader finding at the longest GPU gap spent waiting for a batch, a memory finding
    at the memory peak: not all stacked at the start of the trace."""
    analysis = trainprof.analyze(RESNET_W0)
    gaps = analysis.ranks[0].sections.idle.longest
    loading = max((g for g in gaps if any("DataLoader" in h.name for h in g.host)),
                  key=lambda g: g.duration_us)
    _, events = read_events(annotate(RESNET_W0, tmp_path / "a.json").path)
    _, original = read_events(RESNET_W0)
    first_step = min(e["ts"] for e in original if str(e.get("name", "")).startswith("ProfilerStep#"))
    data = next(e for e in ours(events, "i") if "Waiting for data" in e["name"])
    assert data["ts"] == pytest.approx(first_step + loading.start_ms * 1000, abs=1)
    assert loading.start_ms > 100  # a later step's wait, not the window's start

    b = TraceBuilder()
    for n in range(3):
        b.step(n, n * 1000.0, 1000)
        b.launch(n * 1000.0 + 10, 5, k_ts=n * 1000.0 + 20, k_dur=900)
    b.metadata["deviceProperties"] = [{"id": 0, "name": "GPU", "totalGlobalMem": 80e9}]
    b.memory(100, 1_000_000, 1_000_000, reserved=2_000_000)
    b.memory(2100, 50_000_000, 51_000_000, reserved=60_000_000)  # the peak, in step 2
    b.memory(2600, -50_000_000, 1_000_000, reserved=60_000_000)
    _, events = read_events(annotate(b.write(tmp_path / "m.json"), tmp_path / "m.out.json").path)
    step0 = next(e["ts"] for e in events if e.get("name") == "ProfilerStep#0")
    headroom = [e for e in ours(events, "i") if "room for a larger batch" in e["name"]]
    assert headroom and headroom[0]["ts"] == pytest.approx(step0 + 2100, abs=1)


def test_finding_places_for_step_variance():
    from trainprof.analysis.overview.steps import StepStats, StepWindows
    from trainprof.analysis.section_results import RankSections
    from trainprof.diagnose.findings import Finding
    from trainprof.structs import replace

    steps = StepWindows(np.array([3, 4, 5]), np.array([0.0, 100.0, 400.0]),
                        np.array([100.0, 400.0, 500.0]), "ProfilerStep")
    rank = SimpleNamespace(sections=RankSections(), steps=StepStats())
    places = annotate_events.finding_places(rank, steps)
    assert places == {"step_variance": 0.1}  # step 4, the slowest, starts 100 µs in
    finding = Finding.from_dict({"id": "step_variance", "severity": "low", "rank": 0,
                                 "title": "", "explanation": "", "saving_pct": 0.0,
                                 "saving_ms": 0.0, "saving_assumption": "",
                                 "evidence": [{"what": "slowest", "value": 1.0,
                                               "where": "step 5"}]})
    assert annotate_events.finding_time(finding, steps, places) == 100.0
    at_step = replace(finding, extra={"step": 5})
    assert annotate_events.finding_time(at_step, steps, places) == 400.0
    assert annotate_events.finding_time(finding, steps) == 400.0  # the evidence's step
