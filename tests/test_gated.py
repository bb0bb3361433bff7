"""vLLM pattern #7, gated rms_norm + reshape + fp8 group quant, done from shapes (``eqsat.kernels.families.gated``,
``rewrites/layout.py``): both head layouts, any eps, any G the kernel allows, the native chain and
``fla_rms_norm_gated``, and the group quant as the AITER op, the ``_C`` op under
``auto_functionalized`` (captured through torch.compile) and vLLM's native ATen chain. Every
canonical graph must end as the AITER fused kernel with numeric agreement within the rounding
contract; the exact rules are checked bit for bit; near misses must not become the kernel.
"""

from __future__ import annotations

import pytest
import torch

import eqsat
from benchmarks.graphs import models
from eqsat.library import reference as ref
from tests.conftest import BF16, rand, targets, trace
from tests.test_functionalized import Capture, compile_with
from tests.test_lift import QUANT_TOL_STEPS, quant_native
from tests.test_rules import FP8_TOL_STEPS, check, compare_outputs

vllm, C = torch.ops.vllm, torch.ops._C
FNUZ = torch.float8_e4m3fnuz
KERNEL = "K_rms_gated_fp8_group_quant"
FUSED = "vllm.rocm_aiter_fused_rms_gated_fp8_group_quant.default"
TESTED_RULES = {"reshape-noop-2d", "lift-rms-norm-gated", "lift-rms-norm-gated.match", "quant-group-of-reshape", "rms-norm-gated-rows",
                f"fuse-{KERNEL}", f"unlift-{KERNEL}", "lift-quant-group-e4m3fnuz-folded",
                "lift-quant-group-e4m3fnuz-folded.match"}
H, D = 8, 128


def gated_native(x, z, w, eps=1e-6, gemma=False):
    """vLLM's native RMSNormGated (norm_before_gate, silu gate) as post-grad graphs spell it (§4.5)."""
    x32, z32 = x.float(), z.float()
    w32 = 1 + w.float() if gemma else w.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w32
    return (y * (z32 / (1 + torch.exp(-z32)))).to(x.dtype)


def gated_fla(x, z, w, eps=1e-6):
    return vllm.fla_rms_norm_gated(x, z, w, eps, None, True, "swish")


def q_aiter(y, g):
    return vllm.rocm_aiter_group_fp8_quant(y, g)


def q_c(y, g):
    fmax = torch.finfo(FNUZ).max
    q = torch.empty(y.shape, dtype=FNUZ)
    s = torch.empty(y.shape[0], y.shape[1] // g, dtype=torch.float32)
    C.per_token_group_fp8_quant(y, q, s, g, 1e-10, -fmax, fmax, False, False, False)
    return q, s


NORMS = {"native": gated_native, "fla": gated_fla}
QUANTS = {"aiter": q_aiter, "native": lambda y, g: quant_native(y, g), "c": q_c}


def heads(t, d, layout):
    """The GDN output ``t`` [tokens, H * d] in a head layout: rows ``(N * H, d)`` or ``(N, H, d)``."""
    return t.reshape(-1, d) if layout == "flat" else t.reshape(-1, t.shape[1] // d, d)


def before(layout, norm, quant, *, d=D, g=128, eps=1e-6):
    def f(x, z, w):
        y = NORMS[norm](heads(x, d, layout), heads(z, d, layout), w, eps)
        return QUANTS[quant](y.reshape(-1, x.shape[1]), g)
    return f


def after(layout, *, d=D, g=128, eps=1e-6):
    def f(x, z, w):
        rows = [heads(t, d, "flat") for t in (x, z)]  # the views fold: both layouts end the same
        q, s = vllm.rocm_aiter_fused_rms_gated_fp8_group_quant(rows[0], w, None, rows[1], eps, True, "silu", g)
        return q.reshape(-1, x.shape[1]), s.reshape(-1, x.shape[1] // g)
    return f


def inputs(hd=H * D, d=D, dtype=BF16):
    return [rand(4, hd, dtype=dtype), rand(4, hd, dtype=dtype, seed=1), rand(d, dtype=dtype, seed=2)]


@pytest.mark.parametrize("layout", ["flat", "3d"])
@pytest.mark.parametrize("norm", ["native", "fla"])
@pytest.mark.parametrize("quant", ["aiter", "native"])
def test_canonical_graphs_fuse(layout, norm, quant):
    check(before(layout, norm, quant), after(layout), inputs(), numerics="rounding", fires=f"fuse-{KERNEL}",
          tol=QUANT_TOL_STEPS if quant == "native" else FP8_TOL_STEPS)


@pytest.mark.parametrize(("hd", "d", "g", "eps"), [(1024, 128, 64, 1e-5), (2048, 256, 128, 3e-4), (512, 64, 64, 1e-6)])
@pytest.mark.parametrize("layout", ["flat", "3d"])
def test_any_eps_and_group_the_kernel_takes(layout, hd, d, g, eps):
    """vLLM registers only D = G = 128 and eps in {1e-5, 1e-6}; the kernel takes any power-of-two G dividing D
    (the input's quant is AITER's op where it runs, G = 128, else vLLM's native QuantFP8)."""
    check(before(layout, "native", "aiter" if g == 128 else "native", d=d, g=g, eps=eps), after(layout, d=d, g=g, eps=eps), inputs(hd, d),
          numerics="rounding", group=g, fires=f"fuse-{KERNEL}", tol=QUANT_TOL_STEPS)


@pytest.mark.parametrize("layout", ["flat", "3d"])
@pytest.mark.parametrize("norm", ["native", "fla"])
def test_c_quant_under_auto_functionalized_fuses(layout, norm):
    x, z, w = inputs()
    torch._dynamo.mark_dynamic(z, 0)  # one token dim for x and z
    p = Capture(strict=True)
    got = compile_with(p, before(layout, norm, "c"), x, z, w)
    assert "auto_functionalized" in p.before and "auto_functionalized" not in p.after
    assert p.last_report.kernels_chosen == {KERNEL: 1}, p.after
    want = before(layout, norm, "c")(x, z, w)
    assert ref.fp8_step_error(got[0], got[1], want[0], want[1], 128) <= 1.25


def test_3d_view_of_rows_folds_back_to_the_rows():
    """Rows ``(T*H, D)`` made by an op (here a cat, H = 2; a GDN core kernel in a model) viewed as
    ``(T, H, D)``: the kernel reads the rows themselves, with no reshape to the rows' shape left
    behind (``reshape-noop-2d``: the layout rule's rows key spells that shape differently from the
    imported value's)."""
    def before_(x, z, w):
        y = gated_native(torch.cat([x, z]).reshape(-1, 2, D), torch.cat([z, x]).reshape(-1, 2, D), w)
        return q_aiter(y.reshape(-1, 2 * D), 128)

    def after_(x, z, w):
        q, s = vllm.rocm_aiter_fused_rms_gated_fp8_group_quant(torch.cat([x, z]), w, None, torch.cat([z, x]), 1e-6,
                                                               True, "silu", 128)
        return q.reshape(-1, 2 * D), s.reshape(-1, 2)

    check(before_, after_, [rand(4, D), rand(4, D, seed=1), rand(D, seed=2)], numerics="rounding",
          fires="reshape-noop-2d")


def test_unlift_gated_group_quant_shares_kernel():
    """The fused kernel already in the graph has its semantics: the unfused chain on the same rows
    becomes that kernel's outputs."""
    def before_(x, z, w):
        q1, s1 = vllm.rocm_aiter_fused_rms_gated_fp8_group_quant(x, w, None, z, 1e-6, True, "silu", 128)
        q2, s2 = q_aiter(gated_native(x, z, w), 128)
        return q1, s1, q2, s2

    def after_(x, z, w):
        q, s = vllm.rocm_aiter_fused_rms_gated_fp8_group_quant(x, w, None, z, 1e-6, True, "silu", 128)
        return q, s, q, s

    check(before_, after_, [rand(8, D), rand(8, D, seed=1), rand(D, seed=2)], numerics="rounding",
          fires=f"unlift-{KERNEL}")


def test_lift_rms_norm_gated():
    check(lambda x, z, w: gated_native(x, z, w, 2e-5), lambda x, z, w: gated_fla(x, z, w, 2e-5),
          [rand(32, 128), rand(32, 128, seed=1), rand(128, seed=2)], fires="lift-rms-norm-gated", standalone_lifts=True)


def test_quant_group_of_reshape_shares_one_quant():
    """The quant of the heads' rows is the quant of the tokens' rows, reshaped (bit-exact). Sharing two
    e-classes' kernel is a global choice: the exact ILP sees it, the greedy DAG extractor does not."""
    def f(x):
        return (*q_aiter(x.reshape(-1, 128), 128), *q_aiter(x, 128))

    def g(x):
        q, s = q_aiter(x, 128)
        return q.reshape(-1, 128), s.reshape(-1, 1), q, s

    check(f, g, [rand(4, 1024)], numerics="exact", fires="quant-group-of-reshape", extractor="ilp")


def test_rms_norm_gated_rows_is_exact():
    """Both sides of ``rms-norm-gated-rows`` bit-equal; the rule itself fires on every 3-D graph above."""
    x, z, w = (rand(5, H, D), rand(5, H, D, seed=1), rand(D, seed=2))
    rows = ref.rms_norm_gated(x.reshape(-1, D), z.reshape(-1, D), w, 1e-6).reshape(x.shape)
    assert torch.equal(ref.rms_norm_gated(x, z, w, 1e-6), rows)
    assert torch.equal(gated_native(x, z, w), rows) and torch.equal(gated_fla(x, z, w), rows)


def no_kernel(f, ins, *, unchanged: bool = False):
    gm = trace(f, *ins)
    code = gm.code
    report = eqsat.optimize(gm, strict=True)
    assert KERNEL not in report.kernels_chosen and FUSED not in targets(gm), gm.code
    assert not unchanged or gm.code == code
    fresh = [rand(5, *t.shape[1:], dtype=t.dtype, seed=11) if t.dim() >= 2 else t for t in ins]
    compare_outputs(gm(*fresh), trace(f, *ins)(*fresh), "rounding", QUANT_TOL_STEPS)  # a native quant may lift


@pytest.mark.parametrize("layout", ["flat", "3d"])
def test_group_not_dividing_head_dim_is_not_fused(layout):
    no_kernel(before(layout, "fla", "native", g=256), inputs())  # 256 divides H * D, not D: groups span heads


def test_group_not_a_power_of_two_is_not_fused():
    no_kernel(before("flat", "fla", "native", d=96, g=96), inputs(768, 96))


def test_mismatched_dtypes_gemma_weight_and_mutation_are_untouched():
    x, z, w = inputs()
    no_kernel(lambda x, z, w: q_aiter(gated_native(heads(x, D, "flat"), heads(z, D, "flat").half(), w)
                                      .reshape(-1, H * D), 128), [x, z, w], unchanged=True)
    no_kernel(lambda x, z, w: q_aiter(gated_native(heads(x, D, "flat"), heads(z, D, "flat"), w, gemma=True)
                                      .reshape(-1, H * D), 128), [x, z, w], unchanged=True)

    def mutated(x, z, w):
        y = gated_fla(heads(x, D, "flat"), heads(z, D, "flat"), w).reshape(-1, H * D)
        y.mul_(2)  # a mutation between the norm and the quant
        return q_aiter(y, 128)

    no_kernel(mutated, [x, z, w], unchanged=True)


def test_non_contiguous_heads_are_not_fused():
    def f(x, z, w):
        xt, zt = x.reshape(x.shape[0], D, H).transpose(1, 2), z.reshape(z.shape[0], D, H).transpose(1, 2)
        return q_aiter(gated_fla(xt, zt, w).reshape(-1, H * D), 128)

    no_kernel(f, inputs())


@pytest.mark.parametrize("layout", ["flat", "3d"])
def test_qwen3_next_benchmark_graph_fuses(layout):
    gm = models.qwen3_next_gated_norm(layout)
    report = eqsat.optimize(gm, profile="mi300x", sizes=256, strict=True)
    assert report.kernels_chosen == {KERNEL: 1} and report.predicted_after_us < report.predicted_before_us


def test_gated_rules_plan_as_one_bag():
    """egglog 13.2's decomposed-plan bug (``rewrites/lift.py``): these rules must plan as a single bag."""
    from eqsat.fx.importer import import_graph
    from eqsat.kernels.vocabularies import default_index
    from tests.test_lift import _plan

    gm = trace(before("3d", "native", "native"), *inputs())
    imported = import_graph(gm, eqsat.DEFAULT_CATALOG, default_index())
    names = ("lift-rms-norm-gated", "quant-group-of-reshape", "rms-norm-gated-rows", f"fuse-{KERNEL}")
    assert {n: _plan(n, imported) for n in names} == dict.fromkeys(names, "single")


@pytest.mark.parametrize("layout", ["flat", "3d"])
def test_native_quant_through_torch_compile_fuses(layout):
    """Inductor folds ``reshape(N, H*D) -> reshape(N, H, D)`` of the 3-D layout away, so the native
    quant's grouped view is the gated norm's output itself (``lift-quant-group-*-folded``)."""
    x, z, w = inputs()
    torch._dynamo.mark_dynamic(z, 0)
    p = Capture(strict=True)
    got = compile_with(p, before(layout, "native", "native"), x, z, w)
    assert p.last_report.kernels_chosen == {KERNEL: 1}, p.before
    if layout == "3d":
        assert p.last_report.rules_fired["lift-quant-group-e4m3fnuz-folded"] > 0
    want = before(layout, "native", "native")(x, z, w)
    assert ref.fp8_step_error(got[0], got[1], want[0], want[1], 128) <= 1.25
