"""Call sites under `trainprof run`: trainprof's own frames (its profiler's `step`, the runner)
are never the user's line, as torch's are not."""

from __future__ import annotations

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.operators import operator_stats
from trainprof.report.names import file_line
from trainprof.trace.load import load_file
from trainprof.trace.model import is_source_frame

#: The frames `trainprof run` puts around a training script's ops (its runner, runpy, and the
#: profiler step it calls), as python_function events and as a `Call stack` (innermost first).
SITE_PACKAGES = "/home/u/.venv/lib/python3.11/site-packages"
TRAINPROF_STEP = f"{SITE_PACKAGES}/trainprof/capture/profiler.py(138): step"
RUNNER = f"{SITE_PACKAGES}/trainprof/capture/script_run.py(97): run_script"
USER = "/home/u/proj/train.py(18): <module>"


def test_trainprof_frames_are_not_the_users_code():
    assert not is_source_frame(TRAINPROF_STEP) and not is_source_frame(RUNNER)
    assert not is_source_frame("src/trainprof/capture/profiler.py(138): step")
    assert is_source_frame(USER)


def sources_of(builder, tmp_path) -> dict[str, str | None]:
    trace = load_file(builder.write(tmp_path / "run.json"))
    stats = operator_stats(trace, find_steps(trace))
    return {r.name: r.call_sites[0].source for r in stats.rows if r.call_sites}


def test_an_op_under_trainprofs_step_is_charged_to_the_users_line(builder, tmp_path):
    builder.step(1, 0, 1000)
    builder.event("python_function", RUNNER, 1, 998)
    builder.event("python_function", "<frozen runpy>(88): _run_code", 2, 996)
    builder.event("python_function", USER, 3, 990)
    builder.event("python_function", TRAINPROF_STEP, 5, 300)
    builder.op("aten::addmm", 10, 100)
    sources = sources_of(builder, tmp_path)
    assert sources == {"aten::addmm": USER}
    assert file_line(sources["aten::addmm"]) == "train.py:18 <module>"


def test_a_call_stack_through_trainprof_is_charged_to_the_users_line(builder, tmp_path):
    builder.step(1, 0, 1000)
    builder.op("aten::mm", 400, 100, args={"Call stack": f"{TRAINPROF_STEP};{USER};{RUNNER}"})
    assert sources_of(builder, tmp_path) == {"aten::mm": USER}


def test_a_clone_named_trainprof_holds_user_code():
    """Only trainprof's own modules are skipped, not every path through a folder of that name."""
    assert is_source_frame("/home/u/trainprof/examples/train.py(18): <module>")
    assert not is_source_frame("/home/u/trainprof/src/trainprof/step_timer.py(40): step")
