"""Stand-ins for the vLLM 0.33.0 ops that the ROCm/AITER fusion pass matches and emits.

`register_vllm_standins()` defines, with exactly vLLM's namespaces and schema strings:

    vllm_ir::rms_norm(Tensor x, Tensor? weight, float epsilon, SymInt? variance_size=None) -> Tensor
    vllm_ir::fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, float epsilon,
                                SymInt? variance_size=None) -> (Tensor, Tensor)
    vllm::rocm_aiter_group_fp8_quant(Tensor x, SymInt group_size, bool transpose_scale=False)
                                     -> (Tensor, Tensor)
    vllm::rocm_aiter_rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float variance_epsilon,
                                             SymInt group_size) -> (Tensor, Tensor)
    vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight,
                                                      float variance_epsilon, SymInt group_size)
                                                      -> (Tensor, Tensor, Tensor)
    vllm::rocm_aiter_act_mul_and_fp8_group_quant(Tensor x, SymInt group_size) -> (Tensor, Tensor)
    vllm::fla_rms_norm_gated(Tensor x, Tensor? z, Tensor weight, float eps, SymInt? group_size,
                             bool norm_before_gate, str activation) -> Tensor
    vllm::rocm_aiter_fused_rms_gated_fp8_group_quant(Tensor x, Tensor weight, Tensor? bias, Tensor z,
        float eps, bool norm_before_gate, str activation, SymInt group_size) -> (Tensor, Tensor)

(the gated pair: ``reference.rms_norm_gated`` and ``reference.rms_norm_gated_fp8_group_quant``; only
z given, no group, norm before a swish/silu gate, no bias, and a 2-D x for the fused op, as vLLM
calls them; anything else raises)
plus vLLM's MLA dual rms_norm ops (``fused_mla_dual_rms_norm``, ``..._per_token_quant``,
``..._group_quant``), ``rocm_aiter_triton_add_rmsnorm_pad`` and ``rocm_unquantized_gemm``
(``_mla_pad_ops``, schemas of ``reference/vllm-facts.md`` §3.1), vLLM's per-token and static
per-tensor fp8 quant ops (``_token_static_ops``: the AITER functional ops,
``rocm_aiter_per_tensor_quant`` and the ``_C`` quants, which mutate and are read under
``auto_functionalized``), and the ``_C`` ops of ``_c_ops``.

Invariants:
- An op that already exists (e.g. the real vLLM is installed and imported, which registers the
  `vllm_ir` ops) is never redefined or overridden; only the missing ones are added.
- The kernels are the `eqsat.reference` functions (CompositeExplicitAutograd, any device). The
  fp8 dtype is fixed by the first call that defines a quant op (default e4m3fnuz, as vLLM picks
  on gfx942 / MI300X); later calls cannot change it (see `standin_fp8_dtype`).
- The fakes use only `x.shape` / `new_empty`, so token dims may be SymInts. Like vLLM's fakes,
  the scale has ceil(N / group_size) columns; the real kernels require N % group_size == 0.
- `transpose_scale=True` returns the same scale values in column-major layout
  (`s.t().contiguous().t()`), and the fake has the same strides.
- `vllm_ir` ops with `variance_size` set take the variance over the first `variance_size` columns,
  as vLLM's native impl does.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from eqsat import reference as ref
from eqsat.ops import check_norm_shapes, define_op

# The Library objects that own the stand-in definitions. A Library removes all of its registrations
# when it is garbage-collected, so these must stay referenced for the life of the process; the dict
# is carried over if this module is reloaded so that a reload cannot drop live ops.
_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})
_STATE: dict[str, torch.dtype] = globals().get("_STATE", {})


def standin_fp8_dtype() -> torch.dtype | None:
    """The fp8 dtype of the quant stand-ins this module defined, or None if it defined none."""
    return _STATE.get("fp8_dtype")


def _ceil_groups(x: torch.Tensor, group_size: int) -> Any:
    return (x.shape[-1] + group_size - 1) // group_size


def _col_major(s: torch.Tensor) -> torch.Tensor:
    return s.transpose(-1, -2).contiguous().transpose(-1, -2) if s.dim() >= 2 else s.contiguous()


def _scale_fake(x: torch.Tensor, group_size: int, transpose: bool = False) -> torch.Tensor:
    lead, groups = list(x.shape[:-1]), _ceil_groups(x, group_size)
    if transpose and lead:
        return x.new_empty([*lead[:-1], groups, lead[-1]], dtype=torch.float32).transpose(-1, -2)
    return x.new_empty([*lead, groups], dtype=torch.float32)


def _build(fp8: torch.dtype) -> list[tuple[str, str, Any, Any]]:
    """(namespace, schema, kernel, fake) for every stand-in, closing over the fp8 dtype."""

    def rms_norm(
        x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> Any:
        return ref.rms_norm(x, weight, epsilon, variance_size).contiguous()

    def rms_norm_fake(
        x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: Any = None
    ) -> Any:
        check_norm_shapes(x, weight)
        return x.new_empty(x.shape)

    def fused_add(
        x: torch.Tensor,
        x_residual: torch.Tensor,
        weight: torch.Tensor | None,
        epsilon: float,
        variance_size: Any = None,
    ) -> Any:
        normed, res = ref.fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)
        return normed.contiguous(), res.contiguous()

    def fused_add_fake(
        x: torch.Tensor,
        x_residual: torch.Tensor,
        weight: torch.Tensor | None,
        epsilon: float,
        variance_size: Any = None,
    ) -> Any:
        check_norm_shapes(x, weight, x_residual)
        return x.new_empty(x.shape), x.new_empty(x.shape)

    def quant(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        q, s = ref.group_fp8_quant(x, group_size, fp8)
        return q.contiguous(), (_col_major(s) if transpose_scale else s.contiguous())

    def quant_fake(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        return x.new_empty(x.shape, dtype=fp8), _scale_fake(x, group_size, transpose_scale)

    def rms_quant(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> Any:
        q, s = ref.rmsnorm_fp8_group_quant(x, weight, variance_epsilon, group_size, fp8)
        return q.contiguous(), s.contiguous()

    def rms_quant_fake(
        x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int
    ) -> Any:
        check_norm_shapes(x, weight)
        return x.new_empty(x.shape, dtype=fp8), _scale_fake(x, group_size)

    def add_rms_quant(
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        variance_epsilon: float,
        group_size: int,
    ) -> Any:
        q, res, s = ref.rmsnorm_add_fp8_group_quant(x, residual, weight, variance_epsilon, group_size, fp8)
        return q.contiguous(), res.contiguous(), s.contiguous()

    def add_rms_quant_fake(
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        variance_epsilon: float,
        group_size: int,
    ) -> Any:
        check_norm_shapes(x, weight, residual)
        return x.new_empty(x.shape, dtype=fp8), x.new_empty(x.shape), _scale_fake(x, group_size)

    def act_quant(x: torch.Tensor, group_size: int) -> Any:
        q, s = ref.silu_mul_fp8_group_quant(x, group_size, fp8)
        return q.contiguous(), s.contiguous()

    def act_quant_fake(x: torch.Tensor, group_size: int) -> Any:
        half = x.new_empty([*x.shape[:-1], x.shape[-1] // 2])
        return half.new_empty(half.shape, dtype=fp8), _scale_fake(half, group_size)

    def gated(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: int | None,
              norm_before_gate: bool, activation: str) -> Any:
        if z is None or group_size is not None or not norm_before_gate or activation not in ("swish", "silu"):
            raise NotImplementedError("fla_rms_norm_gated stand-in: z given, no group, norm before a silu gate")
        return ref.rms_norm_gated(x, z, weight, eps).contiguous()

    def gated_fake(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: Any,
                   norm_before_gate: bool, activation: str) -> Any:
        check_norm_shapes(x, weight, z)  # z has x's shape: under torch.compile their token dims are one
        return x.new_empty(x.shape)

    def gated_quant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
                    norm_before_gate: bool, activation: str, group_size: int) -> Any:
        if bias is not None or not norm_before_gate or activation not in ("swish", "silu") or x.dim() != 2:
            raise NotImplementedError("gated quant stand-in: 2-D x, no bias, norm before a silu gate")
        q, s = ref.rms_norm_gated_fp8_group_quant(x, z, weight, eps, group_size, fp8)
        return q.contiguous(), s.contiguous()

    def gated_quant_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor,
                         eps: float, norm_before_gate: bool, activation: str, group_size: int) -> Any:
        check_norm_shapes(x, weight, z)
        return x.new_empty(x.shape, dtype=fp8), _scale_fake(x, group_size)

    return [
        ("vllm", "fla_rms_norm_gated(Tensor x, Tensor? z, Tensor weight, float eps, SymInt? group_size,"
                 " bool norm_before_gate, str activation) -> Tensor", gated, gated_fake),
        ("vllm", "rocm_aiter_fused_rms_gated_fp8_group_quant(Tensor x, Tensor weight, Tensor? bias, Tensor z,"
                 " float eps, bool norm_before_gate, str activation, SymInt group_size) -> (Tensor, Tensor)",
         gated_quant, gated_quant_fake),
        (
            "vllm_ir",
            "rms_norm(Tensor x, Tensor? weight, float epsilon, SymInt? variance_size=None) -> Tensor",
            rms_norm,
            rms_norm_fake,
        ),
        (
            "vllm_ir",
            "fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, float epsilon,"
            " SymInt? variance_size=None) -> (Tensor, Tensor)",
            fused_add,
            fused_add_fake,
        ),
        (
            "vllm",
            "rocm_aiter_group_fp8_quant(Tensor x, SymInt group_size, bool transpose_scale=False)"
            " -> (Tensor, Tensor)",
            quant,
            quant_fake,
        ),
        (
            "vllm",
            "rocm_aiter_rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float variance_epsilon,"
            " SymInt group_size) -> (Tensor, Tensor)",
            rms_quant,
            rms_quant_fake,
        ),
        (
            "vllm",
            "rocm_aiter_rmsnorm_with_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight,"
            " float variance_epsilon, SymInt group_size) -> (Tensor, Tensor, Tensor)",
            add_rms_quant,
            add_rms_quant_fake,
        ),
        (
            "vllm",
            "rocm_aiter_act_mul_and_fp8_group_quant(Tensor x, SymInt group_size) -> (Tensor, Tensor)",
            act_quant,
            act_quant_fake,
        ),
    ]


def _c_ops() -> list[tuple[str, str, Any, Any]]:
    """vLLM's mutating ``_C`` ops this project reads (under ``auto_functionalized``), CUDA schemas."""

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

    def nothing(*args: Any) -> None:
        return None

    return [
        ("_C", "rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()", rms_norm, nothing),
        ("_C", "silu_and_mul(Tensor! result, Tensor input) -> ()", silu_and_mul, nothing),
        ("_C", "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, "
               "float eps, float fp8_min, float fp8_max, bool scale_ue8m0, bool dummy_is_scale_transposed, "
               "bool dummy_is_tma_aligned) -> ()", group_quant, nothing),
    ]


def _token_static_ops() -> list[tuple[str, str, Any, Any]]:
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


def _mla_pad_ops(fp8: torch.dtype) -> list[tuple[str, str, Any, Any]]:
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
        return q8.contiguous(), (_col_major(s) if transpose_scale else s.contiguous()), kv_normed.contiguous()

    def dual_group_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        return (q.new_empty(q.shape, dtype=fp8), _scale_fake(q, group_size, transpose_scale),
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


def register_vllm_standins(fp8_dtype: torch.dtype = torch.float8_e4m3fnuz) -> None:
    """Define whichever of the vLLM ops are missing; a no-op once they all exist.

    `fp8_dtype` is the platform fp8 dtype of the quant stand-ins; only the first call that defines
    them uses it (query the result with `standin_fp8_dtype`).
    """
    if importlib.util.find_spec("vllm") is not None:
        import vllm.ir  # noqa: F401  (the real vllm_ir ops first: a stand-in must never shadow them)
    fp8 = _STATE.get("fp8_dtype", fp8_dtype)
    for namespace, schema, kernel, fake in [*_build(fp8), *_c_ops(), *_token_static_ops(), *_mla_pad_ops(fp8)]:
        if define_op(_LIBS, namespace, schema, kernel, fake) and namespace == "vllm":
            _STATE["fp8_dtype"] = fp8
