"""Pure-PyTorch reference semantics for the ops that the optimizer reasons about.

Plain functions only, registering nothing; `eqsat.library.eqsat_ops` and `eqsat.library.vllm` wrap them as `torch.library` ops.

Invariants:
- Device-agnostic, any number of leading dims; the reduction / grouping axis is the last dim N.
- All arithmetic is fp32; values are rounded only where the modelled kernel rounds, by `.to(dtype)`.
- Outputs are fresh tensors: nothing returned aliases an input.
- `rms_norm` / `fused_add_rms_norm` follow vLLM-IR (rounding to the weight dtype before the weight
  multiply); `rmsnorm_fp8_group_quant` / `rmsnorm_add_fp8_group_quant` follow AITER's fused kernel
  (fp32 up to the quant): they agree only within fp8 rounding (`fp8_step_error`).
- Group fp8 quant is AITER's: amax floor 1e-10, scale = amax / finfo(fp8_dtype).max, multiply by the
  fp32 reciprocal, clamp, cast; per-token is one group per row, static uses a one-element scale. The
  `vllm_*` quants use vLLM's convention (FMAX 224 on e4m3fnuz, scale floor 1 / (FMAX * 512)).
"""

from __future__ import annotations

import torch

AMAX_FLOOR = 1e-10
"""AITER's lower bound on a group's amax (applied before dividing by FMAX)."""


def normalize32(x32: torch.Tensor, eps: float, variance_size: int | None = None) -> torch.Tensor:
    """x32 * rsqrt(mean(x32[..., :variance_size]**2) + eps), all in fp32."""
    xv = x32 if variance_size is None else x32[..., :variance_size]
    var = xv.pow(2).mean(dim=-1, keepdim=True)
    return x32 * torch.rsqrt(var + eps)


def ir_weight(y32: torch.Tensor, weight: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """vLLM-IR tail: round to the weight dtype, multiply there, round to the output dtype."""
    if weight is None:
        return y32.to(out_dtype)
    return (y32.to(weight.dtype) * weight).to(out_dtype)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, variance_size: int | None = None
) -> torch.Tensor:
    """vLLM-IR `rms_norm` (native impl); `variance_size` limits the variance to the first columns."""
    return ir_weight(normalize32(x.float(), eps, variance_size), weight, x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM-IR `fused_add_rms_norm`: returns (normed, residual_out).

    The sum is formed in fp32; `residual_out` is that sum rounded to x.dtype, while the
    norm is taken of the unrounded fp32 sum.
    """
    s32 = x.float() + residual.float()
    residual_out = s32.to(x.dtype)  # fresh even for fp32 x: s32 itself is a new tensor
    return ir_weight(normalize32(s32, eps, variance_size), weight, x.dtype), residual_out


def check_groups(n: int, group_size: int) -> None:
    if group_size <= 0 or n % group_size != 0:
        raise ValueError(f"last dim {n} is not a positive multiple of group_size {group_size}")


def group_quant32(
    y32: torch.Tensor, group_size: int, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER `_fp8_quant_op` on an fp32 tensor: 1 x group_size groups along the last dim. Of three or more
    dims, the groups are taken over the last two dims' row (``(.., A * n / G, G)``, the same blocks as
    ``(.., A, n / G, G)``): Inductor compiles a norm over ``(tokens, H, D)`` and this quant into one
    kernel only so (``benchmarks/results/probe_heads_twin_h200.log``)."""
    n = y32.shape[-1]
    check_groups(n, group_size)
    fmax = torch.finfo(fp8_dtype).max
    lead = y32.shape[:-2] if y32.dim() >= 3 else y32.shape[:-1]
    groups = y32.reshape(*lead, -1, group_size)
    amax = groups.abs().amax(dim=-1, keepdim=True).clamp_min(AMAX_FLOOR)
    scale = amax / fmax
    q = (groups * (1.0 / scale)).clamp(-fmax, fmax).to(fp8_dtype)
    return q.reshape(y32.shape), scale.reshape(*y32.shape[:-1], n // group_size)


def group_fp8_quant(
    x: torch.Tensor, group_size: int, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-(1 x group_size) dynamic fp8 quant: returns (q like x, fp32 scale [..., N // group_size]).

    Raises ValueError unless the last dim is a multiple of `group_size`.
    """
    return group_quant32(x.float(), group_size, fp8_dtype)


def aiter_rms32(inp32: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """AITER `_rmsmorm_op`: (x * rsqrt(sum(x^2)/N + eps)) * w, fp32 throughout, no rounding."""
    r = torch.rsqrt(inp32.pow(2).sum(dim=-1, keepdim=True) / inp32.shape[-1] + eps)
    return inp32 * r * weight.float()


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """vLLM ``SiluAndMul.forward_native``: silu(x[..., :d]) * x[..., d:] in x.dtype (d = N/2)."""
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def token_fp8_quant(x: torch.Tensor, fp8_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """AITER per-token dynamic fp8 quant: the group quant with one group per row (same amax floor,
    FMAX = finfo max, reciprocal multiply); returns (q like x, fp32 scale [..., 1])."""
    return group_quant32(x.float(), x.shape[-1], fp8_dtype)


def static_quant32(y32: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, fmax: float) -> torch.Tensor:
    """``cast(clamp(y32 * (1 / scale), -fmax, fmax))``; ``scale`` must hold exactly one element."""
    inv = torch.reciprocal(scale.float().reshape(()))
    return (y32 * inv).clamp(-fmax, fmax).to(fp8_dtype)


def static_fp8_quant(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """AITER static per-tensor fp8 quant with a one-element fp32 ``scale`` and FMAX = finfo max."""
    return static_quant32(x.float(), scale, fp8_dtype, torch.finfo(fp8_dtype).max)


VLLM_FP8_MAX = {torch.float8_e4m3fnuz: 224.0}
"""vLLM's own fp8 bound where it is not the dtype's max (``get_fp8_min_max``, ``fp8_e4m3_adjusted_max_v``)."""


def vllm_fp8_max(fp8_dtype: torch.dtype) -> float:
    return VLLM_FP8_MAX.get(fp8_dtype, torch.finfo(fp8_dtype).max)


def vllm_token_fp8_quant(x: torch.Tensor, fp8_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's native per-token quant (``QuantFP8`` forward_native): FMAX = ``vllm_fp8_max``, the scale
    floored at 1 / (FMAX * 512), multiply by its reciprocal; returns (q like x, fp32 scale [..., 1])."""
    fmax = vllm_fp8_max(fp8_dtype)
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / fmax).clamp_min(1.0 / (fmax * 512.0))
    q = (x.float() * torch.reciprocal(scale)).clamp(-fmax, fmax).to(fp8_dtype)
    return q, scale


def vllm_static_fp8_quant(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """vLLM's native static per-tensor quant: as ``static_fp8_quant`` but clamped to ``vllm_fp8_max``."""
    return static_quant32(x.float(), scale, fp8_dtype, vllm_fp8_max(fp8_dtype))


def aiter_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """AITER's rms_norm rounded once, to x.dtype (no rounding before the weight multiply)."""
    return aiter_rms32(x.float(), weight, eps).to(x.dtype)


def rms_norm_gated(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """vLLM ``RMSNormGated`` (norm_before_gate, silu gate, no group) over the last dim, as its native
    code computes it: ``x32 * rsqrt(mean(x32^2) + eps) * float(w)``, times ``z32 / (1 + exp(-z32))``,
    all fp32, rounded once to x.dtype."""
    return rms_norm_gated32(x, z, weight, eps).to(x.dtype)


def rms_norm_gated32(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    z32 = z.float()
    return normalize32(x.float(), eps) * weight.float() * (z32 / (1 + torch.exp(-z32)))


def _dequant(q: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    n = q.shape[-1]
    per_elem = scale.double().repeat_interleave(group_size, dim=-1)[..., :n]
    return q.double() * per_elem


def fp8_step_error(
    q_a: torch.Tensor, s_a: torch.Tensor, q_b: torch.Tensor, s_b: torch.Tensor, group_size: int
) -> float:
    """Largest difference of two group-quantized tensors, in fp8 steps (ulps) at that magnitude.

    Each pair (q, s) is dequantized as `q * s` with the scale broadcast over its group of
    `group_size` columns. For every element, the unit is the spacing of the fp8 grid of
    `q_a.dtype` at the larger of the two magnitudes, measured on the grid of the larger of
    the two scales: `step = 2**floor(log2(|v| / scale)) * eps * scale` where `eps` is the
    dtype's relative spacing (2**-3 for e4m3), floored at the subnormal spacing
    `smallest_normal * eps * scale`. The result is `max(|v_a - v_b| / step)`: 0.0 means
    identical values, <= 1.0 means "within one fp8 step" (e.g. one round-to-nearest
    flip). Shapes must match; empty inputs give 0.0.
    """
    if q_a.shape != q_b.shape or s_a.shape != s_b.shape:
        raise ValueError(
            f"shape mismatch: {tuple(q_a.shape)}/{tuple(s_a.shape)} vs {tuple(q_b.shape)}/{tuple(s_b.shape)}"
        )
    if q_a.numel() == 0:
        return 0.0
    fi = torch.finfo(q_a.dtype)
    v_a, v_b = _dequant(q_a, s_a, group_size), _dequant(q_b, s_b, group_size)
    n = q_a.shape[-1]
    scale = torch.maximum(s_a.double(), s_b.double()).repeat_interleave(group_size, dim=-1)[..., :n]
    mag = torch.maximum(v_a.abs(), v_b.abs()) / scale
    step = torch.exp2(torch.floor(torch.log2(mag))) * fi.eps
    step = step.clamp_min(fi.smallest_normal * fi.eps) * scale
    diff = (v_a - v_b).abs()
    err = torch.where(diff == 0, torch.zeros_like(diff), diff / step)
    return float(err.max().item())
