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
(``vllm_standin_ops.mla_pad_ops``, schemas of ``reference/vllm-facts.md`` §3.1), vLLM's per-token and static
per-tensor fp8 quant ops (``vllm_standin_ops.token_static_ops``: the AITER functional ops,
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
from eqsat.vocab.vllm_standin_ops import col_major, mla_pad_ops, scale_fake, token_static_ops

# The Library objects that own the stand-in definitions. A Library removes all of its registrations
# when it is garbage-collected, so these must stay referenced for the life of the process; the dict
# is carried over if this module is reloaded so that a reload cannot drop live ops.
_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})
_STATE: dict[str, torch.dtype] = globals().get("_STATE", {})


def standin_fp8_dtype() -> torch.dtype | None:
    """The fp8 dtype of the quant stand-ins this module defined, or None if it defined none."""
    return _STATE.get("fp8_dtype")


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
        return q.contiguous(), (col_major(s) if transpose_scale else s.contiguous())

    def quant_fake(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        return x.new_empty(x.shape, dtype=fp8), scale_fake(x, group_size, transpose_scale)

    def rms_quant(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> Any:
        q, s = ref.rmsnorm_fp8_group_quant(x, weight, variance_epsilon, group_size, fp8)
        return q.contiguous(), s.contiguous()

    def rms_quant_fake(
        x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int
    ) -> Any:
        check_norm_shapes(x, weight)
        return x.new_empty(x.shape, dtype=fp8), scale_fake(x, group_size)

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
        return x.new_empty(x.shape, dtype=fp8), x.new_empty(x.shape), scale_fake(x, group_size)

    def act_quant(x: torch.Tensor, group_size: int) -> Any:
        q, s = ref.silu_mul_fp8_group_quant(x, group_size, fp8)
        return q.contiguous(), s.contiguous()

    def act_quant_fake(x: torch.Tensor, group_size: int) -> Any:
        half = x.new_empty([*x.shape[:-1], x.shape[-1] // 2])
        return half.new_empty(half.shape, dtype=fp8), scale_fake(half, group_size)

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
        return x.new_empty(x.shape, dtype=fp8), scale_fake(x, group_size)

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


def register_vllm_standins(fp8_dtype: torch.dtype = torch.float8_e4m3fnuz) -> None:
    """Define whichever of the vLLM ops are missing; a no-op once they all exist.

    `fp8_dtype` is the platform fp8 dtype of the quant stand-ins; only the first call that defines
    them uses it (query the result with `standin_fp8_dtype`).
    """
    if importlib.util.find_spec("vllm") is not None:
        import vllm.ir  # noqa: F401  (the real vllm_ir ops first: a stand-in must never shadow them)
    fp8 = _STATE.get("fp8_dtype", fp8_dtype)
    for namespace, schema, kernel, fake in [*_build(fp8), *_c_ops(), *token_static_ops(), *mla_pad_ops(fp8)]:
        if define_op(_LIBS, namespace, schema, kernel, fake) and namespace == "vllm":
            _STATE["fp8_dtype"] = fp8
