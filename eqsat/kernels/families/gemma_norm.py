"""Semantic op: Gemma's RMSNorm, ``RmsNormOnePlus(x, w, eps)``, its own op and never ``RmsNorm(x, w, eps)``.

``cast(x32 * rsqrt(mean(x32^2) + eps) * (1 + float(w)), x.dtype)`` with ``x32 = float(x)``: the
weight enters as ``1 + w`` in fp32 and the product is rounded once (Gemma, Gemma2/3, Qwen3-Next's
zero-centred norms). ``lift-gemma-norm`` (exact) puts it into the e-class of that native
chain, wherever a tracer left it (``mul-comm`` covers the operand order). No fused kernel covers
it yet: it is the semantics a what-if kernel of ``explain`` states, and the project's op
``eqsat::rms_norm_one_plus`` writes it where a graph asks for it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from eqsat.core.rule import Rule, rewrite
from eqsat.core.spec import DimsEqual, KernelSpec, OpDef, Traffic, params, rank, same_last_dim
from eqsat.core.spelling import Spelling
from eqsat.kernels.traffic import operand
from eqsat.library.define import check_norm_shapes, empty


def traffic(a: Mapping[str, object]) -> Traffic:
    x, w = operand(a, "x"), operand(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=x.bytes)


ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("RmsNormOnePlus", params("x:T w:T eps:f64"), traffic, calibration_key="rms_norm_one_plus",
               implies=(DimsEqual("x", "w", True),),
               doc="cast(x32 * rsqrt(mean(x32^2) + eps) * (1 + float(w)), x.dtype) (Gemma's RMSNorm)"),
)

_X32 = '(Convert x "float32")'
_NATIVE = f'(Convert (Mul (Mul {_X32} (Rsqrt (AddS (MeanLast (PowS {_X32} 2.0)) eps))) (AddS (Convert w "float32") 1.0)) dt)'
RULES: tuple[Rule, ...] = (
    rewrite("lift-gemma-norm", _NATIVE, "(RmsNormOnePlus x w eps)", "(= dt (dtype x))", *rank("w", 1),
            *same_last_dim("x", "w"), family="lift"),
)

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "eqsat": (Spelling("RmsNormOnePlus", "eqsat::rms_norm_one_plus", ("x", "w", "eps")),),
}


def rms_norm_one_plus(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The op's meaning, computed as the native chain computes it."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())).to(x.dtype)


def _fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_norm_shapes(x, weight)
    return empty(x)


OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", "rms_norm_one_plus(Tensor x, Tensor weight, float eps) -> Tensor",
          lambda x, w, eps: rms_norm_one_plus(x, w, eps).contiguous(), _fake),
)
