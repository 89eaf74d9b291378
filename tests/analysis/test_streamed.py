"""The streamed analysis equals the in-memory one on every shared trace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainprof.analysis.overview.breakdown import BREAKDOWN
from trainprof.analysis.overview.rank import analyze_trace, overview
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.section_results import RankSections
from trainprof.analysis.sections.registry import SECTIONS
from trainprof.analysis.streaming.memory_budget import parse_memory
from trainprof.analysis.streaming.streamed import (
    _analysis,
    analyze_streamed,
    recorded_steps,
    streamed_steps,
)
from trainprof.analysis.streaming.windows import WindowedSection
from trainprof.trace import stream
from trainprof.trace.load import load_file
from trainprof.trace.parallel_decode import json_size
from trainprof.trace.spill import spill_file

from helpers.paths import SHARED_TRACE_FILES

NOT_WINDOWED = [name for name, fn in SECTIONS if not isinstance(fn, WindowedSection)]


def assert_close(got, want, where: str = "") -> None:
    """Equal, floats within a relative 1e-9 (sums taken window by window round differently)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for k in want:
            assert_close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_close(a, b, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, float | int), where
        if math.isnan(want):
            assert math.isnan(got), where
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-9), where
    else:
        assert got == want, where


def in_memory(trace, steps) -> dict:
    """``analyze_trace(trace).to_dict()`` without the sections that do not stream (not run:
    they would only be dropped)."""
    windowed = {name: fn(trace, steps) for name, fn in SECTIONS if name not in NOT_WINDOWED}
    return overview(trace, steps, lambda section: section(trace, steps),
                    RankSections(**windowed)).to_dict()


def test_every_section_streams():
    """A section that could not stream would be left out of a streamed result."""
    assert NOT_WINDOWED == []


def test_in_memory_reference_is_analyze_trace():
    path = next(p for p in SHARED_TRACE_FILES if p.name == "gpu_metrics_input.json")
    trace = load_file(path, workers=1)
    want = analyze_trace(trace).to_dict()
    for name in NOT_WINDOWED:
        want.pop(name)
    assert in_memory(trace, find_steps(trace)) == want


@pytest.fixture
def small_pieces(monkeypatch):
    """Read in pieces of an eighth of the file, so that windows draw on several."""
    def use(path):
        monkeypatch.setattr(stream, "CHUNK_BYTES", max(json_size(path) // 8, 4096))
    return use


@pytest.mark.parametrize("path", SHARED_TRACE_FILES, ids=lambda p: p.name)
def test_streamed_steps_and_analysis_equal_in_memory(path, tmp_path, small_pieces):
    small_pieces(path)
    trace = load_file(path, workers=1)
    want_steps = find_steps(trace)
    want = in_memory(trace, want_steps)
    notes = want.pop("notes")
    with spill_file(path, tmp_path, piece_events=1) as spilled:
        recorded = recorded_steps(spilled)
        for per in (1, 2) if len(recorded) > 1 else (1,):
            steps = streamed_steps(spilled, recorded, per)
            assert steps.source == want_steps.source and steps.notes == want_steps.notes
            for field in ("numbers", "starts", "ends"):
                assert np.array_equal(getattr(steps, field), getattr(want_steps, field)), field
            got = _analysis(spilled, steps, per).to_dict()
            streamed_note = got.pop("notes")
            assert streamed_note[:-1] == notes and streamed_note[-1].startswith("Streamed")
            assert_close(got, want, path.name)
    assert not list(tmp_path.iterdir())


def test_streaming_within_a_tiny_budget_cuts_one_step_windows(tmp_path):
    path = next(p for p in SHARED_TRACE_FILES if p.name == "df_index_resolver.json.gz")
    trace = load_file(path, workers=1)
    want = BREAKDOWN(trace, find_steps(trace)).mean_ms()
    got = analyze_streamed(path, max_memory=1, folder=tmp_path)
    assert "5 window(s) of up to 1 step(s)" in got.notes[-1]
    assert_close(got.breakdown_ms, want)


def test_a_spill_left_no_files_and_the_budget_decides(tmp_path):
    path = next(p for p in SHARED_TRACE_FILES if p.name == "df_index_resolver.json.gz")
    got = analyze_streamed(path, max_memory=2**40, folder=tmp_path)
    assert "1 window(s) of up to 5 step(s)" in got.notes[-1]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("text, size", [("4G", 4 * 2**30), ("512M", 512 * 2**20),
                                        ("1.5G", int(1.5 * 2**30)), ("2GiB", 2 * 2**30),
                                        ("1000", 1000)])
def test_memory_sizes(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize("text", ["4X", "", "-1G", "0", "G"])
def test_a_bad_memory_size_is_one_sentence(text):
    with pytest.raises(ValueError, match="takes a positive size such as 4G"):
        parse_memory(text)


def test_max_memory_chooses_streaming_through_the_api_and_the_cli(tmp_path, capsys):
    import trainprof
    from trainprof.cli import main

    path = next(p for p in SHARED_TRACE_FILES if p.name == "gpu_metrics_input.json")
    streamed = trainprof.analyze(path, max_memory="1K").ranks[0]
    whole = trainprof.analyze(path).ranks[0]
    assert streamed.notes[-1].startswith("Streamed") and "left out" not in streamed.notes[-1]
    assert not any(n.startswith("Streamed") for n in whole.notes)
    got, want = streamed.to_dict(), whole.to_dict()
    assert got.pop("notes")[:-1] == want.pop("notes")
    assert_close(got, want)  # every section, streamed through the API
    with pytest.raises(SystemExit) as exited:  # argparse's exit for a bad argument
        main(["analyze", str(path), "--max-memory", "lots", "--no-progress"])
    assert exited.value.code == 2
    assert "takes a positive size such as 4G" in capsys.readouterr().err


def test_a_trace_without_steps_streams_by_equal_time_windows(tmp_path):
    """The whole-trace step becomes equal time windows that together cover it; totals over
    the trace (kernels, the step time summed, the breakdown summed) equal the whole read."""
    from trainprof.analysis.streaming.streamed import (
        STREAM_BASE_BYTES,
        WINDOW_BYTES_PER_EVENT,
        analyze_streamed,
    )
    from trainprof.diagnose.rules.host import step_variance

    path = next(p for p in SHARED_TRACE_FILES if p.name == "trace.json")
    trace = load_file(path, workers=1)
    whole = analyze_trace(trace)
    assert whole.step_source == "whole trace"
    budget = STREAM_BASE_BYTES + WINDOW_BYTES_PER_EVENT * (len(trace.events) // 3)
    got = analyze_streamed(path, max_memory=budget, folder=tmp_path)
    per = [p["ms"] for p in got.steps.per_step]
    assert got.step_source == "time window" and len(per) >= 4
    assert "time windows of" in got.notes[-1] and any("equal time windows" in n for n in got.notes)
    assert sum(per) == pytest.approx(whole.steps.mean_ms, rel=1e-9)
    assert np.ptp(per) < 1e-6 * max(per)  # equal windows
    for key, ms in whole.breakdown_ms.items():
        assert got.breakdown_ms[key] * len(per) == pytest.approx(ms, rel=1e-9, abs=1e-9), key
    assert got.sections.kernels.calls == whole.sections.kernels.calls == 1272
    assert got.sections.kernels.total_us == pytest.approx(whole.sections.kernels.total_us)
    assert step_variance(got) is None  # slices of a trace are not steps
    assert list(tmp_path.iterdir()) == []
