"""Smoke test of the pass-time benchmark: model graphs build, eqsat fuses what it should, and the
pattern-matcher baseline fuses a subset of it (registering only the 4 patterns these graphs need)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

import eqsat
from benchmarks.baseline.pattern_matcher import PatternMatcherBaseline
from benchmarks.graphs import models
from benchmarks.pass_time import copy_graph, fused, fusion_sites

OPTIONS = eqsat.Options(profile="mi300x", sizes=256, strict=True)


@pytest.fixture(scope="module")
def graphs():
    return {"layer": models.deepseek_v3(1), "indexer": models.deepseek_v32_indexer()}


@pytest.fixture(scope="module")
def baseline():
    start = time.perf_counter()
    pm = PatternMatcherBaseline(patterns=("add_rms", "rms", "double_view", "silu"), epsilons=(1e-6,))
    assert pm.registrations == 4
    assert time.perf_counter() - start < 10, "4 registrations should take well under a second"
    return pm


def test_61_layers_build_fast_and_chain_the_residual_stream():
    start = time.perf_counter()
    gm = models.deepseek_v3(61)
    assert time.perf_counter() - start < 10
    gm.graph.lint()
    one = models.deepseek_v3(1)
    per_layer = len(one.graph.nodes) - 3  # minus x, residual and the output node
    assert len(gm.graph.nodes) == 61 * per_layer + 3
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"][:2] == ["x", "residual"]


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
    assert replaced == {"layer": 4, "indexer": 1}[which]  # the indexer: one match, two fused calls
    assert len(pm_fused) == {"layer": 4, "indexer": 2}[which]
    assert set(pm_fused) <= set(eq_fused)


@pytest.mark.parametrize("build", [models.deepseek_v3_moe, models.qwen3_next_gated_norm, models.llama_fp8_static,
                                   models.llama_fp8_per_token, models.gpt_oss_router_pad])
def test_other_graphs_run_cleanly_and_eqsat_covers_the_baseline(build, baseline):
    gm = build()
    eq, pm = copy_graph(gm), copy_graph(gm)
    report = eqsat.optimize(eq, OPTIONS)
    assert report.error is None
    eq.graph.lint()
    baseline.apply(pm)
    assert set(fused(fusion_sites(pm))) <= set(fused(fusion_sites(eq)))
