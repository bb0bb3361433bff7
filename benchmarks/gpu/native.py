"""vLLM's native decompositions of the norm / quant family (what Inductor sees when no custom kernel
is chosen, and the reference every measured kernel is checked against), and the checks.

fp8 is float8_e4m3fn (max 448, the H200's), group quant scales floored at 1 / (448 * 512) as vLLM's
native QuantFP8; ``check_quant`` compares dequantised q*s in fp8 steps at the reference's magnitude,
``check_bf16`` in bf16 ulps; ``poison_like`` fills freed outputs with NaN bytes so an element a kernel
fails to write shows in the next check.
"""

from __future__ import annotations

FP8_MAX = 448.0
EPS = 1e-6


def native_group_quant(y, g: int = 128):
    import torch

    M, N = y.shape
    yg = y.view(-1, N // g, g)
    amax = yg.abs().amax(dim=-1, keepdim=True).float()
    s = (amax / FP8_MAX).clamp_min(1.0 / (FP8_MAX * 512.0))
    q = (yg / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(M, N), s.view(M, N // g)


def native_rms(x, w, eps: float = EPS):
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * (var + eps).rsqrt()).to(x.dtype) * w


def native_rms_group_quant(x, w):
    return native_group_quant(native_rms(x, w))


def native_add_rms(x, r, w, eps: float = EPS):
    """vLLM's ``RMSNorm.forward_static`` with a residual: the norm of the fp32 sum, the sum rounded as
    the new residual. Returns (normed, residual)."""
    xf = x.float() + r.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * (var + eps).rsqrt()).to(x.dtype) * w, xf.to(x.dtype)


def native_add_rms_group_quant(x, r, w):
    y, res = native_add_rms(x, r, w)
    q, s = native_group_quant(y)
    return q, s, res


def native_static_quant(y, scale):
    """vLLM's static per-tensor ``QuantFP8.forward_native``: ``x32 * (1 / scale)``, clamped, cast."""
    import torch

    return (y.float() * scale.reciprocal()).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def native_rms_static_quant(x, w, scale):
    return native_static_quant(native_rms(x, w), scale)


def native_add_rms_static_quant(x, r, w, scale):
    y, res = native_add_rms(x, r, w)
    return native_static_quant(y, scale), res


def native_token_quant(y):
    """vLLM 0.33.0's dynamic per-token ``QuantFP8.forward_native``: the row's ``amax``, the scale floored at
    1 / (448 * 512), ``y32 * (1 / scale)`` clamped and cast. Returns (q, scale [M, 1])."""
    import torch

    s = (y.abs().amax(dim=-1).unsqueeze(-1).float() / FP8_MAX).clamp_min(1.0 / (FP8_MAX * 512.0))
    return (y.float() * s.reciprocal()).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), s


def native_rms_token_quant(x, w):
    return native_token_quant(native_rms(x, w))


def native_add_rms_token_quant(x, r, w):
    y, res = native_add_rms(x, r, w)
    q, s = native_token_quant(y)
    return q, s, res


def native_add_rms_pad(x, r, w, multiple: int):
    """gpt-oss: the fused-add norm zero-padded on the right to a multiple (``F.pad``). Returns (padded, residual)."""
    import torch.nn.functional as F

    y, res = native_add_rms(x, r, w)
    return F.pad(y, (0, -y.shape[-1] % multiple)), res


def mla_latents(p, q_width: int, kv_width: int):
    """DeepSeek's split of the q/kv projection: (q_c, kv_c), strided views of ``p``."""
    q_c, kv_lora = p.split([q_width, p.shape[-1] - q_width], -1)
    return q_c, kv_lora[:, :kv_width]


def native_mla_rms_group_quant(p, qw, kvw):
    """DeepSeek's MLA: q_c normed and group-quantized, kv_c normed (widths from the weights)."""
    q_c, kv_c = mla_latents(p, qw.shape[0], kvw.shape[0])
    q, s = native_rms_group_quant(q_c, qw)
    return q, s, native_rms(kv_c, kvw)


def native_silu_group_quant(x):
    import torch.nn.functional as F

    n = x.shape[1] // 2
    y = (F.silu(x[:, :n].float()) * x[:, n:].float()).to(x.dtype)
    return native_group_quant(y)


def _dequant(q, s, g):
    M, N = q.shape
    return (q.float().view(M, N // g, g) * s.float().view(M, N // g, 1)).view(M, N)


def check_quant(q, s, q_ref, s_ref, g, tol_steps=1.5):
    """Max error of dequantised q*s against the reference, in fp8 steps at the reference's magnitude."""
    import torch

    d = _dequant(q, s, g)
    r = _dequant(q_ref, s_ref, g)
    if not torch.isfinite(d).all():
        return False, float("inf"), 1.0
    M, N = q.shape
    sr = s_ref.float().view(M, N // g, 1).expand(M, N // g, g).reshape(M, N)
    mag = torch.maximum(d.abs(), r.abs()) / sr  # in reference q units
    e = torch.floor(torch.log2(mag.clamp(min=2.0**-6))).clamp(max=8.0)
    step = torch.exp2(e - 3.0) * sr
    err = ((d - r).abs() / step).max().item()
    mism = (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()
    return err <= tol_steps, err, mism


def check_bf16(y, ref, tol_ulps):
    import torch

    if not torch.isfinite(y.float()).all():
        return False, float("inf"), 1.0
    yf, rf = y.float(), ref.float()
    ulp = torch.exp2(torch.floor(torch.log2(rf.abs().clamp(min=1e-30))) - 7.0)
    err = ((yf - rf).abs() / ulp).max().item()
    mism = (yf != rf).float().mean().item()
    return err <= tol_ulps, err, mism


def poison_like(outs):
    """Fill the previous call's outputs with 0xFF bytes (NaN in bf16, fp32 and fp8 e4m3fn) before they are freed:
    the next call's outputs reuse those allocator blocks (or, for preallocated outputs, those very buffers), so an
    element the kernel fails to write shows up as NaN in the check."""
    import torch

    for o in outs:
        if isinstance(o, torch.Tensor):
            try:
                o.view(torch.uint8).fill_(0xFF)
            except RuntimeError:
                o.fill_(float("nan"))
