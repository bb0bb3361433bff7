"""Family: gated rms_norm (Qwen3-Next's GDN output) and AITER's fused gated norm + fp8 group quant
(vLLM pattern #7).

``RmsNormGated(x, z, w, eps)`` is vLLM's ``RMSNormGated`` (``norm_before_gate=True``, silu gate, no
group): over the last dim D, ``x32 * rsqrt(mean(x32^2) + eps) * float(w) * z32 / (1 + exp(-z32))``
in fp32, rounded once to x.dtype (``reference.rms_norm_gated``); x and z share shape and dtype, w is
1-D over D; leading dims are rows. It is read from ``vllm.fla_rms_norm_gated`` and from the native
chain (``lift-rms-norm-gated``: exact, staged since its query is cyclic).
``K_rms_gated_fp8_group_quant(x, z, w, eps, G, dt)`` is AITER Triton's
``fused_rms_gated_fp8_group_quant``: ``QuantGroup(RmsNormGated(...), G, dt)`` on rows ``(M, D)`` with
vLLM's fp8 bounds, ``rounding`` (no bf16 rounding of the norm). Constraints: 2-D contiguous x and z of
one shape and dtype (bf16 / fp16), 1-D weight over D, G a power of two dividing D, rows of at most
64 KB. ``rewrites/layout.py`` brings both head layouts to rows. ``Neg`` and ``Exp`` are the ATen ops
the lift rule reads beyond ``aten_ops``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from eqsat.core.accepts import Contiguous, LastDimMultiple, two_d
from eqsat.core.rule import Rule, rewrite
from eqsat.core.spec import (
    DimsEqual,
    KernelSpec,
    OpDef,
    Traffic,
    Twin,
    contiguous,
    dtype_accepted,
    last_dim_divisible,
    params,
    power_of_two,
    rank,
    same_dtype,
    same_last_dim,
    same_shape,
)
from eqsat.core.spelling import Const, Spelling
from eqsat.kernels.traffic import ACT_DTYPES, Pointwise, operand, quant_out
from eqsat.library import reference as ref
from eqsat.library.define import check_norm_shapes, empty, fresh, quant_fake
from eqsat.library.vllm import F32, FP8_OUT, ceil_div, divides, need, rows, standin_op

MAX_ROW_BYTES = 64 * 1024  # the kernel's limit: N * element size <= 64 KB
_ROCM = frozenset({"gfx942", "gfx950", "rdna4"})  # the installed AITER has no Triton build of it for CUDA


def _gated(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=x.bytes)


def _gated_quant(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=quant_out(x, a["G"]))


def gated_constraints(kernel: str) -> tuple[str, ...]:
    return (
        *rank("x", 2), *contiguous("x"), *contiguous("z"), *same_shape("x", "z"), *same_dtype("x", "z"),
        *dtype_accepted(kernel, "x"), *rank("w", 1), *same_last_dim("x", "w"), *power_of_two("G"),
        *last_dim_divisible("x", "G"), f"(<= (* __n_x 2) {MAX_ROW_BYTES})",  # ACT_DTYPES are 2 bytes
    )


NEG = KernelSpec("Neg", params("x:T"), Pointwise(), calibration_key="aten:aten.neg.default", doc="-x")
EXP = KernelSpec("Exp", params("x:T"), Pointwise(), calibration_key="aten:aten.exp.default", doc="e ** x")
_Q = "(QuantGroup (RmsNormGated x z w eps) G dt)"
K = "K_rms_gated_fp8_group_quant"

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("RmsNormGated", params("x:T z:T w:T eps:f64"), _gated, calibration_key="rms_norm_gated", reference=ref.rms_norm_gated,
               implies=(DimsEqual("x", "z"), DimsEqual("x", "w", True)),
               doc="x32 * rsqrt(mean(x32^2) + eps) * float(w) * silu(z32), cast to x.dtype (vLLM RMSNormGated)"),
    KernelSpec(K, params("x:T z:T w:T eps:f64 G:i64 dt:dtype"), _gated_quant, outputs=(f"(Get {_Q} 0)", f"(Get {_Q} 1)"),
               constraints=gated_constraints(K), dtypes=ACT_DTYPES, numerics="rounding", platforms=_ROCM,
               calibration_key="rms_gated_group_quant",
               inductor=Twin(2, (*rank("x", 2), *same_shape("x", "z"), *same_dtype("x", "z"), *same_dtype("x", "w"),
                                 *last_dim_divisible("x", "G")), quant_epilogue=True, heads=("x", "z")),
               doc="AITER Triton fused_rms_gated_fp8_group_quant: fp32 gated norm group-quantized, rows (M, D)"),
    NEG, EXP,
)

_ARGS = ("x", "w", Const(None), "z", "eps", Const(True))  # then activation, group_size

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "vllm": (
        *(Spelling("RmsNormGated", "vllm::fla_rms_norm_gated", ("x", "z", "w", "eps"),
                   fixed=(("group_size", None), ("norm_before_gate", True), ("activation", act)))
          for act in ("swish", "silu")),
        *(Spelling(K, "vllm::rocm_aiter_fused_rms_gated_fp8_group_quant", (*_ARGS, Const(act), "G"),
                   from_output_dtype=("dt",),
                   accepts=(*two_d("x"), Contiguous("x"), Contiguous("z"), LastDimMultiple("x", "G"), FP8_OUT))
          for act in ("silu", "swish")),
    ),
    "eqsat": (
        Spelling("RmsNormGated", "eqsat::rms_norm_gated", ("x", "z", "w", "eps")),
        Spelling(K, "eqsat::rms_norm_gated_fp8_group_quant", ("x", "z", "w", "eps", "G", "dt"),
                 accepts=(LastDimMultiple("x", "G"),)),
    ),
    "aten": (Spelling("Neg", "aten::neg", ("x",)), Spelling("Exp", "aten::exp", ("x",))),
}

_X32, _Z32 = '(Convert x "float32")', '(Convert z "float32")'
NATIVE = (f"(Convert (Mul (Mul (Mul {_X32} (Rsqrt (AddS (MeanLast (PowS {_X32} 2.0)) eps))) (Convert w \"float32\"))"
          f" (Div {_Z32} (AddS (Exp (Neg {_Z32})) 1.0))) dt)")
"""vLLM's native ``RMSNormGated.forward_static``: fp32 norm, times float(w), times silu(z32)
as Inductor spells it (``neg, exp, add 1, div``), cast back to the input dtype ``dt``."""

RULES: tuple[Rule, ...] = (
    rewrite("lift-rms-norm-gated", NATIVE, "(RmsNormGated x z w eps)", "(= dt (dtype x))", *same_dtype("x", "z"),
            *same_shape("x", "z"), *rank("w", 1), *same_last_dim("x", "w"), family="lift"),
)


# -- the fused kernel's arithmetic (AITER's Triton fused_rms_gated_fp8_group_quant) ------------------

def rms_norm_gated_fp8_group_quant(
    x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER Triton ``fused_rms_gated_fp8_group_quant``: the fp32 gated norm (no bf16 rounding), group
    quantized with vLLM's bounds (``vllm_fp8_max``: 224 on e4m3fnuz), the scale floored at
    1 / (FMAX * 512) and a true division by it. Returns (q like x, fp32 scale [..., N // group_size])."""
    y32 = ref.rms_norm_gated32(x, z, weight, eps)
    n = y32.shape[-1]
    ref.check_groups(n, group_size)
    fmax = ref.vllm_fp8_max(fp8_dtype)
    groups = y32.reshape(*y32.shape[:-1], n // group_size, group_size)
    scale = (groups.abs().amax(dim=-1, keepdim=True) / fmax).clamp_min(1.0 / (fmax * 512.0))
    q = (groups / scale).clamp(-fmax, fmax).to(fp8_dtype)
    return q.reshape(y32.shape), scale.squeeze(-1)


# -- the project's ops and vLLM's ---------------------------------------------------------------------

def _gated_fake(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_norm_shapes(x, weight, z)
    return empty(x)


def _gated_quant_fake(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                      dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, z)
    return quant_fake(x, group_size, dtype)


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "rms_norm_gated(Tensor x, Tensor z, Tensor weight, float eps) -> Tensor",
          lambda *a: ref.rms_norm_gated(*a).contiguous(), _gated_fake),
    OpDef("eqsat", "rms_norm_gated_fp8_group_quant(Tensor x, Tensor z, Tensor weight, float eps, SymInt group_size,"
          " ScalarType dtype) -> (Tensor, Tensor)", lambda *a: fresh(*rms_norm_gated_fp8_group_quant(*a)),
          _gated_quant_fake),
)


def vllm_standins(fp8: torch.dtype) -> list[OpDef]:
    """vLLM's FLA gated norm and AITER's fused gated norm + group quant (z given, no group, norm before a
    silu gate, no bias: as vLLM calls them; anything else raises)."""

    def fla_fake(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: int | None,
                 norm_before_gate: bool, activation: str) -> Any:
        return x.new_empty(x.shape)

    def fla_needs(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: int | None,
                  norm_before_gate: bool, activation: str) -> None:
        if z is None or group_size is not None or not norm_before_gate or activation not in ("swish", "silu"):
            raise NotImplementedError("fla_rms_norm_gated stand-in: z given, no group, norm before a silu gate")
        need(z.shape == x.shape, "fla_rms_norm_gated: z must have x's shape")

    def fla(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int | None,
            norm_before_gate: bool, activation: str) -> Any:
        return ref.rms_norm_gated(x, z, weight, eps)

    def gated_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
                   norm_before_gate: bool, activation: str, group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_fused_rms_gated_fp8_group_quant")
        return torch.empty_like(x, dtype=fp8), x.new_empty((m, ceil_div(n, group_size)), dtype=F32)

    def gated_needs(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
                    norm_before_gate: bool, activation: str, group_size: int) -> None:
        op = "rocm_aiter_fused_rms_gated_fp8_group_quant"
        divides(op, x.shape[-1], group_size)
        need(z.shape == x.shape, f"{op}: z must have x's shape")
        if bias is not None or not norm_before_gate or activation not in ("swish", "silu"):
            raise NotImplementedError(f"{op} stand-in: no bias, norm before a silu gate")

    def gated(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor, eps: float,
              norm_before_gate: bool, activation: str, group_size: int) -> Any:
        return rms_norm_gated_fp8_group_quant(x, z, weight, eps, group_size, fp8)

    return [
        standin_op("vllm",
                   "fla_rms_norm_gated(Tensor x, Tensor? z, Tensor weight, float eps, SymInt? group_size,"
                   " bool norm_before_gate, str activation) -> Tensor", fla_fake, fla, fla_needs),
        standin_op("vllm",
                   "rocm_aiter_fused_rms_gated_fp8_group_quant(Tensor x, Tensor weight, Tensor? bias, Tensor z,"
                   " float eps, bool norm_before_gate, str activation, SymInt group_size) -> (Tensor, Tensor)",
                   gated_fake, gated, gated_needs),
    ]
