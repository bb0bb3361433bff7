"""Family: per-token dynamic and static per-tensor fp8 quant, and AITER's rms_norm fused with them (vLLM's ROCm #1, #2, #8, #9).

- ``QuantToken(x, dt)`` (AITER, ``reference.token_fp8_quant``): per row of the last dim, amax floored
  at 1e-10, ``scale = amax / finfo(dt).max``, ``q = cast(clamp(x32 * (1 / scale), ±FMAX))``; outputs
  (q like x, fp32 scale ``[..., 1]``): QuantGroup with one group per row.
- ``QuantStatic(x, s, dt)`` (AITER): ``q = cast(clamp(x32 * (1 / s), ±FMAX))``, ``s`` one-element fp32.
- ``QuantTokenVllm`` / ``QuantStaticVllm``: vLLM's convention (FMAX 224 on e4m3fnuz, per-token scale
  floored at ``1 / (FMAX * 512)``); ``quant-token-vllm`` / ``quant-static-vllm`` (rounding) equate them
  with the AITER rows within ``NATIVE_QUANT_TOL_STEPS`` fp8 steps (``eqsat.rewrites.lift``). Native chains clamped to finfo's 240 lift to AITER's rows.
- ``QuantStaticInplace(x, s, dt)``: AITER's mutating ``per_tensor_quant`` as ``auto_functionalized``
  hands it over: getitem 1 is q, getitem 2 the unchanged scale (``quant-static-inplace-q`` / ``-scale``,
  exact), so the fused static kernel can replace it; only ever imported, never created.
Fused rows are ``rounding`` (fp32 norm quantized without bf16 roundings), on 2-D contiguous rows, a 1-D
weight of the input dtype and, when static, a one-element fp32 scale. Lifts also read ``Reciprocal``, ``AmaxLast``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from eqsat.core.accepts import Contiguous, DtypeIn, LastDimAtMost, SameDtype, two_d
from eqsat.core.ir import dtype_name
from eqsat.core.rule import Rule, rewrite, rule
from eqsat.core.spec import (
    KernelSpec,
    OpDef,
    Traffic,
    Twin,
    contiguous,
    dtype_accepted,
    params,
    rank,
    same_dtype,
    same_last_dim,
    same_shape,
    static_scale,
)
from eqsat.core.spelling import Spelling
from eqsat.kernels.traffic import ACT_DTYPES, FP8_BYTES, SCALE_BYTES, Pointwise, operand
from eqsat.library import reference as ref
from eqsat.library.aiter import rows2d, triton_kernels
from eqsat.library.define import check_norm_shapes, empty, fresh, token_fake
from eqsat.library.vllm import F32, nothing, rows, standin_op


@dataclass(frozen=True)
class QuantTraffic:
    """A (fused) quant kernel reads x (twice the bytes with a residual), the weight and the static
    scale when it has them, and writes q, the per-row scales of a dynamic quant and residual_out."""

    residual: bool = False
    weight: bool = False
    static: bool = False

    def __call__(self, a: Mapping[str, object]) -> Traffic:
        x = operand(a, "x")
        read = x.bytes * (1 + self.residual) + (operand(a, "w").bytes if self.weight else 0) \
            + (operand(a, "s").bytes if self.static else 0)
        written = x.numel * FP8_BYTES + (0 if self.static else x.rows * SCALE_BYTES) + x.bytes * self.residual
        return Traffic(read=read, written=written)


def _operands(*, residual: bool, static: bool) -> tuple[str, ...]:
    """The residual has x's shape and dtype; a static scale is one fp32 element."""
    return (*((*same_shape("x", "r"), *same_dtype("x", "r")) if residual else ()),
            *(static_scale("s") if static else ()))


def _fused_constraints(kernel: str, *, residual: bool, static: bool) -> tuple[str, ...]:
    return (
        *rank("x", 2), *contiguous("x"), *same_dtype("x", "w"), *dtype_accepted(kernel, "x"),
        *rank("w", 1), *same_last_dim("x", "w"), *_operands(residual=residual, static=static),
    )


def _native(*, residual: bool, static: bool = True) -> Twin:
    """A fused row's Inductor twin: one launch (the norm's row reduction with the quant as its epilogue,
    a GEMM reading q and the scale or not), on any 2-D rows of the weight's dtype."""
    return Twin(1, (*rank("x", 2), *same_dtype("x", "w"), *_operands(residual=residual, static=static)))


_ADD = "(AddRmsNorm x r w eps)"
_TOK = "(QuantToken (RmsNorm x w eps) dt)"
_ADD_TOK = f"(QuantToken (Get {_ADD} 0) dt)"
_ROCM = frozenset({"gfx942", "gfx950"})  # CK / HIP: no RDNA4 registration in vLLM either
_TRITON = frozenset({"gfx942", "gfx950", "rdna4", "triton"})
_CK_OR_TRITON = _ROCM | {"triton"}  # CK's kernel on ROCm, the wheel's Triton kernel of that name elsewhere


def _fused(name: str, sig: str, outputs: tuple[str, ...], *, residual: bool, static: bool,
           platforms: frozenset[str], key: str, doc: str, inductor: Twin | None = None) -> KernelSpec:
    return KernelSpec(name, params(sig), QuantTraffic(residual=residual, weight=True, static=static),
                      outputs=outputs, constraints=_fused_constraints(name, residual=residual, static=static),
                      dtypes=ACT_DTYPES, numerics="rounding", platforms=platforms, calibration_key=key, doc=doc,
                      inductor=inductor)


RECIPROCAL = KernelSpec("Reciprocal", params("x:T"), Pointwise(), calibration_key="aten:aten.reciprocal.default",
                        doc="1 / x")
AMAX_LAST = KernelSpec("AmaxLast", params("x:T"), Pointwise(out=1), calibration_key="aten:aten.amax.default",
                       doc="max over the last dim, keepdim=False")

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("QuantToken", params("x:T dt:dtype"), QuantTraffic(), calibration_key="token_quant",
               reference=ref.token_fp8_quant,
               doc="AITER per-token quant: scale = max(amax_row, 1e-10) / finfo(dt).max, q = clamp(x / scale)"),
    KernelSpec("QuantStatic", params("x:T s:T dt:dtype"), QuantTraffic(static=True), calibration_key="static_quant",
               reference=ref.static_fp8_quant,
               doc="AITER static quant: q = clamp(x * (1 / s), ±finfo(dt).max), s one fp32 element"),
    KernelSpec("QuantTokenVllm", params("x:T dt:dtype"), QuantTraffic(), calibration_key="vllm:token_quant",
               doc="vLLM per-token quant: FMAX 224 on e4m3fnuz, scale floored at 1 / (FMAX * 512)"),
    KernelSpec("QuantStaticVllm", params("x:T s:T dt:dtype"), QuantTraffic(static=True),
               calibration_key="vllm:static_quant", doc="vLLM static quant: clamped to 224 on e4m3fnuz"),
    KernelSpec("QuantStaticInplace", params("x:T s:T dt:dtype"), QuantTraffic(static=True),
               calibration_key="static_quant", doc="AITER per_tensor_quant, functionalized: (q, scale after)"),
    _fused("K_rmsnorm_fused_dynamic_quant", "x:T w:T eps:f64 dt:dtype", (f"(Get {_TOK} 0)", f"(Get {_TOK} 1)"),
           residual=False, static=False, platforms=_CK_OR_TRITON, key="rms_token_quant",
           doc="CK (Triton off ROCm) rmsnorm2d_fwd_with_dynamicquant: per-token quant of the fp32 norm output",
           inductor=_native(residual=False, static=False)),
    _fused("K_rmsnorm_fused_add_dynamic_quant", "x:T r:T w:T eps:f64 dt:dtype",
           (f"(Get {_ADD_TOK} 0)", f"(Get {_ADD} 1)", f"(Get {_ADD_TOK} 1)"), residual=True, static=False,
           platforms=_CK_OR_TRITON, key="add_rms_token_quant",
           doc="CK (Triton off ROCm) rmsnorm2d_fwd_with_add_dynamicquant (fp32 add): outputs (q, residual_out, scale)",
           inductor=_native(residual=True, static=False)),
    _fused("K_rms_fp8_per_tensor_static_quant", "x:T w:T eps:f64 s:T dt:dtype",
           ("(QuantStatic (RmsNorm x w eps) s dt)",), residual=False, static=True, platforms=_TRITON,
           key="rms_static_quant", doc="AITER Triton fused_rms_fp8_per_tensor_static_quant: q only",
           inductor=_native(residual=False)),
    _fused("K_add_rms_fp8_per_tensor_static_quant", "x:T r:T w:T eps:f64 s:T dt:dtype",
           (f"(QuantStatic (Get {_ADD} 0) s dt)", f"(Get {_ADD} 1)"), residual=True, static=True,
           platforms=_TRITON, key="add_rms_static_quant",
           doc="the same with res1 (fp32 add): outputs (q, residual_out)", inductor=_native(residual=True)),
    RECIPROCAL, AMAX_LAST,
)

def one_element_scale(a: Mapping[str, object]) -> bool:
    """A mutating quant reads as a per-tensor row only with a one-element scale (``_C``'s static quant
    also takes per-channel / per-token scales)."""
    s = a.get("s")
    val = s.meta.get("val") if isinstance(s, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) and d == 1 for d in val.shape)


_CK = (*two_d("x"), DtypeIn("x", ACT_DTYPES), SameDtype("x", "w"), LastDimAtMost("x", 8192))
"""CK's rmsnorm2d + dynamic quant: 2-D rows of fp16 / bf16 (the weight read as x's dtype), at most 8192
columns (beyond, only the first 8192 are normed, silently); vLLM's fake gives the scale (M, 1)."""

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "vllm": (
        Spelling("QuantToken", "vllm::rocm_aiter_per_token_quant", ("x", "dt"),
                 accepts=(Contiguous("x"), DtypeIn("x", ACT_DTYPES))),  # HIP: TORCH_CHECK(contiguous)
        Spelling("QuantStaticInplace", "vllm::rocm_aiter_per_tensor_quant", ("x", "s"), names=("x", "scale"),
                 mutated=("out", "scale"), from_output_dtype=("dt",), fixed=(("is_dynamic", False),),
                 guard=one_element_scale),
        Spelling("QuantTokenVllm", "_C::dynamic_per_token_scaled_fp8_quant", ("x",), names=("input",),
                 mutated=("result", "scale"), from_output_dtype=("dt",), fixed=(("scale_ub", None),)),
        *(Spelling("QuantStaticVllm", "_C::static_scaled_fp8_quant", ("x", "s"), names=("input", "scale"),
                   mutated=("result",), from_output_dtype=("dt",), fixed=(("group_shape", g),),
                   guard=one_element_scale)
          for g in (None, [-1, -1])),  # per-tensor group_shape: None or [-1, -1] (a list in FX kwargs)
        Spelling("K_rmsnorm_fused_dynamic_quant", "vllm::rocm_aiter_rmsnorm_fused_dynamic_quant",
                 ("x", "w", "eps", "dt"), accepts=_CK),
        Spelling("K_rmsnorm_fused_add_dynamic_quant", "vllm::rocm_aiter_rmsnorm_fused_add_dynamic_quant",
                 ("x", "r", "w", "eps", "dt"), accepts=(*_CK, *two_d("r"), SameDtype("x", "r"))),
        Spelling("K_rms_fp8_per_tensor_static_quant", "vllm::rocm_aiter_fused_rms_fp8_per_tensor_static_quant",
                 ("x", "w", "eps", "s", "dt"), accepts=(*two_d("x"), Contiguous("w"))),
        Spelling("K_add_rms_fp8_per_tensor_static_quant",
                 "vllm::rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant", ("x", "r", "w", "eps", "s", "dt"),
                 accepts=(*two_d("x", "r"), Contiguous("w"), SameDtype("x", "r"), Contiguous("r"))),
    ),
    "eqsat": (
        Spelling("QuantToken", "eqsat::token_fp8_quant", ("x", "dt")),
        Spelling("QuantStatic", "eqsat::static_fp8_quant", ("x", "s", "dt")),
        Spelling("QuantTokenVllm", "eqsat::vllm_token_fp8_quant", ("x", "dt")),
        Spelling("QuantStaticVllm", "eqsat::vllm_static_fp8_quant", ("x", "s", "dt")),
        Spelling("K_rmsnorm_fused_dynamic_quant", "eqsat::rmsnorm_token_fp8_quant", ("x", "w", "eps", "dt")),
        Spelling("K_rmsnorm_fused_add_dynamic_quant", "eqsat::rmsnorm_add_token_fp8_quant",
                 ("x", "r", "w", "eps", "dt")),
        Spelling("K_rms_fp8_per_tensor_static_quant", "eqsat::rmsnorm_static_fp8_quant", ("x", "w", "eps", "s", "dt")),
        Spelling("K_add_rms_fp8_per_tensor_static_quant", "eqsat::rmsnorm_add_static_fp8_quant",
                 ("x", "r", "w", "eps", "s", "dt")),
    ),
    "aten": (
        Spelling("Reciprocal", "aten::reciprocal", ("x",)),
        Spelling("AmaxLast", "aten::amax", ("x",), fixed=(("dim", (-1,)), ("keepdim", False))),
    ),
}

# -- rules ---------------------------------------------------------------------------------------

_F32X = '(Convert x "float32")'


def _q(scale: str) -> str:
    """vLLM's native tail: ``cast(clamp_max(clamp_min(float(x) * reciprocal(scale), -fmax), fmax), dt)``."""
    return f"(Convert (ClampMax (ClampMin (Mul {_F32X} (Reciprocal {scale})) nf) fmax) dt)"


def _fp8(fp8: str, fmax: float) -> tuple[str, ...]:
    return (f'(= dt "{fp8}")', f"(= fmax {fmax!r})", "(= nf (neg fmax))")


def lift_quant_token(fp8: str, fmax: float, op: str = "QuantTokenVllm", numerics: str = "exact") -> Rule:
    """Native per-token quant (``abs, amax(-1), unsqueeze, float, / fmax, clamp_min(1 / (fmax * 512))``
    for the scale, then ``_q``) of a 2-D x is ``QuantTokenVllm`` (or ``op``: ``QuantToken``, within
    rounding, for finfo's 240 on e4m3fnuz): the scale's reshape is the unsqueeze because it keeps the
    row count and ends in 1 (a cyclic query: x twice; the engine stages it)."""
    scale = '(ClampMin (DivS (Convert (Reshape (AmaxLast (Abs x)) ss) "float32") fmax) lo)'
    query = (f"(= __s {scale})", f"(= __q {_q('__s')})", *_fp8(fp8, fmax), "(= lo (/ 1.0 (* fmax 512.0)))",
             *rank("x", 2), *rank("__s", 2), "(= (dim __s -1) 1)")
    actions = (f"(union __q (Get ({op} x dt) 0))", f"(union __s (Get ({op} x dt) 1))")
    return rule(_lift_name("token", fp8, fmax, op), query, actions, numerics, family="lift")


def lift_quant_static(fp8: str, fmax: float, op: str = "QuantStaticVllm") -> Rule:
    """Native static quant (``_q`` of a one-element fp32 scale) of a 2-D x is ``QuantStaticVllm``
    (or ``op``: ``QuantStatic`` exactly, for finfo's 240 on e4m3fnuz; q stays 2-D, so the scale
    broadcast did not add a dim)."""
    query = (f"(= __q {_q('s')})", *_fp8(fp8, fmax), *static_scale("s"), *rank("x", 2), *rank("__q", 2))
    return rule(_lift_name("static", fp8, fmax, op), query, (f"(union __q ({op} x s dt))",), family="lift")


def _lift_name(kind: str, fp8: str, fmax: float, op: str) -> str:
    return f"lift-quant-{kind}-{fp8.removeprefix('float8_')}" + ("" if op.endswith("Vllm") else f"-{fmax:g}")


_FP8 = {dtype_name(d): ref.vllm_fp8_max(d) for d in (torch.float8_e4m3fnuz, torch.float8_e4m3fn)}

RULES: tuple[Rule, ...] = (
    rewrite("quant-static-inplace-q", "(Get (QuantStaticInplace x s dt) 0)", "(QuantStatic x s dt)", family="unlift"),
    rewrite("quant-static-inplace-scale", "(Get (QuantStaticInplace x s dt) 1)", "s", family="unlift"),
    rewrite("quant-token-vllm", "(QuantTokenVllm x dt)", "(QuantToken x dt)", numerics="rounding", family="lift"),
    rewrite("quant-static-vllm", "(QuantStaticVllm x s dt)", "(QuantStatic x s dt)", numerics="rounding",
            family="lift"),
    *(lift_quant_token(fp8, fmax) for fp8, fmax in _FP8.items()),
    *(lift_quant_static(fp8, fmax) for fp8, fmax in _FP8.items()),
    lift_quant_token("float8_e4m3fnuz", 240.0, "QuantToken", "rounding"),
    lift_quant_static("float8_e4m3fnuz", 240.0, "QuantStatic"),
)


# -- the fused kernels' arithmetic (AITER's CK rmsnorm2d + quant, Triton fused static quant) ----------

def rmsnorm_token_fp8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER/CK fused rms_norm + per-token quant of the fp32 norm output: returns (q, scale)."""
    y32 = ref.aiter_rms32(x.float(), weight, eps)
    return ref.group_quant32(y32, y32.shape[-1], fp8_dtype)


def rmsnorm_add_token_fp8_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AITER/CK fused add + rms_norm + per-token quant: returns (q, residual_out, scale); fp32 add."""
    inp32 = x.float() + residual.float()
    q, scale = ref.group_quant32(ref.aiter_rms32(inp32, weight, eps), inp32.shape[-1], fp8_dtype)
    return q, inp32.to(x.dtype), scale


def rmsnorm_static_fp8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor, fp8_dtype: torch.dtype
) -> torch.Tensor:
    """AITER Triton ``fused_rms_fp8_per_tensor_static_quant``: static quant of the fp32 norm output."""
    return ref.static_quant32(ref.aiter_rms32(x.float(), weight, eps), scale, fp8_dtype, torch.finfo(fp8_dtype).max)


def rmsnorm_add_static_fp8_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor,
    fp8_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same with ``res1``: returns (q, residual_out); the add is in fp32."""
    inp32 = x.float() + residual.float()
    q = ref.static_quant32(ref.aiter_rms32(inp32, weight, eps), scale, fp8_dtype, torch.finfo(fp8_dtype).max)
    return q, inp32.to(x.dtype)


# -- the project's ops ---------------------------------------------------------------------------------

def _static_fake(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return empty(x, dtype=dtype)


def _rms_token_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight)
    return token_fake(x, dtype)


def _add_rms_token_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                        dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, residual)
    q, scale = token_fake(x, dtype)
    return q, empty(x), scale


def _rms_static_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor,
                     dtype: torch.dtype) -> torch.Tensor:
    check_norm_shapes(x, weight)
    return empty(x, dtype=dtype)


def _add_rms_static_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                         scale: torch.Tensor, dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, residual)
    return empty(x, dtype=dtype), empty(x)


@rows2d
def _rms_static_gpu(x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor, dtype: torch.dtype) -> Any:
    """AITER's Triton fused_rms_fp8_per_tensor_static_quant."""
    q, *_ = triton_kernels().fused_rms_fp8_per_tensor_static_quant(x, weight, eps, scale, dtype_quant=dtype)
    return q


@rows2d
def _add_rms_static_gpu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                        scale: torch.Tensor, dtype: torch.dtype) -> Any:
    q, _, _, residual_out = triton_kernels().fused_rms_fp8_per_tensor_static_quant(
        x, weight, eps, scale, dtype_quant=dtype, res1=residual)
    return q, residual_out


@rows2d
def _rms_token_gpu(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> Any:
    """AITER's Triton rmsnorm2d_fwd_with_dynamicquant (CK's op of that name on ROCm): (q, scale [M, 1])."""
    x = x.contiguous()
    q, scale = torch.empty_like(x, dtype=dtype), x.new_empty((x.shape[0], 1), dtype=F32)
    triton_kernels().rmsnorm2d_fwd_with_dynamicquant(q, x, scale, weight, eps, clamp_out=True)
    return q, scale


@rows2d
def _add_rms_token_gpu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                       dtype: torch.dtype) -> Any:
    """AITER's Triton rmsnorm2d_fwd_with_add_dynamicquant: (q, residual_out, scale [M, 1]); it norms the
    sum rounded to x's dtype (CK: the fp32 sum), within the row's rounding."""
    x, residual = x.contiguous(), residual.contiguous()
    q, residual_out = torch.empty_like(x, dtype=dtype), torch.empty_like(x)
    scale = x.new_empty((x.shape[0], 1), dtype=F32)
    triton_kernels().rmsnorm2d_fwd_with_add_dynamicquant(q, x, residual, residual_out, scale, weight, eps)
    return q, residual_out, scale


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "token_fp8_quant(Tensor x, ScalarType dtype) -> (Tensor, Tensor)",
          lambda x, dt: fresh(*ref.token_fp8_quant(x, dt)), token_fake),
    OpDef("eqsat", "static_fp8_quant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor",
          lambda x, s, dt: ref.static_fp8_quant(x, s, dt).contiguous(), _static_fake),
    OpDef("eqsat", "vllm_token_fp8_quant(Tensor x, ScalarType dtype) -> (Tensor, Tensor)",
          lambda x, dt: fresh(*ref.vllm_token_fp8_quant(x, dt)), token_fake),
    OpDef("eqsat", "vllm_static_fp8_quant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor",
          lambda x, s, dt: ref.vllm_static_fp8_quant(x, s, dt).contiguous(), _static_fake),
    OpDef("eqsat", "rmsnorm_token_fp8_quant(Tensor x, Tensor weight, float eps, ScalarType dtype) -> (Tensor, Tensor)",
          lambda x, w, eps, dt: fresh(*rmsnorm_token_fp8_quant(x, w, eps, dt)), _rms_token_fake, _rms_token_gpu),
    OpDef("eqsat", "rmsnorm_add_token_fp8_quant(Tensor x, Tensor residual, Tensor weight, float eps,"
          " ScalarType dtype) -> (Tensor, Tensor, Tensor)",
          lambda x, r, w, eps, dt: fresh(*rmsnorm_add_token_fp8_quant(x, r, w, eps, dt)), _add_rms_token_fake,
          _add_rms_token_gpu),
    OpDef("eqsat", "rmsnorm_static_fp8_quant(Tensor x, Tensor weight, float eps, Tensor scale, ScalarType dtype)"
          " -> Tensor", lambda x, w, eps, s, dt: rmsnorm_static_fp8_quant(x, w, eps, s, dt).contiguous(),
          _rms_static_fake, _rms_static_gpu),
    OpDef("eqsat", "rmsnorm_add_static_fp8_quant(Tensor x, Tensor residual, Tensor weight, float eps,"
          " Tensor scale, ScalarType dtype) -> (Tensor, Tensor)",
          lambda x, r, w, eps, s, dt: fresh(*rmsnorm_add_static_fp8_quant(x, r, w, eps, s, dt)),
          _add_rms_static_fake, _add_rms_static_gpu),
)


# -- vLLM's ops ------------------------------------------------------------------------------------------

def vllm_standins(fp8: torch.dtype) -> list[OpDef]:
    """AITER's per-token and static quants (functional and mutating) and their fused rms_norm forms, and
    the ``_C`` per-token and static quants (vLLM's bound: 224 on e4m3fnuz) read under ``auto_functionalized``."""

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

    def add_rms_dyn_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                         quant_dtype: torch.dtype) -> Any:
        return (x.new_empty(x.shape, dtype=quant_dtype), torch.empty_like(x), x.new_empty((x.shape[0], 1), dtype=F32))

    def rms_static_fake(x: torch.Tensor, weight: torch.Tensor, epsilon: float, scale: torch.Tensor,
                        quant_dtype: torch.dtype) -> Any:
        return torch.empty_like(x, dtype=quant_dtype)

    def triton_rows(x: torch.Tensor, *args: Any) -> None:  # AITER's Triton fused norm kernels: 2-D rows
        rows(x, "fused_rms_fp8_per_tensor_static_quant", "AITER's Triton kernel")

    def add_rms_static_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                            scale: torch.Tensor, quant_dtype: torch.dtype) -> Any:
        return torch.empty_like(x, dtype=quant_dtype), torch.empty_like(residual)

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

    return [
        standin_op("vllm", "rocm_aiter_per_token_quant(Tensor x, ScalarType quant_dtype, Tensor? scale=None)"
                   " -> (Tensor, Tensor)", per_token_fake, per_token),
        OpDef("vllm", "rocm_aiter_per_tensor_quant(Tensor(a0!) out, Tensor x, Tensor(a2!) scale, bool is_dynamic)"
              " -> ()", per_tensor, nothing),
        standin_op("vllm", "rocm_aiter_rmsnorm_fused_dynamic_quant(Tensor x, Tensor weight, float epsilon,"
                   " ScalarType quant_dtype) -> (Tensor, Tensor)",
                   rms_dyn_fake, rmsnorm_token_fp8_quant, ck_rows, gpu=_rms_token_gpu),
        standin_op("vllm",
                   "rocm_aiter_rmsnorm_fused_add_dynamic_quant(Tensor x, Tensor residual, Tensor weight,"
                   " float epsilon, ScalarType quant_dtype) -> (Tensor, Tensor, Tensor)",
                   add_rms_dyn_fake, rmsnorm_add_token_fp8_quant, ck_rows, gpu=_add_rms_token_gpu),
        standin_op("vllm",
                   "rocm_aiter_fused_rms_fp8_per_tensor_static_quant(Tensor x, Tensor weight, float epsilon,"
                   " Tensor scale, ScalarType quant_dtype) -> Tensor",
                   rms_static_fake, rmsnorm_static_fp8_quant, triton_rows,
                   gpu=_rms_static_gpu),
        standin_op("vllm", "rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(Tensor x, Tensor residual,"
                   " Tensor weight, float epsilon, Tensor scale, ScalarType quant_dtype) -> (Tensor, Tensor)",
                   add_rms_static_fake, rmsnorm_add_static_fp8_quant, triton_rows,
                   gpu=_add_rms_static_gpu),
        OpDef("_C", "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale,"
              " Tensor? scale_ub) -> ()", c_per_token, nothing),
        OpDef("_C", "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, int[]? group_shape=None)"
              " -> ()", c_static, nothing),
    ]
