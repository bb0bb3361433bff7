"""Rules of the silu_and_mul family and of the "leave it to Inductor" rows: before ≡ after + numerics."""

from __future__ import annotations

from dataclasses import replace

import torch

import eqsat
from eqsat.core.spec import Traffic
from eqsat.cost.roofline import DYNAMIC, KernelTiming, load_profile, profile_names
from eqsat.kernels.families.pad import padded_width
from eqsat.kernels.inductor import TWIN_KEY, is_twin
from eqsat.library import reference as ref
from eqsat.library.reference import fp8_step_error
from tests.conftest import rand
from tests.test_mla_pad import MLA, latents
from tests.test_rules import check

vllm, vir, own = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat
FN = torch.float8_e4m3fn

TESTED_RULES = {"fuse-K_silu_mul_fp8_group_quant", "unlift-K_silu_mul_fp8_group_quant", "fuse-I_rms_group_quant",
                "fuse-I_add_rms_group_quant", "fuse-I_silu_group_quant", "fuse-I_rms_gated_group_quant",
                "fuse-I_add_rms_pad", "fuse-I_rms_static_quant", "fuse-I_add_rms_static_quant",
                "fuse-I_mla_dual_rms_norm_group_quant", "fuse-I_rms_token_quant", "fuse-I_add_rms_token_quant"}
TWIN_KEYS = {s.calibration_key for s in eqsat.DEFAULT_CATALOG if is_twin(s)}


def inductor_wins():
    """An H200 profile on which Inductor's chain kernels are far cheaper than anything else (compiled per
    size or, ``DYNAMIC``, once for every size)."""
    base = load_profile("h200")
    fast = KernelTiming(launch_us=0.1, bandwidth_gbps=1e5)
    return replace(base, kernels={**base.kernels, **dict.fromkeys((*TWIN_KEYS, *(k + DYNAMIC for k in TWIN_KEYS)), fast)})


def test_fuse_silu_mul_group_quant():
    check(lambda x: own.group_fp8_quant(own.silu_and_mul(x), 128, FN),
          lambda x: own.silu_mul_fp8_group_quant(x, 128, FN),
          [rand(8, 512)], numerics="rounding", fires="fuse-K_silu_mul_fp8_group_quant")


def test_unlift_silu_mul_group_quant_shares_kernel():
    def before(x):
        q1, s1 = vllm.rocm_aiter_act_mul_and_fp8_group_quant(x, 128)
        q2, s2 = vllm.rocm_aiter_group_fp8_quant(own.silu_and_mul(x), 128)
        return q1, s1, q2, s2

    def after(x):
        q, s = vllm.rocm_aiter_act_mul_and_fp8_group_quant(x, 128)
        return q, s, q, s

    check(before, after, [rand(8, 512)], numerics="rounding", fires="unlift-K_silu_mul_fp8_group_quant")


def test_inductor_rms_group_quant_inlines_native_chain():
    check(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128),
          lambda x, w: ref.group_fp8_quant(ref.rms_norm(x, w, 1e-6), 128, torch.float8_e4m3fnuz),
          [rand(8, 512), rand(512)], numerics="rounding", fires="fuse-I_rms_group_quant", profile=inductor_wins(),
          post_grad=True)


def test_inductor_add_rms_group_quant_inlines_native_chain():
    def before(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
        q, s = vllm.rocm_aiter_group_fp8_quant(n, 128)
        return q, s, res

    def after(x, r, w):
        n, res = ref.fused_add_rms_norm(x, r, w, 1e-6)
        q, s = ref.group_fp8_quant(n, 128, torch.float8_e4m3fnuz)
        return q, s, res

    check(before, after, [rand(8, 512), rand(8, 512, seed=5), rand(512)], numerics="rounding",
          fires="fuse-I_add_rms_group_quant", profile=inductor_wins(), post_grad=True)


def test_inductor_silu_group_quant_inlines_native_chain():
    check(lambda x: own.group_fp8_quant(own.silu_and_mul(x), 128, FN),
          lambda x: ref.group_fp8_quant(ref.silu_and_mul(x), 128, FN),
          [rand(8, 512)], numerics="rounding", fires="fuse-I_silu_group_quant", profile=inductor_wins(),
          post_grad=True)


def test_inductor_rms_gated_group_quant_inlines_native_chain():
    def before(x, z, w):
        return vllm.rocm_aiter_group_fp8_quant(vllm.fla_rms_norm_gated(x, z, w, 1e-6, None, True, "swish"), 128)

    check(before, lambda x, z, w: ref.group_fp8_quant(ref.rms_norm_gated(x, z, w, 1e-6), 128, torch.float8_e4m3fnuz),
          [rand(8, 256), rand(8, 256, seed=5), rand(256)], numerics="rounding",
          fires="fuse-I_rms_gated_group_quant", profile=inductor_wins(), post_grad=True)


def test_inductor_add_rms_pad_inlines_native_chain():
    """gpt-oss's add + rms_norm + pad (2880 up to a multiple of 256) as the native chain."""
    pad = padded_width(2880, 256) - 2880

    def before(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return torch.nn.functional.pad(n, (0, pad)), res

    def after(x, r, w):
        n, res = ref.fused_add_rms_norm(x, r, w, 1e-5)
        return torch.nn.functional.pad(n, (0, pad)), res

    check(before, after, [rand(8, 2880), rand(8, 2880, seed=5), rand(2880)], numerics="rounding",
          fires="fuse-I_add_rms_pad", profile=inductor_wins(), post_grad=True)


def test_inductor_rms_static_quant_inlines_native_chain():
    check(lambda x, w, s: own.static_fp8_quant(vir.rms_norm(x, w, 1e-6), s, FN),
          lambda x, w, s: ref.static_fp8_quant(ref.rms_norm(x, w, 1e-6), s, FN),
          [rand(8, 512), rand(512), torch.tensor([0.02])], numerics="rounding", fires="fuse-I_rms_static_quant",
          profile=inductor_wins(), post_grad=True)


def test_inductor_add_rms_static_quant_inlines_native_chain():
    def before(x, r, w, s):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return own.static_fp8_quant(n, s, FN), res

    def after(x, r, w, s):
        n, res = ref.fused_add_rms_norm(x, r, w, 1e-5)
        return ref.static_fp8_quant(n, s, FN), res

    check(before, after, [rand(8, 512), rand(8, 512, seed=5), rand(512), torch.tensor([0.02])],
          numerics="rounding", fires="fuse-I_add_rms_static_quant", profile=inductor_wins(), post_grad=True)


def test_inductor_rms_token_quant_inlines_native_chain():
    """AITER's per-token quant of the norm (what K_rmsnorm_fused_dynamic_quant fuses) as Inductor's chain."""
    check(lambda x, w: own.token_fp8_quant(vir.rms_norm(x, w, 1e-6), FN),
          lambda x, w: ref.token_fp8_quant(ref.rms_norm(x, w, 1e-6), FN),
          [rand(8, 512), rand(512)], numerics="rounding", fires="fuse-I_rms_token_quant", profile=inductor_wins(),
          post_grad=True)


def test_inductor_add_rms_token_quant_inlines_native_chain():
    def before(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return (*own.token_fp8_quant(n, FN), res)

    def after(x, r, w):
        n, res = ref.fused_add_rms_norm(x, r, w, 1e-5)
        return (*ref.token_fp8_quant(n, FN), res)

    check(before, after, [rand(8, 512), rand(8, 512, seed=5), rand(512)], numerics="rounding",
          fires="fuse-I_add_rms_token_quant", profile=inductor_wins(), post_grad=True)


def test_inductor_mla_dual_rms_norm_group_quant_inlines_native_chain():
    """DeepSeek's q latent normed and group-quantized, its kv latent normed: the twin's expansion goes
    through the dual norm's own outputs."""
    def before(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        q, s = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(q_c, qw, 1e-6), 128)
        return q, s, vir.rms_norm(kv_c, kvw, 1e-5), k_pe

    def after(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        q, s = ref.group_fp8_quant(ref.rms_norm(q_c, qw, 1e-6), 128, torch.float8_e4m3fnuz)
        return q, s, ref.rms_norm(kv_c, kvw, 1e-5), k_pe

    check(before, after, MLA, numerics="rounding", fires="fuse-I_mla_dual_rms_norm_group_quant",
          profile=inductor_wins(), post_grad=True)


def test_new_twin_rules_plan_as_one_bag():
    """egglog 13.2 may join the bags of a decomposed query plan unsoundly (``rewrites/lift.py``): the
    twins of the pad, static quant and MLA rows plan as one bag on a graph where they all match."""
    from eqsat.fx.importer import import_graph
    from eqsat.kernels.vocabularies import default_index
    from tests.conftest import trace
    from tests.test_lift import _plan

    def every(p, qw, kvw, x, r, w, s):
        q_c, kv_c, _ = latents(p)
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return (*vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(q_c, qw, 1e-6), 128), vir.rms_norm(kv_c, kvw, 1e-5),
                torch.nn.functional.pad(n, (0, 64)), res, own.static_fp8_quant(n, s, FN),
                own.static_fp8_quant(vir.rms_norm(x, w, 1e-6), s, FN), *own.token_fp8_quant(n, FN),
                *own.token_fp8_quant(vir.rms_norm(x, w, 1e-6), FN))

    inputs = [*MLA, rand(8, 2880), rand(8, 2880, seed=5), rand(2880), torch.tensor([0.02])]
    imported = import_graph(trace(every, *inputs), eqsat.DEFAULT_CATALOG, default_index())
    names = ("fuse-I_add_rms_pad", "fuse-I_rms_static_quant", "fuse-I_add_rms_static_quant",
             "fuse-I_mla_dual_rms_norm_group_quant", "fuse-I_rms_token_quant", "fuse-I_add_rms_token_quant")
    plans = {name: _plan(name, imported) for name in names}
    assert all(p == "single" for p in plans.values()), plans


def test_an_unmeasured_twin_never_beats_its_kernel():
    """A twin whose key a profile lacks costs its fused kernel's line (or the defaults, if slower) at
    three quarters of the bandwidth: on every shipped profile, the kernel wins at any size."""
    traffic = Traffic(read=1 << 20, written=1 << 19)
    for name in profile_names():
        p = load_profile(name)
        for twin in (s for s in eqsat.DEFAULT_CATALOG if is_twin(s) and s.calibration_key not in p.kernels):
            fused = twin.calibration_key.removeprefix(TWIN_KEY)
            assert p.time_us(traffic, twin.calibration_key) > p.time_us(traffic, fused), (name, twin.name)
            assert p.time_us(Traffic(0, 0), twin.calibration_key) >= p.time_us(Traffic(0, 0), fused)


def test_a_twin_inlined_inside_torch_compile_is_post_grad_aten():
    """An Inductor twin chosen inside torch.compile is written in the ATen a post-grad graph holds
    (Inductor's decompositions: no ``_to_copy``, which its lowering refuses), and the compiled model
    stays within the contract."""
    h200 = load_profile("h200")
    twin_wins = replace(h200, name="twin-wins", kernels={
        **h200.kernels, "inductor:rms_gated_group_quant": KernelTiming(0.0, 1e9)})

    def f(x, z, w):
        return own.group_fp8_quant(own.rms_norm_gated(x, z, w, 1e-5), 128, torch.float8_e4m3fn)

    x, z, w = rand(64, 1024), rand(64, 1024, seed=1), rand(1024, seed=2)
    p = eqsat.EqSatPass(profile=twin_wins, sizes=64, strict=True)
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, fx_graph_cache=False):
        q, s = torch.compile(f)(x, z, w)
    assert p.last_report is not None and p.last_report.kernels_chosen == {"I_rms_gated_group_quant": 1}
    assert fp8_step_error(q, s, *f(x, z, w), 128) <= 1.25


def test_a_twin_keeps_the_graphs_own_chain():
    """Where Inductor's code wins, a native silu + group quant chain is kept as the graph wrote it: the
    twin's outputs are the graph's own nodes (nothing traced, nothing new in the chain, the user's own
    numerics). Beside it, a norm + quant in the eqsat vocabulary: its twin's chain is not in the graph,
    and is inlined from the reference."""
    from tests.test_lift import quant_native
    from tests.test_lift_act import silu_decomposed

    def f(x, h, w):
        q, s = quant_native(silu_decomposed(x), 128, 448.0, fp8=FN)
        return q, s, *own.group_fp8_quant(own.rms_norm(h, w, 1e-6), 128, FN)

    args = [rand(8, 1024), rand(8, 512, seed=1), rand(512, seed=2)]
    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(*args)
    kept = list(gm.graph.output_node().args[0][:2])
    before = {n for n in gm.graph.nodes}
    report = eqsat.optimize(gm, profile=inductor_wins(), sizes=4096, strict=True)
    assert report.kernels_chosen == {"I_silu_group_quant": 1, "I_rms_group_quant": 1}
    assert list(gm.graph.output_node().args[0][:2]) == kept  # the very nodes
    new = {str(n.target) for n in gm.graph.nodes if n not in before}
    assert "aten.rsqrt.default" in new and not any("silu" in t or "sigmoid" in t for t in new)
    gm.recompile()
    want = f(*args)
    got = gm(*args)
    assert torch.equal(got[0].float(), want[0].float()) and torch.equal(got[1], want[1])
