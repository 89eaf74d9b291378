"""The built-in demo: a real, recorded CPU training run whose DataLoader is the bottleneck."""

from __future__ import annotations

from trainprof.demo import demo_schedule, record_demo

from capture_helpers import profiler_steps, read_trace


def test_demo_records_a_data_bound_run(tmp_path):
    (tmp_path / "rank0.step99.pt.trace.json.gz").write_bytes(b"an old demo trace")
    folder = record_demo(tmp_path, steps=6)
    assert folder == tmp_path
    (path,) = folder.iterdir()  # the old demo trace is gone
    schedule = demo_schedule(6)
    last = schedule["wait"] + schedule["warmup"] + schedule["active"] - 1
    assert path.name == f"rank0.step{last}.pt.trace.json.gz"
    events = [e for e in read_trace(path)["traceEvents"] if e.get("ph") == "X"]
    assert profiler_steps({"traceEvents": events}) == list(range(last - schedule["active"] + 1, last + 1))
    steps_us = sum(e["dur"] for e in events if e["name"].startswith("ProfilerStep#"))
    loading_us = sum(e["dur"] for e in events if e["name"].startswith("enumerate(DataLoader)"))
    assert loading_us > 0.4 * steps_us  # the loader is the bottleneck, as the demo promises
