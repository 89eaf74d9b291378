"""`trainprof.profile` on a real CPU training loop: files, names, schedule, and never failing."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

import trainprof
from trainprof.capture.config import DEFAULT_SCHEDULE, ProfileConfig
from trainprof.capture.safety import RecordingWarning

from capture_helpers import TinyTraining, profiler_steps, read_trace, run_python, trace_names

SHORT = {"wait": 1, "warmup": 1, "active": 2, "repeat": 2}


def test_plain_loop_writes_one_gzipped_trace_per_cycle(tmp_path):
    training = TinyTraining()
    with trainprof.profile(output_trace_dir=tmp_path, schedule_option=SHORT) as prof:
        training.run(10, after_step=prof.step)

    # cycle = wait 1, warmup 1, active 2: steps 2-3 and 6-7 are recorded, twice, then nothing
    assert trace_names(tmp_path) == ["rank0.step3.pt.trace.json.gz", "rank0.step7.pt.trace.json.gz"]
    assert profiler_steps(read_trace(tmp_path / "rank0.step3.pt.trace.json.gz")) == [2, 3]
    trace = read_trace(tmp_path / "rank0.step7.pt.trace.json.gz")
    assert profiler_steps(trace) == [6, 7]
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::addmm" in names  # the real forward ran under the profiler
    assert training.steps_done == 10
    assert prof.trace_files == [tmp_path / "rank0.step3.pt.trace.json.gz", tmp_path / "rank0.step7.pt.trace.json.gz"]


def test_default_schedule_records_one_steady_state_cycle(tmp_path):
    training = TinyTraining()
    with trainprof.profile(output_trace_dir=tmp_path) as prof:
        training.run(40, after_step=prof.step)
    first = DEFAULT_SCHEDULE["wait"] + DEFAULT_SCHEDULE["warmup"]
    last = first + DEFAULT_SCHEDULE["active"] - 1
    assert trace_names(tmp_path) == [f"rank0.step{last}.pt.trace.json.gz"]
    assert profiler_steps(read_trace(tmp_path / f"rank0.step{last}.pt.trace.json.gz")) == list(range(first, last + 1))


def test_empty_schedule_records_every_step_in_one_file(tmp_path):
    training = TinyTraining()
    with trainprof.profile(output_trace_dir=tmp_path, schedule_option={}) as prof:
        training.run(3, after_step=prof.step)
    (path,) = tmp_path.iterdir()
    assert path.name == "rank0.step3.pt.trace.json.gz"
    # step() after the last step opens ProfilerStep#3, closed when the profiler stops
    assert profiler_steps(read_trace(path)) == [0, 1, 2, 3]


def test_no_temporary_files_are_left_behind(tmp_path):
    training = TinyTraining()
    with trainprof.profile(output_trace_dir=tmp_path, schedule_option=SHORT) as prof:
        training.run(8, after_step=prof.step)
    assert all(not name.startswith(".") for name in trace_names(tmp_path))
    assert all(name.endswith(".pt.trace.json.gz") for name in trace_names(tmp_path))


def test_output_path_that_is_a_file_warns_once_and_training_finishes(tmp_path):
    training = TinyTraining()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the trace folder should be")
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trainprof.profile(output_trace_dir=blocker, schedule_option=SHORT) as prof:
            for _ in range(10):  # two cycles, so two failed writes
                losses.append(training.step())
                prof.step()
    ours = [w for w in caught if issubclass(w.category, RecordingWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "could not write a trace" in str(ours[0].message)
    assert training.steps_done == 10 and len(losses) == 10
    assert blocker.read_text() == "a file where the trace folder should be"
    assert prof.trace_files == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_profiler_that_cannot_start_warns_and_training_goes_on(tmp_path):
    training = TinyTraining()
    with (
        pytest.warns(RecordingWarning, match="training goes on unrecorded"),
        trainprof.profile(output_trace_dir=tmp_path, activities=["cuda"], schedule_option=SHORT) as prof,
    ):
        training.run(6, after_step=prof.step)
    assert training.steps_done == 6
    assert not prof.recording
    assert not tmp_path.exists() or trace_names(tmp_path) == []


def test_a_profiler_already_recording_is_left_alone_and_training_goes_on(tmp_path):
    """Two torch profilers cannot record at once: trainprof steps aside (on any machine)."""
    training = TinyTraining()
    outer = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with (
        outer,
        pytest.warns(RecordingWarning, match="another torch profiler is already recording"),
        trainprof.profile(output_trace_dir=tmp_path, schedule_option={"wait": 0, "warmup": 1,
                                                                      "active": 1}) as prof,
    ):
        training.run(5, after_step=prof.step)
    assert training.steps_done == 5 and not prof.recording and prof.trace_files == []
    assert any(e.name == "aten::addmm" for e in outer.events())  # the user's trace is intact


def test_too_short_a_loop_says_so(tmp_path):
    training = TinyTraining()
    with (
        pytest.warns(RecordingWarning, match="no trace was written"),
        trainprof.profile(output_trace_dir=tmp_path) as prof,
    ):
        training.run(3, after_step=prof.step)
    assert prof.trace_files == []


def test_ranks_filter_skips_this_rank_quietly(tmp_path):
    training = TinyTraining()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordingWarning)
        with trainprof.profile(output_trace_dir=tmp_path, schedule_option=SHORT, ranks=[1]) as prof:
            training.run(8, after_step=prof.step)
    assert not prof.recording
    assert not tmp_path.exists() or trace_names(tmp_path) == []
    assert training.steps_done == 8


def test_on_trace_ready_is_called_per_cycle_and_its_errors_do_not_escape(tmp_path):
    training = TinyTraining()
    seen = []

    def handler(profiler):
        seen.append(profiler.step_num)
        raise RuntimeError("a broken user handler")

    with (
        pytest.warns(RecordingWarning, match="on_trace_ready"),
        trainprof.profile(output_trace_dir=tmp_path, schedule_option=SHORT, on_trace_ready=handler) as prof,
    ):
        training.run(10, after_step=prof.step)
    assert len(seen) == 2
    assert len(trace_names(tmp_path)) == 2  # our own files are written before the user's handler


def test_on_trace_ready_alone_writes_no_files(tmp_path, monkeypatch):
    training = TinyTraining()
    monkeypatch.chdir(tmp_path)
    cycles = []
    with trainprof.profile(schedule_option=SHORT, on_trace_ready=cycles.append) as prof:
        training.run(10, after_step=prof.step)
    assert len(cycles) == 2
    assert list(tmp_path.iterdir()) == []


def test_accelerate_profile_kwargs_are_accepted_as_they_are(tmp_path):
    training = TinyTraining()
    from accelerate.utils import ProfileKwargs

    kwargs = ProfileKwargs(activities=["cpu"], schedule_option={"wait": 0, "warmup": 1, "active": 1, "repeat": 1},
                           record_shapes=True, output_trace_dir=str(tmp_path))
    with trainprof.profile(kwargs) as prof:
        training.run(4, after_step=prof.step)
    assert prof.config.record_shapes is True
    (path,) = tmp_path.iterdir()
    assert path.name == "rank0.step1.pt.trace.json.gz"
    trace = read_trace(path)
    assert any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"])  # record_shapes took effect


def test_options_are_checked_at_the_call():
    with pytest.raises(ValueError, match="unknown profiler activity"):
        ProfileConfig(activities=["gpu"])
    with pytest.raises(ValueError, match="schedule_option"):
        ProfileConfig(schedule_option={"wiat": 1})
    with pytest.raises(ValueError, match="needs \\['warmup'\\]"):
        ProfileConfig(schedule_option={"wait": 1, "active": 2})
    with pytest.raises(TypeError, match="output_trace_dir"):
        trainprof.profile(output_dir="traces")
    with pytest.raises(TypeError, match="not dict; pass options by keyword"):
        trainprof.profile({"record_shapes": True})


# A full disk, for real: the child process may write files of at most FULL_DISK_BYTES
# (RLIMIT_FSIZE, which binds root too), so every trace export fails part-way.
FULL_DISK_BYTES = 4096
FULL_DISK_SCRIPT = f"""
import json, resource, signal, warnings
import trainprof
from trainprof.capture.safety import RecordingWarning
from capture_helpers import TinyTraining

training = TinyTraining()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, ({FULL_DISK_BYTES}, {FULL_DISK_BYTES}))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with trainprof.profile(output_trace_dir="traces", schedule_option={SHORT!r}) as prof:
        training.run(10, after_step=prof.step)
print(json.dumps({{"steps": training.steps_done, "files": [str(p) for p in prof.trace_files],
                  "warnings": [str(w.message) for w in caught
                               if issubclass(w.category, RecordingWarning)]}}))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_warns_once_leaves_no_broken_trace_and_training_finishes(tmp_path):
    helpers = Path(__file__).resolve().parent
    result = run_python(["-c", f"import sys; sys.path.insert(0, {str(helpers)!r})\n" + FULL_DISK_SCRIPT],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["steps"] == 10 and seen["files"] == []
    assert len(seen["warnings"]) == 1 and "could not write a trace" in seen["warnings"][0]
    assert "disk full" in seen["warnings"][0]
    assert trace_names(tmp_path / "traces") == []  # no empty trace, no temporary file


def test_torch_profiler_start_is_watched_only_while_recording(tmp_path):
    """capture/profiler_guard.py wraps `torch.profiler.profile.start` while a recording runs."""
    original = torch.profiler.profile.start
    training = TinyTraining()
    with trainprof.profile(output_trace_dir=tmp_path, schedule_option=SHORT) as prof:
        assert getattr(torch.profiler.profile.start, "_trainprof", False)
        training.run(2, after_step=prof.step)
    assert torch.profiler.profile.start is original


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="needs POSIX permissions, which root ignores")
def test_unwritable_output_folder_warns_once_and_training_finishes(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)  # read and enter, no writing
    training = TinyTraining()
    try:
        with (
            pytest.warns(RecordingWarning, match="could not write a trace"),
            trainprof.profile(output_trace_dir=locked, schedule_option=SHORT) as prof,
        ):
            training.run(10, after_step=prof.step)
    finally:
        locked.chmod(0o700)
    assert training.steps_done == 10 and prof.trace_files == [] and trace_names(locked) == []
