"""FLOPs and bytes of attention, norms, softmax and elementwise ops (docs/roofline.md)."""

from __future__ import annotations

import math
from typing import Any

from trainprof.analysis.roofline.cost import OpCost, is_shape, known_dtype, numel, tensors

#: Flops per element of the norms and softmax (mean, variance, normalise, scale, shift...).
NORM_FLOPS_PER_ELEMENT = 5
SOFTMAX_FLOPS_PER_ELEMENT = 5
#: A flash/memory-efficient attention backward does 2.5x the matmul work of its forward
#: (five matmuls against two; FlashAttention-2 paper).
ATTENTION_BWD_FACTOR = 2.5


# -- attention -------------------------------------------------------------------------------


def _attention(dims: Any, types: Any, values: Any, causal_at: int, backward: bool,
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
    es, dt = known_dtype(types[1 if backward else 0])
    causal = (isinstance(values, list) and len(values) > causal_at
              and str(values[causal_at]).lower() in ("true", "1"))
    flops = 2.0 * b * h * sq * sk * (d + dv) / (2 if causal else 1)
    out = b * h * sq * dv
    qkv = numel(q) + numel(k) + numel(v)
    label = f"B={b} H={h} Sq={sq} Sk={sk} D={d}" + (" causal" if causal else "")
    if backward:
        return OpCost("attention_bwd", ATTENTION_BWD_FACTOR * flops,
                      float((2 * qkv + 2 * out) * es), dt, label)
    return OpCost("attention_fwd", flops, float((qkv + out) * es), dt, label)


def sdpa(dims: Any, types: Any, values: Any) -> OpCost | None:
    # (q, k, v, attn_mask, dropout_p, is_causal, ...): is_causal is the sixth argument.
    return _attention(dims, types, values, 5, backward=False)


def sdpa_flash(dims: Any, types: Any, values: Any) -> OpCost | None:
    # _scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, ...)
    return _attention(dims, types, values, 4, backward=False)


def sdpa_efficient(dims: Any, types: Any, values: Any) -> OpCost | None:
    # _scaled_dot_product_efficient_attention(q, k, v, attn_bias, compute_lse, dropout_p,
    # is_causal, ...)
    return _attention(dims, types, values, 6, backward=False)


def sdpa_flash_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    # (grad_out, q, k, v, out, logsumexp, cum_q, cum_k, max_q, max_k, dropout_p, is_causal,...)
    return _attention(dims, types, values, 11, backward=True)


def sdpa_efficient_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    # grad_input_mask, is_causal, ...)
    return _attention(dims, types, values, 11, backward=True)


def flash_forward(dims: Any, types: Any, values: Any) -> OpCost | None:
    # aten::_flash_attention_forward(q, k, v, cum_q, cum_k, max_q, max_k, dropout_p,
    # is_causal, ...), [B,S,H,D]
    return _attention(dims, types, values, 8, backward=False, seq_first=True)


def flash_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    # aten::_flash_attention_backward(grad_out, q, k, v, out, logsumexp, cum_q, cum_k, max_q,
    # max_k, dropout_p, is_causal, ...); flash_attn::_flash_attn_backward(dout, q, k, v, out,
    # lse, dq, dk, dv, dropout_p, softmax_scale, causal, ...): both [B,S,H,D], causal 12th
    return _attention(dims, types, values, 11, backward=True, seq_first=True)


def efficient_forward(dims: Any, types: Any, values: Any) -> OpCost | None:
    # aten::_efficient_attention_forward(q, k, v, bias, cu_q, cu_k, max_q, max_k, dropout_p,
    # custom_mask_type, ...), [B,S,H,D]; custom_mask_type 1 or 2 is causal
    causal = isinstance(values, list) and len(values) > 9 and str(values[9]) in ("1", "2")
    return _attention(dims, types, [""] * 9 + [str(causal)], 9, backward=False,
                      seq_first=True)


def flash_attn_forward(dims: Any, types: Any, values: Any) -> OpCost | None:
    # flash_attn::_flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, ...)
    return _attention(dims, types, values, 5, backward=False, seq_first=True)


# -- memory-bound ops ------------------------------------------------------------------------


def _streaming(op_class: str, reads: int, writes: int, es: int, dt: str, flops_per: float,
               elements: int, label: str) -> OpCost:
    return OpCost(op_class, float(flops_per * elements), float((reads + writes) * es), dt, label)


def layer_norm(dims: Any, types: Any, values: Any) -> OpCost | None:
    """(native_)layer_norm / rms_norm(x, normalized_shape, weight, ...): read x and the
    weights, write y (the per-row statistics are negligible)."""
    x = dims[0]
    es, dt = known_dtype(types[0])
    n = numel(x)
    params = sum(numel(s) for s in dims[2:4] if is_shape(s))
    return _streaming("norm", n + params, n, es, dt, NORM_FLOPS_PER_ELEMENT, n, str(x))


def layer_norm_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    """native_layer_norm_backward(grad_out, x, ...): read dy and x, write dx (and the
    weight gradients)."""
    x = dims[0]
    es, dt = known_dtype(types[0])
    n = numel(x)
    params = sum(numel(s) for s in dims[4:6] if is_shape(s))
    return _streaming("norm", 2 * n + params, n + params, es, dt, 2 * NORM_FLOPS_PER_ELEMENT,
                      n, str(x))


def softmax(dims: Any, types: Any, values: Any) -> OpCost | None:
    x = dims[0]
    es, dt = known_dtype(types[0])
    n = numel(x)
    return _streaming("softmax", n, n, es, dt, SOFTMAX_FLOPS_PER_ELEMENT, n, str(x))


def softmax_backward(dims: Any, types: Any, values: Any) -> OpCost | None:
    """_softmax_backward_data(grad_out, out, ...): read both, write the input gradient."""
    x = dims[0]
    es, dt = known_dtype(types[0])
    n = numel(x)
    return _streaming("softmax", 2 * n, n, es, dt, 3, n, str(x))


def elementwise(dims: Any, types: Any, values: Any) -> OpCost | None:
    """Unary and binary pointwise ops: read every tensor input, write the broadcast output;
    one FLOP per output element."""
    found = tensors(dims, types)
    if not found:
        return None
    out_shape = _broadcast([s for s, _, _ in found])
    if out_shape is None:
        return None
    es, dt = found[0][1], found[0][2]
    n = math.prod(out_shape)
    reads = sum(math.prod(s) * e for s, e, _ in found)
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
