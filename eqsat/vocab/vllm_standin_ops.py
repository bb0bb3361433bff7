"""The vLLM stand-in ops beyond the core norm / group-quant / gated family (``eqsat.vocab.vllm_standins``
registers them all): the per-token and static per-tensor fp8 quants (AITER's functional and
mutating ops, vLLM's ``_C`` ones), the MLA dual rms_norm ops, ``rocm_aiter_triton_add_rmsnorm_pad``
and ``rocm_unquantized_gemm``; plus the scale-shape helpers the fakes share. Each table entry is
``(namespace, schema, kernel, fake)``; kernels are ``eqsat.reference`` functions, fakes use only
shapes (token dims may be SymInts). Schemas: ``reference/vllm-facts.md`` §3.1.
"""

from __future__ import annotations

from typing import Any

import torch

from eqsat import reference as ref
from eqsat.ops import check_norm_shapes


def ceil_groups(x: torch.Tensor, group_size: int) -> Any:
    return (x.shape[-1] + group_size - 1) // group_size


def col_major(s: torch.Tensor) -> torch.Tensor:
    return s.transpose(-1, -2).contiguous().transpose(-1, -2) if s.dim() >= 2 else s.contiguous()


def scale_fake(x: torch.Tensor, group_size: int, transpose: bool = False) -> torch.Tensor:
    lead, groups = list(x.shape[:-1]), ceil_groups(x, group_size)
    if transpose and lead:
        return x.new_empty([*lead[:-1], groups, lead[-1]], dtype=torch.float32).transpose(-1, -2)
    return x.new_empty([*lead, groups], dtype=torch.float32)


def token_static_ops() -> list[tuple[str, str, Any, Any]]:
    """vLLM's per-token dynamic and static per-tensor fp8 quant ops: AITER's (plain and fused with
    rms_norm; the fp8 dtype is an argument) and the ``_C`` ones (vLLM's bound: 224 on e4m3fnuz)."""

    def per_token(x: torch.Tensor, quant_dtype: torch.dtype, scale: torch.Tensor | None = None) -> Any:
        q, s = ref.token_fp8_quant(x, quant_dtype)  # a given `scale` buffer is not written: no aliasing
        return q.contiguous(), s.contiguous()

    def per_token_fake(x: torch.Tensor, quant_dtype: torch.dtype, scale: torch.Tensor | None = None) -> Any:
        return x.new_empty(x.shape, dtype=quant_dtype), x.new_empty([*x.shape[:-1], 1], dtype=torch.float32)

    def per_tensor(out: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, is_dynamic: bool) -> None:
        if is_dynamic:
            amax = x.abs().amax().float().clamp_min(ref.AMAX_FLOOR)
            scale.copy_((amax / torch.finfo(out.dtype).max).reshape(scale.shape))
        out.copy_(ref.static_fp8_quant(x, scale, out.dtype))

    def rms_dyn(x: torch.Tensor, weight: torch.Tensor, epsilon: float, quant_dtype: torch.dtype) -> Any:
        return tuple(t.contiguous() for t in ref.rmsnorm_token_fp8_quant(x, weight, epsilon, quant_dtype))

    def rms_dyn_fake(x: torch.Tensor, weight: torch.Tensor, epsilon: float, quant_dtype: torch.dtype) -> Any:
        check_norm_shapes(x, weight)
        return x.new_empty(x.shape, dtype=quant_dtype), x.new_empty([x.shape[0], 1], dtype=torch.float32)

    def add_rms_dyn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                    quant_dtype: torch.dtype) -> Any:
        return tuple(t.contiguous() for t in ref.rmsnorm_add_token_fp8_quant(x, residual, weight, epsilon,
                                                                            quant_dtype))

    def add_rms_dyn_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                         quant_dtype: torch.dtype) -> Any:
        check_norm_shapes(x, weight, residual)
        return (x.new_empty(x.shape, dtype=quant_dtype), x.new_empty(x.shape),
                x.new_empty([x.shape[0], 1], dtype=torch.float32))

    def rms_static(x: torch.Tensor, weight: torch.Tensor, epsilon: float, scale: torch.Tensor,
                   quant_dtype: torch.dtype) -> Any:
        return ref.rmsnorm_static_fp8_quant(x, weight, epsilon, scale, quant_dtype).contiguous()

    def rms_static_fake(x: torch.Tensor, weight: torch.Tensor, epsilon: float, scale: torch.Tensor,
                        quant_dtype: torch.dtype) -> Any:
        check_norm_shapes(x, weight)
        return x.new_empty(x.shape, dtype=quant_dtype)

    def add_rms_static(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                       scale: torch.Tensor, quant_dtype: torch.dtype) -> Any:
        return tuple(t.contiguous() for t in ref.rmsnorm_add_static_fp8_quant(x, residual, weight, epsilon, scale,
                                                                             quant_dtype))

    def add_rms_static_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                            scale: torch.Tensor, quant_dtype: torch.dtype) -> Any:
        check_norm_shapes(x, weight, residual)
        return x.new_empty(x.shape, dtype=quant_dtype), x.new_empty(x.shape)

    def c_per_token(result: torch.Tensor, input: torch.Tensor, scale: torch.Tensor,
                    scale_ub: torch.Tensor | None) -> None:
        if scale_ub is not None:
            raise NotImplementedError("scale_ub stand-in")
        fmax = ref.vllm_fp8_max(result.dtype)
        s = (input.abs().amax(-1, keepdim=True).float() / fmax).clamp_min(1.0 / (fmax * 512.0))
        result.copy_((input.float() / s).clamp(-fmax, fmax).to(result.dtype))  # divides, as the kernel does
        scale.copy_(s.reshape(scale.shape))

    def c_static(result: torch.Tensor, input: torch.Tensor, scale: torch.Tensor,
                 group_shape: list[int] | None = None) -> None:
        if group_shape is not None and tuple(group_shape) != (-1, -1):
            raise NotImplementedError("group-shaped static scale stand-in")
        result.copy_(ref.vllm_static_fp8_quant(input, scale, result.dtype))

    def nothing(*args: Any) -> None:
        return None

    return [
        ("vllm", "rocm_aiter_per_token_quant(Tensor x, ScalarType quant_dtype, Tensor? scale=None)"
                 " -> (Tensor, Tensor)", per_token, per_token_fake),
        ("vllm", "rocm_aiter_per_tensor_quant(Tensor(a0!) out, Tensor x, Tensor(a2!) scale, bool is_dynamic) -> ()",
         per_tensor, nothing),
        ("vllm", "rocm_aiter_rmsnorm_fused_dynamic_quant(Tensor x, Tensor weight, float epsilon,"
                 " ScalarType quant_dtype) -> (Tensor, Tensor)", rms_dyn, rms_dyn_fake),
        ("vllm", "rocm_aiter_rmsnorm_fused_add_dynamic_quant(Tensor x, Tensor residual, Tensor weight,"
                 " float epsilon, ScalarType quant_dtype) -> (Tensor, Tensor, Tensor)", add_rms_dyn, add_rms_dyn_fake),
        ("vllm", "rocm_aiter_fused_rms_fp8_per_tensor_static_quant(Tensor x, Tensor weight, float epsilon,"
                 " Tensor scale, ScalarType quant_dtype) -> Tensor", rms_static, rms_static_fake),
        ("vllm", "rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(Tensor x, Tensor residual, Tensor weight,"
                 " float epsilon, Tensor scale, ScalarType quant_dtype) -> (Tensor, Tensor)",
         add_rms_static, add_rms_static_fake),
        ("_C", "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale, Tensor? scale_ub)"
               " -> ()", c_per_token, nothing),
        ("_C", "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, int[]? group_shape=None) -> ()",
         c_static, nothing),
    ]


def mla_pad_ops(fp8: torch.dtype) -> list[tuple[str, str, Any, Any]]:
    """vLLM's MLA dual rms_norm ops (AITER HIP ``fused_qk_rmsnorm*``), the add + rms_norm + pad op
    (AITER Triton ``fused_add_rmsnorm_pad``) and the router GEMM it feeds (opaque to the optimizer)."""

    def dual(x1: torch.Tensor, x1_weight: torch.Tensor, x2: torch.Tensor, x2_weight: torch.Tensor,
             x1_epsilon: float, x2_epsilon: float) -> Any:
        return tuple(t.contiguous() for t in ref.mla_dual_rms_norm(x1, x1_weight, x2, x2_weight, x1_epsilon,
                                                                   x2_epsilon))

    def dual_fake(x1: torch.Tensor, x1_weight: torch.Tensor, x2: torch.Tensor, x2_weight: torch.Tensor,
                  x1_epsilon: float, x2_epsilon: float) -> Any:
        return x1.new_empty(x1.shape), x2.new_empty(x2.shape)

    def dual_token(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                   q_epsilon: float, kv_epsilon: float) -> Any:
        return tuple(t.contiguous() for t in ref.mla_dual_rms_norm_token_quant(q, q_weight, kv, kv_weight,
                                                                              q_epsilon, kv_epsilon, fp8))

    def dual_token_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float) -> Any:
        return (q.new_empty(q.shape, dtype=fp8), q.new_empty([q.shape[0], 1], dtype=torch.float32),
                kv.new_empty(kv.shape))

    def dual_group(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                   q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        q8, s, kv_normed = ref.mla_dual_rms_norm_group_quant(q, q_weight, kv, kv_weight, q_epsilon, kv_epsilon,
                                                             group_size, fp8)
        return q8.contiguous(), (col_major(s) if transpose_scale else s.contiguous()), kv_normed.contiguous()

    def dual_group_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        return (q.new_empty(q.shape, dtype=fp8), scale_fake(q, group_size, transpose_scale),
                kv.new_empty(kv.shape))

    def add_pad(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, residual: torch.Tensor,
                x_pad_to_multiple: int) -> Any:
        return tuple(t.contiguous() for t in ref.add_rmsnorm_pad(x, residual, weight, variance_epsilon,
                                                                 x_pad_to_multiple))

    def add_pad_fake(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, residual: torch.Tensor,
                     x_pad_to_multiple: int) -> Any:
        width = ref.padded_width(x.shape[-1], x_pad_to_multiple)
        return x.new_empty([*x.shape[:-1], width]), residual.new_empty(residual.shape)

    def gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        return torch.nn.functional.linear(x, weight, bias)

    def gemm_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        return x.new_empty([*x.shape[:-1], weight.shape[0]])

    dual_args = "Tensor q, Tensor q_weight, Tensor kv, Tensor kv_weight, float q_epsilon, float kv_epsilon"
    return [
        ("vllm", "fused_mla_dual_rms_norm(Tensor x1, Tensor x1_weight, Tensor x2, Tensor x2_weight,"
                 " float x1_epsilon, float x2_epsilon) -> (Tensor, Tensor)", dual, dual_fake),
        ("vllm", f"fused_mla_dual_rms_norm_per_token_quant({dual_args}) -> (Tensor, Tensor, Tensor)",
         dual_token, dual_token_fake),
        ("vllm", f"fused_mla_dual_rms_norm_group_quant({dual_args}, SymInt group_size, bool transpose_scale)"
                 " -> (Tensor, Tensor, Tensor)", dual_group, dual_group_fake),
        ("vllm", "rocm_aiter_triton_add_rmsnorm_pad(Tensor x, Tensor weight, float variance_epsilon,"
                 " Tensor residual, SymInt x_pad_to_multiple) -> (Tensor, Tensor)", add_pad, add_pad_fake),
        ("vllm", "rocm_unquantized_gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor", gemm, gemm_fake),
    ]
