"""Family: silu_and_mul and AITER's fused silu_and_mul + fp8 group quant (vLLM pattern #10).

``SiluMul(x)`` is vLLM's ``SiluAndMul``: ``silu(x[..., :N/2]) * x[..., N/2:]`` in x.dtype. The fused
kernel computes the product in fp32 and quantizes it without the bf16 rounding, so the equality is
``rounding``. Traffic follows AITER's ``act_mul_and_fp8_group_quant`` (reads x once, writes q and
the scales).
"""

from __future__ import annotations

from collections.abc import Mapping

from eqsat.core.accepts import LastDimMultiple, two_d
from eqsat.core.spec import KernelSpec, Operand, Traffic, dtype_accepted, params, power_of_two, rank
from eqsat.core.spelling import Spelling
from eqsat.kernels.norm_quant import ACT_DTYPES, FP8_BYTES, SCALE_BYTES, _op
from eqsat.library.vllm import FP8_OUT


def half(x: Operand) -> Operand:
    return Operand((*x.shape[:-1], x.shape[-1] // 2), x.itemsize)


def silu_mul_traffic(a: Mapping[str, object]) -> Traffic:
    x = _op(a, "x")
    return Traffic(read=x.bytes, written=half(x).bytes)


def silu_quant_traffic(a: Mapping[str, object]) -> Traffic:
    x, g = _op(a, "x"), a["G"]
    y = half(x)
    assert isinstance(g, int) and g > 0
    return Traffic(read=x.bytes, written=y.numel * FP8_BYTES + y.rows * -(-y.shape[-1] // g) * SCALE_BYTES)


_SILU_Q = "(QuantGroup (SiluMul x) G dt)"


def silu_quant_constraints(kernel: str) -> tuple[str, ...]:
    # the product's last dim (N/2) must be a multiple of G: N must be a multiple of 2G
    return (*rank("x", 2), *dtype_accepted(kernel, "x"), *power_of_two("G"),
            "(= (dim x -1) __n)", "(= 0 (% __n (* 2 G)))")


ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("SiluMul", params("x:T"), silu_mul_traffic, calibration_key="silu_mul",
               doc="silu(x[..., :N/2]) * x[..., N/2:] in x.dtype (vLLM SiluAndMul)"),
    KernelSpec(
        "K_silu_mul_fp8_group_quant", params("x:T G:i64 dt:dtype"), silu_quant_traffic,
        outputs=(f"(Get {_SILU_Q} 0)", f"(Get {_SILU_Q} 1)"),
        constraints=silu_quant_constraints("K_silu_mul_fp8_group_quant"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=frozenset({"gfx942", "gfx950", "triton"}),
        calibration_key="silu_group_quant",
        doc="AITER act_mul_and_fp8_group_quant(silu): fp32 product, quantized without bf16 rounding",
    ),
)

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "vllm": (
        Spelling("SiluMul", "_C::silu_and_mul", ("x",), names=("input",), mutated=("result",)),
        Spelling("K_silu_mul_fp8_group_quant", "vllm::rocm_aiter_act_mul_and_fp8_group_quant", ("x", "G"),
                 from_output_dtype=("dt",),  # a partial last group would read undefined lanes
                 accepts=(*two_d("x"), LastDimMultiple("x", "G", 2), FP8_OUT)),
    ),
    "eqsat": (
        Spelling("SiluMul", "eqsat::silu_and_mul", ("x",), accepts=(LastDimMultiple("x", 2),)),
        Spelling("K_silu_mul_fp8_group_quant", "eqsat::silu_mul_fp8_group_quant", ("x", "G", "dt"),
                 accepts=(LastDimMultiple("x", "G", 2),)),
    ),
}
