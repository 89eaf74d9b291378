"""The kernel table: exact answers on a synthetic trace, the plugin's and TraceLens's numbers."""

from __future__ import annotations

import csv
import functools
import json
from collections import defaultdict

import pytest

from trainprof.analysis.sections.kernels import kernel_stats
from trainprof.trace.kernel_class import uses_tensor_cores
from trainprof.trace.load import load_file

from helpers.paths import BERT, RESNET_W0, RESNET_W4, RESULT_CHECK, TIMESFORMER


@functools.cache
def loaded(path):
    return load_file(path)


def test_synthetic_exact_answers(builder, tmp_path):
    builder.step(1, 0, 1000)
    x = builder.op("aten::mm", 10, 50)
    builder.launch(20, 5, name="sm80_xmma_gemm_f16f16", k_ts=100, k_dur=10,
                   external_id=x["args"]["External id"],
                   args={"blocks per SM": 2.0, "est. achieved occupancy %": 50})
    y = builder.op("aten::addmm", 200, 50)
    builder.launch(210, 5, name="sm80_xmma_gemm_f16f16", k_ts=300, k_dur=30,
                   external_id=y["args"]["External id"], args={"est. achieved occupancy %": 100})
    builder.launch(400, 5, name="triton_tem_fused_addmm_0", k_ts=410, k_dur=4)
    builder.launch(500, 5, name="elementwise", k_ts=510, k_dur=6)
    builder.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 600, 50)
    trace = load_file(builder.write(tmp_path / "kernels.json"))
    stats = kernel_stats(trace)
    rows = {r.name: r for r in stats.rows}
    gemm = rows["sm80_xmma_gemm_f16f16"]
    assert (gemm.calls, gemm.total_us, gemm.mean_us, gemm.min_us, gemm.max_us) == (2, 40, 20,
                                                                                  10, 30)
    assert gemm.blocks_per_sm == pytest.approx(2.0)  # the call without a value is left out
    assert gemm.occupancy_pct == pytest.approx((50 * 10 + 100 * 30) / 40)
    assert gemm.tensor_cores and gemm.op == "aten::addmm"
    assert gemm.op_share_pct == pytest.approx(75.0)
    assert rows["triton_tem_fused_addmm_0"].tensor_cores
    assert rows["triton_tem_fused_addmm_0"].op is None  # launched outside any op
    assert not rows["elementwise"].tensor_cores and rows["elementwise"].blocks_per_sm is None
    nccl = rows["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert nccl.communication and nccl.op is None
    assert stats.rows[0].name == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert (stats.calls, stats.total_us) == (5, 100)
    assert stats.tensor_core_pct == pytest.approx(44.0)
    assert sum(r.share_pct for r in stats.rows) == pytest.approx(100.0)
    d = json.loads(json.dumps(stats.to_dict()))
    assert set(d) == {"total_us", "calls", "tensor_core_pct", "facts", "classes", "rows"}
    f = stats.facts  # communication left out; only the two gemms have an op that can use TCs
    assert (f.compute_us, f.tc_eligible_us, f.tc_eligible_on_tc_us) == (50, 40, 40)
    assert (f.reported_blocks_us, f.underfilled_us, f.softmax_us) == (10, 0, 0)


def test_empty_trace_has_no_rows(builder, tmp_path):
    builder.step(1, 0, 100)
    builder.op("aten::add", 0, 50)
    stats = kernel_stats(load_file(builder.write(tmp_path / "cpu.json")))
    assert stats.rows == [] and stats.tensor_core_pct is None


@pytest.mark.parametrize("name, expected", [
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32>", True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", True),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", True),
    ("triton_tem_fused_bmm_3", True),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", True),
    ("triton_poi_fused_add_relu_0", False),
    # FP32 on the CUDA cores although the kernel family matches (TF32 off on an A100).
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_"
     "alignc4_execute_kernel__5x_cublas", False),
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)", False),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", False),
])
def test_tensor_core_names(name, expected):
    assert uses_tensor_cores(name) is expected


@pytest.mark.parametrize("trace_path, line", [(RESNET_W0, 3), (RESNET_W4, 8)])
def test_matches_the_plugin_kernel_table(trace_path, line):
    """Span 1 of both ResNet-50 runs: calls exact; time, blocks per SM, occupancy within 1%."""
    ours = {r.name: r for r in kernel_stats(loaded(trace_path)).rows}
    rows = json.loads(RESULT_CHECK.read_text().splitlines()[line])["data"]["rows"]
    assert set(ours) == {row[0] for row in rows}
    for name, _tc, calls, total, mean, high, low, blocks, occupancy in rows[:20]:
        r = ours[name]
        assert r.calls == calls
        assert (r.total_us, r.mean_us, r.max_us, r.min_us) == pytest.approx(
            (total, mean, high, low), rel=0.01, abs=1.0)
        assert r.blocks_per_sm == pytest.approx(blocks, rel=0.01, abs=0.01)
        assert r.occupancy_pct == pytest.approx(occupancy, rel=0.01, abs=0.01)
        assert not r.tensor_cores  # FP32 on a V100: no Tensor Core kernel


def _tracelens_totals(trace_path):
    folder = trace_path.parent / trace_path.name.replace(".json.gz", "_perf_report_csvs")
    total: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    parent: dict[str, str] = {}
    with open(folder / "kernel_summary.csv", newline="") as f:
        for row in csv.DictReader(f):
            name = row["Kernel name"]
            total[name] += float(row["Kernel duration (µs)_sum"])
            calls[name] += int(row["Kernel duration (µs)_count"])
            parent.setdefault(name, row["Parent cpu_op"])
    return total, calls, parent


@pytest.mark.parametrize("trace_path", [TIMESFORMER, BERT])
def test_matches_tracelens_kernel_summary(trace_path):
    ours = {r.name: r for r in kernel_stats(loaded(trace_path)).rows}
    total, calls, parent = _tracelens_totals(trace_path)
    assert set(ours) == set(total)
    for name in sorted(total, key=total.get, reverse=True)[:8]:
        assert ours[name].calls == calls[name]
        assert ours[name].total_us == pytest.approx(total[name], rel=0.01)
        assert ours[name].op == parent[name]
