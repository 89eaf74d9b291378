"""Kernel classes: names of today's kernel families, and the launch context for unknown names."""

from __future__ import annotations

import pytest

from trainprof.analysis.sections.kernels import kernel_stats
from trainprof.trace.kernel_class import KernelClass, name_class
from trainprof.trace.load import load_file

COMM, TC, COMPUTE = KernelClass.COMMUNICATION, KernelClass.TENSOR_CORE, KernelClass.COMPUTE


@pytest.mark.parametrize("name, expected", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", COMM),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", COMM),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", COMM),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", COMM),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*, int*)", COMM),
    ("void deep_ep::internode::cached_notify(int, int)", COMM),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", COMM),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<bf16>", COMM),
    ("void mscclpp::allreduce7<__half>(__half*, mscclpp::DeviceHandle)", COMM),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**)", COMM),
    ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*)", COMM),
    ("void nvshmemi_transfer_rma_kernel<NVSHMEMI_OP_PUT>(void*)", COMM),
    ("void all_to_all_kernel<float>(float*)", COMM),
    ("rcclKernel_AllGather_RING_LL_Sum_int8_t", COMM),
    # Tensor Cores: CUTLASS 3 / CuTe persistent FP8 grouped GEMM, FA3, FA2, Hopper and
    # Blackwell cuBLAS, Triton templates, cuDNN fused attention, AMD Tensile and CK.
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::"
     "GroupProblemShape<cute::tuple<int, int, int>>, cutlass::gemm::collective::CollectiveMma<"
     "cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<3, cute::tuple<cute::C<1>>>>>>", TC),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
     "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>, 128>>>>(Params)", TC),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<128>>>", TC),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>", TC),
    ("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u>(__nv_bfloat16*, float*)", TC),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1", TC),
    ("sm100_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_cga2x1x1", TC),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32>", TC),
    ("triton_tem_fused_mm_0", TC),
    ("triton_red_fused_bmm_mul_3", TC),
    ("matmul_kernel", TC),  # Triton's tutorial matmul (tl.dot), kept by many projects
    ("_attn_fwd", TC),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", TC),
    ("void fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", TC),
    ("Cijk_Alik_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1", TC),
    ("Cijk_Ailk_Bljk_HHS_BH_MT256x256x64_MFMA_SE_K1", TC),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<bf16>>", TC),
    # FP32 on the CUDA cores, and known compute families.
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)", COMPUTE),
    ("volta_sgemm_128x64_nn", COMPUTE),
    ("triton_poi_fused_add_relu_0", COMPUTE),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", COMPUTE),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", COMPUTE),
])
def test_name_classes(name, expected):
    cls, known = name_class(name)
    assert cls == expected
    assert known


@pytest.mark.parametrize("name", ["my_custom_kernel", "void foo::bar<int>(int*)"])
def test_unknown_names_are_compute_and_unclassified(name):
    assert name_class(name) == (COMPUTE, False)


def test_launch_context_and_unclassified_shares(builder, tmp_path):
    """An unknown kernel launched under a collective op or a dispatch frame is communication;
    a known compute kernel launched there stays compute; an unknown one elsewhere is a guess."""
    builder.step(1, 0, 1000)
    builder.op("nccl:all_to_all", 10, 100)
    builder.launch(20, 5, name="exchange_tokens_v2", k_ts=200, k_dur=40)
    builder.launch(40, 5, name="void at::native::vectorized_elementwise_kernel<4>", k_ts=240,
                   k_dur=10)
    builder.event("python_function", "deep_ep/buffer.py(310): dispatch", 300, 100)
    builder.launch(320, 5, name="void moe::route_tokens_sm90<8>", k_ts=400, k_dur=60)
    builder.launch(500, 5, name="my_custom_kernel", k_ts=600, k_dur=30)
    builder.op("symm_mem::fused_all_gather_matmul", 540, 30)
    builder.launch(550, 5, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", k_ts=700, k_dur=60)
    stats = kernel_stats(load_file(builder.write(tmp_path / "t.json")))
    rows = {r.name: r for r in stats.rows}
    assert (rows["exchange_tokens_v2"].kernel_class,
            rows["exchange_tokens_v2"].classified_by) == ("communication", "launch")
    assert rows["exchange_tokens_v2"].communication
    assert rows["void moe::route_tokens_sm90<8>"].classified_by == "launch"
    elementwise = rows["void at::native::vectorized_elementwise_kernel<4>"]
    assert (elementwise.kernel_class, elementwise.classified_by) == ("compute", "name")
    # A GEMM launched inside a symmetric-memory op stays Tensor Core: its name is known.
    assert rows["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"].kernel_class == "tensor_core"
    assert (rows["my_custom_kernel"].kernel_class,
            rows["my_custom_kernel"].classified_by) == ("compute", "unclassified")
    c = stats.classes
    total = 40 + 10 + 60 + 30 + 60
    assert c.total_us == total
    assert c.class_us == {"compute": 40, "tensor_core": 60, "communication": 100}
    assert c.class_pct["communication"] == pytest.approx(100 / total * 100)
    assert c.by_launch_us == 100
    assert c.unclassified_us == 30
    assert [(u.name, u.calls, u.total_us) for u in c.unclassified] == [
        ("my_custom_kernel", 1, 30)]


@pytest.mark.parametrize("name", [
    # FBGEMM's FP8 quantisation: "fbgemm" and "FP8" in the name, no MMA.
    "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float*)",
    "void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_hfp8_gpu(at::Tensor"
    " const&, long, long, double)::{lambda(float)#1}>(int, float)",
    "void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*)",
    "ampere_gcgemm_64x64_nt",
])
def test_known_compute_that_looks_like_tensor_cores(name):
    assert name_class(name) == (COMPUTE, True)


def test_report_lines_name_the_shares_and_the_guesses(builder, tmp_path):
    from trainprof.report.sections.kernels import kernel_class_line, kernels_table

    builder.step(1, 0, 1000)
    builder.launch(10, 5, name="ncclDevKernel_AllReduce_Sum_f32", k_ts=100, k_dur=100)
    builder.launch(20, 5, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", k_ts=200, k_dur=200)
    builder.launch(30, 5, name="my_custom_kernel", k_ts=400, k_dur=700)
    stats = kernel_stats(load_file(builder.write(tmp_path / "t.json")))
    assert kernel_class_line(stats) == (
        "Kernel classes: communication 10.0%, Tensor Core 20.0%, other compute 70.0%; "
        "unclassified (counted as compute) 70.0%: my_custom_kernel 0.70 ms")
    table = kernels_table(stats)
    assert table.caption.endswith("unclassified (counted as compute) 70.0%")
    classes = {row[0].text: row[7].text for row in table.rows}
    assert classes["my_custom_kernel"] == "compute (unclassified)"


CASELESS = ["_COMMUNICATION", "_TENSOR_CORE", "_CUDA_CORES", "_KNOWN_COMPUTE", "_COMM_FRAME",
            "_PERSISTENT", "FUSED_ATTENTION", "_ROCM_MATRIX_CORES", "_ROCM_VECTOR"]


def shared_kernel_names() -> list[str]:
    names = set()
    for path in ["tests/data/traces/hta/tests/data/df_index_resolver/df_index_resolver.json.gz",
                 "tests/data/traces/tracelens/tests/traces/h100/"
                 "gaunernst_bert-small-uncased__1016001.json.gz"]:
        names.update(load_file(path).events.names)
    return sorted(names)


def test_caseless_patterns_agree_with_ignorecase_on_every_name():
    """The lower-cased ASCII search finds what re.IGNORECASE finds: on every event name of two
    real traces, the names above in mixed case, and names with non-ASCII letters (which take
    the IGNORECASE path: the Kelvin sign and the long s fold to k and s there only)."""
    import re

    from trainprof.trace import kernel_class

    names = shared_kernel_names()
    names += [n.swapcase() for n in names] + [n.upper() for n in names]
    names += ["SM90_XMMA_GEMM_BF16", "void Deep_EP::InterNode::Dispatch<8>()", "FLASH_FWD",
              "\u212aernel flash_fwd", "all_gather_\u017fum", "ncclKernel_\u00e9t\u00e9",
              "\u017fimt_sgemm", "NCCL", "triton_MM_0", "Stream_K_persistent", "x.py(3): Dispatch "]
    hits = 0
    for attr in CASELESS:
        fast = getattr(kernel_class, attr)
        reference = re.compile(fast.pattern, re.IGNORECASE)
        for name in names:
            expected = bool(reference.search(name))
            assert bool(fast.search(name)) == expected, (attr, name)
            hits += expected
    assert hits > 100  # the names do match, so the agreement is not only on misses


def test_a_caseless_pattern_refuses_upper_case_letters():
    from trainprof.trace.kernel_class import CaselessPattern

    with pytest.raises(ValueError, match="upper-case"):
        CaselessPattern(r"ncclKernel")
    assert CaselessPattern(r"\Wnccl\d").search("x NCCL2")


# Kernel names as MI300X (gfx942) traces of PyTorch on ROCm show them: the Triton flash attention
# of SDPA and flash_attn is launched by hipExtModuleLaunchKernel as the code object's symbol
# (``attn_fwd.kd``); MIOpen names come from its solvers (ConvAsmImplicitGemmGTCDynamic*Xdlops:
# ``igemm_*_gtcx3_*``), its OpenCL kernels and its tensor ops (SubTensorOpWithCastTensor<N>d is
# the cast kernel of miopenTransformTensor); hipBLASLt/Tensile GEMMs are ``Cijk_*`` with the MFMA
# instruction in the ``MI`` tile.
@pytest.mark.parametrize("name, expected", [
    ("attn_fwd.kd", TC),
    ("attn_bwd.kd", TC),
    ("_attn_fwd.kd", TC),
    ("fmha_fwd_hd128_bf16_causal_a32_rtz.kd", TC),
    ("void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVS>>", TC),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_"
     "tb1x8x2x1_1x4x1x64_gkgs", TC),
    ("igemm_wrw_gtcx3_nhwc_fp16_bx0_ex0_bt256x128x32_wt32x32x8_ws2x1_wr2x2_ta1x4x4x1_1x8x1x32_"
     "tb1x4x2x1_1x8x1x32_gkgs", TC),
    ("igemm_bwd_gtcx35_nhwc_fp32_bx0_ex1_bt64x64x16_wt16x16x4_ws1x1_wr2x2", TC),
    ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1_SN_1LDSB0_AFC1_AFEM1_ASEM1_CLR1_CADS0_"
     "DTVA0_DTVB0_EPS1_GRVWA8_GRVWB8_GSU1_GSUASB_ISA942_IU1_K1_LBSPPA128_LPA0_LPB0_LDL1", TC),
    ("Cijk_Alik_Bljk_BBS_BH_MT128x128x32_MI16x16x16x1_SN_LDSB1_WGM8.kd", TC),
    # No MMA: MIOpen's casts, tensor ops, batch norm, naive and Winograd convolutions, non-XDLOPS
    # implicit GEMM, a Tensile fp32 GEMM without an MFMA tile.
    ("SubTensorOpWithCastTensor1d", COMPUTE),
    ("SubTensorOpWithCastTensor4d", COMPUTE),
    ("SubTensorOpWithScalar2d", COMPUTE),
    ("Op2dTensorGeneric", COMPUTE),
    ("OpTensorFwdBias", COMPUTE),
    ("MIOpenBatchNormFwdTrainSpatial", COMPUTE),
    ("MIOpenBatchNormBwdSpatial", COMPUTE),
    ("MIOpenConv1x1", COMPUTE),
    ("naive_conv_ab_nonpacked_fwd_nchw_half_double_half", COMPUTE),
    ("naive_conv_ab_nonpacked_wrw_nhwc_float_double_float", COMPUTE),
    ("miopenSp3AsmConv_v30_3_1_gfx9_fp32_f2x3_stride1", COMPUTE),
    ("igemm_v4r1_dynamic_wrw", COMPUTE),
    ("Cijk_Alik_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT8x8x8_SN_LDSB0.kd", COMPUTE),
    ("triton_poi_fused_add_0.kd", COMPUTE),
])
def test_rocm_kernel_classes(name, expected):
    """AMD matrix-core kernels are Tensor Core class, and every name is of a known family."""
    assert name_class(name) == (expected, True)


@pytest.fixture(scope="module")
def real_kernel_names() -> list[str]:
    from trainprof.trace.model import Kind

    from helpers.paths import SHARED_TRACE_FILES

    names: set[str] = set()
    for path in SHARED_TRACE_FILES:
        ev = load_file(path).events
        names.update(ev.names[i] for i in set(ev.name[ev.kind == Kind.KERNEL].tolist()))
    return sorted(names)


def test_the_amd_families_leave_every_real_kernel_name_as_it_was(real_kernel_names):
    """The real traces are NVIDIA ones: no kernel name of theirs is of an AMD family, so the
    AMD patterns change the class of none of them (454 names at the time of writing)."""
    from trainprof.trace import kernel_class

    assert len(real_kernel_names) > 400
    for attr in ("_ROCM_MATRIX_CORES", "_ROCM_VECTOR"):
        pattern = getattr(kernel_class, attr)
        assert [n for n in real_kernel_names if pattern.search(n)] == [], attr
    assert not [n for n in real_kernel_names if n.endswith(kernel_class.CODE_OBJECT_SUFFIX)]
