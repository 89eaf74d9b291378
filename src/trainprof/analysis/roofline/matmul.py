"""FLOPs and bytes of matrix multiplications and convolutions (docs/roofline.md)."""

from __future__ import annotations

import math
from typing import Any

from trainprof.analysis.roofline.cost import OpCost, concrete_ints, is_shape, known_dtype, numel

#: FP8 GEMMs (_scaled_mm) write bf16 unless told otherwise (its out_dtype is not recorded).
FP8_OUTPUT_BYTES = 2


# -- matrix multiplications ----------------------------------------------------------------


def _gemm(m: int, n: int, k: int, batch: int, es_in: int, es_out: int, dtype: str,
          bias: int = 0, bias_es: int = 0) -> OpCost:
    flops = 2.0 * batch * m * n * k + (batch * m * n if bias else 0)
    nbytes = batch * ((m * k + k * n) * es_in + m * n * es_out) + bias * bias_es
    label = f"M={m} N={n} K={k}" + (f" B={batch}" if batch != 1 else "")
    return OpCost("gemm", flops, float(nbytes), dtype, label)


def mm(dims: Any, types: Any, values: Any) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) != 2 or len(b) != 2:
        return None
    es, dt = known_dtype(types[0])
    return _gemm(a[0], b[1], a[1], 1, es, es, dt)


def addmm(dims: Any, types: Any, values: Any) -> OpCost | None:
    c, a, b = dims[0], dims[1], dims[2]
    if len(a) != 2 or len(b) != 2:
        return None
    es, dt = known_dtype(types[1])
    return _gemm(a[0], b[1], a[1], 1, es, es, dt, bias=numel(c) or 0, bias_es=es)


def bmm(dims: Any, types: Any, values: Any) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) != 3 or len(b) != 3:
        return None
    es, dt = known_dtype(types[0])
    return _gemm(a[1], b[2], a[2], a[0], es, es, dt)


def baddbmm(dims: Any, types: Any, values: Any) -> OpCost | None:
    c, a, b = dims[0], dims[1], dims[2]
    if len(a) != 3 or len(b) != 3:
        return None
    es, dt = known_dtype(types[1])
    return _gemm(a[1], b[2], a[2], a[0], es, es, dt, bias=numel(c), bias_es=es)


def matmul(dims: Any, types: Any, values: Any) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) < 2 or len(b) < 1:
        return None
    es, dt = known_dtype(types[0])
    if len(b) == 1:  # matrix-vector
        return _gemm(math.prod(a[:-1]), 1, a[-1], 1, es, es, dt)
    if len(b) == 2:  # leading dims of a fold into M
        return _gemm(math.prod(a[:-1]), b[1], a[-1], 1, es, es, dt)
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    return _gemm(a[-2], b[-1], a[-1], batch, es, es, dt)


def linear(dims: Any, types: Any, values: Any) -> OpCost | None:
    x, w = dims[0], dims[1]
    if len(w) != 2 or not x:
        return None
    es, dt = known_dtype(types[0])
    bias = numel(dims[2]) if len(dims) > 2 and is_shape(dims[2]) else 0
    return _gemm(math.prod(x[:-1]), w[0], x[-1], 1, es, es, dt, bias=bias, bias_es=es)


def scaled_mm(dims: Any, types: Any, values: Any) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) != 2 or len(b) != 2:
        return None
    es, dt = known_dtype(types[0])
    return _gemm(a[0], b[1], a[1], 1, es, FP8_OUTPUT_BYTES if es == 1 else es, dt)


def grouped_mm(dims: Any, types: Any, values: Any) -> OpCost | None:
    """``_grouped_mm(A[T,K], B[G,K,N], offs)`` (tokens split among G experts) or 3-D x 3-D."""
    a, b = dims[0], dims[1]
    es, dt = known_dtype(types[0])
    if len(a) == 2 and len(b) == 3:
        t, k, g, n = a[0], a[1], b[0], b[2]
        cost = _gemm(t, n, k, 1, es, es, dt)
        weights = (g - 1) * k * n * es  # every expert's weight is read, not one
        return OpCost("gemm", cost.flops, cost.bytes + weights, dt, f"T={t} N={n} K={k} G={g}")
    if len(a) == 3 and len(b) == 3:
        return _gemm(a[1], b[2], a[2], a[0], es, es, dt)
    return None


# -- convolution -----------------------------------------------------------------------------


def convolution(dims: Any, types: Any, values: Any) -> OpCost | None:
    """``convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)``
    (and ``_convolution``, ``cudnn_convolution``... whose first six arguments agree)."""
    x, w = dims[0], dims[1]
    if len(x) < 3 or len(w) != len(x) or not isinstance(values, list) or len(values) < 6:
        return None
    nd = len(x) - 2
    stride, pad, dil = (concrete_ints(values[i], nd) for i in (3, 4, 5))
    if stride is None or pad is None or dil is None:
        return None
    if len(values) > 6 and str(values[6]).lower() in ("true", "1"):
        return None  # transposed convolution: not modelled
    out = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
           for i in range(nd)]
    if min(out) <= 0:
        return None
    es, dt = known_dtype(types[0])
    out_numel = x[0] * w[0] * math.prod(out)
    bias = numel(dims[2]) if len(dims) > 2 else 0
    flops = 2.0 * out_numel * math.prod(w[1:]) + (out_numel if bias else 0)  # w[1]: C_in/groups
    nbytes = (numel(x) + numel(w) + bias + out_numel) * es
    label = f"x={x} w={w} stride={stride[0]}"
    return OpCost("conv_fwd", flops, float(nbytes), dt, label)


def cudnn_convolution_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    """PyTorch 1.x's ``cudnn_convolution_backward(x, grad_out, w, ...)``: x comes first."""
    return convolution_backward([dims[1], dims[0], dims[2]], types, values)


def convolution_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    """``convolution_backward(grad_out, x, w, ...)``: input and weight gradients, each the
    forward's matmul work and its own kernel: one reads grad_out and w and writes grad_x, the
    other reads grad_out and x and writes grad_w."""
    gy, x, w = dims[0], dims[1], dims[2]
    if len(x) < 3 or len(gy) != len(x) or len(w) != len(x):
        return None
    es, dt = known_dtype(types[0])
    fwd = 2.0 * numel(gy) * math.prod(w[1:])
    nbytes = 2 * (numel(gy) + numel(x) + numel(w)) * es
    return OpCost("conv_bwd", 2 * fwd, float(nbytes), dt, f"x={x} w={w}")
