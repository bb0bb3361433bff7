"""Saturate: run the rule set one iteration at a time under budgets, and say why it stopped.

Stop reasons (egg's ``StopReason``): ``saturated`` (an iteration changed nothing), ``iteration_limit``,
``node_limit`` (the e-graph grew past the node cap) and ``time_limit`` (the wall-clock budget ran
out). Whatever the reason, the e-graph is consistent after each iteration, so extraction can use it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from egglog import bindings as eb

from eqsat.load import RULESET


@dataclass(frozen=True)
class Budgets:
    iterations: int = 30
    nodes: int = 200_000
    seconds: float = 5.0


@dataclass
class SaturationReport:
    stop_reason: str = ""
    iterations: int = 0
    matches: Counter[str] = field(default_factory=Counter)
    nodes: int = 0
    seconds: float = 0.0


def egraph_size(egraph: eb.EGraph) -> int:
    out = egraph.run_program(eb.PrintSize(eb.RustSpan("eqsat", 0, 0), None))
    return sum(n for _, n in out[0].sizes)


def saturate(egraph: eb.EGraph, budgets: Budgets) -> SaturationReport:
    report = SaturationReport()
    start = time.perf_counter()
    run_one = egraph.parse_program(f"(run {RULESET} 1)")
    while True:
        if report.iterations >= budgets.iterations:
            report.stop_reason = "iteration_limit"
            break
        if time.perf_counter() - start > budgets.seconds:
            report.stop_reason = "time_limit"
            break
        out = egraph.run_program(*run_one)[0].report
        report.iterations += 1
        report.matches.update({k: v for k, v in out.num_matches_per_rule.items() if v})
        if not out.updated:
            report.stop_reason = "saturated"
            break
        report.nodes = egraph_size(egraph)
        if report.nodes > budgets.nodes:
            report.stop_reason = "node_limit"
            break
    report.nodes = report.nodes or egraph_size(egraph)
    report.seconds = time.perf_counter() - start
    return report
