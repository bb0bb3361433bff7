"""Saturation budgets and adversarial graphs: every run ends within its wall-clock budget (+10%,
plus a little slack for a loaded CI machine), names its stop reason, and never breaks the graph."""

from __future__ import annotations

import time

import pytest

import eqsat
from benchmarks.graphs import adversarial as adv

SLACK_S = 0.3


def run(gm, **budget):
    start = time.perf_counter()
    report = eqsat.optimize(gm, budgets=eqsat.Budgets(**budget))
    return report, time.perf_counter() - start


def test_2000_chains_stop_within_a_tight_budget_and_leave_the_graph_untouched():
    gm = adv.chains(2000)
    code = gm.code
    report, wall = run(gm, seconds=1.0)
    assert wall <= 1.0 * 1.1 + SLACK_S
    assert report.stop_reason == "time_limit" and not report.changed and gm.code == code


def test_many_chains_fuse_within_budget():
    gm = adv.chains(200)
    report, wall = run(gm, seconds=10.0)
    assert wall <= 10.0 * 1.1 + SLACK_S
    assert report.stop_reason == "saturated" and report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 200}


def test_200_long_reshape_chain_folds_and_fuses():
    report, wall = run(adv.reshape_chain(200), seconds=5.0)
    assert wall <= 5.0 * 1.1 + SLACK_S
    assert report.stop_reason == "saturated" and report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}


def test_64_identical_quant_consumers_share_one_kernel():
    gm = adv.fan_out(64)
    report, wall = run(gm, seconds=5.0)
    assert wall <= 5.0 * 1.1 + SLACK_S
    assert report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    kernels = [n for n in gm.graph.nodes if "rmsnorm_fp8_group_quant" in str(n.target)]
    assert len(kernels) == 1 and len(gm.graph.output_node().args[0]) == 128


@pytest.mark.parametrize(("budget", "reason"), [({"iterations": 1}, "iteration_limit"), ({"nodes": 5}, "node_limit")])
def test_caps_name_the_stop_reason(budget, reason):
    report, _ = run(adv.reshape_chain(20), **budget)
    assert report.stop_reason == reason
    gm = adv.reshape_chain(20)
    eqsat.optimize(gm, budgets=eqsat.Budgets(**budget))
    gm.graph.lint()


def test_backoff_scheduler_reaches_the_same_result():
    simple, _ = run(adv.chains(20), seconds=10.0)
    backoff, _ = run(adv.chains(20), seconds=10.0, scheduler="backoff")
    assert backoff.kernels_chosen == simple.kernels_chosen and backoff.stop_reason == "saturated"
