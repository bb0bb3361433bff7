"""Family: MLA's dual rms_norm, with and without a quant of the q side (vLLM patterns #12-#14).

DeepSeek's attention splits one projection ``p`` into ``q_c, kv_lora`` and ``kv_lora`` into ``kv_c, k_pe``;
``q_c`` and ``kv_c`` are rms-normed with their own weights and eps. AITER's HIP ``fused_qk_rmsnorm`` runs
both norms in one launch from the split views, optionally quantizing q. Rows (all ``rounding``):
- ``K_mla_dual_rms_norm(q qw kv kvw qeps kveps)`` -> ``(RmsNorm q qw qeps)``, ``(RmsNorm kv kvw kveps)``;
- ``K_mla_dual_rms_norm_group_quant(... G dt)`` / ``..._per_token_quant(... dt)``: ``QuantGroup`` /
  ``QuantToken`` of the dual kernel's q output, and its kv output (stated over the dual kernel to keep
  queries small; unlift rules and congruence reach an already-fused q side).
Pairing is :func:`mla_pair`: the two latents of one 2-D contiguous projection (row-aligned views,
unit inner stride), recorded by ``mla-latents`` as a witness ``(MlaLatents q kv)``, never extracted, that
the fuse query reads, so egglog plans it as one bag (a query over the whole split chain plans as
several, whose joins are unsound). Eps are independent. Constraints: bf16/fp16, 1-D contiguous
weights of the input dtype, widths up to 8192, group sizes powers of two in 16..256 dividing q's width.
The group quant row's Inductor twin is three launches: q's norm and its group quant (two reductions of
different ranges, as ``rms_group_quant``'s twin) and kv's norm (Inductor does not merge independent kernels).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from eqsat.core.accepts import DtypeIn, LastDimAtMost, LastDimMultiple, OneOf, SameDtype, two_d
from eqsat.core.rule import Rule, rule
from eqsat.core.spec import (
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
)
from eqsat.core.spelling import Spelling
from eqsat.kernels.families import norm_quant
from eqsat.kernels.traffic import ACT_DTYPES, FP8_BYTES, SCALE_BYTES, groups, never, operand
from eqsat.library import reference as ref
from eqsat.library.aiter import rows2d, triton_kernels
from eqsat.library.define import check_norm_shapes, empty, fresh, quant_fake, token_fake
from eqsat.library.vllm import F32, FP8_OUT, aiter_transposed, divides, rows, standin_op

MAX_WIDTH = 8192  # fused_qk_norm.cu: max(N1, N2) <= 8192
GROUP_RANGE = (16, 256)  # g % tds == 0, g <= 64 * tds, g / tds a power of two, for tds in {4, 8, 16}
_HIP = frozenset({"gfx942", "gfx950"})


@dataclass(frozen=True)
class DualTraffic:
    """Reads both inputs and weights once; writes kv's norm and q's norm, or q quantized
    (``quant``: ``"group"`` with G columns of scales per row, ``"token"`` with one)."""

    quant: str = ""

    def __call__(self, a: Mapping[str, object]) -> Traffic:
        q, kv = operand(a, "q"), operand(a, "kv")
        read = q.bytes + kv.bytes + operand(a, "qw").bytes + operand(a, "kvw").bytes
        if self.quant == "group":
            q_out = q.numel * FP8_BYTES + groups(q, a["G"]) * SCALE_BYTES
        elif self.quant == "token":
            q_out = q.numel * FP8_BYTES + q.rows * SCALE_BYTES
        else:
            q_out = q.bytes
        return Traffic(read=read, written=q_out + kv.bytes)


def mla_pair(q: str, kv: str) -> tuple[str, ...]:
    """``q`` and ``kv`` are the latents of one MLA projection (the witness ``mla-latents`` records)."""
    return (f"(= __latents (MlaLatents {q} {kv}))",)


def norm_weight(x: str, w: str) -> tuple[str, ...]:
    """``w`` is a 1-D contiguous weight of ``x``'s dtype over its last dim, at most ``MAX_WIDTH`` wide."""
    n = f"__n_{x}"
    return (*rank(w, 1), *contiguous(w), *same_dtype(x, w), f"(= (dim {x} -1) {n})", f"(= (dim {w} -1) {n})",
            f"(<= {n} {MAX_WIDTH})")


def dual_constraints() -> tuple[str, ...]:
    return (*mla_pair("q", "kv"), *norm_weight("q", "qw"), *norm_weight("kv", "kvw"))


def group_constraints(x: str, g: str) -> tuple[str, ...]:
    lo, hi = GROUP_RANGE
    n = f"__n_{x}"
    return (f"(= (dim {x} -1) {n})", *power_of_two(g), f"(>= {g} {lo})", f"(<= {g} {hi})", f"(= 0 (% {n} {g}))")


_Q, _KV = "(RmsNorm q qw qeps)", "(RmsNorm kv kvw kveps)"
_DUAL = "q:T qw:T kv:T kvw:T qeps:f64 kveps:f64"
_K = "(K_mla_dual_rms_norm q qw kv kvw qeps kveps)"
_QG = f"(QuantGroup (Get {_K} 0) G dt)"
_QT = f"(QuantToken (Get {_K} 0) dt)"


def _row(name: str, sig: str, outputs: tuple[str, ...], quant: str, constraints: tuple[str, ...],
         doc: str, platforms: frozenset[str] = _HIP, inductor: Twin | None = None) -> KernelSpec:
    return KernelSpec(name, params(sig), DualTraffic(quant), outputs=outputs,
                      constraints=(*dtype_accepted(name, "q"), *constraints), dtypes=ACT_DTYPES, numerics="rounding",
                      platforms=platforms, calibration_key=name.removeprefix("K_"), doc=doc, inductor=inductor)


ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("MlaLatents", params("q:T kv:T"), never, calibration_key="mla_latents",
               doc="witness: q and kv are the latents of one MLA projection; never extracted"),
    _row("K_mla_dual_rms_norm", _DUAL, (_Q, _KV), "", dual_constraints(),
         "AITER HIP fused_qk_rmsnorm: q's and kv's rms_norm in one launch; outputs (q_normed, kv_normed)"),
    _row("K_mla_dual_rms_norm_group_quant", f"{_DUAL} G:i64 dt:dtype", (f"(Get {_QG} 0)", f"(Get {_QG} 1)",
         f"(Get {_K} 1)"), "group", group_constraints("q", "G"),
         "AITER fused_qk_rmsnorm_group_quant (HIP; Triton fused_rms_fp8_group_quant with a second input):"
         " outputs (q_fp8, q_scale [M, Nq / G], kv_normed)", _HIP | {"triton"},
         Twin(3, (*same_dtype("q", "qw"), *same_dtype("kv", "kvw"), *last_dim_divisible("q", "G")), quant_epilogue=True)),
    _row("K_mla_dual_rms_norm_per_token_quant", f"{_DUAL} dt:dtype", (f"(Get {_QT} 0)", f"(Get {_QT} 1)",
         f"(Get {_K} 1)"), "token", (),
         "AITER HIP fused_qk_rmsnorm_per_token_quant: outputs (q_fp8, q_scale [M, 1], kv_normed)"),
)

_ARGS = ("q", "qw", "kv", "kvw", "qeps", "kveps")

_QK = (*two_d("q", "kv"), DtypeIn("q", ACT_DTYPES), SameDtype("q", "kv"), SameDtype("q", "qw"),
       SameDtype("kv", "kvw"), LastDimAtMost("q", 8192), LastDimAtMost("kv", 8192))
"""AITER's fused q/kv rms_norm kernels: 2-D rows of one fp16 / bf16 dtype, weights included, with a unit
inner stride (a split view is fine), at most 8192 columns."""

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "vllm": (
        Spelling("K_mla_dual_rms_norm", "vllm::fused_mla_dual_rms_norm", _ARGS, accepts=_QK),
        Spelling("K_mla_dual_rms_norm_group_quant", "vllm::fused_mla_dual_rms_norm_group_quant", (*_ARGS, "G"),
                 from_output_dtype=("dt",), fixed=(("transpose_scale", False),),
                 accepts=(*_QK, LastDimMultiple("q", "G"), OneOf("G", (32, 64, 128)), FP8_OUT)),
        Spelling("K_mla_dual_rms_norm_per_token_quant", "vllm::fused_mla_dual_rms_norm_per_token_quant", _ARGS,
                 from_output_dtype=("dt",), accepts=(*_QK, FP8_OUT)),
    ),
    "eqsat": (
        Spelling("K_mla_dual_rms_norm", "eqsat::mla_dual_rms_norm", _ARGS),
        Spelling("K_mla_dual_rms_norm_group_quant", "eqsat::mla_dual_rms_norm_group_quant", (*_ARGS, "G", "dt")),
        Spelling("K_mla_dual_rms_norm_per_token_quant", "eqsat::mla_dual_rms_norm_token_quant", (*_ARGS, "dt")),
    ),
}

RULES: tuple[Rule, ...] = (
    rule("mla-latents", ("(= __split (SplitLast2 __p __a __b))", "(= __split_kv (SplitLast2 (Get __split 1) __c __d))",
                         *rank("__p", 2), *contiguous("__p")),
         ("(MlaLatents (Get __split 0) (Get __split_kv 0))",), family="mla"),
)


# -- the fused kernels' arithmetic (AITER's HIP fused_qk_rmsnorm*) ---------------------------------

def mla_dual_rms_norm(
    q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor, q_eps: float, kv_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER HIP ``fused_qk_rmsnorm``: two independent rms_norms in one launch, each in fp32 and
    rounded once to its input's dtype. Returns (q_normed, kv_normed)."""
    return ref.aiter_rms(q, q_weight, q_eps), ref.aiter_rms(kv, kv_weight, kv_eps)


def mla_dual_rms_norm_group_quant(
    q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor, q_eps: float,
    kv_eps: float, group_size: int, fp8_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AITER HIP ``fused_qk_rmsnorm_group_quant``: q's fp32 norm group-quantized (no bf16 rounding),
    kv normed only. Returns (q_fp8, q_scale, kv_normed)."""
    q8, scale = norm_quant.rmsnorm_fp8_group_quant(q, q_weight, q_eps, group_size, fp8_dtype)
    return q8, scale, ref.aiter_rms(kv, kv_weight, kv_eps)


def mla_dual_rms_norm_token_quant(
    q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor, q_eps: float,
    kv_eps: float, fp8_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AITER HIP ``fused_qk_rmsnorm_per_token_quant``: q's fp32 norm per-token quantized (one group per
    row), kv normed only. Returns (q_fp8, q_scale [..., 1], kv_normed)."""
    y32 = ref.aiter_rms32(q.float(), q_weight, q_eps)
    q8, scale = ref.group_quant32(y32, y32.shape[-1], fp8_dtype)
    return q8, scale, ref.aiter_rms(kv, kv_weight, kv_eps)


# -- the project's ops and vLLM's ---------------------------------------------------------------------

def _dual_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
               q_eps: float, kv_eps: float) -> Any:
    check_norm_shapes(q, q_weight)
    check_norm_shapes(kv, kv_weight)
    torch._check(q.shape[0] == kv.shape[0], lambda: "mla dual rms_norm: q and kv must have the same rows")
    return empty(q), empty(kv)


def _dual_group_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                     q_eps: float, kv_eps: float, group_size: int, dtype: torch.dtype) -> Any:
    kv_normed = _dual_fake(q, q_weight, kv, kv_weight, q_eps, kv_eps)[1]
    return (*quant_fake(q, group_size, dtype), kv_normed)


def _dual_token_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                     q_eps: float, kv_eps: float, dtype: torch.dtype) -> Any:
    kv_normed = _dual_fake(q, q_weight, kv, kv_weight, q_eps, kv_eps)[1]
    return (*token_fake(q, dtype), kv_normed)


@rows2d
def _dual_group_gpu(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor, q_eps: float,
                    kv_eps: float, group_size: int, dtype: torch.dtype) -> Any:
    """AITER's Triton fused_rms_fp8_group_quant with kv as its second, normed-only input."""
    (q8, scale), _, kv_normed, _ = triton_kernels().fused_rms_fp8_group_quant(
        q, q_weight, q_eps, kv, kv_weight, kv_eps, group_size=group_size, dtype_quant=dtype)
    return q8, scale, kv_normed


_DUAL_SCHEMA = "Tensor q, Tensor q_weight, Tensor kv, Tensor kv_weight, float q_eps, float kv_eps"
OPS: tuple[OpDef, ...] = (
    OpDef("eqsat", f"mla_dual_rms_norm({_DUAL_SCHEMA}) -> (Tensor, Tensor)",
          lambda *a: fresh(*mla_dual_rms_norm(*a)), _dual_fake),
    OpDef("eqsat", f"mla_dual_rms_norm_group_quant({_DUAL_SCHEMA}, SymInt group_size, ScalarType dtype)"
          " -> (Tensor, Tensor, Tensor)", lambda *a: fresh(*mla_dual_rms_norm_group_quant(*a)), _dual_group_fake,
          _dual_group_gpu),
    OpDef("eqsat", f"mla_dual_rms_norm_token_quant({_DUAL_SCHEMA}, ScalarType dtype) -> (Tensor, Tensor, Tensor)",
          lambda *a: fresh(*mla_dual_rms_norm_token_quant(*a)), _dual_token_fake),
)


def vllm_standins(fp8: torch.dtype) -> list[OpDef]:
    """vLLM's MLA dual rms_norm ops (AITER HIP ``fused_qk_rmsnorm*``; on a Triton GPU the group-quant one
    runs AITER's Triton kernel the project's op does)."""

    def dual_fake(x1: torch.Tensor, x1_weight: torch.Tensor, x2: torch.Tensor, x2_weight: torch.Tensor,
                  x1_epsilon: float, x2_epsilon: float) -> Any:
        return torch.empty_like(x1), torch.empty_like(x2)

    def dual_token_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float) -> Any:
        mq, nq = rows(q, "fused_mla_dual_rms_norm_per_token_quant")
        return q.new_empty((mq, nq), dtype=fp8), q.new_empty((mq, 1), dtype=F32), kv.new_empty(kv.shape)

    def dual_group_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                        q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        mq, nq = rows(q, "fused_mla_dual_rms_norm_group_quant")
        return (q.new_empty((mq, nq), dtype=fp8), q.new_empty((mq, nq // group_size), dtype=F32),
                kv.new_empty(kv.shape))

    def dual_group_needs(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                         q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> None:
        divides("fused_mla_dual_rms_norm_group_quant", q.shape[-1], group_size)

    def dual_group(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                   q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        q8, s, kv_normed = mla_dual_rms_norm_group_quant(q, q_weight, kv, kv_weight, q_epsilon, kv_epsilon,
                                                         group_size, fp8)
        return q8, aiter_transposed(s) if transpose_scale else s, kv_normed

    def dual_group_gpu(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                       q_epsilon: float, kv_epsilon: float, group_size: int, transpose_scale: bool) -> Any:
        q8, s, kv_normed = _dual_group_gpu(q, q_weight, kv, kv_weight, q_epsilon, kv_epsilon, group_size, fp8)
        return q8, aiter_transposed(s) if transpose_scale else s, kv_normed

    args = "Tensor q, Tensor q_weight, Tensor kv, Tensor kv_weight, float q_epsilon, float kv_epsilon"
    return [
        standin_op("vllm", "fused_mla_dual_rms_norm(Tensor x1, Tensor x1_weight, Tensor x2, Tensor x2_weight,"
                   " float x1_epsilon, float x2_epsilon) -> (Tensor, Tensor)", dual_fake, mla_dual_rms_norm),
        standin_op("vllm", f"fused_mla_dual_rms_norm_per_token_quant({args}) -> (Tensor, Tensor, Tensor)",
                   dual_token_fake, lambda *a: mla_dual_rms_norm_token_quant(*a, fp8)),
        standin_op("vllm",
                   f"fused_mla_dual_rms_norm_group_quant({args}, SymInt group_size, bool transpose_scale)"
                   " -> (Tensor, Tensor, Tensor)", dual_group_fake, dual_group, dual_group_needs,
                   gpu=dual_group_gpu),
    ]
