"""`trainprof compare` gives a verdict with how sure it is even without `--fail-if-slower`,
warns when one run is CPU-only and the other on a GPU, and its JSON (like the analysis and the
history exports) writes 177.443, not 177.44299999999998."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest

import trainprof
import trainprof.history as history
from trainprof.cli import main
from trainprof.commands.compare import compare
from trainprof.history.store.rows import RunRecord
from trainprof.report.compare import render_markdown
from trainprof.report.json import to_json_bytes
from trainprof.tidy import tidy_float

from helpers.paths import RESNET_W0, RESNET_W4
from helpers.tracegen import TraceBuilder


def noisy(text: str) -> list[str]:
    """The floats of a JSON text written with more than 12 significant digits (a whole number
    such as a FLOP count, 3138920644610.0, is exact, not noise)."""
    found: list[str] = []

    def keep(s: str) -> float:
        if re.fullmatch(r"-?\d+\.0", s):
            return float(s)
        digits = re.sub(r"[eE].*$", "", s).replace("-", "").replace(".", "").lstrip("0")
        if len(digits) > 12:
            found.append(s)
        return float(s)

    json.loads(text, parse_float=keep)
    return found


def _steps_trace(path, steps_ms, gpu: bool):
    b = TraceBuilder()
    t = 0.0
    for n, ms in enumerate(steps_ms):
        b.step(n, t, ms * 1000)
        if gpu:
            b.launch(t + 10, 5, k_dur=ms * 500)
        else:
            b.op("aten::mm", t + 10, ms * 500)
        t += ms * 1000
    return b.write(path)


def test_verdict_without_a_gate_says_which_is_faster_and_how_sure(tmp_path):
    base = _steps_trace(tmp_path / "base.json", [100.0, 101.0, 99.0, 100.5, 99.5, 100.2], True)
    new = _steps_trace(tmp_path / "new.json", [80.0, 81.0, 79.0, 80.5, 79.5, 80.2], True)
    c = compare(base, new)
    assert c.gate is None
    v = c.verdict.to_dict()
    # Every NEW step is faster than every BASE step: every resample agrees.
    assert v["faster"] is True and v["probability"] == 1.0 and v["confidence"] == "almost certain"
    assert v["change_pct"] == pytest.approx((80.1 / 100.1 - 1) * 100, abs=0.2)
    assert "faster than BASE's" in v["message"] and "almost certain" in v["message"]
    assert "That NEW is really faster is almost certain (100.0% of bootstrap" in \
        render_markdown(c)
    # The other way round: slower, as sure.
    back = compare(new, base).verdict
    assert not back.faster and back.probability == 1.0


def test_verdict_on_noise_is_uncertain(tmp_path):
    rng = np.random.default_rng(1)
    a, b = (rng.normal(100, 5, 20).tolist() for _ in range(2))
    c = compare(_steps_trace(tmp_path / "a.json", a, True),
                _steps_trace(tmp_path / "b.json", b, True))
    assert c.verdict.probability is not None and c.verdict.probability < 0.99
    one = compare(_steps_trace(tmp_path / "c.json", [100.0], True),
                  _steps_trace(tmp_path / "d.json", [90.0], True))
    assert one.verdict.probability is None and "cannot be told" in one.verdict.message()


def test_cpu_trace_against_gpu_trace_warns(tmp_path):
    cpu = _steps_trace(tmp_path / "cpu.json", [10.0, 11.0], False)
    gpu = _steps_trace(tmp_path / "gpu.json", [10.0, 11.0], True)
    notes = compare(cpu, gpu).to_dict()["notes"]
    assert any("BASE ran on the CPU only and NEW on a GPU" in n for n in notes), notes
    assert not any("different hardware" in n
                   for n in compare(gpu, gpu).to_dict()["notes"])


def test_numbers_are_tidy_in_compare_analysis_and_history(tmp_path, capsys):
    assert tidy_float(177.44299999999998) == 177.443
    assert tidy_float(0.1 + 0.2) == 0.3 and tidy_float(float("inf")) == float("inf")
    c = compare(RESNET_W0, RESNET_W4)
    text = to_json_bytes(c.to_dict()).decode()
    assert json.loads(text)["base"]["median_step_ms"] == 177.443
    assert not noisy(text), noisy(text)[:5]
    analysis = to_json_bytes(trainprof.analyze(RESNET_W0)).decode()
    assert json.loads(analysis)["ranks"][0]["steps"]["median_ms"] == 177.443
    assert not noisy(analysis), noisy(analysis)[:5]
    db = tmp_path / "h.db"
    steps = [177.44299999999998, 0.1 + 0.2, 100.0]
    history.record(RunRecord(name="n", kind="step_timer", recorded_at=1.7e9,
                             step_times_ms=steps, step_ms_median=steps[0],
                             samples_per_s=64000 / 177.44299999999998, steps=3), db=db)
    assert main(["history", "--db", str(db), "--export", "json"]) == 0
    out = capsys.readouterr().out
    assert not noisy(out) and json.loads(out)["runs"][0]["step_ms_median"] == 177.443
    assert main(["history", "--db", str(db), "--export", "csv"]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert row["step_ms_median"] == "177.443", row
