"""Family: AITER's fused add + rms_norm + zero pad (vLLM pattern #11), and the pad algebra it needs.

gpt-oss pads the normed hidden state for the MoE GEMMs (``constant_pad_nd(normed, [0, pad], 0.0)``,
Level-A ``PadLast``) while the router GEMM reads the unpadded one. AITER's Triton
``fused_add_rmsnorm_pad(x, w, eps, res, mult)`` writes the norm of ``x + res`` into rows of
``roundup(N, mult)`` columns (zeros after ``N``) and returns ``x + res``. Its semantics use Level-B
``PadTo(x, m)`` (zero-pad the last dim up to a multiple of ``m``; none for ``m <= 0``), and three exact
rules, reading the last dim ``N`` as a fact (an egglog action cannot), relate the two:
- ``pad-to-multiple``: ``PadLast(x, p) = PadTo(x, N + p)`` for ``p > 0`` (any ``m`` with the same
  roundup gives the same tensor, so the rule names the padded width itself);
- ``pad-to-multiple-amount``: ``PadTo(x, m) = PadLast(x, roundup(N, m) - N)`` for ``m > 0``;
- ``slice-of-pad``: ``x = Slice(PadLast(x, p), -1, 0, N)``, so the router GEMM can read the padded slice.
``PadTo`` is never extracted (infinite cost; ``expand`` is the ATen pad). The kernel row is
``rounding`` (fp32 norm rounded once, where vLLM-IR rounds first); ``residual_out`` is exact. Its
Inductor twin is two launches: the padded rows are a pointwise range of their own, not the norm's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from eqsat.core.accepts import Contiguous, two_d
from eqsat.core.rule import Rule, rule
from eqsat.core.spec import (
    KernelSpec,
    OpDef,
    Operand,
    Traffic,
    Twin,
    dtype_accepted,
    params,
    rank,
    same_dtype,
    same_shape,
)
from eqsat.core.spelling import Spelling
from eqsat.kernels.traffic import ACT_DTYPES, never, operand
from eqsat.library import reference as ref
from eqsat.library.aiter import rows2d, triton_kernels
from eqsat.library.define import check_norm_shapes, empty, fresh
from eqsat.library.vllm import rows, standin_op

MAX_BLOCK = 1 << 20  # the padded row is one Triton block: next_pow2(N_out) <= TRITON_MAX_TENSOR_NUMEL
_TRITON = frozenset({"gfx942", "gfx950", "rdna4", "triton"})


def _padded(x: Operand, mult: object) -> int:
    assert isinstance(mult, int)
    return padded_width(x.shape[-1], mult)


def _add_rms_pad(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=x.rows * _padded(x, a["mult"]) * x.itemsize + x.bytes)


def _pad_to(x: torch.Tensor, m: int) -> torch.Tensor:
    n = x.shape[-1]
    return torch.nn.functional.pad(x, (0, padded_width(n, m) - n))


def pad_constraints(kernel: str) -> tuple[str, ...]:
    """2-D x, 1-D weight and residual of x's dtype and shape; the padded row fits one block."""
    return (*rank("x", 2), *dtype_accepted(kernel, "x"), *same_dtype("x", "w"), *rank("w", 1),
            "(= (dim x -1) __n)", "(= (dim w -1) __n)", *same_shape("x", "r"), *same_dtype("x", "r"),
            "(> mult 0)", f"(<= (* (/ (+ __n (- mult 1)) mult) mult) {MAX_BLOCK})")


_ADD = "(AddRmsNorm x r w eps)"

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("PadTo", params("x:T m:i64"), never, expand=_pad_to, calibration_key="pad_to", reference=_pad_to,
               doc="x zero-padded on the right of its last dim up to a multiple of m (m <= 0: x)"),
    KernelSpec(
        "K_add_rmsnorm_pad", params("x:T r:T w:T eps:f64 mult:i64"), _add_rms_pad,
        outputs=(f"(PadTo (Get {_ADD} 0) mult)", f"(Get {_ADD} 1)"), constraints=pad_constraints("K_add_rmsnorm_pad"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_TRITON, calibration_key="add_rms_pad",
        inductor=Twin(2, (*rank("x", 2), *same_dtype("x", "w"), *same_shape("x", "r"), *same_dtype("x", "r"),
                          "(> mult 0)")),  # the norm's row reduction (+ residual_out), the padded rows
        doc="AITER Triton fused_add_rmsnorm_pad (fp32 add): outputs (padded [M, roundup(N, mult)], residual_out)",
    ),
)

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "vllm": (Spelling("K_add_rmsnorm_pad", "vllm::rocm_aiter_triton_add_rmsnorm_pad", ("x", "w", "eps", "r", "mult"),
                      accepts=(*two_d("x"), Contiguous("w"))),),
    "eqsat": (Spelling("K_add_rmsnorm_pad", "eqsat::add_rmsnorm_pad", ("x", "r", "w", "eps", "mult")),),
}

_LAST = ("(= (dim x -1) __n)",)

RULES: tuple[Rule, ...] = (
    rule("pad-to-multiple", ("(= __s (PadLast x p))", *_LAST, "(> p 0)"), ("(union __s (PadTo x (+ __n p)))",),
         family="lift"),
    rule("pad-to-multiple-amount", ("(= __s (PadTo x m))", *_LAST, "(> m 0)"),
         ("(union __s (PadLast x (- (* (/ (+ __n (- m 1)) m) m) __n)))",), family="lift"),
    rule("slice-of-pad", ("(= __s (PadLast x p))", *_LAST, "(> p 0)"), ("(union x (Slice __s -1 0 __n))",),
         family="views"),
)


# -- the fused kernel's arithmetic (AITER's Triton fused_add_rmsnorm_pad) ----------------------------

def padded_width(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (``n`` itself when ``multiple`` <= 0)."""
    return -(-n // multiple) * multiple if multiple > 0 else n


def add_rmsnorm_pad(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, pad_to_multiple: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER Triton ``fused_add_rmsnorm_pad``: the fp32 sum's rms_norm, rounded once, zero-padded on the
    right of the last dim up to a multiple of ``pad_to_multiple``. Returns (padded, residual_out)."""
    inp32 = x.float() + residual.float()
    normed = ref.aiter_rms32(inp32, weight, eps).to(x.dtype)
    n = x.shape[-1]
    return torch.nn.functional.pad(normed, (0, padded_width(n, pad_to_multiple) - n)), inp32.to(x.dtype)


# -- the project's op and vLLM's (with the router GEMM the pattern reads, opaque to the optimizer) ----

def _add_rmsnorm_pad_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                          pad_to_multiple: int) -> Any:
    check_norm_shapes(x, weight, residual)
    return empty(x, [*x.shape[:-1], padded_width(x.shape[-1], pad_to_multiple)]), empty(x)


@rows2d
def _add_rmsnorm_pad_gpu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                         pad_to_multiple: int) -> Any:
    """AITER's Triton fused_add_rmsnorm_pad."""
    return tuple(triton_kernels().fused_add_rmsnorm_pad(x, weight, eps, residual, pad_to_multiple))


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "add_rmsnorm_pad(Tensor x, Tensor residual, Tensor weight, float eps, SymInt pad_to_multiple)"
          " -> (Tensor, Tensor)", lambda *a: fresh(*add_rmsnorm_pad(*a)), _add_rmsnorm_pad_fake,
          _add_rmsnorm_pad_gpu),
)


def vllm_standins(fp8: torch.dtype) -> list[OpDef]:
    """AITER's add + rms_norm + pad and vLLM's ROCm router GEMM."""

    def add_pad_fake(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, residual: torch.Tensor,
                     x_pad_to_multiple: int) -> Any:
        m, n = rows(x, "rocm_aiter_triton_add_rmsnorm_pad")
        width = padded_width(n, x_pad_to_multiple) if x_pad_to_multiple > 0 else n
        return x.new_empty((m, width)), torch.empty_like(residual)

    def add_pad(x: torch.Tensor, weight: torch.Tensor, variance_epsilon: float, residual: torch.Tensor,
                x_pad_to_multiple: int) -> Any:
        return add_rmsnorm_pad(x, residual, weight, variance_epsilon, x_pad_to_multiple)

    def gemm_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    def gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        return torch.nn.functional.linear(x, weight, bias)

    return [
        standin_op("vllm", "rocm_aiter_triton_add_rmsnorm_pad(Tensor x, Tensor weight, float variance_epsilon,"
                   " Tensor residual, SymInt x_pad_to_multiple) -> (Tensor, Tensor)", add_pad_fake, add_pad,
                   gpu=lambda x, w, eps, r, k: _add_rmsnorm_pad_gpu(x, r, w, eps, k)),
        standin_op("vllm", "rocm_unquantized_gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor",
                   gemm_fake, gemm,
                   gpu=gemm),
    ]
