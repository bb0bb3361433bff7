"""Rules of the MLA dual rms_norm family (vLLM #12-#14) and of add + rms_norm + pad (#11).

Each test is a before ≡ after pair: the optimized graph of ``before`` has exactly the ops of
``after``, and on fresh inputs (another token count) both match ``before`` run unoptimized. The
kernels are ``rounding`` rules (one rounding of the fp32 norm where vLLM-IR rounds twice), so bf16
outputs are compared with ``assert_close``'s bf16 tolerance, (q, scale) pairs within
``FP8_TOL_STEPS`` fp8 steps, and everything else (residuals, ``k_pe``) bit for bit.

Extraction is the exact ILP: greedy DAG extraction values each output class on its own, so it never
picks a multi-output kernel costlier than each output's own producer (the dual norm against either
norm; the pad kernel against the norm the router GEMM also reads), see ``test_greedy_*``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import eqsat
from eqsat.library.reference import fp8_step_error
from tests.conftest import FP8, assert_same_structure, rand, targets, trace
from tests.test_rules import FP8_TOL_STEPS

vllm, vir, own, aten = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat, torch.ops.aten
TOKENS = 8
Q, KV, PE = 1536, 512, 64  # DeepSeek-V3's q_lora_rank, kv_lora_rank, qk_rope_head_dim

TESTED_RULES = {
    "mla-latents", "fuse-K_mla_dual_rms_norm", "unlift-K_mla_dual_rms_norm", "fuse-K_mla_dual_rms_norm_group_quant",
    "unlift-K_mla_dual_rms_norm_group_quant", "fuse-K_mla_dual_rms_norm_per_token_quant",
    "unlift-K_mla_dual_rms_norm_per_token_quant", "pad-to-multiple", "pad-to-multiple-amount", "slice-of-pad",
    "fuse-K_add_rmsnorm_pad", "unlift-K_add_rmsnorm_pad",
}


def check_close(before, after, inputs, *, fires=(), quant: tuple[int, int, int] | None = None, atol: float = 1e-5,
                **options) -> eqsat.Report:
    """``tests.test_rules.check`` for these kernels; ``quant`` = (q index, scale index, group size)."""
    options = {"extractor": "ilp", **options}
    gm, after_gm, reference = trace(before, *inputs), trace(after, *inputs), trace(before, *inputs)
    report = eqsat.optimize(gm, emit="always", strict=True, **options)
    assert_same_structure(gm, after_gm)
    assert all(report.rules_fired.get(name, 0) > 0 for name in fires), report.rules_fired
    fresh = [rand(5, *t.shape[1:], dtype=t.dtype, seed=7 + i) if t.dim() >= 2 and t.shape[0] == TOKENS else t
             for i, t in enumerate(inputs)]
    want = reference(*fresh)
    for side in (gm, after_gm):
        got = side(*fresh)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if quant is not None and i in quant[:2]:
                continue
            if g.dtype in (torch.bfloat16, torch.float16):
                torch.testing.assert_close(g, w, atol=atol, rtol=1.6e-2)
            else:
                assert torch.equal(g, w)
        if quant is not None:
            qi, si, group = quant
            assert fp8_step_error(got[qi], got[si], want[qi], want[si], group) <= FP8_TOL_STEPS
    return report


def latents(p):
    q_c, kv_lora = p.split([Q, KV + PE], -1)
    kv_c, k_pe = kv_lora.split([KV, PE], -1)
    return q_c, kv_c, k_pe


MLA = [rand(TOKENS, Q + KV + PE), rand(Q, seed=1), rand(KV, seed=2)]


# -- #12: two norms, one launch ------------------------------------------------------------------

@pytest.mark.parametrize(("q_eps", "kv_eps"), [(1e-6, 1e-6), (1e-6, 1e-5), (3e-4, 1e-6)])
def test_fuse_mla_dual_rms_norm(q_eps, kv_eps):
    def before(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        return vir.rms_norm(q_c, qw, q_eps), vir.rms_norm(kv_c, kvw, kv_eps), k_pe

    def after(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        return (*vllm.fused_mla_dual_rms_norm(q_c, qw, kv_c, kvw, q_eps, kv_eps), k_pe)

    check_close(before, after, MLA, fires=("mla-latents", "fuse-K_mla_dual_rms_norm"))


def test_fuse_mla_dual_rms_norm_own_ops():
    def before(p, qw, kvw):
        q_c, kv_c, _ = latents(p)
        return own.rms_norm(q_c, qw, 1e-6), own.rms_norm(kv_c, kvw, 1e-5)

    def after(p, qw, kvw):
        q_c, kv_c, _ = latents(p)
        return own.mla_dual_rms_norm(q_c, qw, kv_c, kvw, 1e-6, 1e-5)

    check_close(before, after, MLA, fires=("fuse-K_mla_dual_rms_norm",))


def test_unlift_mla_dual_rms_norm_shares_kernel():
    def before(p, qw, kvw):
        q_c, kv_c, _ = latents(p)
        qn, kvn = vllm.fused_mla_dual_rms_norm(q_c, qw, kv_c, kvw, 1e-6, 1e-5)
        return qn, kvn, vir.rms_norm(q_c, qw, 1e-6)

    def after(p, qw, kvw):
        q_c, kv_c, _ = latents(p)
        qn, kvn = vllm.fused_mla_dual_rms_norm(q_c, qw, kv_c, kvw, 1e-6, 1e-5)
        return qn, kvn, qn

    check_close(before, after, MLA, fires=("unlift-K_mla_dual_rms_norm",))


# -- #14 / #13: the q side quantized, arriving unfused or already fused --------------------------

def _q_group(q_c, qw, eps, fused):
    if fused:
        return vllm.rocm_aiter_rmsnorm_fp8_group_quant(q_c, qw, eps, 128)
    return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(q_c, qw, eps), 128)


def _q_token(q_c, qw, eps, fused):
    if fused:
        return vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(q_c, qw, eps, FP8)
    return vllm.rocm_aiter_per_token_quant(vir.rms_norm(q_c, qw, eps), FP8)


@pytest.mark.parametrize("fused", [False, True], ids=["q-unfused", "q-fused"])
def test_fuse_mla_dual_rms_norm_group_quant(fused):
    def before(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        return (*_q_group(q_c, qw, 1e-6, fused), vir.rms_norm(kv_c, kvw, 1e-5), k_pe)

    def after(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        return (*vllm.fused_mla_dual_rms_norm_group_quant(q_c, qw, kv_c, kvw, 1e-6, 1e-5, 128, False), k_pe)

    fires = ("fuse-K_mla_dual_rms_norm_group_quant", *(("unlift-K_rmsnorm_fp8_group_quant",) if fused else ()))
    check_close(before, after, MLA, fires=fires, quant=(0, 1, 128))


@pytest.mark.parametrize("fused", [False, True], ids=["q-unfused", "q-fused"])
def test_fuse_mla_dual_rms_norm_per_token_quant(fused):
    def before(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        return (*_q_token(q_c, qw, 1e-6, fused), vir.rms_norm(kv_c, kvw, 1e-6), k_pe)

    def after(p, qw, kvw):
        q_c, kv_c, k_pe = latents(p)
        return (*vllm.fused_mla_dual_rms_norm_per_token_quant(q_c, qw, kv_c, kvw, 1e-6, 1e-6), k_pe)

    fires = ("fuse-K_mla_dual_rms_norm_per_token_quant",
             *(("unlift-K_rmsnorm_fused_dynamic_quant",) if fused else ()))
    check_close(before, after, MLA, fires=fires, quant=(0, 1, Q))


@pytest.mark.parametrize(("kernel", "quant"), [
    ("group_quant", lambda q_c, qw, kv_c, kvw: vllm.fused_mla_dual_rms_norm_group_quant(
        q_c, qw, kv_c, kvw, 1e-6, 1e-5, 128, False)),
    ("per_token_quant", lambda q_c, qw, kv_c, kvw: vllm.fused_mla_dual_rms_norm_per_token_quant(
        q_c, qw, kv_c, kvw, 1e-6, 1e-5)),
])
def test_unlift_mla_dual_quant_shares_kernel(kernel, quant):
    """The fused kernel in the graph serves an unfused twin of its kv norm."""
    def before(p, qw, kvw):
        q_c, kv_c, _ = latents(p)
        q8, s, kvn = quant(q_c, qw, kv_c, kvw)
        return q8, s, kvn, vir.rms_norm(kv_c, kvw, 1e-5)

    def after(p, qw, kvw):
        q_c, kv_c, _ = latents(p)
        q8, s, kvn = quant(q_c, qw, kv_c, kvw)
        return q8, s, kvn, kvn

    check_close(before, after, MLA, fires=(f"unlift-K_mla_dual_rms_norm_{kernel}",))


def test_mla_pairs_only_latents_of_one_projection():
    """A q latent normed next to a slice of another tensor, or the kv latent of another projection,
    is not a pair: the dual kernel would read rows of two different tensors."""
    def before(p, qw, kvw, other):
        q_c, kv_c, _ = latents(p)
        _, other_kv, _ = latents(other)
        return vir.rms_norm(q_c, qw, 1e-6), vir.rms_norm(other[:, :KV], kvw, 1e-6), vir.rms_norm(other_kv, kvw, 1e-6)

    gm = trace(before, *MLA, rand(TOKENS, Q + KV + PE, seed=5))
    report = eqsat.optimize(gm, strict=True, emit="always", extractor="ilp")
    assert not report.rules_fired.get("fuse-K_mla_dual_rms_norm"), report.rules_fired
    assert "vllm.fused_mla_dual_rms_norm.default" not in targets(gm)


# -- #11: add + rms_norm + pad, the router GEMM reading the unpadded norm --------------------------

def _pad_inputs(n: int) -> list[torch.Tensor]:
    router_w = rand(32, n, seed=3) / n ** 0.5
    return [rand(TOKENS, n), rand(TOKENS, n, seed=1), rand(n, seed=2), router_w, rand(32, seed=4)]


@pytest.mark.parametrize(("n", "mult"), [(2880, 128), (2880, 256), (4096 + 64, 128), (4096 + 64, 256), (200, 256)])
def test_fuse_add_rmsnorm_pad(n, mult):
    """gpt-oss's 2880 on gfx942 (128) and gfx950 (256), and hidden sizes vLLM's pattern never sees, on
    the H200's measured lines at M = 1 (at M = 4096, and on a profile's defaults, the router GEMM's copy
    of the kernel's strided slice costs what the kernel saves: the copy's line in a graph compiled for
    every size is its slower autotuned config). The kernel is written with the padded width as its
    multiple: the graph's pad amount fixes that width, not which multiple vLLM meant by it."""
    pad = -n % mult

    def before(x, r, w, rw, rb):
        normed, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return torch.nn.functional.pad(normed, (0, pad)), res, vllm.rocm_unquantized_gemm(normed, rw, rb)

    def after(x, r, w, rw, rb):
        padded, res = vllm.rocm_aiter_triton_add_rmsnorm_pad(x, w, 1e-5, r, n + pad)
        return padded, res, vllm.rocm_unquantized_gemm(aten.slice.Tensor(padded, -1, 0, n), rw, rb)

    check_close(before, after, _pad_inputs(n), atol=2e-2, profile="h200", sizes=1,
                fires=("pad-to-multiple", "slice-of-pad", "fuse-K_add_rmsnorm_pad"))


def test_a_traced_pad_keeps_the_token_dim_symbolic():
    """constant_pad_nd's C++ meta kernel reads sizes as ints: traced without the Python dispatcher it
    specialized the token symbol to the example's 8, and every pad test ran on a static graph."""
    gm = trace(lambda x: torch.nn.functional.pad(x, (0, 64)), rand(TOKENS, 2880))
    (pad,) = [n for n in gm.graph.nodes if n.target is aten.constant_pad_nd.default]
    tokens = pad.meta["val"].shape[0]
    assert isinstance(tokens, torch.SymInt) and not isinstance(tokens.node.expr, int) and not tokens.node.expr.is_number


def test_fuse_add_rmsnorm_pad_own_ops():
    def before(x, r, w):
        normed, res = own.fused_add_rms_norm(x, r, w, 1e-6)
        return torch.nn.functional.pad(normed, (0, 64)), res

    def after(x, r, w):
        return own.add_rmsnorm_pad(x, r, w, 1e-6, 2880 + 64)

    check_close(before, after, _pad_inputs(2880)[:3], fires=("fuse-K_add_rmsnorm_pad",))


def test_unlift_add_rmsnorm_pad_shares_kernel():
    """The kernel in the graph (mult 256) is the ATen pad by 192 of its norm: the twin pad goes."""
    def before(x, r, w):
        padded, res = vllm.rocm_aiter_triton_add_rmsnorm_pad(x, w, 1e-5, r, 256)
        normed, _ = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return padded, res, torch.nn.functional.pad(normed, (0, 192))

    def after(x, r, w):
        padded, res = vllm.rocm_aiter_triton_add_rmsnorm_pad(x, w, 1e-5, r, 256)
        return padded, res, padded

    check_close(before, after, _pad_inputs(2880)[:3], fires=("unlift-K_add_rmsnorm_pad", "pad-to-multiple-amount"))


@pytest.mark.parametrize("pad", [
    lambda t: torch.nn.functional.pad(t, (64, 0)),  # on the left
    lambda t: torch.nn.functional.pad(t, (0, 64), value=1.0),  # not with zeros
    lambda t: torch.nn.functional.pad(t, (0, 0, 0, 64)),  # another dim
], ids=["left", "nonzero", "rows"])
def test_pad_that_is_not_a_right_zero_pad_is_left_alone(pad):
    def before(x, r, w):
        normed, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return pad(normed), res

    gm = trace(before, *_pad_inputs(2880)[:3])
    code = gm.code
    report = eqsat.optimize(gm, strict=True, extractor="ilp")
    assert not report.rules_fired.get("fuse-K_add_rmsnorm_pad") and gm.code == code


def test_pad_of_a_norm_without_residual_is_left_alone():
    """vLLM's kernel op takes a residual: a plain rms_norm + pad has no fused form here."""
    def before(x, w):
        return torch.nn.functional.pad(vir.rms_norm(x, w, 1e-5), (0, 64))

    gm = trace(before, rand(TOKENS, 2880), rand(2880))
    code = gm.code
    eqsat.optimize(gm, strict=True, extractor="ilp")
    assert gm.code == code


# -- extraction, rule order, query plans -----------------------------------------------------------

def _mla_group(p, qw, kvw):
    q_c, kv_c, k_pe = latents(p)
    return (*_q_group(q_c, qw, 1e-6, False), vir.rms_norm(kv_c, kvw, 1e-5), k_pe)


def _pad_router(x, r, w, rw, rb):
    """The router as ATen's GEMM (any layout): vLLM's custom-op GEMM would copy the kernel's strided
    slice, which on the default profile's lines costs what the kernel saves."""
    normed, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
    return torch.nn.functional.pad(normed, (0, 64)), res, normed @ rw.t() + rb


@pytest.mark.parametrize(("f", "inputs", "kernel"), [
    (_mla_group, MLA, "vllm.fused_mla_dual_rms_norm_group_quant.default"),
    (_pad_router, _pad_inputs(2880), "vllm.rocm_aiter_triton_add_rmsnorm_pad.default"),
], ids=["mla", "pad"])
def test_shuffled_rule_orders_extract_the_same_graph(f, inputs, kernel):
    baseline = trace(f, *inputs)
    eqsat.optimize(baseline, strict=True, extractor="ilp")
    assert kernel in targets(baseline)
    rules = eqsat.Options().active_rules()
    for order in (tuple(reversed(rules)), tuple(random.Random(1).sample(rules, len(rules)))):
        gm = trace(f, *inputs)
        eqsat.optimize(gm, strict=True, extractor="ilp", rules=order)
        assert gm.code == baseline.code


@pytest.mark.parametrize(("f", "inputs", "kernel"), [
    (_mla_group, MLA, "vllm.fused_mla_dual_rms_norm_group_quant.default"),
    (_pad_router, _pad_inputs(2880), "vllm.rocm_aiter_triton_add_rmsnorm_pad.default"),
], ids=["mla", "pad"])
def test_greedy_extraction_picks_the_multi_output_kernel(f, inputs, kernel):
    greedy, ilp = trace(f, *inputs), trace(f, *inputs)
    eqsat.optimize(greedy, strict=True)
    eqsat.optimize(ilp, strict=True, extractor="ilp")
    assert kernel in targets(ilp)
    assert targets(greedy) == targets(ilp)


def test_fuse_rules_plan_as_one_bag():
    """egglog 13.2 joins the bags of a decomposed query plan unsoundly (``rewrites/lift.py``): every
    rule of these families must plan as one bag on a graph where they all match."""
    from tests.test_lift import _plan

    def every(p, qw, kvw, x, r, w, rw, rb):
        q_c, kv_c, _ = latents(p)
        return (*_q_group(q_c, qw, 1e-6, False), *_q_token(q_c, qw, 1e-6, True), vir.rms_norm(kv_c, kvw, 1e-5),
                *vllm.fused_mla_dual_rms_norm(q_c, qw, kv_c, kvw, 1e-6, 1e-5),
                *vllm.fused_mla_dual_rms_norm_group_quant(q_c, qw, kv_c, kvw, 1e-6, 1e-5, 128, False),
                *vllm.fused_mla_dual_rms_norm_per_token_quant(q_c, qw, kv_c, kvw, 1e-6, 1e-5),
                *_pad_router(x, r, w, rw, rb), *vllm.rocm_aiter_triton_add_rmsnorm_pad(x, w, 1e-5, r, 256))

    from eqsat.fx.importer import import_graph
    from eqsat.kernels.vocabularies import default_index
    imported = import_graph(trace(every, *MLA, *_pad_inputs(2880)), eqsat.DEFAULT_CATALOG, default_index())
    plans = {name: _plan(name, imported) for name in TESTED_RULES}
    assert all(p == "single" for p in plans.values()), plans


@pytest.mark.parametrize(("m", "line"), [(1, "copy"), (TOKENS, "copy"), (TOKENS + 1, "copy@dynamic")])
def test_a_custom_op_reading_the_padded_kernels_slice_pays_its_copy(m, line):
    """The router GEMM a vLLM op (Inductor hands a custom op its inputs with their traced strides) reads
    the kernel's padded output sliced back to 2880 columns: Inductor copies the strided slice
    contiguous first, so the predicted saving is the copy less than with ATen's GEMM (any layout) reading
    it. The traced token dim is symbolic, first run at M = TOKENS (its hint): up to it the copy runs as
    compiled per size (its static line), past it at the config picked for TOKENS (its dynamic line)."""
    from eqsat.core.spec import Traffic
    from eqsat.cost.roofline import load_profile

    def saving(gemm) -> float:  # noqa: ANN001
        def f(x, r, w, rw, rb):
            normed, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
            return torch.nn.functional.pad(normed, (0, 64)), res, gemm(normed, rw, rb)

        report = eqsat.optimize(trace(f, *_pad_inputs(2880)), strict=True, profile="h200", sizes=m,
                                emit="always")
        assert report.kernels_chosen["K_add_rmsnorm_pad"] == 1, report.table()
        return report.predicted_before_us - report.predicted_after_us

    nbytes = m * 2880 * 2
    copy = load_profile("h200").time_us(Traffic(nbytes, nbytes, 1), line)
    aten_gemm = saving(lambda h, rw, rb: h @ rw.t() + rb)
    assert aten_gemm - saving(vllm.rocm_unquantized_gemm) == pytest.approx(copy, rel=1e-6)


def test_a_slice_of_one_row_is_read_without_a_copy():
    """In the graph Inductor compiles for M = 1 alone (the token dim a static 1) the kernel's padded output
    sliced back to 2880 columns is one row, contiguous as it is: Inductor hands it to the vLLM-op GEMM
    without a copy, so that GEMM saves what ATen's does (gpt-oss in vLLM's ops on the H100 at M = 1 saved
    1.3 µs where the copy, priced, left 0.08). With the token dim symbolic, bound to 1, the copy stays:
    one kernel for every size copies."""
    from torch.fx.experimental.proxy_tensor import make_fx

    one_row = [rand(1, 2880), rand(1, 2880, seed=1), rand(2880, seed=2), rand(32, 2880, seed=3) / 2880 ** 0.5,
               rand(32, seed=4)]

    def saving(gemm, symbolic: bool) -> float:  # noqa: ANN001
        def f(x, r, w, rw, rb):
            normed, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
            return torch.nn.functional.pad(normed, (0, 64)), res, gemm(normed, rw, rb)

        gm = trace(f, *_pad_inputs(2880)) if symbolic else make_fx(f, tracing_mode="fake")(*one_row)
        report = eqsat.optimize(gm, strict=True, profile="h200", sizes=1, emit="always")
        assert report.kernels_chosen["K_add_rmsnorm_pad"] == 1, report.table()
        return report.predicted_before_us - report.predicted_after_us

    def aten_gemm(h, rw, rb):  # noqa: ANN001, ANN202
        return h @ rw.t() + rb

    assert saving(vllm.rocm_unquantized_gemm, False) == pytest.approx(saving(aten_gemm, False), rel=1e-9)
    assert saving(vllm.rocm_unquantized_gemm, True) < saving(aten_gemm, True) - 0.5


def test_a_copy_added_to_a_graph_compiled_for_every_size_is_priced_at_its_slow_config(tmp_path):
    """In a graph with a symbolic token dim Inductor autotunes the copy's config at the first run's size, and
    at M = 4096 it lands at 29 or 57 µs (``probe_block_kernels_gptoss_vllm_spread_h200.log``): the h200
    profile prices it by ``copy@dynamic``, the slower draw. vLLM's gpt-oss norm + pad compiled for every M,
    at M = 4096: the fused kernel stands in for Inductor's pad while the router GEMM keeps reading AITER's
    add + norm (no copy); priced by the static copy line, the router reads the kernel's slice through the
    copy instead. At M = 1 both read the slice."""
    import dataclasses

    from benchmarks.graphs import models
    from eqsat.cost.roofline import COPY_KEY, DYNAMIC, load_profile

    models.register_ops()
    h200 = load_profile("h200")
    assert h200.line(COPY_KEY + DYNAMIC).bandwidth_gbps < h200.line(COPY_KEY).bandwidth_gbps / 1.5
    static_only = tmp_path / "h200_static_copy.json"
    static_only.write_text(dataclasses.replace(
        h200, kernels={k: v for k, v in h200.kernels.items() if k != COPY_KEY + DYNAMIC}).to_json())

    def written(profile: str, m: int) -> set[str]:
        gm = models.GRAPHS["gpt-oss router + pad"]()
        report = eqsat.optimize(gm, strict=True, profile=profile, sizes=m)
        assert report.kernels_chosen["K_add_rmsnorm_pad"] == 1, report.table()
        return set(targets(gm))

    slice_path, kept_norm = {"aten.slice.Tensor"}, {"vllm_ir.fused_add_rms_norm.default"}
    for profile in ("h200", str(static_only)):
        got = written(profile, 1)
        assert slice_path <= got and not kept_norm & got
    got = written("h200", 4096)
    assert kept_norm <= got and not slice_path & got
    got = written(str(static_only), 4096)
    assert slice_path <= got and not kept_norm & got


def test_a_graph_compiled_for_every_size_is_left_alone_where_it_would_lose_at_one():
    """The graph torch.compile handed the pass for gpt-oss's block in vLLM's ops on the H200 (token dim
    symbolic, M = 2 … 8192 run it; ``benchmarks/fixtures/e2e_graphs_h200``): weighed over the range a
    rewrite is cheaper, but at M = 1 it is slower, so the graph is left alone and the report says where.
    The M = 1 graph Inductor compiles on its own is rewritten."""
    from eqsat import graphfile

    sizes = (1, 8, 64, 256, 1024, 4096, 8192)
    fixtures = Path(__file__).parents[1] / "benchmarks" / "fixtures" / "e2e_graphs_h200"
    weighed = eqsat.optimize(graphfile.load(fixtures / "gptoss_vllm.M8.json"), profile="h200", sizes=sizes,
                             emit="always")
    assert weighed.predicted_after_us < weighed.predicted_before_us
    report = eqsat.optimize(graphfile.load(fixtures / "gptoss_vllm.M8.json"), profile="h200", sizes=sizes)
    assert not report.changed and report.declined.startswith("predicted slower at size 1 "), report.summary()
    static = eqsat.optimize(graphfile.load(fixtures / "gptoss_vllm.M1.json"), profile="h200", sizes=sizes)
    assert static.changed and static.kernels_chosen["K_add_rmsnorm_pad"] == 1


def test_native_pad_chain_is_priced_as_inductors_code_for_it():
    """gpt-oss as written natively (fp32 add + HF norm, F.pad, the router GEMM reading the unpadded norm)
    on the H200: the "before" the kernel must beat is Inductor's code for the chain (the calibrated
    ``I_add_rms_pad``, reached through the ``Slice`` the router reads), not one kernel per ATen op, so
    the predicted saving is the measured kernel's against Inductor's dynamic code (the graph's token dim
    is symbolic: 1.1x the region at M = 1, up to the chain's measured 3.0x at M = 4096), and the kernel is
    still chosen."""
    from tests.test_lift import add_rms_native

    def f(x, r, w, rw, rb):
        normed, res = add_rms_native(x, r, w, 1e-5)
        return torch.nn.functional.pad(normed, (0, 64)), res, normed @ rw.t() + rb

    for m in (1, 4096):
        gm = trace(f, *_pad_inputs(2880))
        report = eqsat.optimize(gm, strict=True, profile="h200", sizes=m)
        assert report.kernels_chosen["K_add_rmsnorm_pad"] == 1, report.table()
        assert 1.05 < report.predicted_before_us / report.predicted_after_us < 3.1, report.table()


def test_a_dynamic_graph_prices_inductors_chain_by_its_dynamic_line():
    """Inductor's code for gpt-oss's add + norm + pad compiled once for every M and first run at M = 8 runs
    2x slower at M = 8192 than compiled for that M; first run at M = 1024 or 8192 it runs as compiled per M
    (``probe_dynamic_twin.py --hints 8 1024 8192``): a graph with a symbolic token dim prices the twin by
    ``inductor:add_rms_pad@dynamic`` at sizes past its hint, a static graph and a dynamic one at sizes up to
    its hint (vLLM's first run is at its largest size) by the per-M line, and a profile without the dynamic
    line prices all alike."""
    import dataclasses

    from torch.fx.experimental.proxy_tensor import make_fx

    from eqsat.cost.roofline import DYNAMIC, load_profile
    from tests.test_lift import add_rms_native

    def f(x, r, w):
        normed, res = add_rms_native(x, r, w, 1e-5)
        return torch.nn.functional.pad(normed, (0, 64)), res

    def before(gm, profile) -> float:  # noqa: ANN001
        return eqsat.optimize(gm, strict=True, profile=profile, sizes=8192, recompile=False).predicted_before_us

    h200 = load_profile("h200")
    assert "inductor:add_rms_pad" + DYNAMIC in h200.kernels
    per_m = dataclasses.replace(h200, kernels={k: v for k, v in h200.kernels.items() if not k.endswith(DYNAMIC)})
    m = 8192
    x, r, w = rand(m, 2880), rand(m, 2880, seed=3), rand(2880, seed=1)
    dynamic, static = before(trace(f, *_pad_inputs(2880)[:3]), h200), before(make_fx(f, tracing_mode="fake")(x, r, w), h200)
    assert dynamic > 1.5 * static
    assert before(trace(f, *_pad_inputs(2880)[:3]), per_m) == pytest.approx(static, rel=1e-6)
    first_at_largest = trace(f, x, r, w)  # the token symbol's hint is 8192
    assert before(first_at_largest, h200) == pytest.approx(static, rel=1e-6)


def test_inductors_kernels_take_their_dynamic_line_only_past_the_hints():
    """The pad (a catalog row keyed as its ATen op), a generic ATen op and the copy of a strided slice are
    Inductor's kernels: in a graph whose token dim was first run at M = 8 they are priced by their per-size
    lines up to 8 and by their ``@dynamic`` lines past it; without hints, at every size past them."""
    from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
    from eqsat.cost.roofline import DYNAMIC, RooflineCost, load_profile
    from eqsat.options import Options

    row, wide = TensorFacts("bfloat16", ("s0", 2880)), TensorFacts("bfloat16", ("s0", 3072))
    pad, exp = ENode("PadLast", (Ref(0), 192), 1), ENode("A1", ("aten.exp.default", Ref(0)), 2)
    eg = EGraph.from_nodes([ENode("Leaf", (0,), 0), pad, exp], [1, 2], {0: row, 1: wide, 2: row})
    h200 = load_profile("h200")
    assert h200.line("aten:aten.constant_pad_nd.default" + DYNAMIC) != h200.line("aten:aten.constant_pad_nd.default")

    def keys(hints, m: int) -> list[str]:  # noqa: ANN001
        cost = RooflineCost(eg, Options().catalog, h200, m, hints=hints)
        return [cost.traffic(n, m)[1] for n in (pad, exp)]  # type: ignore[index]

    assert keys({"s0": 8}, 8) == ["aten:aten.constant_pad_nd.default", "aten:aten.exp.default"]
    assert keys({"s0": 8}, 9) == ["aten:aten.constant_pad_nd.default@dynamic", "aten:aten.exp.default@dynamic"]
    assert keys(None, 8) == keys({"other": 8192}, 8) == keys({"s0": 8}, 9)
