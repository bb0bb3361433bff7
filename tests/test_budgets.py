"""Saturation budgets and adversarial graphs: every run ends within its wall-clock budget (+10%,
plus a little slack for a loaded CI machine), names its stop reason, and never breaks the graph."""

from __future__ import annotations

import time

import pytest

import eqsat
from benchmarks.graphs import adversarial as adv

SLACK_S = 0.3


def run(gm, repeats=True, **budget):
    start = time.perf_counter()
    report = eqsat.optimize(gm, budgets=eqsat.Budgets(**budget), repeats=repeats)
    return report, time.perf_counter() - start


def test_2000_chains_stop_within_a_tight_budget_and_leave_the_graph_untouched():
    """Each chain saturated on its own (``repeats=False``), as 2000 different chains would be."""
    gm = adv.chains(2000)
    code = gm.code
    report, wall = run(gm, repeats=False, seconds=1.0)
    assert wall <= 1.0 * 1.1 + SLACK_S
    assert report.stop_reason == "time_limit" and not report.changed and gm.code == code


def test_2000_copies_of_a_chain_saturate_once_and_all_fuse():
    report, wall = run(adv.chains(2000), seconds=10.0)
    assert wall <= 10.0 * 1.1 + SLACK_S
    assert report.stop_reason == "saturated" and report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 2000}
    assert report.copied_nodes > 1999 * 5


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


def _runs_of(gm, monkeypatch, **overrides):
    """The report of optimizing ``gm``, and the iterations each of saturation's egglog calls ran."""
    from eqsat.engine import saturate as sat

    calls: list[int] = []
    real = sat.saturate

    def counted(egraph, *args, **kwargs):  # noqa: ANN001, ANN202
        return real(_Counting(egraph, calls), *args, **kwargs)

    monkeypatch.setattr(sat, "saturate", counted)
    return eqsat.optimize(gm, strict=True, **overrides), calls


class _Counting:
    """An egglog e-graph that appends to ``calls`` the iterations each run call ran."""

    def __init__(self, egraph: object, calls: list[int]) -> None:
        self.egraph, self.calls = egraph, calls

    def __getattr__(self, name: str) -> object:
        return getattr(self.egraph, name)

    def run_program(self, *commands: object) -> list:
        out = self.egraph.run_program(*commands)
        if hasattr(out[0], "report"):
            self.calls.append(len(out[0].report.iterations))
        return out


def test_iterations_run_in_doubling_calls(monkeypatch):
    from benchmarks.graphs import models
    from eqsat.engine.engine import Engine

    models.register_ops()
    options = eqsat.Options()
    engine = Engine(options.catalog, options.active_rules())
    first, declaring = _runs_of(models.qwen3_next_gated_norm_3d(), monkeypatch, engine=engine)
    declaring = [*declaring]  # the next run's calls are appended to it too
    report, calls = _runs_of(models.qwen3_next_gated_norm_3d(), monkeypatch, engine=engine)
    assert report.stop_reason == "saturated" and report.kernels_chosen == {"K_rms_gated_fp8_group_quant": 1}
    assert report.iterations == sum(calls) == 7 and calls == [4, 3]  # 2 egglog calls, not 7
    # a fresh engine declares rules as others match (eqsat.engine.engine.Engine.grow): a call ends where
    # the declared ones saturate, and the next runs those they let match
    assert first.kernels_chosen == report.kernels_chosen and first.egraph_nodes == report.egraph_nodes
    assert first.iterations == sum(declaring) and len(declaring) > len(calls)


def test_near_the_node_cap_every_call_runs_one_iteration(monkeypatch):
    from benchmarks.graphs import models

    models.register_ops()
    report, calls = _runs_of(models.qwen3_next_gated_norm_3d(), monkeypatch, budgets=eqsat.Budgets(nodes=120))
    # the load alone may fill half the cap (its bound is ~110 rows): no call runs more than one
    assert calls and set(calls) == {1} and report.iterations == len(calls)


def test_a_first_call_that_may_not_fit_the_time_share_runs_one_iteration():
    from eqsat.engine.saturate import ROW_SECONDS, saturate

    engine, imported = _qwen_3d_engine()
    bound = engine.size_bound(imported)
    for seconds, first in ((2 * bound.rows * ROW_SECONDS, 1), (1.0, 4)):  # 4 x rows x pace > the share, then <
        calls: list[int] = []
        with engine.scope() as egraph:
            engine.load(imported)
            saturate(_Counting(egraph, calls), eqsat.Budgets(seconds=seconds), bound=bound, ruleset=engine.ruleset)
        assert calls[0] == first, seconds


def _qwen_3d_engine() -> tuple:
    """A fresh engine declared for Qwen3-Next's 3-D gated norm, and the graph's import."""
    from benchmarks.graphs import models
    from eqsat.core.spelling import VocabIndex
    from eqsat.engine.engine import Engine
    from eqsat.fx.importer import import_graph

    models.register_ops()
    options = eqsat.Options()
    imported = import_graph(models.qwen3_next_gated_norm_3d(), options.catalog, VocabIndex(options.vocabularies))
    engine = Engine(options.catalog, options.active_rules())
    engine.declare_for(imported)
    return engine, imported


def _saturated(cap: int | None, bounded: bool = False) -> tuple[int, dict, str]:
    """Qwen3-Next's 3-D gated norm loaded into a fresh engine and saturated: by ``saturate`` capped
    at ``cap`` iterations (``bounded``: given the engine's size bound, so its first call runs up to 4),
    or (``cap`` None) one egglog iteration per call until one changes nothing."""
    from eqsat.engine.saturate import saturate

    engine, imported = _qwen_3d_engine()
    with engine.scope() as egraph:
        engine.load(imported)
        if cap is not None:
            got = saturate(egraph, eqsat.Budgets(iterations=cap), bound=engine.size_bound(imported) if bounded else None,
                           ruleset=engine.ruleset)
            return got.iterations, dict(got.matches), got.stop_reason
        matches: dict[str, int] = {}
        one = egraph.parse_program(f"(run {engine.ruleset} 1)")
        for k in range(1, 100):
            out = egraph.run_program(*one)[0].report
            for rule, m in out.num_matches_per_rule.items():
                if m:
                    matches[rule] = matches.get(rule, 0) + m
            if not out.updated:
                return k, matches, "saturated"
    raise AssertionError("never saturated")


@pytest.mark.parametrize("bounded", [False, True])
def test_calls_of_many_iterations_match_what_one_at_a_time_matches(bounded):
    """Saturation runs iterations in calls of 1, 2, 4, ... (4, 8, ... given a size bound far from the
    node cap); it ends where one iteration a call ends, with the same matches, and a cap stops it at
    exactly that many iterations."""
    iterations, matches, _ = _saturated(None)
    assert iterations == 7
    assert _saturated(30, bounded) == (7, matches, "saturated")
    for cap in range(1, 7):
        got, _, reason = _saturated(cap, bounded)
        assert (got, reason) == (cap, "iteration_limit")
