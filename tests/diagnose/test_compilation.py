"""Compilation and untraced time: live CPU runs (torch.compile recompiling every step, a sleep in
every step) get their own finding, and the figures match a hand computation on a synthetic trace."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

import trainprof
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.compilation import UNTRACED_MIN_GAP_US, compilation
from trainprof.report.sections.compilation import text as compilation_text
from trainprof.report.sections.view import ViewContext
from trainprof.trace.compile_names import compiled_region, is_compile
from trainprof.trace.load import load_file

from helpers.tracegen import TraceBuilder


def _ids(analysis) -> list[str]:
    return [f.id for f in analysis.findings]


def _record(out, body, steps: int = 4, **options) -> trainprof.Analysis:
    with trainprof.profile(output_trace_dir=out, **options,
                           schedule_option=dict(wait=0, warmup=1, active=steps, repeat=1)) as p:
        for i in range(steps + 1):
            body(i)
            p.step()
    return trainprof.analyze(out)


@pytest.mark.slow
def test_live_run_recompiling_every_step_gets_the_compilation_finding(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, cache_size_limit=64):
        torch._dynamo.reset()
        compiled = torch.compile(model)

        def step(i: int) -> None:
            compiled(torch.randn(4 + i, 16)).sum().backward()  # a new shape: a recompile
            opt.step()
            opt.zero_grad()

        a = _record(tmp_path, step)
        torch._dynamo.reset()
    found = {f.id: f for f in a.findings}
    assert "compilation" in found, _ids(a)
    f = found["compilation"]
    c = a.ranks[0].sections.compilation
    # Every recorded step (after the unrecorded warm-up one) compiles anew: all recompilations.
    assert c.steps_compiling == [p["step"] for p in a.ranks[0].steps.per_step]
    assert c.recompilations == 4 and c.first_compilations == 0 and c.markers
    assert c.recompile_ms == pytest.approx(c.compile_ms)
    assert "mark_dynamic" in f.fix.pytorch and "TORCH_LOGS=recompiles" in f.fix.summary
    assert "host_bound" not in found
    assert f.saving_pct == pytest.approx(c.compile_pct)


@pytest.mark.slow
def test_live_run_sleeping_in_every_step_gets_the_untraced_finding(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(8, 8)  # a few ms of ops even on a loaded machine, beside 200 ms
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)

    def read_shard() -> None:
        time.sleep(0.2)  # outside every op the profiler records

    def step(i: int) -> None:
        loss = model(x).sum()
        read_shard()
        loss.backward()
        opt.step()
        opt.zero_grad()

    a = _record(tmp_path, step, steps=3)
    found = {f.id: f for f in a.findings}
    assert "untraced_time" in found, _ids(a)
    assert "host_bound" not in found and "compilation" not in found
    c = a.ranks[0].sections.compilation
    per_step = dict(c.untraced_per_step_ms)
    # Each step holds its 200 ms sleep (a sleep lasts at least as long as asked).
    assert all(ms >= 200.0 for ms in per_step.values()), per_step
    steps = {p["step"]: p["ms"] for p in a.ranks[0].steps.per_step}
    assert all(per_step[s] <= steps[s] for s in steps)


def test_compile_names():
    assert is_compile("entire_frame_compile") and is_compile("compile_fx_inner (dynamo_timed)")
    assert is_compile("compile_attempt_0") and is_compile("async_compile.wait")
    for running in ("CompiledFunction", "CompiledFunctionBackward", "TorchDynamo Cache Lookup",
                    "## Call CompiledFxGraph abc ##", "Torch-Compiled Region: 0/1", "aten::mm"):
        assert not is_compile(running), running
    assert compiled_region("Torch-Compiled Region: 2/3") == (2, 3)
    assert compiled_region("Torch-Compiled Region") is None


def test_figures_on_a_synthetic_trace(tmp_path):
    """Three 100 ms steps: step 0 compiles frame 0 (forward 30 ms with a nested phase, backward
    10 ms), step 1 recompiles it (20 ms), step 2 only runs; step 2 also has a 40 ms untraced
    gap and a 0.5 ms one (too short to count)."""
    b = TraceBuilder()
    for n in range(3):
        b.step(n, n * 100_000, 100_000)
    b.op("dynamo", 1_000, 30_000)
    b.op("compile_fx_inner (dynamo_timed)", 5_000, 10_000)  # nested: counted once
    b.op("Torch-Compiled Region: 0/0", 31_000, 1_000)
    b.op("CompiledFunctionBackward", 40_000, 12_000)
    b.op("entire_backward_compile", 41_000, 10_000)
    b.op("dynamo", 101_000, 20_000)
    b.op("Torch-Compiled Region: 0/1", 121_500, 1_000)
    # Recorded ops cover every step except the gaps named above.
    b.op("aten::mm", 52_000, 48_000)
    b.op("aten::mm", 0, 1_000)
    b.op("aten::mm", 100_000, 1_000)
    b.op("aten::mm", 122_500, 77_500)
    b.op("aten::mm", 121_000, 500)
    b.op("aten::mm", 200_000, 10_000)
    b.op("aten::mm", 250_000, 49_500)  # 210-250 ms untraced (40 ms), 299.5-300 (0.5 ms)
    b.op("aten::add", 31_000, 9_000)
    # Python frames (with_stack): the loop, open since before the steps; the function in the
    # gap and the sleep inside it; a frame in passing.
    b.event("python_function", "train.py(9): <module>", -5_000, 310_000)
    b.event("python_function", "train.py(3): read_shard", 209_500, 40_500)
    b.event("python_function", "<built-in function sleep>", 210_000, 39_900)
    b.event("python_function", "<built-in function len>", 230_000, 1)
    path = b.write(tmp_path / "t.json")
    trace = load_file(path)
    c = compilation(trace, find_steps(trace))
    assert c.compile_per_step_ms == [(0, 40.0), (1, 20.0), (2, 0.0)]
    assert c.compile_ms == pytest.approx(60.0 / 3)
    assert c.first_ms == pytest.approx(40.0 / 3) and c.recompile_ms == pytest.approx(20.0 / 3)
    assert (c.first_compilations, c.recompilations) == (1, 1)
    assert c.compile_pct == pytest.approx(60.0 / 300.0 * 100)
    assert 500 < UNTRACED_MIN_GAP_US <= 40_000
    assert c.untraced_per_step_ms == [(0, 0.0), (1, 0.0), (2, 40.0)]
    assert c.longest_untraced == (2, 40.0)
    assert c.untraced_pct == pytest.approx(40.0 / 300.0 * 100)
    # Frames at least 80% inside the untraced time, by their time in it, per step (3 steps);
    # a frame with under a tenth of the longest one's time is not named.
    assert [(f.name, f.ms_per_step) for f in c.untraced_frames] == [
        ("train.py(3): read_shard", pytest.approx(40.0 / 3)),
        ("<built-in function sleep>", pytest.approx(39.9 / 3))]


def test_the_section_renders_only_the_steps_with_compile_or_untraced_time(tmp_path):
    b = TraceBuilder()
    for n in range(3):
        b.step(n, n * 10_000, 10_000)
        b.op("aten::mm", n * 10_000, 10_000 if n != 2 else 4_000)  # step 2: 6 ms untraced
    b.op("inductor_compile", 1_000, 2_000)  # step 0: 2 ms compiling
    trace = load_file(b.write(tmp_path / "t.json"))
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(compilation_text(compilation(trace, find_steps(trace)), ViewContext()))
    rows = [line.split() for line in console.export_text().splitlines()]
    assert ["0", "2.0", "0.0"] in rows and ["2", "0.0", "6.0"] in rows
    assert not any(r[:1] == ["1"] for r in rows)  # nothing happened in step 1
    assert ["mean", "0.7", "2.0"] in rows and ["share", "6.7%", "20.0%"] in rows
    quiet = TraceBuilder()
    quiet.step(0, 0, 1_000)
    quiet.op("aten::mm", 0, 1_000)
    (tmp_path / "q").mkdir()
    trace = load_file(quiet.write(tmp_path / "q" / "t.json"))
    assert compilation_text(compilation(trace, find_steps(trace)), ViewContext()) is None
