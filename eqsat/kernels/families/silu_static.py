"""Kernel: AITER's ``fused_silu_mul_fp8_per_tensor_static_quant`` — silu_and_mul + static fp8 quant.

``K_silu_mul_fp8_static_quant(x, s, dt)`` is ``QuantStatic(SiluMul(x), s, dt)``: ``silu(a) * b`` over
the two halves of x's last dim, in fp32 and not rounded to x.dtype, then ``q = clamp(y * (1 / s))``
(``s`` one fp32 element). Skipping the bf16 rounding of the product makes the equality ``rounding``.
It reads x and the scale once and writes q. The kernel is in AITER's Triton tree after the installed
0.1.7 wheel, so it runs on ROCm builds that have it; elsewhere it is no candidate.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from eqsat.core.accepts import LastDimMultiple
from eqsat.core.spec import KernelSpec, OpDef, Traffic, dtype_accepted, params, rank, static_scale
from eqsat.core.spelling import Spelling
from eqsat.kernels.traffic import ACT_DTYPES, FP8_BYTES, half, operand
from eqsat.library import reference as ref
from eqsat.library.define import empty

K = "K_silu_mul_fp8_static_quant"


def traffic(a: Mapping[str, object]) -> Traffic:
    x = operand(a, "x")
    return Traffic(read=x.bytes + operand(a, "s").bytes, written=half(x).numel * FP8_BYTES)


ROWS: tuple[KernelSpec, ...] = (
    KernelSpec(K, params("x:T s:T dt:dtype"), traffic, outputs=("(QuantStatic (SiluMul x) s dt)",),
               constraints=(*rank("x", 2), *dtype_accepted(K, "x"), *static_scale("s"), "(= (dim x -1) __n)", "(= 0 (% __n 2))"),
               dtypes=ACT_DTYPES, numerics="rounding", platforms=frozenset({"gfx942", "gfx950"}),
               calibration_key="silu_static_quant",
               doc="AITER fused_silu_mul_fp8_per_tensor_static_quant: fp32 silu(a) * b, static fp8 quant"),
)

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "eqsat": (Spelling(K, "eqsat::silu_mul_fp8_static_quant", ("x", "s", "dt"), accepts=(LastDimMultiple("x", 2),)),),
}


def silu_mul_fp8_static_quant(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """The kernel's arithmetic: silu(a) * b in fp32, then the static quant at ``finfo(fp8_dtype).max``."""
    d = x.shape[-1] // 2
    a, b = x[..., :d].float(), x[..., d:].float()
    return ref.static_quant32(a * torch.sigmoid(a) * b, scale, fp8_dtype, torch.finfo(fp8_dtype).max)


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "silu_mul_fp8_static_quant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor",
          lambda x, s, dt: silu_mul_fp8_static_quant(x, s, dt).contiguous(),
          lambda x, s, dt: empty(x, [*x.shape[:-1], x.shape[-1] // 2], dt)),
)
