"""The module view (analysis/sections/modules.py) on a live CPU recording of a model with known
structure, and on the shared traces that carry module events; figures checked against a
plain-json reading of the same files."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.modules import HOW_TO_RECORD, ModuleTree, module_tree
from trainprof.trace.load import load_file

from helpers.module_workload import (
    ACTIVE_STEPS,
    inside,
    read_events,
    record_nested_model,
    step_windows,
    synthetic_gpu_modules,
)
from helpers.paths import BERT, GPU_METRICS


def tree_of(path) -> ModuleTree:
    trace = load_file(path)
    return module_tree(trace, find_steps(trace))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    pytest.importorskip("torch")
    path = record_nested_model(tmp_path_factory.mktemp("modules"))
    return path, tree_of(path), read_events(path)


def rows_by_path(tree: ModuleTree) -> dict:
    return {r.path: r for r in tree.rows}


def test_the_tree_has_the_model_structure(live):
    _, tree, _ = live
    paths = [r.path for r in tree.rows]
    assert paths == ["Net_0", "Net_0/Block_0", "Net_0/Block_0/Linear_0",
                     "Net_0/Block_0/Heavy_0", "Net_0/Block_0/Heavy_0/Linear_1",
                     "Net_0/Linear_2"]
    by = rows_by_path(tree)
    assert all(r.calls == ACTIVE_STEPS for r in tree.rows)
    assert [tree.rows[r.parent].path if r.parent >= 0 else None for r in tree.rows] == [
        None, "Net_0", "Net_0/Block_0", "Net_0/Block_0", "Net_0/Block_0/Heavy_0", "Net_0"]
    assert by["Net_0/Block_0/Heavy_0"].depth == 2
    assert tree.clock == "host" and tree.backward_source == "fwdbwd flows"


def test_host_times_match_the_module_events(live):
    path, tree, events = live
    windows = step_windows(events)
    by = rows_by_path(tree)
    for name, module_path in (("Heavy_0", "Net_0/Block_0/Heavy_0"), ("Net_0", "Net_0")):
        want = sum(e["dur"] for e in events if e.get("name") == f"nn.Module: {name}"
                   and inside(e["ts"], windows))
        assert by[module_path].host_total_us == pytest.approx(want, rel=1e-9)
    # Self: the module less the modules it called.
    heavy = by["Net_0/Block_0/Heavy_0"]
    proj = by["Net_0/Block_0/Heavy_0/Linear_1"]
    assert heavy.host_self_us == pytest.approx(heavy.host_total_us - proj.host_total_us)


def test_the_slow_module_is_the_heavy_one(live):
    _, tree, _ = live
    by = rows_by_path(tree)
    leaves = [r for r in tree.rows if not any(c.parent == tree.rows.index(r) for c in tree.rows)]
    assert max(leaves + [by["Net_0/Block_0/Heavy_0"]],
               key=lambda r: r.host_self_us).path == "Net_0/Block_0/Heavy_0"
    where = tree.where(lambda name: name in ("aten::mm", "aten::matmul"))
    assert where is not None and where.path == "Net_0/Block_0/Heavy_0" and where.pct > 50
    assert (where.kind, where.kind_modules) == ("Heavy", 1)
    assert where.short == "Net_0/Block_0/Heavy_0"
    assert tree.short_path(4, levels=2) == "…/Heavy_0/Linear_1"


def test_backward_matches_the_sequence_numbers(live):
    """Backward nodes found independently: the autograd nodes whose sequence number is one of
    the forward ops' inside the module's own calls (not its submodules')."""
    _, tree, events = live
    windows = step_windows(events)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]

    def ranges(name):
        return [(e["ts"], e["ts"] + e["dur"]) for e in events
                if e.get("name") == f"nn.Module: {name}" and inside(e["ts"], windows)]

    heavy, proj = ranges("Heavy_0"), ranges("Linear_1")
    seqs = {e["args"]["Sequence number"] for e in ops
            if "Sequence number" in e.get("args", {}) and "Fwd thread id" in e["args"]
            and e["args"]["Fwd thread id"] == 0
            and any(a <= e["ts"] < b for a, b in heavy)
            and not any(a <= e["ts"] < b for a, b in proj)}
    nodes = [e for e in ops if e["args"].get("Sequence number") in seqs
             and e["args"].get("Fwd thread id", 0) != 0
             and not e["name"].startswith("autograd::engine::")
             and inside(e["ts"], windows)]
    row = rows_by_path(tree)["Net_0/Block_0/Heavy_0"]
    assert row.backward_calls == len(nodes) > 0
    assert row.backward_host_self_us == pytest.approx(sum(e["dur"] for e in nodes), rel=1e-9)
    proj_row = rows_by_path(tree)["Net_0/Block_0/Heavy_0/Linear_1"]
    assert row.backward_host_total_us == pytest.approx(
        row.backward_host_self_us + proj_row.backward_host_total_us)


def test_share_is_forward_and_backward_over_the_steps(live):
    _, tree, events = live
    step_us = sum(b - a for a, b in step_windows(events))
    assert tree.step_us == pytest.approx(step_us)
    for r in tree.rows:
        assert r.share_pct == pytest.approx(
            (r.host_total_us + r.backward_host_total_us) / step_us * 100)


def test_device_time_of_a_module_on_a_real_gpu_trace():
    """BERT on an H100: a module's kernel time is that of the kernels whose launch lies inside
    the module's calls (joined on the correlation id)."""
    tree = tree_of(BERT)
    events = read_events(BERT)
    assert tree.clock == "device" and tree.rows[0].path == "BertLMHeadModel_0"
    assert tree.backward_source is None and "no forward-backward" in tree.note
    kernels = {e["args"]["correlation"]: e["dur"] for e in events
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    # Launched through the runtime (cudaLaunchKernel) or the driver (cuLaunchKernel).
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e.get("args", {}).get("correlation") in kernels]
    layers = [r for r in tree.rows if r.name.startswith("BertLayer_")]
    assert len(layers) == len({e["name"] for e in events
                               if str(e.get("name")).startswith("nn.Module: BertLayer_")})
    for row in [tree.rows[0], *layers]:
        spans = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events
                 if e.get("name") == f"nn.Module: {row.name}"]
        want = sum(kernels[e["args"]["correlation"]] for e in launches
                   if any(a <= e["ts"] < b and e["tid"] == t for a, b, t in spans))
        assert row.device_total_us == pytest.approx(want, rel=1e-9)
        assert row.calls == len(spans)


def test_a_trace_without_module_events_says_how_to_record_them():
    tree = tree_of(GPU_METRICS)
    assert not tree.available and tree.rows == []
    assert tree.note == HOW_TO_RECORD and "with_stack=True" in tree.note
    assert tree.to_dict()["available"] is False


def test_a_synthetic_gpu_trace_with_backward_on_another_thread(builder, tmp_path):
    synthetic_gpu_modules(builder)
    tree = tree_of(builder.write(tmp_path / "t.json"))
    outer, inner = tree.rows
    assert (outer.path, inner.path, inner.parent) == ("Outer_0", "Outer_0/Inner_0", 0)
    assert tree.clock == "device" and tree.step_us == 1000
    assert (inner.device_self_us, inner.device_total_us) == (80, 80)
    assert (outer.device_self_us, outer.device_total_us) == (20, 100)
    assert (inner.backward_calls, inner.backward_device_self_us, inner.backward_host_self_us) == (
        1, 150, 200)
    assert (outer.backward_device_self_us, outer.backward_device_total_us) == (0, 150)
    assert (outer.host_total_us, outer.host_self_us) == (390, 140)
    assert outer.share_pct == pytest.approx(25.0) and inner.share_pct == pytest.approx(23.0)
    # Backward ops count for the module they differentiate.
    assert tree.where(lambda name: name == "MmBackward0").path == "Outer_0/Inner_0"
    assert tree.where(lambda name: name == "aten::add").path == "Outer_0"


def test_a_module_called_twice_in_a_step_is_one_row_with_two_calls(builder, tmp_path):
    builder.step(1, 0, 1000)
    builder.event("python_function", "nn.Module: Outer_0", 0, 500)
    for start in (10, 200):
        builder.event("python_function", "nn.Module: Shared_0", start, 100)
        builder.op("aten::add", start + 10, 50)
    builder.event("python_function", "nn.Module: Late_0", 1500, 100)  # after the step
    tree = tree_of(builder.write(tmp_path / "t.json"))
    assert [(r.path, r.calls) for r in tree.rows] == [("Outer_0", 1), ("Outer_0/Shared_0", 2)]
    outer, shared = tree.rows
    assert (shared.host_total_us, outer.host_self_us) == (200, 300)
    assert tree.clock == "host" and shared.share_pct == pytest.approx(20.0)


def test_a_flow_without_a_time_maps_nothing(builder, tmp_path):
    synthetic_gpu_modules(builder)
    for e in builder.events:
        if e.get("cat") == "fwdbwd" and e["ph"] == "f":
            e["ts"] = "soon"
    tree = tree_of(builder.write(tmp_path / "t.json"))
    assert tree.backward_source is None and all(r.backward_calls == 0 for r in tree.rows)
    assert tree.rows[0].device_total_us == 100  # the forward figures stand
