"""Trace diff: exact per-step deltas on synthetic runs, and the ResNet DataLoader fix."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.analysis.diff import diff, name_totals
from trainprof.trace.load import load_file
from trainprof.trace.model import Kind

from helpers.paths import RESNET_W0, RESNET_W4
from helpers.tracegen import TraceBuilder


def cpu_run(mm_us: float, extra: str, extra_us: float) -> TraceBuilder:
    """Two 1 ms steps on the host: aten::mm, then one other op; nothing nested."""
    b = TraceBuilder()
    for n in range(2):
        t = n * 1000
        b.step(n, t, 1000)
        b.op("aten::mm", t + 10, mm_us)
        b.op(extra, t + 600, extra_us)
        b.op("aten::relu", t + 800, 20)  # the same in both runs
    return b


def gpu_run(kernel_us: float, steps: int = 2) -> TraceBuilder:
    b = TraceBuilder()
    for n in range(steps):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=kernel_us, name="gemm")
    return b


def test_ops_added_removed_slower(tmp_path):
    base = cpu_run(300, "aten::old", 100).write(tmp_path / "base" / "t.json")
    new = cpu_run(500, "aten::new", 50).write(tmp_path / "new" / "t.json")
    d = diff(base, new)
    changes = [(o.name, o.change, o.delta_us) for o in d.ops]
    assert changes == [("aten::mm", "slower", 200), ("aten::old", "removed", -100),
                       ("aten::new", "added", 50)]
    mm = d.ops[0]
    assert (mm.base_calls, mm.new_calls, mm.base_us, mm.new_us) == (1, 1, 300, 500)
    assert d.step_ms.delta == 0 and d.step_ms.delta_pct == 0
    assert d.breakdown_ms["cpu_exec"].delta == pytest.approx(0.15)  # +200 -100 +50 µs
    assert d.to_dict()["ops"][0]["delta_us_per_step"] == 200


def test_kernels_per_step_across_run_lengths(tmp_path):
    """Per step, so a longer recording of the same kernels is no change."""
    base = [load_file(gpu_run(200, steps=2).write(tmp_path / "a.json"))]
    same = [load_file(gpu_run(200, steps=4).write(tmp_path / "b.json"))]
    faster = [load_file(gpu_run(100).write(tmp_path / "c.json"))]
    assert diff(base, same).kernels == []
    (k,) = diff(base, faster).kernels
    assert (k.name, k.change, k.base_us, k.new_us) == ("gemm", "faster", 200, 100)


def test_accepts_analyses_and_notes_missing_tables(tmp_path):
    a = trainprof.analyze(cpu_run(300, "aten::x", 10).write(tmp_path / "a.json"))
    b = trainprof.analyze(cpu_run(300, "aten::x", 10).write(tmp_path / "b.json"))
    d = diff(a, b)
    assert d.step_ms.delta == 0
    if a.ranks[0].sections.operators is None:
        assert d.ops == [] and "no operator table" in d.notes[0]


def test_name_totals(tmp_path):
    trace = load_file(gpu_run(200).write(tmp_path / "t.json"))
    totals = name_totals([trace], Kind.KERNEL)
    assert (totals.calls, totals.us, totals.steps) == ({"gemm": 2}, {"gemm": 400}, 2)


def test_resnet_dataloader_fix():
    """num_workers 0 -> 4: the data wait goes, the step gets shorter."""
    d = diff(RESNET_W0, RESNET_W4)
    assert d.step_ms.delta < -40
    assert d.phases_ms["data"].delta < -60 and d.breakdown_ms["dataloader"].delta < -50
    # Collation (torch.stack -> aten::_cat) moved to the worker processes, out of the trace.
    cat = next(o for o in d.ops if o.name == "aten::_cat")
    assert cat.change == "removed" and cat.delta_us < -2000
    assert d.kernels and all(abs(k.delta_us) >= abs(d.kernels[-1].delta_us) for k in d.kernels)
