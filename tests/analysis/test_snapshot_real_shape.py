"""Snapshots in the shape real CUDA training runs record (`_record_memory_history()` at its
defaults: C++ frames with the Python ones interleaved; or `stacks="python"`; contexts "all",
"alloc", "state"). The format: `torch.cuda.memory._snapshot()` as torch 2.13 (the version
installed here) documents it in torch/cuda/memory.py and writes it in torch/csrc/cuda/Module.cpp
and memory_snapshot.cpp (the `allocator_settings` keys); the interleaving as
torch/csrc/profiler/combined_traceback.cpp `symbolize` does it; the frames themselves as seen in
five real CUDA snapshots of training runs (issue 25). Built by tests/helpers/snapshotgen.py
(`cuda_stack`, `real_shaped_run`). Every expected figure is recomputed here by replaying the
history."""

from __future__ import annotations

import pytest

from trainprof.analysis.snapshot.analyze import analyze_snapshot
from trainprof.analysis.snapshot.frames import NO_PYTHON, NO_STACK
from trainprof.diagnose.snapshot import (
    HOLDER_FIXES,
    HOLDER_MEDIUM_SHARE,
    HOLDER_SHARE,
    snapshot_findings,
)

from helpers.snapshotgen import (
    ACT_BLOCKS,
    ACT_SIZE,
    PARAM_BLOCKS,
    PARAM_SIZE,
    TO_DEVICE,
    USER_FORWARD,
    USER_OPTIMIZER,
    real_shaped_snapshot,
)


def with_context(snapshot: dict, context: str) -> dict:
    """The snapshot as `context=` records it: "alloc" keeps no stack for frees, "state" none in
    the history (only the live blocks have one)."""
    for entries in snapshot["device_traces"]:
        for e in entries:
            if context == "state" or (context == "alloc" and e["action"] != "alloc"):
                e["frames"] = []
    return snapshot


def replayed_peak(snapshot: dict) -> tuple[int, int, dict[int, tuple[int, list]]]:
    """(entry, bytes, live blocks) at the peak, by replaying the history forward: the run's
    history starts with its first allocation, so nothing was live before it."""
    live: dict[int, tuple[int, list]] = {}
    best = (-1, -1, {})
    for k, e in enumerate(snapshot["device_traces"][0]):
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e["frames"])
        elif e["action"] == "free_completed":
            live.pop(e["addr"])
        total = sum(size for size, _ in live.values())
        if total > best[1]:
            best = (k, total, dict(live))
    return best


@pytest.fixture(scope="module", params=["all", "python"])
def stacks(request) -> str:
    return request.param


@pytest.mark.parametrize("context", ["all", "alloc", "state"])
def test_the_site_is_the_users_python_frame_whatever_the_stacks(stacks, context):
    result = analyze_snapshot(with_context(real_shaped_snapshot(stacks), context))
    state, params = result.live_sites
    assert (state.file, state.line, state.function) == USER_OPTIMIZER
    assert (state.bytes, state.count) == (2 * PARAM_BLOCKS * PARAM_SIZE, 2 * PARAM_BLOCKS)
    assert state.site == "/home/u/proj/cs336_basics/optimizers.py:82 in step"
    assert (params.file, params.line, params.function) == TO_DEVICE
    assert not any("memory_snapshot.cpp" in s.site or "??" in s.site for s in result.live_sites)
    # the shown stack is the Python one, innermost first
    assert state.stack[:2] == [
        "/home/u/proj/cs336_basics/optimizers.py:82 in step",
        "/home/u/.venv/lib/python3.11/site-packages/torch/optim/optimizer.py:493 in wrapper"]
    if context == "state":
        assert {s.site for s in result.allocated_sites} == {NO_STACK}
        return
    sites = {s.site: s.bytes for s in result.allocated_sites}
    forward = "/home/u/proj/cs336_basics/model.py:150 in forward"
    assert sites[forward] == 2 * ACT_BLOCKS * ACT_SIZE  # two steps' activations, one site
    assert sites[NO_PYTHON if stacks == "all" else NO_STACK] == 2 * PARAM_BLOCKS * PARAM_SIZE


def expected_holder(frames: list, stacks: str) -> str:
    """The holder of each stack the run uses, by what the test knows made it."""
    text = str(frames)
    if "optimizers.py" in text:
        return "optimizer_state"
    if "MmBackward0" in text:
        return "gradients"
    if "'to'" in text:
        return "parameters"
    if "model.py" in text:
        return "activations"
    assert frames == [] and stacks == "python"  # the autograd thread records no Python frame
    return "unknown"


def test_what_was_live_at_the_peak_from_the_history(stacks):
    snapshot = real_shaped_snapshot(stacks)
    result = analyze_snapshot(snapshot)
    (h,), (peak,) = result.histories, result.peaks
    entry, total, live = replayed_peak(snapshot)
    assert (peak.entry, peak.live) == (h.peak_entry, h.peak_live) == (entry, total)
    want = dict.fromkeys(peak.holders, 0)
    for size, frames in live.values():
        want[expected_holder(frames, stacks)] += size
    assert peak.holders == want
    grads = "gradients" if stacks == "all" else "unknown"
    assert want["optimizer_state"] == 2 * PARAM_BLOCKS * PARAM_SIZE
    assert want[grads] == PARAM_BLOCKS * PARAM_SIZE
    # the last gradient is made before the activation it frees: 3 of the 6 still live
    assert want["activations"] == (ACT_BLOCKS - PARAM_BLOCKS + 1) * ACT_SIZE
    # at the snapshot's end the gradients are freed (zero_grad) and only weights and state live
    assert result.holders[0] == {**dict.fromkeys(want, 0), "parameters": PARAM_BLOCKS * PARAM_SIZE,
                                 "optimizer_state": 2 * PARAM_BLOCKS * PARAM_SIZE}


def test_gradients_freed_by_zero_grad_are_named_by_their_allocation():
    """With context "all" a free carries the freeing stack (zero_grad, in torch/optim): a block
    freed after the peak is still charged to what allocated it."""
    snapshot = real_shaped_snapshot("all")
    frees = [e for e in snapshot["device_traces"][0] if e["action"] == "free_completed"]
    assert any("zero_grad" in str(e["frames"]) for e in frees)
    for context in ("all", "alloc"):
        (peak,) = analyze_snapshot(with_context(real_shaped_snapshot("all"), context)).peaks
        assert peak.holders["gradients"] == PARAM_BLOCKS * PARAM_SIZE


def test_the_moment_of_the_peak_and_its_step():
    snapshot = real_shaped_snapshot("all", annotate=True)
    (peak,) = analyze_snapshot(snapshot).peaks
    entries = snapshot["device_traces"][0]
    entry = replayed_peak(snapshot)[0]
    assert peak.ms == pytest.approx((entries[entry]["time_us"] - entries[0]["time_us"]) / 1e3)
    spans = {a["name"]: [] for a in snapshot["external_annotations"]}
    for a in snapshot["external_annotations"]:
        spans[a["name"]].append(a["time_us"])
    (step,) = [int(name.split("#")[1]) for name, (start, end) in spans.items()
               if start <= entries[entry]["time_us"] <= end]
    assert peak.step == step == 1


def test_the_largest_holder_is_a_finding_with_its_fix(stacks):
    result = analyze_snapshot(real_shaped_snapshot(stacks))
    _, total, _ = replayed_peak(real_shaped_snapshot(stacks))
    share = 2 * PARAM_BLOCKS * PARAM_SIZE / total
    assert HOLDER_SHARE <= share < HOLDER_MEDIUM_SHARE
    (finding,) = snapshot_findings(result)
    assert (finding.id, finding.severity) == ("memory_pressure", "low")
    assert finding.title.startswith(f"Optimizer state holds {100 * share:.0f}% of cuda:0")
    assert finding.fix is HOLDER_FIXES["optimizer_state"]
    assert "AdamW8bit" in finding.fix.pytorch and "ZeroRedundancyOptimizer" in finding.fix.pytorch
    assert finding.evidence[-1].where == "/home/u/proj/cs336_basics/optimizers.py:82 in step"


def test_capacity_and_a_full_device_get_the_holders_fix():
    snapshot = real_shaped_snapshot("all")
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    snapshot["trainprof"] = {"device_totals": {"0": int(reserved / 0.95)}}
    snapshot["device_traces"][0].append({"action": "oom", "device_free": 0, "size": 30 << 30,
                                         "stream": 0, "time_us": 10**9, "frames": []})
    found = snapshot_findings(analyze_snapshot(snapshot))
    pressure = [f for f in found if f.id == "memory_pressure"]
    assert [f.severity for f in pressure] == ["high"]  # one per id: the OOM's
    assert pressure[0].title.startswith("Out of memory")
    assert pressure[0].fix is HOLDER_FIXES["optimizer_state"]


def test_a_forward_heavy_peak_gets_activation_checkpointing(stacks):
    """The same run with the forward's outputs 4x larger: activations hold the peak."""
    snapshot = real_shaped_snapshot(stacks)
    for entries in snapshot["device_traces"]:
        for e in entries:
            if USER_FORWARD[0] in str(e["frames"]):
                e["size"] *= 4
    for seg in snapshot["segments"]:  # none is live at the end; the layout stays as it is
        assert all(USER_FORWARD[0] not in str(b["frames"]) for b in seg["blocks"])
    result = analyze_snapshot(snapshot)
    (peak,) = result.peaks
    assert max(peak.holders, key=lambda k: peak.holders[k]) == "activations"
    (finding,) = snapshot_findings(result)
    assert finding.fix is HOLDER_FIXES["activations"] and "checkpoint" in finding.fix.pytorch


@pytest.mark.parametrize("requested_gib", [13, 25])
def test_an_out_of_memory_error_in_a_real_shaped_run(requested_gib):
    """A third step's forward asks for one block larger than any free one: fragmentation when
    the free blocks together would hold it, capacity when not; the advice also names what holds
    the memory (the optimizer state)."""
    from helpers.snapshotgen import GiB, cuda_stack

    snapshot = real_shaped_snapshot("all")
    blocks = [b for seg in snapshot["segments"] for b in seg["blocks"]]
    free = [b["size"] for b in blocks if b["state"] == "inactive"]
    snapshot["device_traces"][0].append({
        "action": "oom", "device_free": 0, "size": requested_gib * GiB, "stream": 0,
        "time_us": snapshot["device_traces"][0][-1]["time_us"] + 10,
        "frames": cuda_stack(USER_FORWARD)})
    result = analyze_snapshot(snapshot)
    (oom,) = result.ooms
    assert (oom.largest_free_block, oom.cached_free) == (max(free), sum(free))
    cause = "fragmentation" if sum(free) >= requested_gib * GiB > max(free) else "capacity"
    assert oom.cause == cause == ("fragmentation" if requested_gib == 13 else "capacity")
    found = {f.id: f for f in snapshot_findings(result)}
    rule = "memory_fragmentation" if cause == "fragmentation" else "memory_pressure"
    assert found[rule].severity == "high"
    assert found["memory_pressure"].fix is HOLDER_FIXES["optimizer_state"]


@pytest.mark.parametrize(("stack", "holder"), [
    # a custom autograd Function (flash attention, a fused layer) runs in forward
    ([USER_FORWARD, ("/venv/lib/python3.11/site-packages/torch/autograd/function.py", 575,
                     "apply")], "activations"),
    # backward on the calling thread (CPU tensors, or a hook): Tensor.backward
    ([("/venv/lib/python3.11/site-packages/torch/autograd/graph.py", 829,
       "_engine_run_backward"),
      ("/venv/lib/python3.11/site-packages/torch/_tensor.py", 626, "backward"),
      ("/home/u/proj/train.py", 116, "train")], "gradients"),
    ([("/venv/lib/python3.11/site-packages/torch/nn/init.py", 70, "_no_grad_trunc_normal_"),
      ("/home/u/proj/cs336_basics/model.py", 20, "reset_parameters")], "parameters"),
    ([("/home/u/proj/train.py", 101, "train")], "other"),
])
def test_holder_rules_on_python_stacks(stack, holder):
    from trainprof.analysis.snapshot.holders import holder_of

    from helpers.snapshotgen import cuda_stack

    assert holder_of(cuda_stack(*stack)) == holder == holder_of(cuda_stack(*stack, stacks="python"))


def test_without_history_the_holders_are_those_live_at_the_snapshot():
    snapshot = real_shaped_snapshot("all")
    snapshot["device_traces"] = [[]]
    result = analyze_snapshot(snapshot)
    assert result.peaks == []
    share = 2 * PARAM_BLOCKS / (3 * PARAM_BLOCKS)  # the state beside the weights, at the end
    (finding,) = snapshot_findings(result)
    assert share >= HOLDER_MEDIUM_SHARE and finding.severity == "medium"
    assert finding.title == (f"Optimizer state holds {100 * share:.0f}% of cuda:0's live memory "
                             "at the snapshot")


def test_the_holders_largest_site_is_its_own_bytes():
    """Parameters made at two lines: the evidence names the larger with its own bytes."""
    from helpers.snapshotgen import AllocatorReplay, GiB, cuda_stack

    replay = AllocatorReplay(segment_size=8 * GiB)
    module = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
    big = cuda_stack((module, 942, "_apply"), ("/home/u/proj/train.py", 90, "train"))
    small = cuda_stack(("/home/u/proj/model.py", 12, "__init__"))
    for size, stack in ((3 * GiB, big), (GiB, small), (GiB, small)):
        replay.alloc(size, stack)
    (finding,) = snapshot_findings(analyze_snapshot(replay.snapshot()))
    site = finding.evidence[-1]
    assert (site.what, site.where) == ("its largest site", "/home/u/proj/train.py:90 in train")
    assert site.value == f"{3 * GiB / 1e9:,.2f} GB"
    assert finding.title.startswith("Parameters hold 100% of cuda:0's live memory")
