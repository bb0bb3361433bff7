"""Smoke test of the pass-time benchmark: model graphs build, eqsat fuses what it should, and the
pattern-matcher baseline registers what vLLM registers, each of its patterns fires on the graph it
targets (and only with its eps / pad multiple) and computes what it replaces, and eqsat fuses
every site it fuses."""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.fx as fx
from torch._inductor.fx_passes.post_grad import view_to_reshape

import eqsat
from benchmarks.baseline.pattern_matcher import PATTERNS, PatternMatcherBaseline
from benchmarks.graphs import models
from benchmarks.sites import fused, fused_op, fusion_sites
from eqsat.fx.capture import copy_graph, trace_tokens

OPTIONS = eqsat.Options(profile="mi300x", sizes=256, strict=True)
EPS = 1e-6


@pytest.fixture(scope="module")
def graphs():
    return {"layer": models.deepseek_v3(1), "indexer": models.deepseek_v32_indexer()}


@pytest.fixture(scope="module")
def baseline():
    start = time.perf_counter()
    pm = PatternMatcherBaseline(patterns=("add_rms_group", "rms_group", "double", "silu", "mla_dual_group"),
                                epsilons=(EPS,))
    assert pm.registrations == 5
    assert time.perf_counter() - start < 10, "5 registrations should take well under a second"
    return pm


@pytest.fixture(scope="module")
def full_baseline():
    return PatternMatcherBaseline()


def test_the_baseline_registers_what_vllm_registers_on_mi300(full_baseline):
    # vllm-facts §7: pad 2 eps x 2 multiples; the AITER rms + quant pass 20 on an MI300 with
    # quant_fp8 enabled, + 2 for one GDN shape with head_dim 128; silu 1; MLA 2 eps x 3
    assert full_baseline.registrations == 4 + 22 + 1 + 6 == 33
    names = [(p.name, args) for _, p, args in full_baseline.registered]
    assert names[:4] == [("pad", (128, 1e-5)), ("pad", (256, 1e-5)), ("pad", (128, 1e-6)), ("pad", (256, 1e-6))]
    per_eps = ["double", "double_view", "rms_group", "add_rms_group", "rms_static", "add_rms_static",  # §1.3
               "rms_token", "add_rms_token", "rms_token_c", "add_rms_token_c", "gated"]
    assert [n for n, _ in names[4:26]] == per_eps * 2
    assert names[14] == ("gated", (32, 128, 1e-5))  # 32 v-heads / TP 1
    assert names[26] == ("silu", ())
    assert [n for n, _ in names[27:]] == ["mla_dual", "mla_dual_token", "mla_dual_group"] * 2
    assert set(PATTERNS) == {n for n, _ in names}
    assert PatternMatcherBaseline(patterns=["gated"], gated_shapes=[(8, 64), (16, 128)]).registrations == 2
    with pytest.raises(ValueError, match="unknown patterns"):
        PatternMatcherBaseline(patterns=["rms"])


def test_graphs_are_what_torch_compile_hands_a_post_grad_pass():
    """Captured through torch.compile(dynamic=True): a token symbol, then f's arguments by name (an
    unused one left out), the token dim the only symbolic dim, eps a constant, mutated scales
    functionalized and copied back."""
    gm = models.llama_fp8_per_token()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.name for n in placeholders] == ["tokens", "x", "residual", "w_in", "w_qkv", "w_o", "w_post", "w_gu",
                                              "w_down"]  # the per-token quant reads no static scale
    assert isinstance(placeholders[0].meta["val"], torch.SymInt)
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and v.dim() == 2 and n.name not in ("w_qkv", "w_o", "w_gu", "w_down"):
            assert isinstance(v.shape[0], torch.SymInt) and isinstance(v.shape[1], int), n.name
    norms = [n for n in gm.graph.nodes if n.target is torch.ops.vllm_ir.fused_add_rms_norm.default]
    assert [n.args[3] for n in norms] == [1e-5, 1e-5]
    static = models.llama_fp8_static()
    assert "auto_functionalized" in static.code and "copy_" in static.code
    gated = models.qwen3_next_gated_norm()
    assert not any(isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dim() == 0
                   for n in gated.graph.nodes if n.op == "placeholder")  # eps is no lifted 0-d input


def test_61_layers_build_fast_and_chain_the_residual_stream():
    start = time.perf_counter()
    gm = models.deepseek_v3(61)
    assert time.perf_counter() - start < 10
    gm.graph.lint()
    one = models.deepseek_v3(1)
    per_layer = len(one.graph.nodes) - 4  # minus the token symbol, x, residual and the output node
    assert len(gm.graph.nodes) == 61 * per_layer + 4
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"][:3] == ["tokens", "x", "residual"]


def _site_of(gm, weight: str) -> str:
    """The fusion site of the GEMM that reads placeholder ``weight``."""
    (gemm,) = [n for n in gm.graph.nodes if any(a.op == "placeholder" and a.name == weight for a in n.all_input_nodes)]
    return f"{gemm.name}.0"


def test_eqsat_fuses_the_deepseek_layer(graphs):
    gm = copy_graph(graphs["layer"])
    report = eqsat.optimize(gm, OPTIONS)
    k = report.kernels_chosen
    assert k["K_rmsnorm_add_fp8_group_quant"] == 2  # input and post-attention norms
    assert k["K_silu_mul_fp8_group_quant"] == 1  # shared expert / dense MLP
    sites = fusion_sites(gm)
    assert len(sites) == 5 and len(fused(sites)) == 4  # the attention output's quant has nothing to fuse
    assert sites[_site_of(gm, "w_qkv_a_l0")] == "rmsnorm_with_add_fp8_group_quant"
    assert sites[_site_of(gm, "w_gu_l0")] == "rmsnorm_with_add_fp8_group_quant"
    assert sites[_site_of(gm, "w_down_l0")] == "act_mul_and_fp8_group_quant"
    # q_a norm over a split view of the qkv_a output: fused with its quant by AITER's rms + quant
    # kernel, Inductor's native chain, or AITER's MLA dual-norm kernel (with the kv_a norm)
    assert sites[_site_of(gm, "w_qb_l0")] in (
        "rmsnorm_fp8_group_quant", "inductor native chain", "fused_mla_dual_rms_norm_group_quant")
    assert sites[_site_of(gm, "w_o_l0")] == "unfused"
    assert report.predicted_after_us < report.predicted_before_us


def test_eqsat_fuses_the_indexer_once(graphs):
    gm = copy_graph(graphs["indexer"])
    report = eqsat.optimize(gm, OPTIONS)
    assert report.kernels_chosen == Counter({"K_rmsnorm_fp8_group_quant": 1})  # one kernel feeds both GEMMs
    assert set(fused(fusion_sites(gm)).values()) == {"rmsnorm_fp8_group_quant"}


@pytest.mark.parametrize("which", ["layer", "indexer"])
def test_baseline_fuses_a_subset_of_eqsat(graphs, baseline, which):
    eq, pm = copy_graph(graphs[which]), copy_graph(graphs[which])
    eqsat.optimize(eq, OPTIONS)
    replaced = baseline.apply(pm)
    pm.graph.lint()
    pm_fused, eq_fused = fused(fusion_sites(pm)), fused(fusion_sites(eq))
    # the layer: 2 fused-add, the q_a norm (#3, then folded with the kv_a norm by #14), silu
    assert replaced == {"layer": 5, "indexer": 1}[which]  # the indexer: one match, two fused calls
    assert len(pm_fused) == {"layer": 4, "indexer": 2}[which]
    assert set(pm_fused) <= set(eq_fused)
    if which == "layer":
        assert pm_fused[_site_of(pm, "w_qb_l0")] == "fused_mla_dual_rms_norm_group_quant"


# -- each pattern fires on the graph it targets -------------------------------------------------------


def _tiny(body: Callable[..., object], q_dim: int = 0) -> fx.GraphModule:
    """A one-norm graph ``body(x, w, w2)`` over ``x [T, 512 (+ q_dim + 64 when q_dim)]``: with
    ``q_dim``, x is an MLA projection (``q_dim`` q latent, 512 kv latent, 64 rope), ``w`` the q
    norm's weight and ``w2`` the kv norm's; else ``w`` the norm's weight (w2 unused)."""
    width = q_dim + 512 + 64 if q_dim else 512
    return models.trace(body, [models.tok(width), models.weight(q_dim or 512), models.weight(512)])


def _indexer_with_view() -> fx.GraphModule:
    """The indexer as vLLM's pattern #6 was written for: rms_norm -> view(-1, 1536) -> two group
    quants, the view kept (torch.compile drops this no-op view before post-grad passes, which leaves
    the graph of #5: ``models.deepseek_v32_indexer``)."""
    def body(q_c, w):
        return _twice(_rms(q_c, w).view(-1, 1536))
    gm = trace_tokens(body, torch.randn(8, 1536, dtype=torch.bfloat16), torch.randn(1536, dtype=torch.bfloat16))
    view_to_reshape(gm)
    return gm


def _rms(x, w):
    return torch.ops.vllm_ir.rms_norm(x, w, EPS)


def _mla(q_side: Callable[..., object]) -> Callable[..., object]:
    def body(x, w, w2):
        q_c, kv = x.split([1536, 576], dim=-1)
        kv_c, k_pe = kv.split([512, 64], dim=-1)
        return q_side(_rms(q_c, w)), _rms(kv_c, w2), k_pe
    return body


def _group(y):
    return tuple(torch.ops.vllm.rocm_aiter_group_fp8_quant(y, 128))


def _twice(y):  # one norm output, two group quants (no view between: #5, not #6)
    return (*_group(y), *_group(y))


def _token(y):
    return tuple(torch.ops.vllm.rocm_aiter_per_token_quant(y, models._fp8()))


def _token_c(y):
    r = torch.ops.higher_order.auto_functionalized(
        torch.ops._C.dynamic_per_token_scaled_fp8_quant.default, result=torch.empty(y.shape, dtype=models._fp8()),
        input=y, scale=torch.empty([y.shape[0], 1], dtype=torch.float32), scale_ub=None)
    return r[1], r[2]


def _rms_static() -> fx.GraphModule:
    """rms_norm -> static per-tensor quant whose scale, a graph input, functionalization writes back."""
    def body(x, w, scale):
        r = torch.ops.higher_order.auto_functionalized(
            torch.ops.vllm.rocm_aiter_per_tensor_quant.default, out=torch.empty(x.shape, dtype=models._fp8()),
            x=_rms(x, w), scale=scale, is_dynamic=False)
        scale.copy_(r[2])
        return r[1]
    return models.trace(body, [models.tok(512), models.weight(512), models.weight(1, 1, dtype=torch.float32)])


TARGETS: dict[str, tuple[tuple[str, ...], Callable[[], fx.GraphModule], dict[str, int]]] = {
    # case: (patterns registered, graph, fused ops after)
    "#1 rms_token": (("rms_token",), lambda: _tiny(lambda x, w, w2: _token(_rms(x, w))),
                     {"rmsnorm_fused_dynamic_quant": 1}),
    "#1 rms_token_c": (("rms_token_c",), lambda: _tiny(lambda x, w, w2: _token_c(_rms(x, w))),
                       {"rmsnorm_fused_dynamic_quant": 1}),
    "#2 add_rms_token": (("add_rms_token",), models.llama_fp8_per_token, {"rmsnorm_fused_add_dynamic_quant": 2}),
    "#3 rms_group": (("rms_group",), models.deepseek_v3, {"rmsnorm_fp8_group_quant": 1}),
    "#4 add_rms_group": (("add_rms_group",), models.deepseek_v3, {"rmsnorm_with_add_fp8_group_quant": 2}),
    "#5 double": (("double",), lambda: _tiny(lambda x, w, w2: _twice(_rms(x, w))),
                  {"rmsnorm_fp8_group_quant": 2}),
    "#5 double (indexer)": (("double",), models.deepseek_v32_indexer, {"rmsnorm_fp8_group_quant": 2}),
    "#6 double_view": (("double_view",), _indexer_with_view, {"rmsnorm_fp8_group_quant": 2}),
    "#7 gated": (("gated",), models.qwen3_next_gated_norm, {"fused_rms_gated_fp8_group_quant": 1}),
    "#7 gated 3-D": (("gated",), models.qwen3_next_gated_norm_3d, {"fused_rms_gated_fp8_group_quant": 1}),
    "#8 rms_static": (("rms_static",), _rms_static, {"fused_rms_fp8_per_tensor_static_quant": 1}),
    "#9 add_rms_static": (("add_rms_static",), models.llama_fp8_static,
                          {"fused_add_rms_fp8_per_tensor_static_quant": 2}),
    "#10 silu": (("silu",), models.deepseek_v3, {"act_mul_and_fp8_group_quant": 1}),
    "#11 pad": (("pad",), models.gpt_oss_router_pad, {"triton_add_rmsnorm_pad": 1}),
    "#11 pad 256": (("pad",), lambda: models.gpt_oss_router_pad(multiple=256), {"triton_add_rmsnorm_pad": 1}),
    "#12 mla_dual": (("mla_dual",), lambda: _tiny(_mla(lambda y: y), 1536), {"fused_mla_dual_rms_norm": 1}),
    "#13 mla_dual_token": (("rms_token", "mla_dual_token"), lambda: _tiny(_mla(_token), 1536),
                           {"fused_mla_dual_rms_norm_per_token_quant": 1}),
    "#14 mla_dual_group": (("rms_group", "mla_dual_group"), models.deepseek_v3,
                           {"fused_mla_dual_rms_norm_group_quant": 1}),
}


@pytest.mark.parametrize("case", list(TARGETS))
def test_each_pattern_fires_on_its_graph(case):
    names, build, expected = TARGETS[case]
    gm = build()
    before = Counter(n.target for n in gm.graph.nodes if n.op == "call_function")
    pm = PatternMatcherBaseline(patterns=names)
    assert pm.apply(gm) >= 1
    gm.graph.lint()
    after = Counter(n.target for n in gm.graph.nodes if n.op == "call_function")
    assert Counter(k for k in map(fused_op, gm.graph.nodes) if k) == Counter(expected)
    norms = (torch.ops.vllm_ir.rms_norm.default, torch.ops.vllm_ir.fused_add_rms_norm.default)
    assert sum(after[t] for t in norms) < sum(before[t] for t in norms) or case.startswith(("#7", "#10"))
    if case.startswith("#11"):  # the router reads the unpadded slice of the padded output
        assert torch.ops.aten.constant_pad_nd.default not in after and torch.ops.aten.slice.Tensor in after
    if case.startswith(("#8", "#9")):  # each fused quant's functionalized scale became the input scale
        functionalized = torch.ops.higher_order.auto_functionalized
        assert after[functionalized] == before[functionalized] - sum(expected.values())
        assert all(n.args[0] is n.args[1] for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default
                   if n.args[0].name.startswith(("s_qkv", "s_gu", "scale")))


@pytest.mark.parametrize("case", ["#2 add_rms_token", "#11 pad"])
def test_a_pattern_registered_for_the_other_eps_does_not_fire(case):
    names, build, _ = TARGETS[case]  # both graphs use eps 1e-5
    gm = build()
    assert PatternMatcherBaseline(patterns=names, epsilons=(1e-6,)).apply(gm) == 0


def test_pad_fires_only_for_the_multiple_it_pads_to():
    gm = models.gpt_oss_router_pad(multiple=256)
    pm = PatternMatcherBaseline(patterns=["pad"])
    pm.apply(gm)
    (padded,) = [n for n in gm.graph.nodes if n.target is torch.ops.vllm.rocm_aiter_triton_add_rmsnorm_pad.default]
    assert padded.args[-1] == 256


@pytest.mark.parametrize("build", [models.deepseek_v3_moe, models.qwen3_next_gated_norm, models.qwen3_next_gated_norm_3d,
                                   models.llama_fp8_static, models.llama_fp8_per_token, models.gpt_oss_router_pad])
def test_other_graphs_run_cleanly_and_eqsat_covers_the_baseline(build, full_baseline):
    gm = build()
    eq, pm = copy_graph(gm), copy_graph(gm)
    report = eqsat.optimize(eq, OPTIONS)
    assert report.error is None
    eq.graph.lint()
    assert full_baseline.apply(pm) >= 1
    pm.graph.lint()
    assert not set(fused(fusion_sites(pm))) - set(fused(fusion_sites(eq)))


def test_the_moe_layer_does_not_compute_its_post_attention_norm_twice():
    """The norm's bf16 output also feeds the router and the routed experts, so the fused add + norm +
    quant kernel would recompute it: greedy extraction leaves that kernel for a plain quant of the
    norm, as the ILP does (it used to keep both, 6% dearer)."""
    gm = models.deepseek_v3_moe()
    greedy, ilp = copy_graph(gm), copy_graph(gm)
    got = eqsat.optimize(greedy, OPTIONS)
    want = eqsat.optimize(ilp, OPTIONS, extractor="ilp")
    assert got.predicted_after_us == pytest.approx(want.predicted_after_us, abs=1e-6)
    norms = Counter(str(n.target) for n in greedy.graph.nodes if "rms" in str(n.target))
    assert norms == {"vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant.default": 1,
                     "vllm_ir.fused_add_rms_norm.default": 1,
                     "vllm.fused_mla_dual_rms_norm_group_quant.default": 1}, norms


def _gated() -> fx.GraphModule:
    """Qwen3-Next's gated norm over ``(T*H, D)`` rows of token inputs (the benchmark graph's GDN
    stand-in returns zeros), -> ``reshape(-1, H*D)`` -> group quant."""
    def body(x, z, w):
        x32, z32 = x.reshape(-1, 128).float(), z.reshape(-1, 128).float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
        return _group((y * (z32 / (1 + torch.exp(-z32)))).to(torch.bfloat16).reshape(-1, 32 * 128))
    return models.trace(body, [models.tok(32 * 128), models.tok(32 * 128), models.weight(128)])


def _add_token() -> fx.GraphModule:
    """fused_add_rms_norm -> per-token quant, small (Llama's is 4096 wide with 14336-wide GEMMs)."""
    def body(x, residual, w):
        y, residual_out = torch.ops.vllm_ir.fused_add_rms_norm(x, residual, w, 1e-5)
        return (*_token(y), residual_out)
    return models.trace(body, [models.tok(512), models.tok(512), models.weight(512)])


SMALL = {"#7 gated": _gated, "#2 add_rms_token": _add_token}  # numerics on smaller graphs than TARGETS'


def _real_inputs(gm: fx.GraphModule) -> list[torch.Tensor | int]:
    """Random inputs for ``gm``'s placeholders, the token dim (and count) 64;
    static scales 0.1, fp8 weights small."""
    g = torch.Generator().manual_seed(0)
    tokens = 64
    out = []
    for n in gm.graph.nodes:
        if n.op == "placeholder" and isinstance(n.meta["val"], torch.SymInt):  # the token count
            out.append(tokens)
        elif n.op == "placeholder":
            v = n.meta["val"]
            t = torch.randn([tokens if isinstance(d, torch.SymInt) else d for d in v.shape], generator=g)
            out.append(torch.full_like(t, 0.1) if tuple(v.shape) == (1, 1) else (t * 0.05 if v.dtype.itemsize == 1
                                                                                 else t).to(v.dtype))
    return out


@pytest.mark.parametrize("case", ["#1 rms_token", "#1 rms_token_c", "#2 add_rms_token", "#5 double", "#7 gated",
                                  "#8 rms_static", "#11 pad", "#12 mla_dual", "#13 mla_dual_token"])
def test_replacements_compute_what_they_replace(case):
    """Each output of the rewritten graph is the unfused one up to fp8 rounding (the fused kernels
    skip a bf16 rounding and clamp at 240, vLLM's unfused ``_C`` quant at 224): outputs wired to the
    wrong fused result (a scale for a residual, ...) would differ by far more."""
    names, build, _ = TARGETS[case]
    gm = SMALL.get(case, build)()
    rewritten = copy_graph(gm)
    assert PatternMatcherBaseline(patterns=names).apply(rewritten) >= 1
    rewritten.recompile()
    xs = _real_inputs(gm)
    fresh = lambda: [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]  # noqa: E731
    want = torch.utils._pytree.tree_leaves(gm(*fresh()))
    got = torch.utils._pytree.tree_leaves(rewritten(*fresh()))
    assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]
    for a, b in zip(want, got, strict=True):
        a, b = a.float(), b.float()
        assert (a - b).norm() <= 0.1 * a.norm() + 1e-6, case


@pytest.mark.parametrize("mode", [[], ["--after-baseline"]])
def test_the_paired_ab_compares_two_checkouts_side_by_side(capsys, mode):
    from pathlib import Path

    from benchmarks import paired_ab
    here = str(Path(paired_ab.__file__).resolve().parent.parent)
    assert paired_ab.main([here, here, "--rounds", "4", "--graph", "gpt-oss router + pad", *mode]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    old, new = (float(x) for x in row.split()[4:6])
    assert row.startswith("gpt-oss router + pad") and old > 0 and new > 0 and "ms (" in row


def test_the_paired_ab_times_saved_graphs(capsys, tmp_path):
    from pathlib import Path

    from benchmarks import paired_ab
    from eqsat import graphfile
    graphfile.save(models.gpt_oss_router_pad().graph, tmp_path / "router.json")
    here = str(Path(paired_ab.__file__).resolve().parent.parent)
    assert paired_ab.main([here, here, "--rounds", "4", "--file", str(tmp_path / "router.json")]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.startswith("router ") and float(row.split()[1]) > 0 and float(row.split()[2]) > 0


def test_the_paired_ab_takes_one_mode_at_a_time():
    from benchmarks import paired_ab
    with pytest.raises(SystemExit):
        paired_ab.main([".", "--one-off", "--after-baseline"])


def test_the_time_split_times_egglog_and_the_fake_values_each_pass_computes(full_baseline):
    from benchmarks.pass_time import Bench
    from benchmarks.time_split import fake_dispatch, split
    from eqsat.fx import new_values
    from eqsat.fx.fake_value import fake_value
    gm = models.gpt_oss_router_pad()
    engine = Bench.engine_for(gm)
    real = engine.egraph
    # the router's copy of the kernel's slice: the H200's lines, at a size where they price the copy below the
    # fused kernel's saving (at 256 and above, its line in a dynamic graph is its slower config: no rewrite)
    h200 = dataclasses.replace(OPTIONS, profile="h200", sizes=8)
    run = lambda g: eqsat.optimize(g, h200, engine=engine, recompile=False)  # noqa: E731
    got = split(gm, engine, run, full_baseline.apply, runs=2)
    assert engine.egraph is real and new_values.fake_value is fake_value  # the stopwatches are gone after
    assert 0 < got.egglog_ms < got.eqsat_ms and got.python_ms > 0
    # eqsat reuses the fused kernel's padded output (the pad's value) and computes the router's slice
    assert got.eqsat_written == 1 and got.eqsat_fake_ms > 0
    assert got.baseline_written >= 1 and got.baseline_fake_ms > 0
    assert fake_dispatch(gm, lambda g: None) == (0.0, 0)  # a pass that writes nothing costs nothing


def test_the_split_table_names_what_a_10x_speedup_leaves_and_the_plot_is_written(tmp_path):
    from benchmarks.pass_time_report import Row, Timing, plot_graphs, split_table
    from benchmarks.time_split import Split

    def row(name, eq_ms, pm_ms, parts):
        return Row(name, 10, 1.0, Timing([eq_ms], [eq_ms], [eq_ms]), Timing([pm_ms], [pm_ms], [pm_ms]),
                   eqsat.Report(), {}, {}, 1, 5.0, 300.0, split=parts)

    rows = [row("slow", 5.0, 30.0, Split(5.0, 1.0, 1.5, 1, 3.0, 5)),
            row("fast", 2.0, 40.0, Split(2.0, 1.0, 0.0, 0, 3.0, 5))]
    text = "\n".join(split_table(rows))
    assert "| slow | 5.00 | 1.00 | 1.50 (1) | 2.50 | 30.0 | 3.00 (5) | 3.00 |" in text
    # only the graph over its 10x time is explained, with shares of the split's own run
    assert "**slow**: 5.00 ms (timed runs) against the 3.00 ms" in text
    assert "egglog and torch's fake values took 2.50 ms (50%) and eqsat's own code 2.50 ms (50%)" in text
    assert "**fast**" not in text
    plot_graphs(rows, tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_the_pass_time_command_refuses_an_unknown_option_before_running_anything(capsys):
    from benchmarks.pass_time import main
    with pytest.raises(SystemExit) as stop:
        main(["--graph", "gpt-oss"])  # an option it does not have: it used to start the full run
    assert stop.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_the_report_gives_the_spread_of_per_round_speedups():
    from benchmarks.pass_time_report import Row, Timing, spread
    row = Row("g", 10, 1.0, Timing([1.0, 2.0, 1.0, 1.0], [], []), Timing([12.0, 12.0, 9.0, 8.0], [], []),
              eqsat.Report(), {}, {}, 1, 5.0, 300.0)
    assert row.round_speedups() == [12.0, 6.0, 9.0, 8.0]  # round by round, not median over median
    assert spread(row.round_speedups()) == "per round 6.50–11.25x between quartiles, 25% of 4 rounds at 10x or more"
    assert spread([11.0]) == "1 round(s)"


def test_counted_work_is_the_same_every_run_and_grows_linearly_in_layers():
    from benchmarks.pass_time import Bench, counted_work
    models.register_ops()
    bench = Bench(runs=1)
    first, again = counted_work(bench, (1, 4, 8)), counted_work(bench, (1, 4, 8))
    assert first == again  # a count, not a time: what the report's work row rests on
    low, high = (first[4] - first[1]) / 3, (first[8] - first[4]) / 4
    assert low > 0 and abs(high / low - 1) < 0.05  # each layer adds the same work, whatever L is


def test_the_gpu_layer_benchmarks_plan_is_what_eqsat_chooses_today():
    """``benchmarks/gpu/layer_speedup.py --plan`` (CPU) re-derives the kernels eqsat picks for the
    DeepSeek-V3 layer at each M and compares them with the PLAN the GPU run times."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "gpu" / "layer_speedup.py"), "--plan"],
                         capture_output=True, text=True, cwd=root, timeout=600,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count(" OK ") + run.stderr.count(" OK ") == 6


def test_a_graph_the_baseline_raises_on_is_left_out_and_named(full_baseline):
    """vLLM's rms + group quant pattern matches the 3-D indexer norm, and its fused op's fake (2-D only, as
    vLLM's) refuses the match: the pass-time benchmark names the graph instead of failing the run."""
    from benchmarks.pass_time import BaselineRaised, Bench
    bench = Bench.__new__(Bench)  # only the baseline: the rest of the set-up is the timed benchmark's
    bench.baseline = full_baseline
    with pytest.raises(BaselineRaised, match="2-D"):
        bench.baseline_run(models.deepseek_v32_indexer_3d())
    assert bench.baseline_run(models.deepseek_v32_indexer()) == 1


def test_reprice_reproduces_a_runs_own_predictions_from_its_saved_graphs(tmp_path, capsys):
    """``benchmarks.reprice`` on rows of the H100 e2e run: under the profile the run priced with (h200),
    the saved graphs (the dynamic one at the run's first M, 8192) give the run's own predicted speedups;
    the errors it prints are predicted over measured."""
    import csv

    from benchmarks import reprice

    src = Path("benchmarks/results/e2e_nvidiah10080gbhb.csv")
    rows = [r for r in csv.DictReader(src.open()) if r["block"] in ("gptoss", "qwen3next") and r["M"] in ("1", "8192")]
    run = tmp_path / "run.csv"
    with run.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    points = reprice.read_run(run)
    assert sorted(points) == [("gptoss", 1), ("gptoss", 8192), ("qwen3next", 1), ("qwen3next", 8192)]
    assert all(len(p.measured) == 3 for p in points.values())  # three rounds
    reprice.main([str(run), "--profiles", "h200", "--hint", "8192", "--choice", "per-m"])
    out = capsys.readouterr().out
    seen = 0
    for line in out.splitlines():
        got = re.fullmatch(r"(gptoss|qwen3next)\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+) \(\s*([-+\d.]+)%\)", line)
        if got:
            measured, run_pred, pred, err = (float(v) for v in got.groups()[1:])
            assert pred == pytest.approx(run_pred, abs=2e-3), line  # the run's own prediction, again
            assert err == pytest.approx((pred / measured - 1) * 100, abs=0.06), line
            seen += 1
    assert seen == 4 and "h200: errors" in out
    # gpt-oss in vLLM's ops over the run's M, in the H100 run priced by the h100 profile of its day, which left
    # the dynamic graph alone: today's h100 writes the kernel there, another graph than the one the run
    # measured, so no error is stated for it
    with Path("benchmarks/results/e2e_h100_edd90b9.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["block"] == "gptoss_vllm"]
    with run.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    reprice.main([str(run), "--profiles", "h100"])
    out = capsys.readouterr().out
    assert re.search(r"^gptoss_vllm\s+8192 .* \(other\)", out, re.M), out
    assert re.search(r"^h100: errors .*; 0 of 1 more than 10% off$", out, re.M), out  # M = 1: the run's graph
    assert "gptoss_vllm M=8192: K_add_rmsnorm_padx1 where the run wrote -" in out
