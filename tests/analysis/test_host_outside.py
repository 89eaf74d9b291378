"""Work outside the training phases on a synthetic trace with known answers: ops count, the
Python glue under GLUE_US between them counts, a host wait on the device (a CUDA
synchronize, here without the device's events so that the steps keep their host bounds) does
not."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.host import host_time
from trainprof.analysis.sections.host_outside import GLUE_US
from trainprof.trace.load import load_file

STEP = 10_000.0


def _train(b, t: float) -> None:
    """Forward [100, 2000), backward [2000, 4000), optimizer [4000, 4500) of a step at t."""
    b.op("aten::linear", t + 100, 1900)
    b.op("autograd::engine::evaluate_function: AddmmBackward0", t + 2000, 2000)
    b.annotation("Optimizer.step#SGD.step", t + 4000, 500)


def test_outside_work_counts_ops_and_glue_not_device_waits(builder, tmp_path):
    for n in range(3):
        builder.step(n, n * STEP, STEP)
        _train(builder, n * STEP)
    # Step 0: loss.item() after the optimizer, 5 ms of it a stream synchronize: 100 µs of work.
    builder.op("aten::item", 4600, 5000)
    builder.event("cuda_runtime", "cudaStreamSynchronize", 4650, 4900)
    # Step 1: ten 400 µs eval linears, 50 µs apart (glue): one run of 10 x 400 + 9 x 50 µs.
    for i in range(10):
        builder.op("aten::linear", STEP + 4600 + i * 450, 400)
    # Step 2: two 1000 µs ops 150 µs apart (not glue): 2000 µs.
    builder.op("aten::save_checkpoint_op", 2 * STEP + 5000, 1000)
    builder.op("aten::save_checkpoint_op", 2 * STEP + 6150, 1000)
    trace = load_file(builder.write(tmp_path / "t.json"))
    out = host_time(trace, find_steps(trace)).outside_training
    assert 50 < GLUE_US <= 150
    expected = [100.0, 10 * 400 + 9 * 50.0, 2000.0]
    assert out.per_step_pct == pytest.approx([u / STEP * 100 for u in expected])
    assert out.mean_pct == pytest.approx(sum(expected) / (3 * STEP) * 100)
    assert out.median_pct == pytest.approx(2000 / STEP * 100)
    top = {(w.name, w.calls): w.ms_per_step for w in out.top}
    assert top[("aten::linear", 10)] == pytest.approx(4000 / 3 / 1000)
    assert top[("aten::save_checkpoint_op", 2)] == pytest.approx(2000 / 3 / 1000)
    assert ("aten::item", 1) not in top  # 98% of it is a wait: not inside the work
