"""The calibration cases ``measure.py`` times: per key, the call on one shape's inputs, what it
outputs, how it is checked, and the bytes it must move at least (the bytes model of
``measure.py``'s docstring).

Two sets of keys: ``grid``, the group-quant family over the M x N grid of the first table, and
``models``, the kernels a model's own shape decides (gpt-oss's add + rms_norm + pad of 2880 to a multiple
of 256, Llama's norm with a static per-tensor or dynamic per-token quant at 4096, DeepSeek's MLA q latent
of 1536 with its kv latent of 512), each AITER kernel with its Inductor twin, at its model's width (``WIDTHS``).
"""

from __future__ import annotations

from native import (
    EPS,
    FP8_MAX,
    check_bf16,
    check_quant,
    mla_latents,
    native_add_rms,
    native_add_rms_group_quant,
    native_add_rms_pad,
    native_add_rms_static_quant,
    native_add_rms_token_quant,
    native_group_quant,
    native_mla_rms_group_quant,
    native_rms,
    native_rms_group_quant,
    native_rms_static_quant,
    native_rms_token_quant,
    native_silu_group_quant,
)

_GRID_FUSED = ["rms_group_quant", "add_rms_group_quant", "silu_group_quant"]
_MODEL_FUSED = ["add_rms_pad", "rms_static_quant", "add_rms_static_quant", "mla_dual_rms_norm_group_quant",
                "rms_token_quant", "add_rms_token_quant"]
SETS = {
    "grid": [*_GRID_FUSED, "rms_norm", "add_rms_norm", "group_quant", "silu_mul",
             *(f"inductor:{k}" for k in _GRID_FUSED)],
    "models": [*_MODEL_FUSED, *(f"inductor:{k}" for k in _MODEL_FUSED)],
}
KEYS = [k for keys in SETS.values() for k in keys]
WIDTHS = {"add_rms_pad": [2880], "rms_static_quant": [4096], "add_rms_static_quant": [4096],
          "mla_dual_rms_norm_group_quant": [1536], "rms_token_quant": [4096], "add_rms_token_quant": [4096]}
"""N of the ``models`` keys (MLA: q's width; kv's is ``MLA_KV``); the other keys take the grid's."""
PAD_MULTIPLE = 256  # gpt-oss's x_pad_to_multiple on gfx950
MLA_KV, MLA_PE = 512, 64  # DeepSeek-V3's kv_lora_rank, qk_rope_head_dim
STATIC_SCALE = 8.0 / FP8_MAX  # the norm's outputs (about unit variance) up to 8 before clamping
GROUPED = {"rms_group_quant", "add_rms_group_quant", "silu_group_quant", "group_quant",
           "mla_dual_rms_norm_group_quant"}
"""Keys whose N must be a multiple of G."""
EXPECTED_LAUNCHES = {k: 1 for k in KEYS} | {"silu_mul": 2, "inductor:rms_group_quant": 2,
                                            "inductor:add_rms_group_quant": 2, "inductor:add_rms_pad": 2,
                                            "inductor:mla_dual_rms_norm_group_quant": 3}
"""Launches written when the profiler fails; a twin's are its row's ``Twin.launches``."""


def widths(key: str, grid: list[int]) -> list[int]:
    return WIDTHS.get(key.split(":")[-1], grid)


def min_bytes(key: str, M: int, N: int, G: int) -> int:
    ng = N // G
    base = key.split(":")[-1]
    if base == "rms_group_quant":
        return M * N * 2 + N * 2 + M * N + M * ng * 4
    if base == "add_rms_group_quant":
        return 2 * M * N * 2 + N * 2 + M * N + M * ng * 4 + M * N * 2
    if base == "silu_group_quant":
        return 2 * M * N * 2 + M * N + M * ng * 4
    if base == "rms_norm":
        return M * N * 2 + N * 2 + M * N * 2 + M * 4
    if base == "add_rms_norm":
        return 2 * M * N * 2 + N * 2 + 2 * M * N * 2 + M * 4
    if base == "group_quant":
        return M * N * 2 + M * N + M * ng * 4
    if base == "silu_mul":
        return (M * N * 2 + M * N * 2) + (2 * M * N * 2 + M * N * 2)
    if base == "add_rms_pad":
        return 2 * M * N * 2 + N * 2 + M * (N + -N % PAD_MULTIPLE) * 2 + M * N * 2
    if base == "rms_static_quant":
        return M * N * 2 + N * 2 + 4 + M * N
    if base == "add_rms_static_quant":
        return 2 * M * N * 2 + N * 2 + 4 + M * N + M * N * 2
    if base == "rms_token_quant":
        return M * N * 2 + N * 2 + M * N + M * 4
    if base == "add_rms_token_quant":
        return 2 * M * N * 2 + N * 2 + M * N + M * 4 + M * N * 2
    if base == "mla_dual_rms_norm_group_quant":
        return M * (N + MLA_KV) * 2 + (N + MLA_KV) * 2 + M * N + M * ng * 4 + M * MLA_KV * 2
    raise KeyError(key)


def make_case(key, M, N, G, A, dev, inp):
    """Return (fn, outputs_of(result) -> list of tensors, checker(result) -> (ok, err, mism))."""
    import torch
    import torch.nn.functional as F

    if key.split(":")[-1] in WIDTHS:
        return _model_case(key, N, G, A, inp)
    x, r, w, xs = inp["x"], inp["r"], inp["w"], inp["xs"]
    ref = inp["ref"]
    fp8 = torch.float8_e4m3fn

    if key == "rms_group_quant":

        def fn():
            return A["fused_rms_fp8_group_quant"](x, w, EPS, group_size=G, dtype_quant=fp8)

        def outs(res):
            return [res[0][0], res[0][1]]

        def chk(res):
            return check_quant(res[0][0], res[0][1], *ref["rms_q"], G)
    elif key == "add_rms_group_quant":

        def fn():
            return A["fused_rms_fp8_group_quant"](x, w, EPS, group_size=G, dtype_quant=fp8, res1=r)

        def outs(res):
            return [res[0][0], res[0][1], res[3]]

        def chk(res):
            ok, err, mism = check_quant(res[0][0], res[0][1], *ref["add_q"][:2], G)
            same_res = torch.equal(res[3], ref["add_q"][2])
            return ok and same_res, err, mism
    elif key == "silu_group_quant":

        def fn():
            return A["act_mul_and_fp8_group_quant"](xs, "silu", G, dtype_quant=fp8)

        def outs(res):
            return list(res)

        def chk(res):
            return check_quant(res[0], res[1], *ref["silu_q"], G)
    elif key == "rms_norm":

        def fn():
            return A["rms_norm"](x, w, EPS)

        def outs(res):
            return [res]

        def chk(res):
            return check_bf16(res, ref["rms_y"], 2.0)
    elif key == "add_rms_norm":
        out = torch.empty_like(x)
        res_out = torch.empty_like(x)

        def fn():
            A["rmsnorm2d_fwd_with_add"](out, x, r, res_out, w, EPS)
            return out, res_out

        def outs(res):
            return list(res)

        def chk(res):
            ok, err, mism = check_bf16(res[0], ref["add_y"], 3.0)
            return ok and torch.equal(res[1], ref["add_res"]), err, mism
    elif key == "group_quant":
        y = ref["rms_y"]
        y3 = y.view(M, 1, N)

        def fn():
            return A["fused_flatten_fp8_group_quant"](y3, G, dtype_quant=fp8)

        def outs(res):
            return list(res)

        def chk(res):
            return check_quant(res[0], res[1], *ref["rms_q"], G)
    elif key == "silu_mul":

        def fn():
            return F.silu(xs[:, :N]) * xs[:, N:]

        def outs(res):
            return [res]

        def chk(res):
            return check_bf16(res, ref["silu_y"], 2.0)
    elif key.startswith("inductor:"):
        base = key.split(":", 1)[1]
        torch._dynamo.reset()
        if base == "rms_group_quant":
            c = torch.compile(native_rms_group_quant, dynamic=False)

            def fn():
                return c(x, w)

            def chk(res):
                return check_quant(res[0], res[1], *ref["rms_q"], G)
        elif base == "add_rms_group_quant":
            c = torch.compile(native_add_rms_group_quant, dynamic=False)

            def fn():
                return c(x, r, w)

            def chk(res):
                ok, err, mism = check_quant(res[0], res[1], *ref["add_q"][:2], G)
                return ok and torch.equal(res[2], ref["add_q"][2]), err, mism
        elif base == "silu_group_quant":
            c = torch.compile(native_silu_group_quant, dynamic=False)

            def fn():
                return c(xs)

            def chk(res):
                return check_quant(res[0], res[1], *ref["silu_q"], G)
        else:
            raise KeyError(key)

        def outs(res):
            return list(res)
    else:
        raise KeyError(key)
    return fn, outs, chk


def _model_case(key, N, G, A, inp):
    """A ``models`` key: the AITER kernel, or (``inductor:``) its native chain compiled, both returning
    the native chain's outputs in its order, and the check of those."""
    import torch

    x, r, w, s, p, kvw, ref = (inp[k] for k in ("x", "r", "w", "s", "p", "kvw", "ref"))
    fp8 = torch.float8_e4m3fn
    base = key.split(":")[-1]
    if base == "add_rms_pad":
        native, args = native_add_rms_pad, (x, r, w, PAD_MULTIPLE)

        def aiter():
            return A["fused_add_rmsnorm_pad"](x, w, EPS, r, PAD_MULTIPLE)  # (padded, residual)

        def chk(res):
            ok, err, mism = check_bf16(res[0], ref["add_pad"][0], 3.0)  # the pad columns: exactly 0
            return ok and torch.equal(res[1], ref["add_pad"][1]), err, mism
    elif base == "rms_static_quant":
        native, args = native_rms_static_quant, (x, w, s)

        def aiter():
            return A["fused_rms_fp8_per_tensor_static_quant"](x, w, EPS, s, dtype_quant=fp8)[0]

        def chk(res):
            return _check_static(res[0], ref["rms_static"], s)
    elif base == "add_rms_static_quant":
        native, args = native_add_rms_static_quant, (x, r, w, s)

        def aiter():
            q, _, _, res_out = A["fused_rms_fp8_per_tensor_static_quant"](x, w, EPS, s, dtype_quant=fp8, res1=r)
            return q, res_out

        def chk(res):
            ok, err, mism = _check_static(res[0], ref["add_static"][0], s)
            return ok and torch.equal(res[1], ref["add_static"][1]), err, mism
    elif base == "rms_token_quant":
        native, args = native_rms_token_quant, (x, w)

        def aiter():
            q, scale = torch.empty_like(x, dtype=fp8), x.new_empty((x.shape[0], 1), dtype=torch.float32)
            A["rmsnorm2d_fwd_with_dynamicquant"](q, x, scale, w, EPS, clamp_out=True)
            return q, scale

        def chk(res):
            return check_quant(res[0], res[1], *ref["rms_token"], N)
    elif base == "add_rms_token_quant":
        native, args = native_add_rms_token_quant, (x, r, w)

        def aiter():  # returned in the native chain's order: (q, scale, residual)
            q, res_out = torch.empty_like(x, dtype=fp8), torch.empty_like(x)
            scale = x.new_empty((x.shape[0], 1), dtype=torch.float32)
            A["rmsnorm2d_fwd_with_add_dynamicquant"](q, x, r, res_out, scale, w, EPS)
            return q, scale, res_out

        def chk(res):
            ok, err, mism = check_quant(res[0], res[1], *ref["add_token"][:2], N)
            return ok and torch.equal(res[2], ref["add_token"][2]), err, mism
    elif base == "mla_dual_rms_norm_group_quant":
        native, args = native_mla_rms_group_quant, (p, w, kvw)
        q_c, kv_c = mla_latents(p, N, MLA_KV)

        def aiter():  # q's norm group-quantized, kv's normed: the Triton kernel with a second input
            (q8, scale), _, kv_normed, _ = A["fused_rms_fp8_group_quant"](
                q_c, w, EPS, kv_c, kvw, EPS, group_size=G, dtype_quant=fp8)
            return q8, scale, kv_normed

        def chk(res):
            ok, err, mism = check_quant(res[0], res[1], *ref["mla"][:2], G)
            return ok and check_bf16(res[2], ref["mla"][2], 2.0)[0], err, mism
    else:
        raise KeyError(key)
    fn = aiter
    if key.startswith("inductor:"):
        torch._dynamo.reset()
        compiled = torch.compile(native, dynamic=False)

        def fn():
            return compiled(*args)

    def outs(res):
        return list(res) if isinstance(res, tuple) else [res]

    return fn, outs, lambda res: chk(outs(res))


def _check_static(q, q_ref, scale):
    """A static quant's q against the reference's, in fp8 steps (``check_quant`` with one group a row)."""
    M, N = q.shape
    s = scale.float().reshape(1, 1).expand(M, 1).contiguous()
    return check_quant(q, s, q_ref, s, N)


class _Lazy(dict):
    """References made on first use: a key's are computed only where it is measured (a width that is
    no multiple of G has no group quant)."""

    def __init__(self, makers):
        super().__init__()
        self.makers = makers

    def __missing__(self, key):
        value = self[key] = self.makers[key]()
        return value


def make_inputs(M, N, G, dev, seed):
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16

    def randn(*shape, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(*shape, device=dev, dtype=torch.float32, generator=gen)).to(bf)

    x, r, w, xs = randn(M, N), randn(M, N), randn(N, scale=0.2, shift=1.0), randn(M, 2 * N, scale=2.0)
    p, kvw = randn(M, N + MLA_KV + MLA_PE), randn(MLA_KV, scale=0.2, shift=1.0)  # MLA: N is q's width
    s = torch.full((1,), STATIC_SCALE, device=dev, dtype=torch.float32)
    ref = _Lazy({
        "rms_y": lambda: native_rms(x, w),
        "rms_q": lambda: native_group_quant(ref["rms_y"]),
        "add_q": lambda: native_add_rms_group_quant(x, r, w),
        "add_y": lambda: native_add_rms(x, r, w)[0],
        "add_res": lambda: native_add_rms(x, r, w)[1],  # the rounded sum (any N, no quant groups)
        "silu_y": lambda: (F.silu(xs[:, :N].float()) * xs[:, N:].float()).to(bf),
        "silu_q": lambda: native_group_quant(ref["silu_y"]),
        "add_pad": lambda: native_add_rms_pad(x, r, w, PAD_MULTIPLE),
        "rms_static": lambda: native_rms_static_quant(x, w, s),
        "add_static": lambda: native_add_rms_static_quant(x, r, w, s),
        "mla": lambda: native_mla_rms_group_quant(p, w, kvw),
        "rms_token": lambda: native_rms_token_quant(x, w),
        "add_token": lambda: native_add_rms_token_quant(x, r, w),
    })
    return {"x": x, "r": r, "w": w, "xs": xs, "p": p, "kvw": kvw, "s": s, "ref": ref}
