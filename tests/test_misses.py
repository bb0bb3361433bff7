"""Cases vLLM's hand-written passes silently miss: decided by cost here, or correctly left alone."""

from __future__ import annotations

import torch

import eqsat
from eqsat.library.reference import fp8_step_error
from eqsat.tools.explain import explain
from tests.conftest import rand, scaled_gemm, targets, trace

own = torch.ops.eqsat
FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz


def test_third_bf16_consumer_is_decided_by_cost():
    """rms_norm feeding two quants and a bf16 user: vLLM's Double pattern needs exactly two consumers.
    Here the fused kernels are stated and costed: with the bf16 norm written anyway for its third user,
    a fused kernel would read x where the quant reads y, the same bytes, so the graph stays (explain
    lists both sites as not chosen); without the third user the same quants fuse."""
    def quants(x, w):
        y = own.rms_norm(x, w, 1e-6)
        return y, (*own.group_fp8_quant(y, 128, FN), *own.group_fp8_quant(y, 64, FN))

    def f(x, w):
        y, qs = quants(x, w)
        return (*qs, y * 2)

    x, w = rand(8, 512), rand(512)
    for sizes in (1, 4096):
        gm = trace(f, x, w)
        ref = gm(rand(5, 512, seed=9), w)
        report = eqsat.optimize(gm, strict=True, profile="h200", sizes=sizes)
        assert report.rules_fired["fuse-K_rmsnorm_fp8_group_quant"] == 2  # both alternatives were there
        assert not report.changed and "K_rmsnorm_fp8_group_quant" not in report.kernels_chosen, report.table()
        got = gm(rand(5, 512, seed=9), w)
        assert torch.equal(got[4], ref[4])  # the bf16 user still sees the rounded norm
        assert fp8_step_error(got[0], got[1], ref[0], ref[1], 128) <= 1.25
        assert fp8_step_error(got[2], got[3], ref[2], ref[3], 64) <= 1.25
        assert "eqsat.rms_norm.default" in targets(gm)
        sites = [s for s in explain(trace(f, x, w), profile="h200", sizes=sizes)
                 if s.kernel == "K_rmsnorm_fp8_group_quant"]
        # explain prices each site alone (the norm's cost counts against it, though its third user needs it)
        assert len(sites) == 2 and all(s.status == "not chosen" and s.kernel_us and s.chosen_us for s in sites)
        two = trace(lambda x, w: quants(x, w)[1], x, w)
        assert eqsat.optimize(two, strict=True, profile="h200", sizes=sizes).kernels_chosen


def test_fnuz_and_fn_quants_are_never_merged():
    """A fused kernel already quantizing to e4m3fnuz does not stand in for an e4m3fn quant."""
    def f(x, w):
        q1, s1 = own.rmsnorm_fp8_group_quant(x, w, 1e-6, 128, FNUZ)
        q2, s2 = own.group_fp8_quant(own.rms_norm(x, w, 1e-6), 128, FN)
        return q1, s1, q2, s2

    gm = trace(f, rand(8, 512), rand(512))
    eqsat.optimize(gm, strict=True)
    out = gm(rand(5, 512, seed=3), rand(512))
    assert out[0].dtype == FNUZ and out[2].dtype == FN
    kernels = [n for n in gm.graph.nodes if n.target is own.rmsnorm_fp8_group_quant.default]
    assert {n.args[4] for n in kernels} <= {FNUZ, FN} and len(kernels) in (1, 2)
    assert any(n.args[4] == FNUZ for n in kernels)


def test_a_native_graph_is_left_alone_when_the_saving_is_within_the_cost_models_error():
    """HF's norm + vLLM's native e4m3fn group quant on the h200 profile: where the fused kernel is priced
    just below Inductor's code for the chain (its twin) the saving is inside the native-graph margin and
    the graph stays, the report saying why; priced well below, it is written."""
    from dataclasses import replace

    from eqsat.cost.roofline import KernelTiming, load_profile
    from eqsat.decision import NATIVE_MARGIN, NATIVE_MARGIN_US
    from tests.test_lift import quant_native, rms_native

    def f(x, w):
        return scaled_gemm(*quant_native(rms_native(x.float(), w, 1e-6), 128, fmax=448.0, fp8=FN))

    base = load_profile("h200")
    twin = KernelTiming(launch_us=1.0, bandwidth_gbps=4000.0)  # a GEMM reads the quant: three launches, 3 us, bytes
    for kernel_us, written in ((2.9, False), (0.5, True)):
        kernels = {**base.kernels, "inductor:rms_group_quant": twin,
                   "rms_group_quant": KernelTiming(launch_us=kernel_us, bandwidth_gbps=4000.0)}
        gm = trace(f, rand(8, 512), rand(512))
        before = targets(gm)
        report = eqsat.optimize(gm, strict=True, profile=replace(base, kernels=kernels), sizes=8)
        assert report.changed is written, report.table()
        if written:
            assert report.kernels_chosen["K_rmsnorm_fp8_group_quant"] == 1 and not report.declined
        else:
            assert targets(gm) == before
            margin = max(NATIVE_MARGIN_US, NATIVE_MARGIN * report.predicted_before_us)
            assert "below the native graph's margin" in report.declined and f"{margin:.2f} us" in report.declined
            assert "left alone" in report.summary()
