"""FLOPs and bytes moved of one op call, from its recorded shapes, dtypes and scalar arguments.

Each model reads the op's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (recorded with
``record_shapes=True``) and returns an ``OpCost``, or None when the op is not modelled or its
arguments do not fit. Bytes count each input read once and each output written once (the
ideal of a kernel with perfect reuse); docs/roofline.md gives every formula and where it
differs from TraceLens's performance models.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Op classes, in the order reports list them.
OP_CLASSES = ("gemm", "conv_fwd", "conv_bwd", "attention_fwd", "attention_bwd", "norm",
              "softmax", "elementwise")
#: The op classes that run on matrix units (Tensor Cores / matrix cores) when the dtype allows.
MATRIX_CLASSES = frozenset({"gemm", "conv_fwd", "conv_bwd", "attention_fwd", "attention_bwd"})

# Element size and the peak-table dtype of each recorded ``Input type``.
_DTYPES: dict[str, tuple[int, str]] = {
    "double": (8, "fp64"), "float": (4, "fp32"), "c10::half": (2, "fp16"),
    "c10::bfloat16": (2, "bf16"), "c10::float8_e4m3fn": (1, "fp8"),
    "c10::float8_e5m2": (1, "fp8"), "c10::float8_e4m3fnuz": (1, "fp8"),
    "c10::float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"),
    "unsigned char": (1, "int8"), "int": (4, "int32"), "long int": (8, "int64"),
    "bool": (1, "bool"),
}
#: Flops per element of the norms and softmax (mean, variance, normalise, scale, shift...).
NORM_FLOPS_PER_ELEMENT = 5
SOFTMAX_FLOPS_PER_ELEMENT = 5
#: A flash/memory-efficient attention backward does 2.5x the matmul work of its forward
#: (five matmuls against two; FlashAttention-2 paper).
ATTENTION_BWD_FACTOR = 2.5
#: FP8 GEMMs (_scaled_mm) write bf16 unless told otherwise (its out_dtype is not recorded).
FP8_OUTPUT_BYTES = 2


@dataclass(frozen=True)
class OpCost:
    """One call's work: its class, FLOPs, bytes read and written, and the dtype it computes in."""

    op_class: str
    flops: float
    bytes: float
    dtype: str  # peak-table dtype: fp32, bf16, fp8, ...
    dims: str  # a short shape label, e.g. "M=141 N=512 K=512"


def dtype_info(name: Any) -> tuple[int, str] | None:
    """(bytes per element, peak-table dtype) of an ``Input type`` entry, or None."""
    return _DTYPES.get(name.lower()) if isinstance(name, str) else None


def _numel(shape: Any) -> int:
    """Elements of a recorded shape; 0 for ``[]`` (a scalar, None or an absent tensor)."""
    return math.prod(shape) if isinstance(shape, list) and shape else 0


def _is_shape(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(d, int) and d >= 0 for d in x)


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[list[int], int, str]]:
    """The tensor arguments that have a known dtype: (shape, element size, dtype)."""
    out = []
    for shape, t in zip(dims, types, strict=False):
        info = dtype_info(t)
        if info is not None and _is_shape(shape) and shape:
            out.append((shape, info[0], info[1]))
    return out


# -- matrix multiplications ----------------------------------------------------------------


def _gemm(m: int, n: int, k: int, batch: int, es_in: int, es_out: int, dtype: str,
          bias: int = 0, bias_es: int = 0) -> OpCost:
    flops = 2.0 * batch * m * n * k + (batch * m * n if bias else 0)
    nbytes = batch * ((m * k + k * n) * es_in + m * n * es_out) + bias * bias_es
    label = f"M={m} N={n} K={k}" + (f" B={batch}" if batch != 1 else "")
    return OpCost("gemm", flops, float(nbytes), dtype, label)


def mm(dims, types, values) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) != 2 or len(b) != 2:
        return None
    es, dt = dtype_info(types[0])
    return _gemm(a[0], b[1], a[1], 1, es, es, dt)


def addmm(dims, types, values) -> OpCost | None:
    c, a, b = dims[0], dims[1], dims[2]
    if len(a) != 2 or len(b) != 2:
        return None
    es, dt = dtype_info(types[1])
    return _gemm(a[0], b[1], a[1], 1, es, es, dt, bias=_numel(c) or 0, bias_es=es)


def bmm(dims, types, values) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) != 3 or len(b) != 3:
        return None
    es, dt = dtype_info(types[0])
    return _gemm(a[1], b[2], a[2], a[0], es, es, dt)


def baddbmm(dims, types, values) -> OpCost | None:
    c, a, b = dims[0], dims[1], dims[2]
    if len(a) != 3 or len(b) != 3:
        return None
    es, dt = dtype_info(types[1])
    return _gemm(a[1], b[2], a[2], a[0], es, es, dt, bias=_numel(c), bias_es=es)


def matmul(dims, types, values) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) < 2 or len(b) < 1:
        return None
    es, dt = dtype_info(types[0])
    if len(b) == 1:  # matrix-vector
        return _gemm(math.prod(a[:-1]), 1, a[-1], 1, es, es, dt)
    if len(b) == 2:  # leading dims of a fold into M
        return _gemm(math.prod(a[:-1]), b[1], a[-1], 1, es, es, dt)
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    return _gemm(a[-2], b[-1], a[-1], batch, es, es, dt)


def linear(dims, types, values) -> OpCost | None:
    x, w = dims[0], dims[1]
    if len(w) != 2 or not x:
        return None
    es, dt = dtype_info(types[0])
    bias = _numel(dims[2]) if len(dims) > 2 and _is_shape(dims[2]) else 0
    return _gemm(math.prod(x[:-1]), w[0], x[-1], 1, es, es, dt, bias=bias, bias_es=es)


def scaled_mm(dims, types, values) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) != 2 or len(b) != 2:
        return None
    es, dt = dtype_info(types[0])
    return _gemm(a[0], b[1], a[1], 1, es, FP8_OUTPUT_BYTES if es == 1 else es, dt)


def grouped_mm(dims, types, values) -> OpCost | None:
    """``_grouped_mm(A[T,K], B[G,K,N], offs)`` (tokens split among G experts) or 3-D x 3-D."""
    a, b = dims[0], dims[1]
    es, dt = dtype_info(types[0])
    if len(a) == 2 and len(b) == 3:
        t, k, g, n = a[0], a[1], b[0], b[2]
        cost = _gemm(t, n, k, 1, es, es, dt)
        weights = (g - 1) * k * n * es  # every expert's weight is read, not one
        return OpCost("gemm", cost.flops, cost.bytes + weights, dt, f"T={t} N={n} K={k} G={g}")
    if len(a) == 3 and len(b) == 3:
        return _gemm(a[1], b[2], a[2], a[0], es, es, dt)
    return None


# -- convolution -----------------------------------------------------------------------------


def _ints(value: Any, n: int) -> list[int] | None:
    """A concrete list argument ("[1, 1]") as n ints (a single value repeats)."""
    if isinstance(value, str):
        found = [int(v) for v in re.findall(r"-?\d+", value)]
    elif isinstance(value, list):
        found = [v for v in value if isinstance(v, int)]
    else:
        return None
    if len(found) == 1:
        found = found * n
    return found if len(found) == n else None


def convolution(dims, types, values) -> OpCost | None:
    """``convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)``
    (and ``_convolution``, ``cudnn_convolution``... whose first six arguments agree)."""
    x, w = dims[0], dims[1]
    if len(x) < 3 or len(w) != len(x) or not isinstance(values, list) or len(values) < 6:
        return None
    nd = len(x) - 2
    stride, pad, dil = (_ints(values[i], nd) for i in (3, 4, 5))
    if stride is None or pad is None or dil is None:
        return None
    if len(values) > 6 and str(values[6]).lower() in ("true", "1"):
        return None  # transposed convolution: not modelled
    out = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
           for i in range(nd)]
    if min(out) <= 0:
        return None
    es, dt = dtype_info(types[0])
    out_numel = x[0] * w[0] * math.prod(out)
    bias = _numel(dims[2]) if len(dims) > 2 else 0
    flops = 2.0 * out_numel * math.prod(w[1:]) + (out_numel if bias else 0)  # w[1]: C_in/groups
    nbytes = (_numel(x) + _numel(w) + bias + out_numel) * es
    label = f"x={x} w={w} stride={stride[0]}"
    return OpCost("conv_fwd", flops, float(nbytes), dt, label)


def cudnn_convolution_backward(dims, types, values) -> OpCost | None:
    """PyTorch 1.x's ``cudnn_convolution_backward(x, grad_out, w, ...)``: x comes first."""
    return convolution_backward([dims[1], dims[0], dims[2]], types, values)


def convolution_backward(dims, types, values) -> OpCost | None:
    """``convolution_backward(grad_out, x, w, ...)``: input and weight gradients, each the
    forward's matmul work and its own kernel: one reads grad_out and w and writes grad_x, the
    other reads grad_out and x and writes grad_w."""
    gy, x, w = dims[0], dims[1], dims[2]
    if len(x) < 3 or len(gy) != len(x) or len(w) != len(x):
        return None
    es, dt = dtype_info(types[0])
    fwd = 2.0 * _numel(gy) * math.prod(w[1:])
    nbytes = 2 * (_numel(gy) + _numel(x) + _numel(w)) * es
    return OpCost("conv_bwd", 2 * fwd, float(nbytes), dt, f"x={x} w={w}")


# -- attention -------------------------------------------------------------------------------


def _attention(dims, types, values, causal_at: int, backward: bool,
               seq_first: bool = False) -> OpCost | None:
    """q[B,H,Sq,D], k[B,Hk,Sk,D], v[B,Hk,Sk,Dv] (grad_out first in the backward);
    ``seq_first``: the kernels' own [B,S,H,D] layout."""
    q, k, v = (dims[1:4] if backward else dims[0:3])
    if not (len(q) == len(k) == len(v) == 4):
        return None
    if seq_first:
        q, k, v = ([t[0], t[2], t[1], t[3]] for t in (q, k, v))
    b, h, sq, d = q
    sk, dv = k[2], v[3]
    es, dt = dtype_info(types[1 if backward else 0])
    causal = (isinstance(values, list) and len(values) > causal_at
              and str(values[causal_at]).lower() in ("true", "1"))
    flops = 2.0 * b * h * sq * sk * (d + dv) / (2 if causal else 1)
    out = b * h * sq * dv
    qkv = _numel(q) + _numel(k) + _numel(v)
    label = f"B={b} H={h} Sq={sq} Sk={sk} D={d}" + (" causal" if causal else "")
    if backward:
        return OpCost("attention_bwd", ATTENTION_BWD_FACTOR * flops,
                      float((2 * qkv + 2 * out) * es), dt, label)
    return OpCost("attention_fwd", flops, float((qkv + out) * es), dt, label)


def sdpa(dims, types, values) -> OpCost | None:
    # (q, k, v, attn_mask, dropout_p, is_causal, ...): is_causal is the sixth argument.
    return _attention(dims, types, values, 5, backward=False)


def sdpa_flash(dims, types, values) -> OpCost | None:
    # _scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, ...)
    return _attention(dims, types, values, 4, backward=False)


def sdpa_efficient(dims, types, values) -> OpCost | None:
    # _scaled_dot_product_efficient_attention(q, k, v, attn_bias, compute_lse, dropout_p,
    # is_causal, ...)
    return _attention(dims, types, values, 6, backward=False)


def sdpa_flash_backward(dims, types, values) -> OpCost | None:
    # (grad_out, q, k, v, out, logsumexp, cum_q, cum_k, max_q, max_k, dropout_p, is_causal,...)
    return _attention(dims, types, values, 11, backward=True)


def sdpa_efficient_backward(dims, types, values) -> OpCost | None:
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    # grad_input_mask, is_causal, ...)
    return _attention(dims, types, values, 11, backward=True)


def flash_forward(dims, types, values) -> OpCost | None:
    # aten::_flash_attention_forward(q, k, v, cum_q, cum_k, max_q, max_k, dropout_p,
    # is_causal, ...), [B,S,H,D]
    return _attention(dims, types, values, 8, backward=False, seq_first=True)


def flash_backward(dims, types, values) -> OpCost | None:
    # aten::_flash_attention_backward(grad_out, q, k, v, out, logsumexp, cum_q, cum_k, max_q,
    # max_k, dropout_p, is_causal, ...); flash_attn::_flash_attn_backward(dout, q, k, v, out,
    # lse, dq, dk, dv, dropout_p, softmax_scale, causal, ...): both [B,S,H,D], causal 12th
    return _attention(dims, types, values, 11, backward=True, seq_first=True)


def efficient_forward(dims, types, values) -> OpCost | None:
    # aten::_efficient_attention_forward(q, k, v, bias, cu_q, cu_k, max_q, max_k, dropout_p,
    # custom_mask_type, ...), [B,S,H,D]; custom_mask_type 1 or 2 is causal
    causal = isinstance(values, list) and len(values) > 9 and str(values[9]) in ("1", "2")
    return _attention(dims, types, [""] * 9 + [str(causal)], 9, backward=False,
                      seq_first=True)


def flash_attn_forward(dims, types, values) -> OpCost | None:
    # flash_attn::_flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, ...)
    return _attention(dims, types, values, 5, backward=False, seq_first=True)


# -- memory-bound ops ------------------------------------------------------------------------


def _streaming(op_class: str, reads: int, writes: int, es: int, dt: str, flops_per: float,
               elements: int, label: str) -> OpCost:
    return OpCost(op_class, float(flops_per * elements), float((reads + writes) * es), dt, label)


def layer_norm(dims, types, values) -> OpCost | None:
    """(native_)layer_norm / rms_norm(x, normalized_shape, weight, ...): read x and the
    weights, write y (the per-row statistics are negligible)."""
    x = dims[0]
    es, dt = dtype_info(types[0])
    n = _numel(x)
    params = sum(_numel(s) for s in dims[2:4] if _is_shape(s))
    return _streaming("norm", n + params, n, es, dt, NORM_FLOPS_PER_ELEMENT, n, str(x))


def layer_norm_backward(dims, types, values) -> OpCost | None:
    """native_layer_norm_backward(grad_out, x, ...): read dy and x, write dx (and the
    weight gradients)."""
    x = dims[0]
    es, dt = dtype_info(types[0])
    n = _numel(x)
    params = sum(_numel(s) for s in dims[4:6] if _is_shape(s))
    return _streaming("norm", 2 * n + params, n + params, es, dt, 2 * NORM_FLOPS_PER_ELEMENT,
                      n, str(x))


def softmax(dims, types, values) -> OpCost | None:
    x = dims[0]
    es, dt = dtype_info(types[0])
    n = _numel(x)
    return _streaming("softmax", n, n, es, dt, SOFTMAX_FLOPS_PER_ELEMENT, n, str(x))


def softmax_backward(dims, types, values) -> OpCost | None:
    """_softmax_backward_data(grad_out, out, ...): read both, write the input gradient."""
    x = dims[0]
    es, dt = dtype_info(types[0])
    n = _numel(x)
    return _streaming("softmax", 2 * n, n, es, dt, 3, n, str(x))


def elementwise(dims, types, values) -> OpCost | None:
    """Unary and binary pointwise ops: read every tensor input, write the broadcast output;
    one FLOP per output element."""
    tensors = _tensors(dims, types)
    if not tensors:
        return None
    out_shape = _broadcast([s for s, _, _ in tensors])
    if out_shape is None:
        return None
    es, dt = tensors[0][1], tensors[0][2]
    n = math.prod(out_shape)
    reads = sum(math.prod(s) * e for s, e, _ in tensors)
    return OpCost("elementwise", float(n), float(reads + n * es), dt, str(out_shape))


def _broadcast(shapes: list[list[int]]) -> list[int] | None:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(1, rank + 1):
        sizes = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out[::-1]


Model = Callable[[list[Any], list[Any], Any], OpCost | None]
_ELEMENTWISE = ("add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "gelu", "relu",
                "silu", "sigmoid", "tanh", "gelu_backward", "silu_backward",
                "threshold_backward", "sigmoid_backward", "tanh_backward", "relu_", "silu_",
                "neg", "exp", "rsqrt", "pow", "where", "native_dropout", "mul.Tensor")
#: ``aten::`` op name -> its model.
MODELS: dict[str, Model] = {
    "mm": mm, "addmm": addmm, "bmm": bmm, "baddbmm": baddbmm, "matmul": matmul,
    "linear": linear, "_scaled_mm": scaled_mm, "_grouped_mm": grouped_mm,
    "_scaled_grouped_mm": grouped_mm,
    "convolution": convolution, "_convolution": convolution,
    "cudnn_convolution": convolution, "convolution_backward": convolution_backward,
    "cudnn_convolution_backward": cudnn_convolution_backward,
    "scaled_dot_product_attention": sdpa,
    "_scaled_dot_product_flash_attention": sdpa_flash,
    "_scaled_dot_product_cudnn_attention": sdpa_efficient,
    "_scaled_dot_product_efficient_attention": sdpa_efficient,
    "_scaled_dot_product_flash_attention_backward": sdpa_flash_backward,
    "_scaled_dot_product_efficient_attention_backward": sdpa_efficient_backward,
    "_scaled_dot_product_cudnn_attention_backward": sdpa_efficient_backward,
    "_flash_attention_forward": flash_forward, "_flash_attention_backward": flash_backward,
    "_efficient_attention_forward": efficient_forward,
    "flash_attn::_flash_attn_forward": flash_attn_forward,
    "flash_attn::_flash_attn_backward": flash_backward,
    "layer_norm": layer_norm, "native_layer_norm": layer_norm, "rms_norm": layer_norm,
    "_fused_rms_norm": layer_norm, "native_layer_norm_backward": layer_norm_backward,
    "softmax": softmax, "_softmax": softmax, "_softmax_backward_data": softmax_backward,
    **dict.fromkeys(_ELEMENTWISE, elementwise),
}


def model_for(op_name: str) -> Model | None:
    """The model of an op (``aten::mm`` or ``mm``; ``flash_attn::`` ops by their full
    name), or None when it is not modelled."""
    return MODELS.get(op_name.removeprefix("aten::"))


def op_cost(op_name: str, dims: Any, types: Any, values: Any = None) -> OpCost | None:
    """The work of one call, or None when the op is not modelled or its arguments do not fit
    (missing shapes, an unknown dtype)."""
    model = model_for(op_name)
    if model is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    first = next((t for t in types if dtype_info(t) is not None), None)
    if first is None:
        return None
    try:
        cost = model(dims, types, values)
        if cost is None or not (0 <= cost.flops < math.inf and 0 < cost.bytes < math.inf):
            return None
    except (IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None  # a malformed or hostile argument list: not modelled
    return cost
