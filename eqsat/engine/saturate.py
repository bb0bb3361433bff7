"""Saturate: run the rule set under budgets, and say why it stopped.

Rules that chain (``chains``: each firing makes the rule's own next match, one link an iteration) first
run alone, to a fixpoint or ``CHAIN_ITERATIONS`` (an iteration of one rule costs a fraction of one of the
whole ruleset, and the links of a deep model would otherwise spend the iteration cap); they stay in
``ruleset`` too. The result is the same fixpoint: only the order rules fire in changes.
Iterations run in egglog calls of 4, 8, 16, ... (the ``simple`` scheduler stops a call at the first
iteration that changes nothing), since each call has a fixed overhead and small graphs saturate in a
handful; a call runs no more iterations than the cap leaves, than the last call's pace fits in the
time left, or than one once the e-graph may be past half the node cap; the first runs one when its
size is unbounded or 4 may not fit at a pessimistic pace (``ROW_SECONDS``).
Stop reasons (egg's ``StopReason``): ``saturated``, ``iteration_limit``, ``node_limit`` (seen after the
call that grew it) and ``time_limit``; the e-graph is consistent after each iteration, so extraction
can use it whatever the reason. Saturation runs ``ruleset`` (an engine's, ``eqsat.engine.engine.Engine.ruleset``);
``grow``, given the rules that matched in a call, may declare more and name the ruleset that runs them
too (``eqsat.engine.engine.Engine.grow``); saturation goes on while it does. ``Budgets.seconds`` bounds the
whole pass: a :class:`Deadline` is checked at stage boundaries and in import's and emit's long loops,
an uninterruptible stage (loading terms) is refused up front when its estimate does not fit, and past
the deadline the pass raises
:class:`~eqsat.core.errors.BudgetExceeded` with the graph untouched.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from egglog import bindings as eb

from eqsat.core.errors import BudgetExceeded

SATURATION_SHARE = 0.4  # of the budget left when saturation starts
FIRST_CALL = 4  # iterations of the first egglog call, when the e-graph is known to be small
CHAIN_ITERATIONS = 256  # at most, for the rules that chain: two links a layer of a deep model
ROW_SECONDS = 1e-6  # a pessimistic pace before any is measured: one iteration over one row, well above the observed pace
# scheduler -> (egglog schedule of {n} iterations, iterations a call runs: None for doubling calls,
# which needs egglog to stop a call at the first iteration that changes nothing, as its ``run``
# does); the back-off scheduler runs 4 a call (its bans last within one call)
SCHEDULES: dict[str, tuple[str, int | None]] = {
    "simple": ("(run {ruleset} {n})", None),
    "backoff": ("(run-schedule (let-scheduler bo (back-off)) (repeat {n} (run-with bo {ruleset})))", 4),
}


@dataclass(frozen=True)
class Budgets:
    """Caps on one pass: saturation iterations, e-graph size, wall-clock seconds for the whole pass,
    and egglog's scheduler (``"simple"``: every rule every iteration; ``"backoff"``: rules that
    match too often are banned for a while, egg's BackoffScheduler)."""

    iterations: int = 30
    nodes: int = 200_000
    seconds: float = 5.0
    scheduler: str = "simple"


@dataclass(frozen=True)
class Deadline:
    """A wall-clock deadline for one pass (``time.perf_counter`` seconds)."""

    end: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.perf_counter() + seconds, seconds)

    def remaining(self) -> float:
        return self.end - time.perf_counter()

    def check(self, stage: str) -> None:
        if time.perf_counter() > self.end:
            raise BudgetExceeded(stage, f"wall-clock budget of {self.seconds:g} s exceeded")

    def require(self, stage: str, estimate: float) -> None:
        """Refuse to start an uninterruptible stage whose estimated time does not fit."""
        if estimate > self.remaining():
            raise BudgetExceeded(stage, f"estimated {estimate:.2f} s does not fit the {self.seconds:g} s budget "
                                        f"({max(self.remaining(), 0):.2f} s left)")


@dataclass(frozen=True)
class SizeBound:
    """An upper bound on the e-graph's rows that spares asking egglog (``PrintSize`` is not free):
    at most ``rows`` at the start and ``growth[rule]`` more per match of each rule. While the bound
    stays under the node cap the cap cannot be hit; past it (or for a rule not listed) egglog is asked."""

    rows: int
    growth: Mapping[str, int]


@dataclass
class SaturationReport:
    stop_reason: str = ""
    iterations: int = 0
    matches: Counter[str] = field(default_factory=Counter)
    nodes: int = 0  # rows when egglog was last asked; 0 if a SizeBound made asking needless
    seconds: float = 0.0
    chain_iterations: int = 0  # of the rules that chain, alone, before the others (not in ``iterations``)


def egraph_size(egraph: eb.EGraph) -> int:
    out = egraph.run_program(eb.PrintSize(eb.RustSpan("eqsat", 0, 0), None))
    return sum(n for _, n in out[0].sizes)


def _bound_after(most: int | None, growth: Mapping[str, int], matched: Mapping[str, int]) -> int | None:
    """The bound on the rows (``SizeBound``) after rules ``matched`` (name -> matches); None once unknown."""
    if most is None or not all(k in growth for k in matched):
        return None
    return most + sum(v * growth[k] for k, v in matched.items())


def _run(egraph: eb.EGraph, programs: dict[str, list], command: str,
         report: SaturationReport) -> tuple[eb.RunReport, dict[str, int]]:
    """egglog's report of running ``command`` (parsed once, kept in ``programs``), and the rules that matched
    (name -> matches), added to ``report``."""
    if command not in programs:
        programs[command] = egraph.parse_program(command)
    out = egraph.run_program(*programs[command])[0].report
    matched = {k: v for k, v in out.num_matches_per_rule.items() if v}
    report.matches.update(matched)
    return out, matched


def saturate(egraph: eb.EGraph, budgets: Budgets, deadline: Deadline | None = None,
             bound: SizeBound | None = None, parsed: dict[str, list] | None = None,
             grow: Callable[[Iterable[str]], str | None] | None = None, *, ruleset: str,
             chains: str | None = None) -> SaturationReport:
    report = SaturationReport()
    most = bound.rows if bound is not None else None  # upper bound on the rows, None: unknown
    growth = bound.growth if bound is not None else {}
    programs = {} if parsed is None else parsed  # run commands by text: parse each once
    start = time.perf_counter()
    share = budgets.seconds if deadline is None else max(deadline.remaining(), 0.0) * SATURATION_SHARE
    if budgets.scheduler not in SCHEDULES:
        raise ValueError(f"scheduler must be one of {sorted(SCHEDULES)}, got {budgets.scheduler!r}")
    if chains is not None:
        out, matched = _run(egraph, programs, f"(run {chains} {CHAIN_ITERATIONS})", report)
        report.chain_iterations = len(out.iterations)
        grown = grow(matched) if grow is not None and matched else None
        ruleset = grown if grown is not None else ruleset
        most = _bound_after(most, growth, matched)
    text, fixed = SCHEDULES[budgets.scheduler]
    half = budgets.nodes // 2  # past it, the e-graph is measured and a call runs one iteration
    # iterations of the next call (as many as the back-off scheduler's while the e-graph is known to be far
    # from the node cap and they fit the time share at a pessimistic pace); seconds an iteration took in
    # the last call
    small = most is not None and most <= half and FIRST_CALL * most * ROW_SECONDS <= share
    n, pace = FIRST_CALL if small else 1, 0.0
    while True:
        if report.iterations >= budgets.iterations:
            report.stop_reason = "iteration_limit"
            break
        elapsed = time.perf_counter() - start
        if elapsed > share:
            report.stop_reason = "time_limit"
            break
        if fixed is not None:
            n = fixed
        else:  # calls of 4, 8, 16, ... iterations while the last call's pace says they fit
            n = max(1, min(n, budgets.iterations - report.iterations, int((share - elapsed) / pace) if pace else n))
        called = time.perf_counter()
        out, matched = _run(egraph, programs, text.format(ruleset=ruleset, n=n), report)
        iterations = out.iterations  # each read of a report's field converts it again
        ran = len(iterations)
        pace = (time.perf_counter() - called) / max(ran, 1)
        report.iterations += ran
        grown = grow(matched) if grow is not None else None
        if grown is not None:
            ruleset = grown
        elif not out.updated or (fixed is None and not iterations[-1].rule_set_report.changed):
            report.stop_reason = "saturated"
            break
        most = _bound_after(most, growth, matched)
        if most is None or most > half:
            most = report.nodes = egraph_size(egraph)
            if report.nodes > budgets.nodes:
                report.stop_reason = "node_limit"
                break
        # double while the e-graph is far from the node cap; one at a time near it
        n = 2 * n if most <= half else 1
    if not report.nodes and bound is None:
        report.nodes = egraph_size(egraph)
    report.seconds = time.perf_counter() - start
    return report
