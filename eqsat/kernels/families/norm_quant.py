"""Family: rms_norm, fused-add rms_norm, fp8 group quant, and AITER's fused norm + group quant.

Level-B rows (``outputs=None``) are the semantic ops, each also standing for the standalone kernel
that runs it unfused; fused rows give their semantics as Level-B terms in the op's output order.
Traffic formulas follow AITER's kernels. ``SPELLINGS`` says how
each vocabulary writes these ops in an FX graph, and what each op runs (``accepts``): vLLM's fakes
are 2-D; AITER's ``per_1x128`` quant ignores its group size (G = 128 only) and takes fp16 / bf16; the
Triton norm + quant kernels read x through its row stride but need a contiguous weight, and the add
variant writes residual_out in x's dtype, row-major, where vLLM's fake says the residual's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from eqsat.core.accepts import Contiguous, DtypeIn, LastDimMultiple, OneOf, SameDtype, two_d
from eqsat.core.spec import (
    DimsEqual,
    KernelSpec,
    OpDef,
    Traffic,
    Twin,
    dtype_accepted,
    last_dim_divisible,
    params,
    power_of_two,
    rank,
    same_dtype,
    same_last_dim,
    same_shape,
)
from eqsat.core.spelling import Spelling
from eqsat.kernels.traffic import ACT_DTYPES, operand, quant_out
from eqsat.library import reference as ref
from eqsat.library.aiter import rows2d, triton_kernels
from eqsat.library.define import check_norm_shapes, empty, fresh, quant_fake
from eqsat.library.vllm import (
    F32,
    FP8_OUT,
    aiter_transposed,
    ceil_div,
    divides,
    need,
    nothing,
    rows,
    standin_op,
)


def _rms(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=x.bytes)


def _add_rms(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=2 * x.bytes)


def _quant_group(a: Mapping[str, object]) -> Traffic:
    x = operand(a, "x")
    return Traffic(read=x.bytes, written=quant_out(x, a["G"]))


def _rms_quant(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=quant_out(x, a["G"]))


def _add_rms_quant(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=x.bytes + quant_out(x, a["G"]))


def _norm_quant_constraints(kernel: str) -> tuple[str, ...]:
    return (
        *rank("x", 2), *same_dtype("x", "w"), *dtype_accepted(kernel, "x"),  # any strides
        *rank("w", 1), *same_last_dim("x", "w"), *power_of_two("G"), *last_dim_divisible("x", "G"),
    )


_RMS_Q = "(QuantGroup (RmsNorm x w eps) G dt)"
_ADD_RMS = "(AddRmsNorm x r w eps)"
_ADD_RMS_Q = f"(QuantGroup (Get {_ADD_RMS} 0) G dt)"
_GPU = frozenset({"gfx942", "gfx950", "rdna4", "triton"})

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("RmsNorm", params("x:T w:T eps:f64"), _rms, calibration_key="rms_norm", reference=ref.rms_norm, implies=(DimsEqual("x", "w", True),),
               doc="y = cast(x32 * rsqrt(mean(x32^2) + eps), w.dtype) * w, in x.dtype (vLLM IR)"),
    KernelSpec("AddRmsNorm", params("x:T r:T w:T eps:f64"), _add_rms, calibration_key="add_rms_norm", reference=ref.fused_add_rms_norm,
               implies=(DimsEqual("x", "r"), DimsEqual("x", "w", True)),
               doc="(RmsNorm of s32 = x32 + r32, cast(s32, x.dtype)); outputs (normed, residual_out)"),
    KernelSpec("QuantGroup", params("x:T G:i64 dt:dtype"), _quant_group, calibration_key="group_quant", reference=ref.group_fp8_quant,
               doc="per-row groups of G: scale = max(amax, 1e-10) / finfo(dt).max, q = clamp(x / scale)"),
    KernelSpec(
        "K_rmsnorm_fp8_group_quant", params("x:T w:T eps:f64 G:i64 dt:dtype"), _rms_quant,
        outputs=(f"(Get {_RMS_Q} 0)", f"(Get {_RMS_Q} 1)"),
        constraints=_norm_quant_constraints("K_rmsnorm_fp8_group_quant"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_GPU, calibration_key="rms_group_quant",
        inductor=Twin(2, (*rank("x", 2), *same_dtype("x", "w"), *last_dim_divisible("x", "G")), quant_epilogue=True),
        doc="AITER fused_rms_fp8_group_quant: quantizes the fp32 norm output (no bf16 rounding)",
    ),
    KernelSpec(
        "K_rmsnorm_add_fp8_group_quant", params("x:T r:T w:T eps:f64 G:i64 dt:dtype"), _add_rms_quant,
        outputs=(f"(Get {_ADD_RMS_Q} 0)", f"(Get {_ADD_RMS} 1)", f"(Get {_ADD_RMS_Q} 1)"),
        constraints=(*_norm_quant_constraints("K_rmsnorm_add_fp8_group_quant"), *same_shape("x", "r"), *same_dtype("x", "r")),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_GPU, calibration_key="add_rms_group_quant",
        inductor=Twin(2, (*rank("x", 2), *same_dtype("x", "w"), *same_shape("x", "r"), *last_dim_divisible("x", "G")),
                      quant_epilogue=True),
        doc="AITER fused_rms_fp8_group_quant with res1: outputs (q, residual_out, scale)",
    ),
)

def _finfo_bounds(a: Mapping[str, object]) -> bool:
    """``_C.per_token_group_fp8_quant`` is QuantGroup when its bounds are the dtype's own (AITER's)."""
    dt = a.get("dt")
    fmax = torch.finfo(dt).max if isinstance(dt, torch.dtype) else None
    return fmax is not None and a.get("fp8_max") == fmax and a.get("fp8_min") == -fmax


SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "vllm": (
        Spelling("RmsNorm", "_C::rms_norm", ("x", "w", "eps"), names=("input", "weight", "epsilon"),
                 mutated=("result",)),
        Spelling("QuantGroup", "_C::per_token_group_fp8_quant", ("x", "G"), names=("input", "group_size"),
                 mutated=("output_q", "output_s"), from_output_dtype=("dt",), guard=_finfo_bounds,
                 fixed=(("eps", 1e-10), ("scale_ue8m0", False), ("dummy_is_scale_transposed", False),
                        ("dummy_is_tma_aligned", False))),
        Spelling("RmsNorm", "vllm_ir::rms_norm", ("x", "w", "eps")),
        Spelling("AddRmsNorm", "vllm_ir::fused_add_rms_norm", ("x", "r", "w", "eps")),
        Spelling("QuantGroup", "vllm::rocm_aiter_group_fp8_quant", ("x", "G"), from_output_dtype=("dt",),
                 accepts=(*two_d("x"), LastDimMultiple("x", "G"), OneOf("G", (128,)), DtypeIn("x", ACT_DTYPES), FP8_OUT)),
        Spelling("K_rmsnorm_fp8_group_quant", "vllm::rocm_aiter_rmsnorm_fp8_group_quant",
                 ("x", "w", "eps", "G"), from_output_dtype=("dt",),
                 accepts=(*two_d("x"), LastDimMultiple("x", "G"), Contiguous("w"), FP8_OUT)),
        Spelling("K_rmsnorm_add_fp8_group_quant", "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant",
                 ("x", "r", "w", "eps", "G"), from_output_dtype=("dt",),
                 accepts=(*two_d("x", "r"), LastDimMultiple("x", "G"), Contiguous("w"),
                          SameDtype("x", "r"), Contiguous("r"), FP8_OUT)),  # residual_out: x's dtype, row-major
    ),
    "eqsat": (
        Spelling("RmsNorm", "eqsat::rms_norm", ("x", "w", "eps")),
        Spelling("AddRmsNorm", "eqsat::fused_add_rms_norm", ("x", "r", "w", "eps")),
        Spelling("QuantGroup", "eqsat::group_fp8_quant", ("x", "G", "dt"), accepts=(LastDimMultiple("x", "G"),)),
        Spelling("K_rmsnorm_fp8_group_quant", "eqsat::rmsnorm_fp8_group_quant", ("x", "w", "eps", "G", "dt"),
                 accepts=(LastDimMultiple("x", "G"),)),
        Spelling("K_rmsnorm_add_fp8_group_quant", "eqsat::rmsnorm_add_fp8_group_quant",
                 ("x", "r", "w", "eps", "G", "dt"), accepts=(LastDimMultiple("x", "G"),)),
    ),
}


# -- the fused kernels' arithmetic (AITER's Triton fused_rms_fp8_group_quant) -------------------------

def rmsnorm_fp8_group_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER fused rms_norm + group fp8 quant of the fp32 norm (no rounding between): (q, scale)."""
    return ref.group_quant32(ref.aiter_rms32(x.float(), weight, eps), group_size, fp8_dtype)


def rmsnorm_add_fp8_group_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    fp8_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AITER fused add + rms_norm + group fp8 quant: returns (q, residual_out, scale).

    The add is in fp32; `residual_out` is the sum rounded to x.dtype and the norm sees
    the unrounded fp32 sum.
    """
    inp32 = x.float() + residual.float()
    residual_out = inp32.to(x.dtype)
    q, scale = ref.group_quant32(ref.aiter_rms32(inp32, weight, eps), group_size, fp8_dtype)
    return q, residual_out, scale


# -- the project's ops ---------------------------------------------------------------------------------

def _rms_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_norm_shapes(x, weight)
    return empty(x)


def _add_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> Any:
    check_norm_shapes(x, weight, residual)
    return empty(x), empty(x)


def _rms_quant_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int, dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight)
    return quant_fake(x, group_size, dtype)


def _add_quant_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                    dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, residual)
    q, scale = quant_fake(x, group_size, dtype)
    return q, empty(x), scale


# -- on a GPU: AITER's Triton fused_rms_fp8_group_quant --------------------------------------------------

@rows2d
def _rms_quant_gpu(x: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int, dtype: torch.dtype) -> Any:
    (q, scale), *_ = triton_kernels().fused_rms_fp8_group_quant(x, weight, eps, group_size=group_size,
                                                                 dtype_quant=dtype)
    return q, scale


@rows2d
def _add_rms_quant_gpu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                       dtype: torch.dtype) -> Any:
    (q, scale), _, _, residual_out = triton_kernels().fused_rms_fp8_group_quant(
        x, weight, eps, group_size=group_size, dtype_quant=dtype, res1=residual)
    return q, residual_out, scale


@rows2d
def _rms_norm_gpu(x: torch.Tensor, weight: torch.Tensor, eps: float) -> Any:
    """AITER's Triton rms_norm (rows of a 2-D x, the last dim contiguous)."""
    return triton_kernels().rms_norm(x, weight, eps)


@rows2d
def _add_rms_norm_gpu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> Any:
    """AITER's Triton rmsnorm2d_fwd_with_add (it reads x, the residual and its outputs with one row stride)."""
    x, residual = x.contiguous(), residual.contiguous()
    out, residual_out = torch.empty_like(x), torch.empty_like(x)
    triton_kernels().rmsnorm2d_fwd_with_add(out, x, residual, residual_out, weight, eps)
    return out, residual_out


@rows2d
def _group_quant_gpu(x: torch.Tensor, group_size: int, dtype: torch.dtype) -> Any:
    """AITER's Triton fused_flatten_fp8_group_quant of [M, 1, N]: a group quant of x's rows."""
    return tuple(triton_kernels().fused_flatten_fp8_group_quant(x.unsqueeze(1), group_size, dtype_quant=dtype))


def _aiter_norm_reads(x: torch.Tensor, weight: torch.Tensor | None, variance_size: int | None) -> bool:
    """What AITER's Triton norms compute as vLLM-IR's native code does: a weight of x's dtype spanning
    x's last dim (contiguous), a 16-bit x, the variance over the whole row."""
    return (weight is not None and variance_size is None and x.dtype in (torch.bfloat16, torch.float16)
            and weight.dtype == x.dtype and weight.shape == x.shape[-1:] and x.stride(-1) == 1)


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "rms_norm(Tensor x, Tensor weight, float eps) -> Tensor",
          lambda x, w, eps: ref.rms_norm(x, w, eps).contiguous(), _rms_fake),
    OpDef("eqsat", "fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)",
          lambda *a: fresh(*ref.fused_add_rms_norm(*a)), _add_fake),
    OpDef("eqsat", "group_fp8_quant(Tensor x, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor)",
          lambda *a: fresh(*ref.group_fp8_quant(*a)), quant_fake),
    OpDef("eqsat", "rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float eps, SymInt group_size,"
          " ScalarType dtype) -> (Tensor, Tensor)", lambda *a: fresh(*rmsnorm_fp8_group_quant(*a)), _rms_quant_fake,
          _rms_quant_gpu),
    OpDef("eqsat", "rmsnorm_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight, float eps,"
          " SymInt group_size, ScalarType dtype) -> (Tensor, Tensor, Tensor)",
          lambda *a: fresh(*rmsnorm_add_fp8_group_quant(*a)), _add_quant_fake, _add_rms_quant_gpu),
)


# -- vLLM's ops (eqsat.library.vllm says how a stand-in is made) ---------------------------------------

def vllm_standins(fp8: torch.dtype) -> list[OpDef]:
    """vLLM-IR's norms (their native code is their fake, as vLLM registers them), AITER's group quant and
    fused norm + group quants, and the ``_C`` norm and group quant read under ``auto_functionalized``."""

    def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None) -> Any:
        return ref.rms_norm(x, weight, epsilon, variance_size)

    def rms_norm_gpu(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
                     variance_size: int | None = None) -> Any:
        if _aiter_norm_reads(x, weight, variance_size):
            return _rms_norm_gpu(x, weight, epsilon)
        return rms_norm(x, weight, epsilon, variance_size)

    def fused_add(x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
                  variance_size: int | None = None) -> Any:
        return ref.fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)

    def fused_add_gpu(x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
                      variance_size: int | None = None) -> Any:
        if _aiter_norm_reads(x, weight, variance_size) and x_residual.shape == x.shape and x_residual.dtype == x.dtype:
            return _add_rms_norm_gpu(x, x_residual, weight, epsilon)
        return fused_add(x, x_residual, weight, epsilon, variance_size)

    def quant_fake_(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        m, n = rows(x, "rocm_aiter_group_fp8_quant")
        return x.new_empty((m, n), dtype=fp8), x.new_empty((m, ceil_div(n, group_size)), dtype=F32)

    def quant_needs(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> None:
        divides("rocm_aiter_group_fp8_quant", x.shape[-1], group_size)
        need(group_size == 128, "rocm_aiter_group_fp8_quant: AITER's per_1x128 quant takes group_size 128 only, "
             f"got {group_size}")

    def quant(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        q, s = ref.group_fp8_quant(x, group_size, fp8)
        return q, aiter_transposed(s) if transpose_scale else s

    def quant_gpu(x: torch.Tensor, group_size: int, transpose_scale: bool = False) -> Any:
        q, s = _group_quant_gpu(x, group_size, fp8)
        return q, aiter_transposed(s) if transpose_scale else s

    def rms_fake(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_rmsnorm_fp8_group_quant")
        return torch.empty_like(x, dtype=fp8), x.new_empty((m, ceil_div(n, group_size)), dtype=F32)

    def rms_needs(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> None:
        divides("rocm_aiter_rmsnorm_fp8_group_quant", x.shape[-1], group_size)

    def rms(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, group_size: int) -> Any:
        return rmsnorm_fp8_group_quant(x, weight, variance_epsilon, group_size, fp8)

    def add_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, variance_epsilon: float,
                 group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_rmsnorm_with_add_fp8_group_quant")
        return (torch.empty_like(x, dtype=fp8), torch.empty_like(residual),
                x.new_empty((m, ceil_div(n, group_size)), dtype=F32))

    def add_needs(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, variance_epsilon: float,
                  group_size: int) -> None:
        divides("rocm_aiter_rmsnorm_with_add_fp8_group_quant", x.shape[-1], group_size)
        need(residual.shape == x.shape, "rocm_aiter_rmsnorm_with_add_fp8_group_quant: residual must have x's shape")

    def add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, variance_epsilon: float,
            group_size: int) -> Any:
        return rmsnorm_add_fp8_group_quant(x, residual, weight, variance_epsilon, group_size, fp8)

    def c_rms_norm(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
        result.copy_(ref.rms_norm(input, weight, epsilon))

    def c_group_quant(input: torch.Tensor, output_q: torch.Tensor, output_s: torch.Tensor, group_size: int,
                      eps: float, fp8_min: float, fp8_max: float, scale_ue8m0: bool,
                      dummy_is_scale_transposed: bool, dummy_is_tma_aligned: bool) -> None:
        if scale_ue8m0:
            raise NotImplementedError("scale_ue8m0 stand-in")
        g = input.float().unflatten(-1, (-1, group_size))
        scale = g.abs().amax(-1, keepdim=True).clamp_min(eps) / fp8_max
        output_q.copy_((g / scale).clamp(fp8_min, fp8_max).flatten(-2).to(output_q.dtype))
        output_s.copy_(scale.squeeze(-1))

    return [
        OpDef("vllm_ir", "rms_norm(Tensor x, Tensor? weight, float epsilon, SymInt? variance_size=None) -> Tensor",
              rms_norm, rms_norm, rms_norm_gpu),
        OpDef("vllm_ir", "fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, float epsilon,"
              " SymInt? variance_size=None) -> (Tensor, Tensor)", fused_add, fused_add, fused_add_gpu),
        standin_op("vllm", "rocm_aiter_group_fp8_quant(Tensor x, SymInt group_size, bool transpose_scale=False)"
                   " -> (Tensor, Tensor)", quant_fake_, quant, quant_needs, gpu=quant_gpu),
        standin_op("vllm", "rocm_aiter_rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float variance_epsilon,"
                   " SymInt group_size) -> (Tensor, Tensor)", rms_fake, rms, rms_needs,
                   gpu=lambda x, w, eps, g: _rms_quant_gpu(x, w, eps, g, fp8)),
        standin_op("vllm",
                   "rocm_aiter_rmsnorm_with_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight,"
                   " float variance_epsilon, SymInt group_size) -> (Tensor, Tensor, Tensor)",
                   add_fake, add, add_needs,
                   gpu=lambda x, r, w, eps, g: _add_rms_quant_gpu(x, r, w, eps, g, fp8)),
        OpDef("_C", "rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()", c_rms_norm, nothing),
        OpDef("_C", "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, "
              "float eps, float fp8_min, float fp8_max, bool scale_ue8m0, bool dummy_is_scale_transposed, "
              "bool dummy_is_tma_aligned) -> ()", c_group_quant, nothing),
    ]
