"""The vLLM 0.33.0 ops eqsat reads and writes, as stand-ins: schema, fake and kernel of each.

:func:`standin_table` lists them (``eqsat.library.vllm`` registers what is missing). Each
fake is written as vLLM writes it (``vllm/_aiter_ops.py``, ``vllm/ir/ops/layernorm.py``,
``layers/utils.py``): the AITER ones unpack ``M, N = x.shape`` (2-D only), size scales
``(M, ceil(N / G))``, and use ``empty_like`` where vLLM does (an input's dense strides carry over).
Each kernel runs the op's fake on the real inputs first (so it raises wherever vLLM's fake raises
and returns exactly the fake's layout), then what AITER's kernel requires beyond it (``needs``),
then fills the outputs from an ``eqsat.library.reference`` function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from eqsat.library import reference as ref

F32 = torch.float32


@dataclass(frozen=True)
class StandIn:
    namespace: str
    schema: str
    kernel: Callable[..., Any]
    fake: Callable[..., Any]

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


def rows(x: torch.Tensor, op: str, who: str = "vLLM's fake") -> tuple[Any, Any]:
    """``M, N = x.shape`` as vLLM's AITER fakes (or ``who``: AITER's kernel) unpack it: the same
    ValueError for any rank but 2."""
    if x.dim() != 2:
        want = "too many" if x.dim() > 2 else "not enough"
        raise ValueError(f"{op}: {want} values to unpack (expected 2): {who} takes a 2-D x, got shape {tuple(x.shape)}")
    return x.shape[0], x.shape[1]


def ceil_div(n: Any, g: Any) -> Any:
    return (n + g - 1) // g


def aiter_transposed(s: torch.Tensor) -> torch.Tensor:
    """A ``transpose_scale=True`` scale as AITER returns it: the column-major data of ``s`` read as a
    row-major tensor of ``s``'s shape (the GEMM that reads it knows; an element is not ``s``'s)."""
    return s.transpose(0, 1).contiguous().view(s.shape)


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _kernel(fake: Callable[..., Any], compute: Callable[..., Any],
            needs: Callable[..., None] | None = None) -> Callable[..., Any]:
    """A stand-in kernel: vLLM's fake on the real inputs (its checks, its output layout), AITER's
    further requirements ``needs``, then the reference values copied into the fake's outputs."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        outs = fake(*args, **kwargs)
        if needs is not None:
            needs(*args, **kwargs)
        got = compute(*args, **kwargs)
        if isinstance(outs, torch.Tensor):
            return outs.copy_(got)
        for o, g in zip(outs, got, strict=True):
            o.copy_(g)
        return outs

    return kernel


def _divides(op: str, n: Any, g: int) -> None:
    _need(g > 0 and n % g == 0, f"{op}: the last dim {n} must be a multiple of group_size {g}")


# -- vllm_ir: vLLM's native implementations are their own fakes ------------------------------------

def _ir_ops() -> list[StandIn]:
    def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None) -> Any:
        return ref.rms_norm(x, weight, epsilon, variance_size)

    def fused_add(x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
                  variance_size: int | None = None) -> Any:
        return ref.fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)

    return [
        StandIn("vllm_ir", "rms_norm(Tensor x, Tensor? weight, float epsilon, SymInt? variance_size=None) -> Tensor",
                rms_norm, rms_norm),
        StandIn("vllm_ir", "fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, float epsilon,"
                " SymInt? variance_size=None) -> (Tensor, Tensor)", fused_add, fused_add),
    ]


# -- AITER group quants ----------------------------------------------------------------------------

def _group_ops(fp8: torch.dtype) -> list[StandIn]:
    def quant_fake(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        m, n = rows(x, "rocm_aiter_group_fp8_quant")
        return x.new_empty((m, n), dtype=fp8), x.new_empty((m, ceil_div(n, group_size)), dtype=F32)

    def quant_needs(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> None:
        _divides("rocm_aiter_group_fp8_quant", x.shape[-1], group_size)
        _need(group_size == 128, "rocm_aiter_group_fp8_quant: AITER's per_1x128 quant takes group_size 128 only, "
              f"got {group_size}")

    def quant(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        q, s = ref.group_fp8_quant(x, group_size, fp8)
        return q, aiter_transposed(s) if transpose_scale else s

    def rms_fake(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_rmsnorm_fp8_group_quant")
        return torch.empty_like(x, dtype=fp8), x.new_empty((m, ceil_div(n, group_size)), dtype=F32)

    def rms_needs(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> None:
        _divides("rocm_aiter_rmsnorm_fp8_group_quant", x.shape[-1], group_size)

    def rms(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> Any:
        return ref.rmsnorm_fp8_group_quant(x, weight, variance_epsilon, group_size, fp8)

    def add_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, variance_epsilon: float,
                 group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_rmsnorm_with_add_fp8_group_quant")
        return (torch.empty_like(x, dtype=fp8), torch.empty_like(residual),
                x.new_empty((m, ceil_div(n, group_size)), dtype=F32))

    def add_needs(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, variance_epsilon: float,
                  group_size: int) -> None:
        _divides("rocm_aiter_rmsnorm_with_add_fp8_group_quant", x.shape[-1], group_size)
        _need(residual.shape == x.shape, "rocm_aiter_rmsnorm_with_add_fp8_group_quant: residual must have x's shape")

    def add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, variance_epsilon: float,
            group_size: int) -> Any:
        return ref.rmsnorm_add_fp8_group_quant(x, residual, weight, variance_epsilon, group_size, fp8)

    def act_fake(x: torch.Tensor, group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_act_mul_and_fp8_group_quant")
        if n % 2 != 0:
            raise AssertionError("rocm_aiter_act_mul_and_fp8_group_quant: the last dim must be even")
        half = n // 2
        return x.new_empty((m, half), dtype=fp8), x.new_empty((m, ceil_div(half, group_size)), dtype=F32)

    def act_needs(x: torch.Tensor, group_size: int) -> None:
        _divides("rocm_aiter_act_mul_and_fp8_group_quant", x.shape[-1] // 2, group_size)

    def act(x: torch.Tensor, group_size: int) -> Any:
        return ref.silu_mul_fp8_group_quant(x, group_size, fp8)

    def gated_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
                   norm_before_gate: bool, activation: str, group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_fused_rms_gated_fp8_group_quant")
        return torch.empty_like(x, dtype=fp8), x.new_empty((m, ceil_div(n, group_size)), dtype=F32)

    def gated_needs(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
                    norm_before_gate: bool, activation: str, group_size: int) -> None:
        op = "rocm_aiter_fused_rms_gated_fp8_group_quant"
        _divides(op, x.shape[-1], group_size)
        _need(z.shape == x.shape, f"{op}: z must have x's shape")
        if bias is not None or not norm_before_gate or activation not in ("swish", "silu"):
            raise NotImplementedError(f"{op} stand-in: no bias, norm before a silu gate")

    def gated(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
              norm_before_gate: bool, activation: str, group_size: int) -> Any:
        return ref.rms_norm_gated_fp8_group_quant(x, z, weight, eps, group_size, fp8)

    def fla_fake(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: int | None,
                 norm_before_gate: bool, activation: str) -> Any:
        return x.new_empty(x.shape)

    def fla_needs(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: int | None,
                  norm_before_gate: bool, activation: str) -> None:
        if z is None or group_size is not None or not norm_before_gate or activation not in ("swish", "silu"):
            raise NotImplementedError("fla_rms_norm_gated stand-in: z given, no group, norm before a silu gate")
        _need(z.shape == x.shape, "fla_rms_norm_gated: z must have x's shape")

    def fla(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int | None,
            norm_before_gate: bool, activation: str) -> Any:
        return ref.rms_norm_gated(x, z, weight, eps)

    return [
        StandIn("vllm", "rocm_aiter_group_fp8_quant(Tensor x, SymInt group_size, bool transpose_scale=False)"
                " -> (Tensor, Tensor)", _kernel(quant_fake, quant, quant_needs), quant_fake),
        StandIn("vllm", "rocm_aiter_rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float variance_epsilon,"
                " SymInt group_size) -> (Tensor, Tensor)", _kernel(rms_fake, rms, rms_needs), rms_fake),
        StandIn("vllm", "rocm_aiter_rmsnorm_with_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight,"
                " float variance_epsilon, SymInt group_size) -> (Tensor, Tensor, Tensor)",
                _kernel(add_fake, add, add_needs), add_fake),
        StandIn("vllm", "rocm_aiter_act_mul_and_fp8_group_quant(Tensor x, SymInt group_size) -> (Tensor, Tensor)",
                _kernel(act_fake, act, act_needs), act_fake),
        StandIn("vllm", "fla_rms_norm_gated(Tensor x, Tensor? z, Tensor weight, float eps, SymInt? group_size,"
                " bool norm_before_gate, str activation) -> Tensor", _kernel(fla_fake, fla, fla_needs), fla_fake),
        StandIn("vllm", "rocm_aiter_fused_rms_gated_fp8_group_quant(Tensor x, Tensor weight, Tensor? bias, Tensor z,"
                " float eps, bool norm_before_gate, str activation, SymInt group_size) -> (Tensor, Tensor)",
                _kernel(gated_fake, gated, gated_needs), gated_fake),
    ]


# -- AITER per-token and static per-tensor quants --------------------------------------------------

def _token_static_ops() -> list[StandIn]:
    def per_token_fake(x: torch.Tensor, quant_dtype: torch.dtype, scale: torch.Tensor | None = None) -> Any:
        return x.new_empty(x.shape, dtype=quant_dtype), x.new_empty((*x.shape[:-1], 1), dtype=F32)

    def per_token(x: torch.Tensor, quant_dtype: torch.dtype, scale: torch.Tensor | None = None) -> Any:
        return ref.token_fp8_quant(x, quant_dtype)  # a given `scale` buffer is not written: no aliasing

    def per_tensor(out: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, is_dynamic: bool) -> None:
        if is_dynamic:
            amax = x.abs().amax().float().clamp_min(ref.AMAX_FLOOR)
            scale.copy_((amax / torch.finfo(out.dtype).max).reshape(scale.shape))
        out.copy_(ref.static_fp8_quant(x, scale, out.dtype))

    def rms_dyn_fake(x: torch.Tensor, weight: torch.Tensor, epsilon: float, quant_dtype: torch.dtype) -> Any:
        return x.new_empty(x.shape, dtype=quant_dtype), x.new_empty((x.shape[0], 1), dtype=F32)

    def ck_rows(x: torch.Tensor, *args: Any) -> None:  # CK's rmsnorm2d kernels: rows of a 2-D x
        rows(x, "rmsnorm2d_fwd_with_(add_)dynamicquant", "AITER's CK kernel")

    def rms_dyn(x: torch.Tensor, weight: torch.Tensor, epsilon: float, quant_dtype: torch.dtype) -> Any:
        return ref.rmsnorm_token_fp8_quant(x, weight, epsilon, quant_dtype)

    def add_rms_dyn_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                         quant_dtype: torch.dtype) -> Any:
        return (x.new_empty(x.shape, dtype=quant_dtype), torch.empty_like(x),
                x.new_empty((x.shape[0], 1), dtype=F32))

    def add_rms_dyn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                    quant_dtype: torch.dtype) -> Any:
        return ref.rmsnorm_add_token_fp8_quant(x, residual, weight, epsilon, quant_dtype)

    def rms_static_fake(x: torch.Tensor, weight: torch.Tensor, epsilon: float, scale: torch.Tensor,
                        quant_dtype: torch.dtype) -> Any:
        return torch.empty_like(x, dtype=quant_dtype)

    def triton_rows(x: torch.Tensor, *args: Any) -> None:  # AITER's Triton fused norm kernels: 2-D rows
        rows(x, "fused_rms_fp8_per_tensor_static_quant", "AITER's Triton kernel")

    def rms_static(x: torch.Tensor, weight: torch.Tensor, epsilon: float, scale: torch.Tensor,
                   quant_dtype: torch.dtype) -> Any:
        return ref.rmsnorm_static_fp8_quant(x, weight, epsilon, scale, quant_dtype)

    def add_rms_static_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                            scale: torch.Tensor, quant_dtype: torch.dtype) -> Any:
        return torch.empty_like(x, dtype=quant_dtype), torch.empty_like(residual)

    def add_rms_static(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                       scale: torch.Tensor, quant_dtype: torch.dtype) -> Any:
        return ref.rmsnorm_add_static_fp8_quant(x, residual, weight, epsilon, scale, quant_dtype)

    def nothing(*args: Any) -> None:
        return None

    return [
        StandIn("vllm", "rocm_aiter_per_token_quant(Tensor x, ScalarType quant_dtype, Tensor? scale=None)"
                " -> (Tensor, Tensor)", _kernel(per_token_fake, per_token), per_token_fake),
        StandIn("vllm", "rocm_aiter_per_tensor_quant(Tensor(a0!) out, Tensor x, Tensor(a2!) scale, bool is_dynamic)"
                " -> ()", per_tensor, nothing),
        StandIn("vllm", "rocm_aiter_rmsnorm_fused_dynamic_quant(Tensor x, Tensor weight, float epsilon,"
                " ScalarType quant_dtype) -> (Tensor, Tensor)", _kernel(rms_dyn_fake, rms_dyn, ck_rows), rms_dyn_fake),
        StandIn("vllm", "rocm_aiter_rmsnorm_fused_add_dynamic_quant(Tensor x, Tensor residual, Tensor weight,"
                " float epsilon, ScalarType quant_dtype) -> (Tensor, Tensor, Tensor)",
                _kernel(add_rms_dyn_fake, add_rms_dyn, ck_rows), add_rms_dyn_fake),
        StandIn("vllm", "rocm_aiter_fused_rms_fp8_per_tensor_static_quant(Tensor x, Tensor weight, float epsilon,"
                " Tensor scale, ScalarType quant_dtype) -> Tensor", _kernel(rms_static_fake, rms_static, triton_rows),
                rms_static_fake),
        StandIn("vllm", "rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(Tensor x, Tensor residual,"
                " Tensor weight, float epsilon, Tensor scale, ScalarType quant_dtype) -> (Tensor, Tensor)",
                _kernel(add_rms_static_fake, add_rms_static, triton_rows), add_rms_static_fake),
    ]


# -- MLA dual norms, add + norm + pad, the router GEMM --------------------------------------------

def _mla_pad_ops(fp8: torch.dtype) -> list[StandIn]:
    def dual_fake(x1: torch.Tensor, x1_weight: torch.Tensor, x2: torch.Tensor, x2_weight: torch.Tensor,
                  x1_epsilon: float, x2_epsilon: float) -> Any:
        return torch.empty_like(x1), torch.empty_like(x2)

    def dual(x1: torch.Tensor, x1_weight: torch.Tensor, x2: torch.Tensor, x2_weight: torch.Tensor,
             x1_epsilon: float, x2_epsilon: float) -> Any:
        return ref.mla_dual_rms_norm(x1, x1_weight, x2, x2_weight, x1_epsilon, x2_epsilon)

    def dual_token_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float) -> Any:
        mq, nq = rows(q, "fused_mla_dual_rms_norm_per_token_quant")
        return q.new_empty((mq, nq), dtype=fp8), q.new_empty((mq, 1), dtype=F32), kv.new_empty(kv.shape)

    def dual_token(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                   q_epsilon: float, kv_epsilon: float) -> Any:
        return ref.mla_dual_rms_norm_token_quant(q, q_weight, kv, kv_weight, q_epsilon, kv_epsilon, fp8)

    def dual_group_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        mq, nq = rows(q, "fused_mla_dual_rms_norm_group_quant")
        return (q.new_empty((mq, nq), dtype=fp8), q.new_empty((mq, nq // group_size), dtype=F32),
                kv.new_empty(kv.shape))

    def dual_group_needs(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                         q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> None:
        _divides("fused_mla_dual_rms_norm_group_quant", q.shape[-1], group_size)

    def dual_group(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                   q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        q8, s, kv_normed = ref.mla_dual_rms_norm_group_quant(q, q_weight, kv, kv_weight, q_epsilon, kv_epsilon,
                                                             group_size, fp8)
        return q8, aiter_transposed(s) if transpose_scale else s, kv_normed

    def add_pad_fake(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, residual: torch.Tensor,
                     x_pad_to_multiple: int) -> Any:
        m, n = rows(x, "rocm_aiter_triton_add_rmsnorm_pad")
        width = ref.padded_width(n, x_pad_to_multiple) if x_pad_to_multiple > 0 else n
        return x.new_empty((m, width)), torch.empty_like(residual)

    def add_pad(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, residual: torch.Tensor,
                x_pad_to_multiple: int) -> Any:
        return ref.add_rmsnorm_pad(x, residual, weight, variance_epsilon, x_pad_to_multiple)

    def gemm_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    def gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        return torch.nn.functional.linear(x, weight, bias)

    dual_args = "Tensor q, Tensor q_weight, Tensor kv, Tensor kv_weight, float q_epsilon, float kv_epsilon"
    return [
        StandIn("vllm", "fused_mla_dual_rms_norm(Tensor x1, Tensor x1_weight, Tensor x2, Tensor x2_weight,"
                " float x1_epsilon, float x2_epsilon) -> (Tensor, Tensor)", _kernel(dual_fake, dual), dual_fake),
        StandIn("vllm", f"fused_mla_dual_rms_norm_per_token_quant({dual_args}) -> (Tensor, Tensor, Tensor)",
                _kernel(dual_token_fake, dual_token), dual_token_fake),
        StandIn("vllm", f"fused_mla_dual_rms_norm_group_quant({dual_args}, SymInt group_size, bool transpose_scale)"
                " -> (Tensor, Tensor, Tensor)", _kernel(dual_group_fake, dual_group, dual_group_needs), dual_group_fake),
        StandIn("vllm", "rocm_aiter_triton_add_rmsnorm_pad(Tensor x, Tensor weight, float variance_epsilon,"
                " Tensor residual, SymInt x_pad_to_multiple) -> (Tensor, Tensor)",
                _kernel(add_pad_fake, add_pad), add_pad_fake),
        StandIn("vllm", "rocm_unquantized_gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor",
                _kernel(gemm_fake, gemm), gemm_fake),
    ]


# -- vLLM's mutating _C ops (read under auto_functionalized), CUDA schemas -------------------------

def _c_ops() -> list[StandIn]:
    def rms_norm(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
        result.copy_(ref.rms_norm(input, weight, epsilon))

    def silu_and_mul(result: torch.Tensor, input: torch.Tensor) -> None:
        result.copy_(ref.silu_and_mul(input))

    def group_quant(input: torch.Tensor, output_q: torch.Tensor, output_s: torch.Tensor, group_size: int,
                    eps: float, fp8_min: float, fp8_max: float, scale_ue8m0: bool,
                    dummy_is_scale_transposed: bool, dummy_is_tma_aligned: bool) -> None:
        if scale_ue8m0:
            raise NotImplementedError("scale_ue8m0 stand-in")
        g = input.float().unflatten(-1, (-1, group_size))
        scale = g.abs().amax(-1, keepdim=True).clamp_min(eps) / fp8_max
        output_q.copy_((g / scale).clamp(fp8_min, fp8_max).flatten(-2).to(output_q.dtype))
        output_s.copy_(scale.squeeze(-1))

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
        StandIn("_C", "rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()", rms_norm, nothing),
        StandIn("_C", "silu_and_mul(Tensor! result, Tensor input) -> ()", silu_and_mul, nothing),
        StandIn("_C", "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, "
                "float eps, float fp8_min, float fp8_max, bool scale_ue8m0, bool dummy_is_scale_transposed, "
                "bool dummy_is_tma_aligned) -> ()", group_quant, nothing),
        StandIn("_C", "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale, Tensor? scale_ub)"
                " -> ()", c_per_token, nothing),
        StandIn("_C", "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, int[]? group_shape=None)"
                " -> ()", c_static, nothing),
    ]


def standin_table(fp8: torch.dtype) -> Sequence[StandIn]:
    """Every stand-in, its quants producing ``fp8`` (vLLM's platform ``FP8_DTYPE``)."""
    return [*_ir_ops(), *_group_ops(fp8), *_token_static_ops(), *_mla_pad_ops(fp8), *_c_ops()]
