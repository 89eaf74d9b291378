"""The Lightning callback on a CPU Trainer: one trace per rank, the same options as profile()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capture_helpers import profiler_steps, read_trace, run_python, trace_names

pl = pytest.importorskip("lightning.pytorch")
# lightning 2.6 on torch 2.13 warns about its own use of a torch pytree API; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec")

from trainprof.integrations.lightning import TrainprofCallback  # noqa: E402

from lightning_helpers import TinyModule, loader, trainer  # noqa: E402


@pytest.mark.slow
def test_callback_records_one_trace_for_rank_0(tmp_path):
    callback = TrainprofCallback(schedule_option={"wait": 1, "warmup": 1, "active": 3, "repeat": 1},
                                 output_trace_dir=tmp_path / "traces", record_shapes=True)
    trainer(callback, tmp_path).fit(TinyModule(), loader())
    assert trace_names(tmp_path / "traces") == ["rank0.step4.pt.trace.json.gz"]
    trace = read_trace(tmp_path / "traces" / "rank0.step4.pt.trace.json.gz")
    assert profiler_steps(trace) == [2, 3, 4]
    assert any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"])
    assert callback.trace_files == [tmp_path / "traces" / "rank0.step4.pt.trace.json.gz"]


def test_callback_takes_accelerates_profile_kwargs_too():
    from accelerate.utils import ProfileKwargs

    callback = TrainprofCallback(ProfileKwargs(record_shapes=True), with_stack=True)
    assert callback.config.record_shapes and callback.config.with_stack


@pytest.mark.slow
def test_callback_defaults_to_the_trainers_root_dir(tmp_path):
    callback = TrainprofCallback(schedule_option={"wait": 0, "warmup": 1, "active": 2, "repeat": 1})
    trainer(callback, tmp_path).fit(TinyModule(), loader())
    assert trace_names(tmp_path / "trainprof-traces") == ["rank0.step2.pt.trace.json.gz"]


# In a child process: before the callback stepped aside, this combination crashed the process
# (a segmentation fault in Lightning's trace export), which would take pytest down with it.
BOTH_PROFILERS = """
import json, warnings
import torch
from lightning_helpers import TinyModule, loader, trainer
from trainprof.integrations.lightning import TrainprofCallback

callback = TrainprofCallback(schedule_option={"wait": 1, "warmup": 1, "active": 3, "repeat": 1},
                             output_trace_dir="traces")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fitted = trainer(callback, ".", profiler="pytorch")
    fitted.fit(TinyModule(), loader())
print(json.dumps({"steps": fitted.global_step, "files": [str(p) for p in callback.trace_files],
                  "ours": [str(w.message) for w in caught if "trainprof" in str(w.message)]}))
"""


@pytest.mark.slow
def test_a_trainer_with_its_own_torch_profiler_trains_and_trainprof_steps_aside(tmp_path):
    here = Path(__file__).resolve().parent
    result = run_python(["-c", f"import sys; sys.path.insert(0, {str(here)!r})\n" + BOTH_PROFILERS],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["steps"] == 8 and seen["files"] == []
    assert len(seen["ours"]) == 1 and "profiler='pytorch'" in seen["ours"][0]
