"""Communication: types, sizes and overlap on synthetic traces, HTA's overlap on real ones."""

from __future__ import annotations

import functools

import pytest

import trainprof
from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.sections.communication import communication
from trainprof.trace.load import load_file
from trainprof.trace.model import collective_type, dtype_bytes

from helpers.paths import BIG_TRACE, NCCL_TRACE, NS_TRACE, TRACE_FILTER

RECORD = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000,
          "dtype": "Float"}



@functools.cache
def loaded(path):
    """Real traces are loaded once per test module (the analyses only read them)."""
    return load_file(path)

def nccl_trace(b):
    """Compute 100-300; an all_reduce kernel 250-500 named Generic (the type and the 4000 bytes
    come from record_param_comms around its launch); an all_gather 620-700 with no size; a
    kernel whose own args say reduce_scatter of 2048 bf16 elements, 800-850."""
    b.step(1, 0, 1000)
    b.launch(90, 5, k_ts=100, k_dur=200, name="volta_sgemm_128x64_nn")
    b.op("c10d::allreduce_", 200, 60)
    b.op("record_param_comms", 205, 50, args=RECORD)
    b.annotation("nccl:all_reduce", 210, 40)
    b.stream = 8
    b.launch(220, 5, name="ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
             k_ts=250, k_dur=250)
    b.op("c10d::_allgather_base_", 600, 40)
    b.annotation("nccl:_all_gather_base", 605, 30)
    b.launch(610, 5, name="ncclKernel_AllGather_RING_LL_Sum_float(ncclWork*)", k_ts=620,
             k_dur=80)
    b.kernel("ncclDevKernel_Generic_1", 800, 50, **{
        "Collective name": "reduce_scatter", "In msg nelems": 2048, "Out msg nelems": 1024,
        "dtype": "BFloat16"})
    return b


def test_kernels_types_sizes_and_overlap(tmp_path, builder):
    trace = load_file(nccl_trace(builder).write(tmp_path / "t.json"))
    result = communication(trace, find_steps(trace))
    assert result.source == "kernels"
    rows = {r.type: r for r in result.types}
    assert list(rows) == ["all_reduce", "all_gather", "reduce_scatter"]  # by time
    ar, ag, rs = rows["all_reduce"], rows["all_gather"], rows["reduce_scatter"]
    assert (ar.count, ar.bytes, ar.time_us, ar.exposed_us) == (1, 4000, 250, 200)
    assert ar.overlap_pct == pytest.approx(20.0)
    assert (ag.sized, ag.to_dict()["bytes"], ag.exposed_us) == (0, None, 80)
    assert (rs.bytes, rs.time_us) == (4096, 50)
    assert (result.busy_us, result.exposed_us) == (380, 330)
    assert result.overlap_pct == pytest.approx(50 / 380 * 100)
    assert result.per_step_ms == [pytest.approx(0.38)]
    assert result.to_dict()["count"] == 3
    assert len(result.instances) == 3


def test_host_collectives_overlap_with_other_threads(tmp_path, builder):
    """Gloo: the collective runs on its own thread; the main thread computes 0-100."""
    builder.step(1, 0, 200)
    builder.op("aten::mm", 0, 100)
    builder.op("c10d::allreduce_", 40, 5)
    builder.annotation("gloo:all_reduce", 50, 100, tid=2)
    trace = load_file(builder.write(tmp_path / "t.json"))
    result = communication(trace, find_steps(trace))
    assert result.source == "host ops"
    (row,) = result.types
    assert (row.type, row.count, row.time_us, row.exposed_us) == ("all_reduce", 1, 100, 50)


@pytest.mark.parametrize("name, kind", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "other"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "send_recv"),
    ("nccl:_all_gather_base", "all_gather"),
    ("gloo:broadcast", "broadcast"),
    ("c10d::alltoall_base_", "all_to_all"),
    ("c10d::monitored_barrier_", "barrier"),
    ("c10d::recv_any_source_", "recv"),
    ("_c10d_functional::wait_tensor", "wait"),
    ("allgather_into_tensor_coalesced", "all_gather"),
    ("record_param_comms", "other"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "all_to_all"),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*, int*)", "all_to_all"),
])
def test_collective_type(name, kind):
    assert collective_type(name) == kind


def test_dtype_sizes():
    assert (dtype_bytes("Float"), dtype_bytes("BFloat16"), dtype_bytes("c10::Half")) == (4, 2, 2)
    assert dtype_bytes("Long") == 8 and dtype_bytes("mystery") is None


def _hta_window(trace):
    s = find_steps(trace)
    return StepWindows(s.numbers[:-1], s.starts[:-1], s.ends[:-1], s.source)


@pytest.mark.parametrize(
    "path, hta_overlap",
    [(NCCL_TRACE, 14.31), (TRACE_FILTER / "sampled_rank-0.json.gz", 11.81),
     (TRACE_FILTER / "sampled_rank-1.json.gz", 20.05), (BIG_TRACE, 0.0)],
    ids=["nccl", "filter_rank0", "filter_rank1", "df_index_resolver"],
)
def test_overlap_matches_hta(path, hta_overlap):
    trace = loaded(path)
    assert communication(trace, _hta_window(trace)).overlap_pct == pytest.approx(hta_overlap,
                                                                                 abs=2.0)


def test_nccl_trace_counts_and_bytes():
    trace = loaded(NCCL_TRACE)
    result = communication(trace, find_steps(trace))
    rows = {r.type: r for r in result.types}
    assert (rows["all_reduce"].count, rows["broadcast"].count) == (15, 6)
    assert rows["all_reduce"].bytes == 306_684_384  # In msg nelems x 4 (Float)
    assert result.backend == "nccl"


def test_sendrecv_kernels_take_the_host_collective_type():
    trace = load_file(TRACE_FILTER / "sampled_rank-0.json.gz")
    types = {r.type: r.count for r in communication(trace, find_steps(trace)).types}
    assert types == {"all_to_all": 4, "all_reduce": 4, "all_gather": 2}


def test_single_rank_nccl_has_host_collectives_only():
    trace = load_file(NS_TRACE)
    result = communication(trace, find_steps(trace))
    assert result.source == "host ops"
    assert {r.type: r.count for r in result.types} == {"all_reduce": 25, "broadcast": 10}


def test_big_trace():
    result = trainprof.analyze([loaded(BIG_TRACE)]).ranks[0].sections.communication
    (row,) = result.types
    assert (row.type, row.count, row.sized) == ("all_reduce", 2020, 0)
    assert result.to_dict()["exposed_pct"] == pytest.approx(20.56, abs=0.01)
