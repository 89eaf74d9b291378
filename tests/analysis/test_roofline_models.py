"""FLOPs and bytes of each op class against hand-computed values."""

from __future__ import annotations

import pytest

from trainprof.analysis.roofline.models import op_cost

BF16, F32, F8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


def test_mm_is_2mnk_and_reads_both_writes_one():
    c = op_cost("aten::mm", [[64, 128], [128, 32]], [BF16, BF16])
    assert c.op_class == "gemm" and c.dtype == "bf16"
    assert c.flops == 2 * 64 * 32 * 128  # 524,288
    assert c.bytes == (64 * 128 + 128 * 32 + 64 * 32) * 2  # 28,672


def test_addmm_adds_the_bias_like_tracelens():
    # TraceLens GEMM.csv, bert-small: M=141 N=512 K=512 with bias: 0.0739968 GFLOPs,
    # 0.7763671875 MB (2**20) moved.
    c = op_cost("aten::addmm", [[512], [141, 512], [512, 512], [], []],
                [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1", "1"])
    assert c.flops == 73_996_800
    assert c.bytes == 0.7763671875 * 2**20


def test_bmm_and_baddbmm_scale_by_the_batch():
    c = op_cost("aten::bmm", [[4, 8, 16], [4, 16, 2]], [F32, F32])
    assert c.flops == 4 * 2 * 8 * 2 * 16
    assert c.bytes == 4 * (8 * 16 + 16 * 2 + 8 * 2) * 4
    c = op_cost("aten::baddbmm", [[4, 8, 2], [4, 8, 16], [4, 16, 2]], [F32, F32, F32])
    assert c.flops == 4 * 2 * 8 * 2 * 16 + 4 * 8 * 2
    assert c.bytes == (4 * (8 * 16 + 16 * 2 + 8 * 2) + 4 * 8 * 2) * 4


def test_linear_folds_leading_dims_into_m():
    c = op_cost("aten::linear", [[2, 10, 64], [32, 64], [32]], [BF16, BF16, BF16])
    m = 20
    assert c.flops == 2 * m * 32 * 64 + m * 32
    assert c.bytes == (m * 64 + 64 * 32 + m * 32 + 32) * 2
    assert c.dims == "M=20 N=32 K=64"


def test_matmul_batched_and_with_a_matrix():
    c = op_cost("aten::matmul", [[3, 5, 7], [7, 11]], [F32, F32])
    assert c.flops == 2 * 15 * 11 * 7
    c = op_cost("aten::matmul", [[2, 3, 5, 7], [2, 3, 7, 11]], [F32, F32])
    assert c.flops == 6 * 2 * 5 * 11 * 7


def test_scaled_mm_reads_fp8_and_writes_bf16():
    c = op_cost("aten::_scaled_mm", [[128, 256], [256, 64], [], []], [F8, F8, F32, F32])
    assert c.dtype == "fp8" and c.flops == 2 * 128 * 64 * 256
    assert c.bytes == 128 * 256 + 256 * 64 + 128 * 64 * 2


def test_grouped_mm_reads_every_expert_weight():
    c = op_cost("aten::_grouped_mm", [[1000, 64], [8, 64, 32], [8]], [BF16, BF16, "int"])
    assert c.flops == 2 * 1000 * 32 * 64
    assert c.bytes == (1000 * 64 + 8 * 64 * 32 + 1000 * 32) * 2


def test_convolution_output_from_stride_padding_dilation():
    # 3x3, stride 2, padding 1 on 32x32: out 16x16.
    c = op_cost("aten::convolution", [[8, 16, 32, 32], [64, 16, 3, 3], [64], [], [], [], [],
                                      [], []],
                [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar",
                 "ScalarList", "Scalar"],
                ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    out = 8 * 64 * 16 * 16
    assert c.op_class == "conv_fwd"
    assert c.flops == 2 * out * 16 * 3 * 3 + out  # the bias adds one per output element
    assert c.bytes == (8 * 16 * 32 * 32 + 64 * 16 * 9 + 64 + out) * 4


def test_convolution_backward_is_twice_the_forward_work():
    c = op_cost("aten::convolution_backward", [[8, 64, 16, 16], [8, 16, 32, 32], [64, 16, 3, 3]],
                [BF16, BF16, BF16])
    fwd = 2 * (8 * 64 * 16 * 16) * 16 * 9
    assert c.op_class == "conv_bwd" and c.flops == 2 * fwd
    assert c.bytes == 2 * (8 * 64 * 256 + 8 * 16 * 1024 + 64 * 16 * 9) * 2


def test_attention_forward_matches_tracelens_and_halves_when_causal():
    # TraceLens SDPA_fwd.csv, bert-small: B=1 H=8 N=141 d=64: 0.040716288 GFLOPs, 0.55078125 MB.
    q = [1, 8, 141, 64]
    c = op_cost("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []],
                [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""],
                ["", "", "", "0.", "False", "False", ""])
    assert c.op_class == "attention_fwd"
    assert c.flops == 40_716_288 and c.bytes == 0.55078125 * 2**20
    causal = op_cost("aten::scaled_dot_product_attention", [q, q, q, [], [], []],
                     [BF16, BF16, BF16, "", "Scalar", "Scalar"],
                     ["", "", "", "", "0.", "True"])
    assert causal.flops == 40_716_288 / 2


def test_attention_backward_is_two_and_a_half_forwards():
    q = [2, 4, 128, 64]
    c = op_cost("aten::_scaled_dot_product_flash_attention_backward",
                [q, q, q, q, q, [2, 4, 128]], [BF16] * 6)
    fwd = 4 * 2 * 4 * 128 * 128 * 64
    n = 2 * 4 * 128 * 64
    assert c.op_class == "attention_bwd" and c.flops == 2.5 * fwd
    assert c.bytes == (2 * 3 * n + 2 * n) * 2


def test_norms_softmax_and_elementwise_stream_their_tensors():
    x = [4, 256, 1024]
    n = 4 * 256 * 1024
    ln = op_cost("aten::native_layer_norm", [x, [], [1024], [1024], []],
                 [BF16, "ScalarList", BF16, BF16, "Scalar"])
    assert ln.op_class == "norm" and ln.bytes == (2 * n + 2 * 1024) * 2 and ln.flops == 5 * n
    sm = op_cost("aten::_softmax", [x, [], []], [F32, "Scalar", "Scalar"])
    assert sm.op_class == "softmax" and sm.bytes == 2 * n * 4 and sm.flops == 5 * n
    add = op_cost("aten::add", [x, [1024], []], [BF16, BF16, "Scalar"])
    assert add.op_class == "elementwise" and add.flops == n
    assert add.bytes == (n + 1024 + n) * 2  # the bias row is broadcast, read once
    gelu = op_cost("aten::gelu", [x, []], [BF16, "String"])
    assert gelu.bytes == 2 * n * 2


@pytest.mark.parametrize("name, dims, types", [
    ("aten::view", [[2, 3]], [F32]),  # not modelled
    ("aten::mm", [[2, 3]], [F32]),  # too few inputs
    ("aten::mm", [[2, 3], [3, 4]], ["Scalar", "Scalar"]),  # no known dtype
    ("aten::add", [[2, 3], [4, 5]], [F32, F32]),  # shapes do not broadcast
    ("aten::mm", "not a list", [F32]),
])
def test_ops_that_do_not_fit_are_left_out(name, dims, types):
    assert op_cost(name, dims, types) is None


@pytest.mark.parametrize("name, dims, types, values", [
    ("aten::convolution", [[1, 3, 8, 8], [4, 3, 3, 3]] + [[]] * 7, [F32] * 2,
     ["", "", "", "[0, 0]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]),  # stride 0
    ("aten::mm", [[10**400, 2], [2, 3]], [F32, F32], None),  # beyond a float
    ("aten::mm", [[-4, 2], [2, 3]], [F32, F32], None),  # negative sizes
    ("aten::mm", [["a", 2], [2, 3]], [F32, F32], None),
])
def test_hostile_arguments_are_left_out(name, dims, types, values):
    assert op_cost(name, dims, types, values) is None


def test_linear_without_bias_and_rms_norm_count_no_absent_tensor():
    c = op_cost("aten::linear", [[8, 64], [32, 64], []], [BF16, BF16, ""])
    assert c.flops == 2 * 8 * 32 * 64 and c.bytes == (8 * 64 + 64 * 32 + 8 * 32) * 2
    rms = op_cost("aten::rms_norm", [[4, 1024], [], [1024], []],
                  [BF16, "ScalarList", BF16, "Scalar"])
    assert rms.bytes == (2 * 4096 + 1024) * 2


def test_flash_kernels_own_layout_is_batch_sequence_heads_dim():
    """_flash_attention_forward and flash_attn take [B, S, H, D]: the same work as SDPA's
    [B, H, S, D] once transposed."""
    bshd, bhsd = [2, 128, 4, 64], [2, 4, 128, 64]
    sdpa = op_cost("aten::_scaled_dot_product_flash_attention", [bhsd] * 3, [BF16] * 3)
    aten = op_cost("aten::_flash_attention_forward", [bshd] * 3 + [[]] * 6, [BF16] * 3,
                   ["", "", "", "", "", "128", "128", "0.", "False"])
    lib = op_cost("flash_attn::_flash_attn_forward", [bshd] * 3, [BF16] * 3,
                  ["", "", "", "0.", "0.125", "True"])
    assert aten.flops == sdpa.flops == 4 * 2 * 4 * 128 * 128 * 64 and aten.bytes == sdpa.bytes
    assert lib.flops == sdpa.flops / 2  # causal
    bwd = op_cost("aten::_flash_attention_backward", [bshd] * 5 + [[2, 4, 128]], [BF16] * 6)
    assert bwd.op_class == "attention_bwd" and bwd.flops == 2.5 * sdpa.flops


def test_pytorch_1_cudnn_convolution_backward_reads_x_first():
    """The 2021 ResNet traces: cudnn_convolution_backward(x, grad_out, w, ...)."""
    old = op_cost("aten::cudnn_convolution_backward",
                  [[32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1]], [F32] * 3)
    new = op_cost("aten::convolution_backward",
                  [[32, 2048, 7, 7], [32, 512, 7, 7], [2048, 512, 1, 1]], [F32] * 3)
    assert old == new
    assert old.flops == 2 * 2 * (32 * 2048 * 49) * 512
