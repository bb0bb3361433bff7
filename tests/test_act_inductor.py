"""Rules of the silu_and_mul family and of the "leave it to Inductor" rows: before ≡ after + numerics."""

from __future__ import annotations

from dataclasses import replace

import torch

import eqsat
from eqsat.cost.roofline import KernelTiming, load_profile
from eqsat.library import reference as ref
from eqsat.library.reference import fp8_step_error
from tests.conftest import rand
from tests.test_rules import check

vllm, vir, own = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat
FN = torch.float8_e4m3fn

TESTED_RULES = {"fuse-K_silu_mul_fp8_group_quant", "unlift-K_silu_mul_fp8_group_quant", "fuse-I_rms_group_quant",
                "fuse-I_add_rms_group_quant", "fuse-I_silu_group_quant", "fuse-I_rms_gated_group_quant"}


def inductor_wins():
    """An H200 profile on which Inductor's chain kernels are far cheaper than anything else."""
    base = load_profile("h200")
    fast = KernelTiming(launch_us=0.1, bandwidth_gbps=1e5)
    return replace(base, kernels={**base.kernels, **{k: fast for k in (
        "inductor:rms_group_quant", "inductor:add_rms_group_quant", "inductor:silu_group_quant",
        "inductor:rms_gated_group_quant")}})


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
