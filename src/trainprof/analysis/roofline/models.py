"""FLOPs and bytes moved of one op call, from its recorded shapes, dtypes and scalar arguments.

Each model reads the op's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (recorded with
``record_shapes=True``) and returns an ``OpCost``, or None when the op is not modelled or its
arguments do not fit. Bytes count each input read once and each output written once (the
ideal of a kernel with perfect reuse); docs/roofline.md gives every formula and where it
differs from TraceLens's performance models.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from trainprof.analysis.roofline import attention as att
from trainprof.analysis.roofline import matmul as mat
from trainprof.analysis.roofline.cost import OpCost, dtype_info

__all__ = ["MATRIX_CLASSES", "MODELS", "OP_CLASSES", "OpCost", "dtype_info", "model_for",
           "op_cost"]

#: Op classes, in the order reports list them.
OP_CLASSES = ("gemm", "conv_fwd", "conv_bwd", "attention_fwd", "attention_bwd", "norm",
              "softmax", "elementwise")
#: The op classes that run on matrix units (Tensor Cores / matrix cores) when the dtype allows.
MATRIX_CLASSES = frozenset({"gemm", "conv_fwd", "conv_bwd", "attention_fwd", "attention_bwd"})


Model = Callable[[list[Any], list[Any], Any], OpCost | None]
_ELEMENTWISE = ("add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "gelu", "relu",
                "silu", "sigmoid", "tanh", "gelu_backward", "silu_backward",
                "threshold_backward", "sigmoid_backward", "tanh_backward", "relu_", "silu_",
                "neg", "exp", "rsqrt", "pow", "where", "native_dropout")
#: ``aten::`` op name -> its model.
MODELS: dict[str, Model] = {
    "mm": mat.mm, "addmm": mat.addmm, "bmm": mat.bmm, "baddbmm": mat.baddbmm, "matmul": mat.matmul,
    "linear": mat.linear, "_scaled_mm": mat.scaled_mm, "_grouped_mm": mat.grouped_mm,
    "_scaled_grouped_mm": mat.grouped_mm,
    "convolution": mat.convolution, "_convolution": mat.convolution,
    "cudnn_convolution": mat.convolution, "convolution_backward": mat.convolution_backward,
    "cudnn_convolution_backward": mat.cudnn_convolution_backward,
    "scaled_dot_product_attention": att.sdpa,
    "_scaled_dot_product_flash_attention": att.sdpa_flash,
    "_scaled_dot_product_cudnn_attention": att.sdpa_efficient,
    "_scaled_dot_product_efficient_attention": att.sdpa_efficient,
    "_scaled_dot_product_flash_attention_backward": att.sdpa_flash_backward,
    "_scaled_dot_product_efficient_attention_backward": att.sdpa_efficient_backward,
    "_scaled_dot_product_cudnn_attention_backward": att.sdpa_efficient_backward,
    "_flash_attention_forward": att.flash_forward, "_flash_attention_backward": att.flash_backward,
    "_efficient_attention_forward": att.efficient_forward,
    "flash_attn::_flash_attn_forward": att.flash_attn_forward,
    "flash_attn::_flash_attn_backward": att.flash_backward,
    "layer_norm": att.layer_norm, "native_layer_norm": att.layer_norm, "rms_norm": att.layer_norm,
    "_fused_rms_norm": att.layer_norm, "native_layer_norm_backward": att.layer_norm_backward,
    "softmax": att.softmax, "_softmax": att.softmax, "_softmax_backward_data": att.softmax_backward,
    **dict.fromkeys(_ELEMENTWISE, att.elementwise),
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
