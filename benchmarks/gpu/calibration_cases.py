"""The calibration cases ``measure.py`` times: per key, the call on one shape's inputs, what it
outputs, how it is checked, and the bytes it must move at least (the bytes model of
``measure.py``'s docstring).
"""

from __future__ import annotations

from native import (
    EPS,
    check_bf16,
    check_quant,
    native_add_rms_group_quant,
    native_group_quant,
    native_rms,
    native_rms_group_quant,
    native_silu_group_quant,
)

KEYS = [
    "rms_group_quant",
    "add_rms_group_quant",
    "silu_group_quant",
    "rms_norm",
    "add_rms_norm",
    "group_quant",
    "silu_mul",
    "inductor:rms_group_quant",
    "inductor:add_rms_group_quant",
    "inductor:silu_group_quant",
]
EXPECTED_LAUNCHES = {k: 1 for k in KEYS} | {"silu_mul": 2}


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
    raise KeyError(key)


def make_case(key, M, N, G, A, dev, inp):
    """Return (fn, outputs_of(result) -> list of tensors, checker(result) -> (ok, err, mism))."""
    import torch
    import torch.nn.functional as F

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
            return ok and torch.equal(res[1], ref["add_q"][2]), err, mism
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


def make_inputs(M, N, G, dev, seed):
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16
    x = torch.randn(M, N, device=dev, dtype=torch.float32, generator=gen).to(bf)
    r = torch.randn(M, N, device=dev, dtype=torch.float32, generator=gen).to(bf)
    w = (1.0 + 0.2 * torch.randn(N, device=dev, dtype=torch.float32, generator=gen)).to(bf)
    xs = (2.0 * torch.randn(M, 2 * N, device=dev, dtype=torch.float32, generator=gen)).to(bf)
    ref = {}
    ref["rms_y"] = native_rms(x, w)
    ref["rms_q"] = native_group_quant(ref["rms_y"])
    ref["add_q"] = native_add_rms_group_quant(x, r, w)
    xf = x.float() + r.float()
    ref["add_y"] = (xf * (xf.pow(2).mean(-1, keepdim=True) + EPS).rsqrt()).to(bf) * w
    ref["silu_y"] = (F.silu(xs[:, :N].float()) * xs[:, N:].float()).to(bf)
    ref["silu_q"] = native_group_quant(ref["silu_y"])
    return {"x": x, "r": r, "w": w, "xs": xs, "ref": ref}
