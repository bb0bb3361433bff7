"""Family: AITER's fused add + rms_norm + zero pad (vLLM pattern #11), and the pad algebra it needs.

gpt-oss pads the normed hidden state for the MoE GEMMs (``F.pad(normed, (0, pad))``, in post-grad
graphs ``constant_pad_nd(normed, [0, pad], 0.0)``, the Level-A ``PadLast``) while the router GEMM
reads the unpadded ``normed``. AITER's Triton ``fused_add_rmsnorm_pad(x, w, eps, res, mult)`` writes
the norm of ``x + res`` into a row of ``roundup(N, mult)`` columns, zeros after ``N``, and returns
``x + res`` too (``T15``): one launch instead of the norm and the pad.

The kernel speaks in multiples, the graph in amounts, so the semantics use the Level-B
``PadTo(x, m)``: x zero-padded on the right of its last dim up to a multiple of ``m`` (no padding
for ``m <= 0``, as the kernel). Three exact rules relate them, each reading the last dim ``N`` as a
fact (an egglog action cannot read facts, so no catalog row could):
- ``pad-to-multiple``: ``PadLast(x, p) = PadTo(x, N + p)`` for ``p > 0``. The kernel takes any
  positive multiple, and every ``m`` with ``roundup(N, m) = N + p`` gives the same tensor, so the
  rule names one: the padded width itself. Nothing else is assumed about ``N``, ``p`` or ``m``
  (vLLM's pattern only fires for ``N = 2880`` and ``m`` in {128, 256}).
- ``pad-to-multiple-amount``: ``PadTo(x, m) = PadLast(x, roundup(N, m) - N)`` for ``m > 0`` (how an
  already-fused kernel's output reaches the ATen pad).
- ``slice-of-pad``: ``x = Slice(PadLast(x, p), -1, 0, N)``: the first ``N`` columns of the padded
  tensor are ``x``. This is what lets the router GEMM read ``padded[:, :N]`` (as vLLM's replacement
  does) instead of a second norm: the extractor weighs the view against recomputing.

``PadTo`` has no kernel of its own: it is never extracted (infinite cost; ``expand`` is the ATen
pad should a caller's catalog make it cheaper). The kernel row is ``rounding``: it rounds the fp32
norm once, where vLLM-IR rounds before the weight multiply; ``residual_out`` is exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from eqsat.core.accepts import Contiguous, two_d
from eqsat.core.rule import Rule, rule
from eqsat.core.spec import (
    KernelSpec,
    Operand,
    Traffic,
    dtype_accepted,
    params,
    rank,
    same_dtype,
    same_shape,
)
from eqsat.core.spelling import Spelling
from eqsat.kernels.norm_quant import ACT_DTYPES, _op
from eqsat.library import reference as ref

MAX_BLOCK = 1 << 20  # the padded row is one Triton block: next_pow2(N_out) <= TRITON_MAX_TENSOR_NUMEL
_TRITON = frozenset({"gfx942", "gfx950", "rdna4", "triton"})


def _padded(x: Operand, mult: object) -> int:
    assert isinstance(mult, int)
    return ref.padded_width(x.shape[-1], mult)


def never(a: Mapping[str, object]) -> Traffic:
    """The traffic of a term with no kernel of its own (a semantic op, a witness): infinite, so no
    extractor ever picks it."""
    return Traffic(read=math.inf, written=0, launches=0)


def _add_rms_pad(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=x.rows * _padded(x, a["mult"]) * x.itemsize + x.bytes)


def _pad_to(x: torch.Tensor, m: int) -> torch.Tensor:
    n = x.shape[-1]
    return torch.nn.functional.pad(x, (0, ref.padded_width(n, m) - n))


def pad_constraints(kernel: str) -> tuple[str, ...]:
    """2-D x, 1-D weight and residual of x's dtype and shape; the padded row fits one block."""
    return (*rank("x", 2), *dtype_accepted(kernel, "x"), *same_dtype("x", "w"), *rank("w", 1),
            "(= (dim x -1) __n)", "(= (dim w -1) __n)", *same_shape("x", "r"), *same_dtype("x", "r"),
            "(> mult 0)", f"(<= (* (/ (+ __n (- mult 1)) mult) mult) {MAX_BLOCK})")


_ADD = "(AddRmsNorm x r w eps)"

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("PadTo", params("x:T m:i64"), never, expand=_pad_to, calibration_key="pad_to",
               doc="x zero-padded on the right of its last dim up to a multiple of m (m <= 0: x)"),
    KernelSpec(
        "K_add_rmsnorm_pad", params("x:T r:T w:T eps:f64 mult:i64"), _add_rms_pad,
        outputs=(f"(PadTo (Get {_ADD} 0) mult)", f"(Get {_ADD} 1)"), constraints=pad_constraints("K_add_rmsnorm_pad"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_TRITON, calibration_key="add_rms_pad",
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
