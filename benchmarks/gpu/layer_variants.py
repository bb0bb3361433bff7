"""The DeepSeek-V3 layer's norm/quant part as ``layer_speedup.py`` runs it: its shapes (TP 8), the
random inputs, the eager reference of vLLM's native ops, and the three variants (before on AITER's
kernels, before on Inductor, after on the kernels eqsat chose) as per-site functions, with the
checks that compare a variant's outputs with the reference (``layer_speedup.py``'s docstring says
what each variant runs and the tolerances).
"""

from __future__ import annotations

import native

EPS = native.EPS
G = 128
HIDDEN, Q_LORA, KV_LORA, ROPE = 7168, 1536, 512, 64
ATTN_OUT = 16 * 128  # heads / TP 8 * v_head_dim
INTER = 18432 // 8  # dense MLP intermediate per TP rank
SITES = ("add1", "qkv", "attnq", "add2", "silu")
SITE_KERNELS = {  # which chosen kernels can take a site (eqsat's catalog names)
    "add": ("K_rmsnorm_add_fp8_group_quant", "I_add_rms_group_quant"),
    "qkv": ("K_mla_dual_rms_norm_group_quant", "K_rmsnorm_fp8_group_quant", "I_rms_group_quant"),
    "silu": ("K_silu_mul_fp8_group_quant", "I_silu_group_quant"),
}
VARIANTS = ("before_aiter", "before_inductor", "after")


def native_add_rms(x, r, w):
    """vLLM fused_add_rms_norm native: fp32 add, residual = sum rounded, norm of the fp32 sum."""
    import torch

    xf = x.float() + r.float()
    res = xf.to(x.dtype)
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(var + EPS)).to(x.dtype) * w, res


def native_rms(x, w):
    return native.native_rms(x, w)


def native_silu_mul(x):
    import torch.nn.functional as F

    n = x.shape[-1] // 2
    return F.silu(x[:, :n]) * x[:, n:]


def i_silu_group_quant(x):
    """I_silu_group_quant's expansion (eqsat.kernels.inductor): native silu_and_mul (bf16) + group quant."""
    return native.native_group_quant(native_silu_mul(x), G)


def i_add_rms_group_quant(x, r, w):
    q, s, res = native.native_add_rms_group_quant(x, r, w)
    return q, s, res


def i_rms_group_quant(x, w):
    return native.native_rms_group_quant(x, w)


def make_inputs(M, dev, seed):
    import torch

    gen = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16

    def rn(*shape, scale=1.0):
        return (scale * torch.randn(*shape, device=dev, dtype=torch.float32, generator=gen)).to(bf)

    def wt(n):
        return (1.0 + 0.2 * torch.randn(n, device=dev, dtype=torch.float32, generator=gen)).to(bf)

    inp = {
        "x": rn(M, HIDDEN), "residual": rn(M, HIDDEN), "qkv": rn(M, Q_LORA + KV_LORA + ROPE),
        "attn": rn(M, ATTN_OUT), "o": rn(M, HIDDEN), "gate_up": rn(M, 2 * INTER, scale=2.0),
        "w_in": wt(HIDDEN), "w_qa": wt(Q_LORA), "w_kva": wt(KV_LORA), "w_post": wt(HIDDEN),
    }
    inp["q_c"] = inp["qkv"][:, :Q_LORA]
    inp["kv_c"] = inp["qkv"][:, Q_LORA:Q_LORA + KV_LORA]
    return inp


def reference(inp):
    """Eager fp32 reference of vLLM's native ops (the graph's semantics): dict of outputs."""
    import torch.nn.functional as F

    ref = {}
    q, s, res = native.native_add_rms_group_quant(inp["x"], inp["residual"], inp["w_in"])
    ref["add1_q"], ref["add1_res"] = (q, s), res
    ref["qkv_q"] = native.native_rms_group_quant(inp["q_c"], inp["w_qa"])
    ref["qkv_kv"] = native.native_rms(inp["kv_c"], inp["w_kva"])
    ref["attnq_q"] = native.native_group_quant(inp["attn"].contiguous(), G)
    q, s, res = native.native_add_rms_group_quant(inp["o"], res, inp["w_post"])
    ref["add2_q"], ref["add2_res"] = (q, s), res
    gu = inp["gate_up"]
    y = (F.silu(gu[:, :INTER].float()) * gu[:, INTER:].float()).to(gu.dtype)
    ref["silu_q"] = native.native_group_quant(y, G)
    return ref


def assign_sites(plan: dict[str, int]) -> dict[str, str | None]:
    """Chosen kernel per site, from the plan's counts; every chosen kernel must be placed exactly."""
    left = dict(plan)
    out: dict[str, str | None] = {}
    for site in SITES:
        kind = "add" if site.startswith("add") else site
        out[site] = None
        for k in SITE_KERNELS.get(kind, ()):
            if left.get(k, 0) > 0:
                left[k] -= 1
                out[site] = k
                break
    rest = {k: n for k, n in left.items() if n}
    if rest:
        raise ValueError(f"chosen kernels with no site in this graph: {rest}")
    return out


def build_variant(name, M, A, compile_fn, plan=None):
    """Return (sites: dict site -> fn(inp, res_in) -> dict, kernels: dict site -> label)."""
    import torch
    import torch.nn.functional as F

    fp8 = torch.float8_e4m3fn

    def gq(y):
        m, n = y.shape
        return A["fused_flatten_fp8_group_quant"](y.view(m, 1, n), G, dtype_quant=fp8)

    # -- AITER unfused (before_aiter; also after's sites with no chosen kernel)
    def a_add(x, r, w):
        out = torch.empty_like(x)
        res_out = torch.empty_like(x)
        A["rmsnorm2d_fwd_with_add"](out, x, r, res_out, w, EPS)
        return {"q": gq(out), "res": res_out}

    def a_qkv(inp):
        return {"q": gq(A["rms_norm"](inp["q_c"], inp["w_qa"], EPS)), "kv": A["rms_norm"](inp["kv_c"], inp["w_kva"], EPS)}

    def attnq(inp):
        return {"q": gq(inp["attn"])}

    def a_silu(inp):
        gu = inp["gate_up"]
        return {"q": gq(F.silu(gu[:, :INTER]) * gu[:, INTER:])}

    aiter_sites = {
        "add1": lambda inp, res: a_add(inp["x"], inp["residual"], inp["w_in"]),
        "qkv": lambda inp, res: a_qkv(inp),
        "attnq": lambda inp, res: attnq(inp),
        "add2": lambda inp, res: a_add(inp["o"], res, inp["w_post"]),
        "silu": lambda inp, res: a_silu(inp),
    }
    aiter_labels = {"add1": "rmsnorm2d_fwd_with_add + group_quant", "qkv": "rms_norm x2 + group_quant",
                    "attnq": "group_quant", "add2": "rmsnorm2d_fwd_with_add + group_quant",
                    "silu": "eager silu*mul + group_quant"}
    if name == "before_aiter":
        return aiter_sites, aiter_labels

    if name == "before_inductor":
        c_add = compile_fn(native_add_rms)
        c_rms_q = compile_fn(lambda x, w: native_rms(x, w))
        c_rms_kv = compile_fn(lambda x, w: native_rms(x, w))
        c_silu = compile_fn(native_silu_mul)

        def i_add(x, r, w):
            y, res = c_add(x, r, w)
            return {"q": gq(y), "res": res}

        sites = {
            "add1": lambda inp, res: i_add(inp["x"], inp["residual"], inp["w_in"]),
            "qkv": lambda inp, res: {"q": gq(c_rms_q(inp["q_c"], inp["w_qa"])),
                                     "kv": c_rms_kv(inp["kv_c"], inp["w_kva"])},
            "attnq": lambda inp, res: attnq(inp),
            "add2": lambda inp, res: i_add(inp["o"], res, inp["w_post"]),
            "silu": lambda inp, res: {"q": gq(c_silu(inp["gate_up"]))},
        }
        labels = {"add1": "inductor add_rms_norm + group_quant", "qkv": "inductor rms_norm x2 + group_quant",
                  "attnq": "group_quant", "add2": "inductor add_rms_norm + group_quant",
                  "silu": "inductor silu_and_mul + group_quant"}
        return sites, labels

    assert name == "after"
    chosen = assign_sites(plan)
    fused = A["fused_rms_fp8_group_quant"]
    sites, labels = dict(aiter_sites), dict(aiter_labels)
    for site, k in chosen.items():
        if k is None:
            continue
        labels[site] = k
        if k == "K_rmsnorm_add_fp8_group_quant":
            xk, wk = ("x", "w_in") if site == "add1" else ("o", "w_post")

            def f(inp, res, xk=xk, wk=wk, site=site):
                r = inp["residual"] if site == "add1" else res
                (q, s), _, _, res_out = fused(inp[xk], inp[wk], EPS, res1=r, group_size=G, dtype_quant=fp8)
                return {"q": (q, s), "res": res_out}
        elif k == "I_add_rms_group_quant":
            c = compile_fn(i_add_rms_group_quant)
            xk, wk = ("x", "w_in") if site == "add1" else ("o", "w_post")

            def f(inp, res, xk=xk, wk=wk, site=site, c=c):
                r = inp["residual"] if site == "add1" else res
                q, s, res_out = c(inp[xk], r, inp[wk])
                return {"q": (q, s), "res": res_out}
        elif k == "K_mla_dual_rms_norm_group_quant":

            def f(inp, res):
                (q, s), _, kv, _ = fused(inp["q_c"], inp["w_qa"], EPS, inp2=inp["kv_c"], inp2_weight=inp["w_kva"],
                                         inp2_epsilon=EPS, group_size=G, dtype_quant=fp8)
                return {"q": (q, s), "kv": kv}
        elif k == "K_rmsnorm_fp8_group_quant":

            def f(inp, res):
                (q, s), _, _, _ = fused(inp["q_c"], inp["w_qa"], EPS, group_size=G, dtype_quant=fp8)
                return {"q": (q, s), "kv": A["rms_norm"](inp["kv_c"], inp["w_kva"], EPS)}
        elif k == "I_rms_group_quant":
            c = compile_fn(i_rms_group_quant)

            def f(inp, res, c=c):
                return {"q": c(inp["q_c"], inp["w_qa"]), "kv": A["rms_norm"](inp["kv_c"], inp["w_kva"], EPS)}
        elif k == "K_silu_mul_fp8_group_quant":

            def f(inp, res):
                return {"q": A["act_mul_and_fp8_group_quant"](inp["gate_up"], "silu", G, dtype_quant=fp8)}
        elif k == "I_silu_group_quant":
            c = compile_fn(i_silu_group_quant)

            def f(inp, res, c=c):
                return {"q": c(inp["gate_up"])}
        else:
            raise KeyError(f"no AITER mapping for {k}")
        sites[site] = f
    return sites, labels


def whole_fn(sites, inp):
    """The part as the graph runs it: add2 reads add1's residual output."""

    def fn():
        out = {}
        for s in SITES:
            o = sites[s](inp, out.get("add1_res"))
            for k, v in o.items():
                out[f"{s}_{k}"] = v
        return out

    return fn


def site_fn(sites, site, inp, ref):
    def fn():
        return {f"{site}_{k}": v for k, v in sites[site](inp, ref["add1_res"]).items()}

    return fn


def flat_tensors(out):
    ts = []
    for v in out.values():
        ts.extend(v if isinstance(v, tuple) else [v])
    return ts


def compare(out, ref, exact_res: bool):
    """(ok, worst fp8 steps, detail) of every output in ``out`` against ``ref`` (same keys)."""
    import torch

    ok, worst, parts = True, 0.0, []
    for k, v in out.items():
        if k not in ref:
            continue
        if k.endswith("_q"):
            good, err, mism = native.check_quant(v[0], v[1], ref[k][0], ref[k][1], G)
            worst = max(worst, err)
            parts.append(f"{k}={err:.2f}st/{mism:.3f}")
        elif k.endswith("_kv"):
            good, err, _ = native.check_bf16(v, ref[k], 3.0)
            parts.append(f"{k}={err:.1f}ulp")
        elif k.endswith("_res"):
            if exact_res:
                good = torch.equal(v, ref[k])
                parts.append(f"{k}={'eq' if good else 'NE'}")
            else:
                good, err, _ = native.check_bf16(v, ref[k], 1.0)
                parts.append(f"{k}={err:.1f}ulp")
        else:
            continue
        ok = ok and good
    return ok, worst, " ".join(parts)


def make_compile(dry_run):
    import torch

    if dry_run:
        return lambda f: f
    return lambda f: torch.compile(f, dynamic=False)

