"""Findings name the module class where their time lies (diagnose/modules.py)."""

from __future__ import annotations

import trainprof
from trainprof.diagnose.engine import diagnose

from helpers.module_workload import read_events
from helpers.paths import GPU_METRICS, TIMESFORMER


def module_evidence(finding):
    return [e for e in finding.evidence if e.what.startswith("where in the model")]


def test_unfused_attention_is_placed_in_the_attention_modules():
    """TimeSformer on an H100: every softmax runs inside one of the 24 self-attention modules
    (12 layers, time and space attention in each)."""
    analysis = trainprof.analyze(TIMESFORMER, workers=1)
    finding = next(f for f in diagnose(analysis) if f.id == "attention_not_fused")
    (evidence,) = module_evidence(finding)
    names = {e["name"] for e in read_events(TIMESFORMER)
             if str(e.get("name", "")).startswith("nn.Module: TimesformerSelfAttention_")}
    assert evidence.value == "TimesformerSelfAttention"
    assert evidence.where.startswith(f"{len(names)} modules, 100% of that time; heaviest ")
    assert len(names) == 24
    assert "heaviest …/TimesformerLayer_" in evidence.where


def test_no_module_line_without_module_events():
    findings = diagnose(trainprof.analyze(GPU_METRICS, workers=1))
    assert {"sync_points", "no_tensor_cores"} <= {f.id for f in findings}
    assert all(not module_evidence(f) for f in findings)
