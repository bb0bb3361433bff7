"""Family: rms_norm, fused-add rms_norm, fp8 group quant, and AITER's fused norm + group quant.

Level-B rows (``outputs=None``) are the semantic ops, each also standing for the standalone kernel
that runs it unfused; fused rows give their semantics as Level-B terms in the op's output order.
Traffic formulas follow AITER's kernels (``reference/aiter-kernels.md`` §6). ``SPELLINGS`` says how
each vocabulary writes these ops in an FX graph, and what each op runs (``accepts``): vLLM's fakes
are 2-D; AITER's ``per_1x128`` quant ignores its group size (G = 128 only) and takes fp16 / bf16; the
Triton norm + quant kernels read x through its row stride but need a contiguous weight, and the add
variant writes residual_out in x's dtype, row-major, where vLLM's fake says the residual's.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from eqsat.core.accepts import Contiguous, DtypeIn, LastDimMultiple, OneOf, SameDtype, two_d
from eqsat.core.spec import (
    DimsEqual,
    KernelSpec,
    Operand,
    Traffic,
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
from eqsat.library.vllm import FP8_OUT

ACT_DTYPES = ("bfloat16", "float16")
SCALE_BYTES = 4
FP8_BYTES = 1


def _op(a: Mapping[str, object], name: str) -> Operand:
    value = a[name]
    assert isinstance(value, Operand)
    return value


def _groups(x: Operand, g: object) -> int:
    assert isinstance(g, int) and g > 0
    return x.rows * -(-x.shape[-1] // g)


def _rms(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=x.bytes)


def _add_rms(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=2 * x.bytes)


def _quant_out(x: Operand, g: object) -> float:
    return x.numel * FP8_BYTES + _groups(x, g) * SCALE_BYTES


def _quant_group(a: Mapping[str, object]) -> Traffic:
    x = _op(a, "x")
    return Traffic(read=x.bytes, written=_quant_out(x, a["G"]))


def _rms_quant(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=_quant_out(x, a["G"]))


def _add_rms_quant(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=x.bytes + _quant_out(x, a["G"]))


def _norm_quant_constraints(kernel: str) -> tuple[str, ...]:
    return (
        *rank("x", 2), *same_dtype("x", "w"), *dtype_accepted(kernel, "x"),  # any strides (T1)
        *rank("w", 1), *same_last_dim("x", "w"), *power_of_two("G"), *last_dim_divisible("x", "G"),
    )


_RMS_Q = "(QuantGroup (RmsNorm x w eps) G dt)"
_ADD_RMS = "(AddRmsNorm x r w eps)"
_ADD_RMS_Q = f"(QuantGroup (Get {_ADD_RMS} 0) G dt)"
_GPU = frozenset({"gfx942", "gfx950", "rdna4", "triton"})

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("RmsNorm", params("x:T w:T eps:f64"), _rms, calibration_key="rms_norm", implies=(DimsEqual("x", "w", True),),
               doc="y = cast(x32 * rsqrt(mean(x32^2) + eps), w.dtype) * w, in x.dtype (vLLM IR)"),
    KernelSpec("AddRmsNorm", params("x:T r:T w:T eps:f64"), _add_rms, calibration_key="add_rms_norm",
               implies=(DimsEqual("x", "r"), DimsEqual("x", "w", True)),
               doc="(RmsNorm of s32 = x32 + r32, cast(s32, x.dtype)); outputs (normed, residual_out)"),
    KernelSpec("QuantGroup", params("x:T G:i64 dt:dtype"), _quant_group, calibration_key="group_quant",
               doc="per-row groups of G: scale = max(amax, 1e-10) / finfo(dt).max, q = clamp(x / scale)"),
    KernelSpec(
        "K_rmsnorm_fp8_group_quant", params("x:T w:T eps:f64 G:i64 dt:dtype"), _rms_quant,
        outputs=(f"(Get {_RMS_Q} 0)", f"(Get {_RMS_Q} 1)"),
        constraints=_norm_quant_constraints("K_rmsnorm_fp8_group_quant"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_GPU, calibration_key="rms_group_quant",
        doc="AITER fused_rms_fp8_group_quant: quantizes the fp32 norm output (no bf16 rounding)",
    ),
    KernelSpec(
        "K_rmsnorm_add_fp8_group_quant", params("x:T r:T w:T eps:f64 G:i64 dt:dtype"), _add_rms_quant,
        outputs=(f"(Get {_ADD_RMS_Q} 0)", f"(Get {_ADD_RMS} 1)", f"(Get {_ADD_RMS_Q} 1)"),
        constraints=(*_norm_quant_constraints("K_rmsnorm_add_fp8_group_quant"), *same_shape("x", "r"), *same_dtype("x", "r")),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_GPU, calibration_key="add_rms_group_quant",
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
