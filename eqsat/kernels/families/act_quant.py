"""Family: silu_and_mul and AITER's fused silu_and_mul + fp8 group quant (vLLM pattern #10).

``SiluMul(x)`` is vLLM's ``SiluAndMul``: ``silu(x[..., :N/2]) * x[..., N/2:]`` in x.dtype. The fused
kernel computes the product in fp32 and quantizes it without the bf16 rounding, so the equality is
``rounding``. Traffic follows AITER's ``act_mul_and_fp8_group_quant`` (reads x once, writes q and
the scales).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from eqsat.core.accepts import LastDimMultiple, two_d
from eqsat.core.spec import (
    KernelSpec,
    OpDef,
    Traffic,
    Twin,
    dtype_accepted,
    params,
    power_of_two,
    rank,
)
from eqsat.core.spelling import Spelling
from eqsat.kernels.traffic import ACT_DTYPES, FP8_BYTES, SCALE_BYTES, half, operand
from eqsat.library import reference as ref
from eqsat.library.aiter import rows2d, triton_kernels
from eqsat.library.define import empty, fresh, quant_fake
from eqsat.library.vllm import F32, FP8_OUT, ceil_div, divides, nothing, rows, standin_op


def silu_mul_traffic(a: Mapping[str, object]) -> Traffic:
    x = operand(a, "x")
    return Traffic(read=x.bytes, written=half(x).bytes)


def silu_quant_traffic(a: Mapping[str, object]) -> Traffic:
    x, g = operand(a, "x"), a["G"]
    y = half(x)
    assert isinstance(g, int) and g > 0
    return Traffic(read=x.bytes, written=y.numel * FP8_BYTES + y.rows * -(-y.shape[-1] // g) * SCALE_BYTES)


_SILU_Q = "(QuantGroup (SiluMul x) G dt)"


_HALF_IN_GROUPS = ("(= (dim x -1) __n)", "(= 0 (% __n (* 2 G)))")


def silu_quant_constraints(kernel: str) -> tuple[str, ...]:
    # the product's last dim (N/2) must be a multiple of G: N must be a multiple of 2G
    return (*rank("x", 2), *dtype_accepted(kernel, "x"), *power_of_two("G"),
            *_HALF_IN_GROUPS)


ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("SiluMul", params("x:T"), silu_mul_traffic, calibration_key="silu_mul", reference=ref.silu_and_mul,
               doc="silu(x[..., :N/2]) * x[..., N/2:] in x.dtype (vLLM SiluAndMul)"),
    KernelSpec(
        "K_silu_mul_fp8_group_quant", params("x:T G:i64 dt:dtype"), silu_quant_traffic,
        outputs=(f"(Get {_SILU_Q} 0)", f"(Get {_SILU_Q} 1)"),
        constraints=silu_quant_constraints("K_silu_mul_fp8_group_quant"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=frozenset({"gfx942", "gfx950", "triton"}),
        calibration_key="silu_group_quant", inductor=Twin(1, (*rank("x", 2), *_HALF_IN_GROUPS), quant_epilogue=True),
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


# -- the fused kernel's arithmetic (AITER's Triton act_mul_and_fp8_group_quant) -----------------------

def silu_mul_fp8_group_quant(
    x: torch.Tensor, group_size: int, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER ``act_mul_and_fp8_group_quant(silu)``: silu(a) * b in fp32, no rounding, then group quant."""
    d = x.shape[-1] // 2
    a, b = x[..., :d].float(), x[..., d:].float()
    return ref.group_quant32(a * torch.sigmoid(a) * b, group_size, fp8_dtype)


# -- the project's ops and vLLM's ---------------------------------------------------------------------

def _half(x: torch.Tensor) -> torch.Tensor:
    return empty(x, [*x.shape[:-1], x.shape[-1] // 2])


@rows2d
def _silu_quant_gpu(x: torch.Tensor, group_size: int, dtype: torch.dtype) -> Any:
    """AITER's Triton act_mul_and_fp8_group_quant."""
    return triton_kernels().act_mul_and_fp8_group_quant(x, "silu", group_size, dtype)


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "silu_and_mul(Tensor x) -> Tensor", lambda x: ref.silu_and_mul(x).contiguous(), _half),
    OpDef("eqsat", "silu_mul_fp8_group_quant(Tensor x, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor)",
          lambda x, g, dt: fresh(*silu_mul_fp8_group_quant(x, g, dt)),
          lambda x, g, dt: quant_fake(_half(x), g, dt), _silu_quant_gpu),
)


def vllm_standins(fp8: torch.dtype) -> list[OpDef]:
    """AITER's silu_and_mul + group quant and the ``_C`` silu_and_mul read under ``auto_functionalized``."""

    def act_fake(x: torch.Tensor, group_size: int) -> Any:
        m, n = rows(x, "rocm_aiter_act_mul_and_fp8_group_quant")
        if n % 2 != 0:
            raise AssertionError("rocm_aiter_act_mul_and_fp8_group_quant: the last dim must be even")
        half = n // 2
        return x.new_empty((m, half), dtype=fp8), x.new_empty((m, ceil_div(half, group_size)), dtype=F32)

    def act_needs(x: torch.Tensor, group_size: int) -> None:
        divides("rocm_aiter_act_mul_and_fp8_group_quant", x.shape[-1] // 2, group_size)

    def c_silu_and_mul(result: torch.Tensor, input: torch.Tensor) -> None:
        result.copy_(ref.silu_and_mul(input))

    def c_silu_and_mul_gpu(result: torch.Tensor, input: torch.Tensor) -> None:  # two kernels: silu, mul into result
        if result.dtype != input.dtype:
            return c_silu_and_mul(result, input)
        d = input.shape[-1] // 2
        torch.mul(torch.nn.functional.silu(input[..., :d]), input[..., d:], out=result)
        return None

    return [
        standin_op("vllm", "rocm_aiter_act_mul_and_fp8_group_quant(Tensor x, SymInt group_size) -> (Tensor, Tensor)",
                   act_fake, lambda x, g: silu_mul_fp8_group_quant(x, g, fp8), act_needs,
                   gpu=lambda x, g: _silu_quant_gpu(x, g, fp8)),
        OpDef("_C", "silu_and_mul(Tensor! result, Tensor input) -> ()", c_silu_and_mul, nothing, c_silu_and_mul_gpu),
    ]
