"""Recording a loop driven by an accelerate `Accelerator` on the CPU."""

from __future__ import annotations

import pytest
import torch

import trainprof
from trainprof.integrations import accelerate as trainprof_accelerate

from capture_helpers import profiler_steps, read_trace, trace_names

accelerate = pytest.importorskip("accelerate")
from accelerate.utils import ProfileKwargs  # noqa: E402

SCHEDULE = {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}


def prepared(accelerator):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    return accelerator.prepare(model, optimizer, loader)


def train(accelerator, model, optimizer, loader, after_step=None):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        if after_step is not None:
            after_step()


def test_profile_uses_the_accelerators_registered_profile_kwargs(tmp_path):
    accelerator = accelerate.Accelerator(
        cpu=True, kwargs_handlers=[ProfileKwargs(schedule_option=SCHEDULE, output_trace_dir=str(tmp_path))]
    )
    model, optimizer, loader = prepared(accelerator)
    with trainprof.profile(accelerator=accelerator) as prof:  # rank and barrier from the Accelerator
        train(accelerator, model, optimizer, loader, after_step=prof.step)
    assert accelerator.process_index == 0
    assert trace_names(tmp_path) == ["rank0.step3.pt.trace.json.gz"]
    assert profiler_steps(read_trace(tmp_path / "rank0.step3.pt.trace.json.gz")) == [2, 3]


def test_integration_profile_takes_a_handler_like_accelerator_profile(tmp_path):
    accelerator = accelerate.Accelerator(cpu=True)
    model, optimizer, loader = prepared(accelerator)
    handler = ProfileKwargs(schedule_option=SCHEDULE, profile_memory=True)
    with trainprof_accelerate.profile(accelerator, handler, output_trace_dir=tmp_path) as prof:
        train(accelerator, model, optimizer, loader, after_step=prof.step)
    (path,) = tmp_path.iterdir()
    events = read_trace(path)["traceEvents"]
    assert any(e.get("name") == "[memory]" for e in events)  # profile_memory from the handler


def test_step_timer_sees_through_the_accelerated_optimizer():
    accelerator = accelerate.Accelerator(cpu=True)
    model, optimizer, loader = prepared(accelerator)
    timer = trainprof.StepTimer(model, optimizer, log_every=None, flops_per_step=1.0, warmup_steps=0)
    for x, y in timer.wrap(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    summary = timer.summary()
    assert summary["steps"] == 8
    assert summary["phases_ms"]["optimizer"] > 0
    assert summary["phases_ms"]["backward"] > 0


def test_traces_written_by_accelerator_profile_are_read_as_ranks(tmp_path):
    """accelerate's own `accelerator.profile()` writes `profile_{process_index}.json`."""
    out = tmp_path / "accelerate-traces"
    handler = ProfileKwargs(activities=["cpu"], schedule_option=SCHEDULE, output_trace_dir=str(out))
    accelerator = accelerate.Accelerator(cpu=True, kwargs_handlers=[handler])
    model, optimizer, loader = prepared(accelerator)
    with accelerator.profile() as prof:
        train(accelerator, model, optimizer, loader, after_step=prof.step)
    assert trace_names(out) == ["profile_0.json"]
    analysis = trainprof.analyze(out)
    assert [r.rank for r in analysis.ranks] == [0]
    assert analysis.ranks[0].steps.count == SCHEDULE["active"]


def test_an_accelerator_given_as_the_first_argument_is_the_accelerator(tmp_path):
    handler = ProfileKwargs(schedule_option=SCHEDULE, output_trace_dir=str(tmp_path))
    accelerator = accelerate.Accelerator(cpu=True, kwargs_handlers=[handler])
    model, optimizer, loader = prepared(accelerator)
    barrier_calls = []
    accelerator.wait_for_everyone = lambda: barrier_calls.append(1)  # count the barrier
    with trainprof.profile(accelerator) as prof:
        train(accelerator, model, optimizer, loader, after_step=prof.step)
    assert prof.config.schedule_option == SCHEDULE  # its registered ProfileKwargs
    assert trace_names(tmp_path) == ["rank0.step3.pt.trace.json.gz"] and barrier_calls == [1]
